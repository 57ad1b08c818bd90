// Package console serves the workspace console, a single-page application
// built from console/ (npm, esbuild) into dist and embedded in the binary.
// Every path under /console/ that is not an asset answers the console's
// page, so deep links load directly and survive a reload; the page talks
// to the workspace API only.
package console

import (
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

//go:embed all:dist
var dist embed.FS

// Prefix is where the console is served.
const Prefix = "/console/"

// SecurityPolicy forbids inline scripts and styles and every origin but
// the service's own: device data the console shows is untrusted text.
const SecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the console from the embedded assets.
type Handler struct {
	files fs.FS
	index []byte // nil: the console was not built into this binary
}

// New returns the handler of the embedded console.
func New() *Handler {
	files, _ := fs.Sub(dist, "dist")
	return newHandler(files)
}

func newHandler(files fs.FS) *Handler {
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		index = nil
	}
	return &Handler{files: files, index: index}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", SecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("X-Frame-Options", "DENY")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		writeText(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	if h.index == nil {
		writeText(w, http.StatusServiceUnavailable, "console not built: run make console (or make build)")
		return
	}
	// Any path but an asset's is a page of the console: the router in the
	// page decides what it shows.
	b, ct, cache := h.index, "text/html; charset=utf-8", "no-cache"
	if rel := strings.TrimPrefix(r.URL.Path, Prefix); strings.HasPrefix(rel, "assets/") {
		name := path.Clean(rel)
		asset, err := fs.ReadFile(h.files, name)
		if err != nil || !strings.HasPrefix(name, "assets/") {
			writeText(w, http.StatusNotFound, "no such asset")
			return
		}
		// Asset names carry a content hash: they never change.
		b, ct, cache = asset, mime.TypeByExtension(path.Ext(name)), "public, max-age=31536000, immutable"
	}
	if ct != "" {
		hdr.Set("Content-Type", ct)
	}
	hdr.Set("Cache-Control", cache)
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(b)
	}
}

func writeText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg + "\n"))
}
