package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
)

const adminToken = "e2e-admin-token-7f3a"

// tokenKey is the stack's TOKEN_KEY.
const tokenKey = "e2e-token-key-3b9d0c51a7e24f68b1c0d9e8f7a6b5c4"

var binDir string

func TestMain(m *testing.M) {
	if os.Getenv("HOSTILE_ATTACK") != "" {
		os.Exit(m.Run()) // an attacker process of TestHostileInput: it runs no program
	}
	dir, err := os.MkdirTemp("", "e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	root, err := moduleRoot()
	if err == nil {
		cmd := exec.Command("go", "build", "-o", dir+"/", "./ingest-api", "./mapper-worker", "./writer-worker")
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		err = cmd.Run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "build programs:", err)
		os.Exit(1)
	}
	binDir = dir
	_ = os.Chmod(dir, 0o755) // a program may run as a user of its own
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// stack is one running service: NATS in this process, ClickHouse from the
// test run, and the three programs as child processes.
type stack struct {
	t      *testing.T
	base   string   // http://127.0.0.1:port of ingest-api's device port
	ws     string   // http://127.0.0.1:port of its workspace listener
	bases  []string // of every ingest-api copy, base first
	db     string
	ch     driver.Conn
	nats   *testenv.NATSServer
	logDir string
	procs  map[string]*exec.Cmd
	users  map[string]int    // program copy -> the user it runs as (none: the test's own)
	ops    map[string]string // program -> address of its /metrics and health listener
	env    []string
	http   *http.Client // talks to ingest-api
}

func freeAddr(t *testing.T) string {
	return fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
}

func startStack(t *testing.T, extraEnv ...string) *stack {
	t.Helper()
	return startStackOn(t, testenv.ClickHouseAddr(t), extraEnv...)
}

// startStackOn starts a stack whose writer uses the ClickHouse server at
// chAddr, in a fresh database.
func startStackOn(t *testing.T, chAddr string, extraEnv ...string) *stack {
	t.Helper()
	ns := testenv.NATSControlFor(t, namesIn(extraEnv))
	s := newStack(t, chAddr, ns.Server().ClientURL(), extraEnv...)
	s.nats = ns
	s.start("writer-worker")
	s.start("mapper-worker")
	s.start("ingest-api")
	s.waitReady()
	return s
}

// newStack prepares a stack on the NATS servers at natsURL (comma
// separated) without starting any program.
func newStack(t *testing.T, chAddr, natsURL string, extraEnv ...string) *stack {
	t.Helper()
	db := testenv.FreshDB(t, chAddr)
	ch, err := clickhouse.Open(&clickhouse.Options{Addr: []string{chAddr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.Close() })
	s := &stack{t: t, db: db, ch: ch, logDir: t.TempDir(), procs: map[string]*exec.Cmd{}, ops: map[string]string{}, http: client}
	ingestAddr, wsAddr := freeAddr(t), freeAddr(t)
	s.base, s.ws = "http://"+ingestAddr, "http://"+wsAddr
	s.bases = []string{s.base}
	s.env = append([]string{
		"NATS_URL=" + natsURL,
		// As deployed: one user inserts, a readonly one reads.
		"CLICKHOUSE_URL=" + chURL(db, chAddr),
		"CLICKHOUSE_READ_USER=ingest_reader",
		"ADMIN_TOKEN=" + adminToken,
		"TOKEN_KEY=" + tokenKey,
		"HTTP_ADDR=" + ingestAddr,
		"WORKSPACE_ADDR=" + wsAddr,
		"LOG_LEVEL=debug",
		"PATH=" + os.Getenv("PATH"),
	}, extraEnv...)
	for i, kv := range s.env {
		s.env[i] = strings.ReplaceAll(kv, dbPlaceholder, db)
	}
	return s
}

// namesIn returns the NATS names that the settings env give (the defaults
// for those not given), for the test server's permissions.
func namesIn(env []string) bus.Names {
	n := bus.DefaultNames
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "NATS_PREFIX="); ok {
			n = bus.NamesFor(v)
		}
	}
	return n
}

