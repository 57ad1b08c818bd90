// Package version is the release every program reports: -version, the
// <program>_build_info metric and the first log line.
package version

import "runtime/debug"

// Version is the release (the repository's VERSION file; a unit test keeps
// the two equal).
const Version = "1.0.0"

// Revision is the VCS commit the binary was built from ("" when unknown,
// as under go run; "+dirty" when the tree had changes).
func Revision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}