// dbPlaceholder in a setting given to newStack stands for the stack's
// database.
const dbPlaceholder = "{db}"

// chURL is CLICKHOUSE_URL for database db on the servers addrs, as the
// insert user.
func chURL(db string, addrs ...string) string {
	return "clickhouse://ingest_writer@" + strings.Join(addrs, ",") + "/" + db
}

// start runs a program on the stack's settings, with its operations
// listener (metrics, health) on a fresh loopback port. A name may carry a
// copy number ("mapper-worker.2") to run another copy of the program.
func (s *stack) start(name string, env ...string) {
	s.t.Helper()
	program, copyNo, _ := strings.Cut(name, ".")
	s.ops[name] = freeAddr(s.t)
	env = append(env, "METRICS_ADDR="+s.ops[name])
	if program == "ingest-api" && copyNo != "" { // another copy: a workspace listener of its own
		env = append(env, "WORKSPACE_ADDR="+freeAddr(s.t))
	}
	logf, err := os.OpenFile(filepath.Join(s.logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, program))
	// Each program is its own NATS user, as deployed.
	env = append([]string{"NATS_USER=" + program, "NATS_PASSWORD=" + testenv.NATSPassword(program)}, env...)
	cmd.Env = append(append([]string{}, s.env...), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if uid := s.users[name]; uid != 0 { // a party of a test's firewall
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.procs[name] = cmd
	s.t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = logf.Close()
		if dir := os.Getenv("STACK_LOGS"); dir != "" { // kept whole, to investigate a run that passed
			b, _ := os.ReadFile(logf.Name())
			_ = os.WriteFile(filepath.Join(dir, s.t.Name()+"-"+name+".log"), b, 0o644)
		}
		if s.t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			s.t.Logf("--- %s log ---\n%s", name, tail(b, 4000))
		}
	})
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// waitReady waits for every ingest-api copy to be ready, as long as the
// stack progresses (testenv.WaitFor).
func (s *stack) waitReady() {
	s.t.Helper()
	for _, base := range s.bases {
		s.waitOK(s.t, "ingest-api at "+base+" ready", base+"/readyz")
	}
}

// logs returns everything the programs logged so far.
func (s *stack) logs() string {
	var b strings.Builder
	for name := range s.procs {
		data, _ := os.ReadFile(filepath.Join(s.logDir, name+".log"))
		b.Write(data)
	}
	return b.String()
}

// reply is a parsed HTTP answer.
type reply struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   map[string]any
}

var client = &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512}}

// do sends a request to the device port.
func (s *stack) do(t testing.TB, method, path string, body []byte, header map[string]string) reply {
	t.Helper()
	return s.doOn(t, s.base, method, path, body, header)
}

// doOn sends a request to the listener at base.
func (s *stack) doOn(t testing.TB, base, method, path string, body []byte, header map[string]string) reply {
	t.Helper()
	req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &r.Body); err != nil {
			t.Fatalf("%s %s: answer is not a JSON object (%d): %q", method, path, resp.StatusCode, raw)
		}
	}
	return r
}

func (s *stack) admin(t testing.TB, method, path string, body string) reply {
	t.Helper()
	return s.doOn(t, s.ws, method, "/api/v1/admin"+path, []byte(body), map[string]string{"Authorization": "Bearer " + adminToken})
}

func (s *stack) post(t testing.TB, body string, header map[string]string) reply {
	t.Helper()
	return s.do(t, http.MethodPost, "/api/v1/deviceapi/event", []byte(body), header)
}

// count runs a count query against the stack's database.
func (s *stack) count(t testing.TB, where string, args ...any) uint64 {
	t.Helper()
	var n uint64
	q := fmt.Sprintf("SELECT count() FROM %s.%s", s.db, where)
	if err := s.ch.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// waitOpsReady waits until the program's operations listener answers
// /readyz with 200, as long as the stack progresses (testenv.WaitFor).
func (s *stack) waitOpsReady(t *testing.T, name, addr string) {
	t.Helper()
	s.waitOK(t, name+" ready", "http://"+addr+"/readyz")
}
