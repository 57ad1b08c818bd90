package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
)

// The device SDKs (docs/sdk.md) as device processes against the real stack:
// sdk/go and sdk/c each have a dsq-driver with the same commands, so every
// scenario runs both, and each sends queues the other recorded.

// sdkDrivers builds both drivers and both sensor examples once: "go", "c",
// "go-sensor" and "c-sensor" to their paths.
var sdkDrivers = sync.OnceValues(func() (map[string]string, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	for name, pkg := range map[string]string{"dsq-driver-go": "./tools/dsq-driver", "sensor-go": "./examples/sensor"} {
		build := exec.Command("go", "build", "-o", filepath.Join(binDir, name), pkg)
		build.Dir = filepath.Join(root, "sdk/go")
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go %s: %v %s", pkg, err, out)
		}
	}
	// make test builds them first (the packages come from deploy/dev/deps.sh).
	if out, err := exec.Command("make", "-s", "-C", filepath.Join(root, "sdk/c"), "build/dsq-driver", "build/sensor").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("c driver: %v %s", err, out)
	}
	return map[string]string{"go": filepath.Join(binDir, "dsq-driver-go"), "c": filepath.Join(root, "sdk/c/build/dsq-driver"),
		"go-sensor": filepath.Join(binDir, "sensor-go"), "c-sensor": filepath.Join(root, "sdk/c/build/sensor")}, nil
})

func sdkDriver(t *testing.T, sdk string) string {
	t.Helper()
	d, err := sdkDrivers()
	if err != nil {
		t.Fatal(err)
	}
	return d[sdk]
}

var sdks = []string{"go", "c"}

// sdkDevice is a provisioned device whose input v goes to its own entity.
type sdkDevice struct {
	s              *stack
	serial, entity string
	env            []string // DSQ_TOKEN and the like
}

func newSDKDevice(t *testing.T, s *stack, serial string, env ...string) *sdkDevice {
	t.Helper()
	token := "sdk-tok-5f0c2b9e71d4-" + serial
	body := fmt.Sprintf(`{"accessToken":%q,"inputs":[{"name":"v","entity":%q,"entityInput":"v"}]}`, token, serial)
	if r := s.admin(t, http.MethodPut, "/devices/"+serial, body); r.Status != 200 {
		t.Fatalf("provision %s: %d %s", serial, r.Status, r.Raw)
	}
	return &sdkDevice{s: s, serial: serial, entity: serial, env: append([]string{"DSQ_TOKEN=" + token}, env...)}
}

// cmd is the driver of sdk running one command on dir: "record N START",
// "send [SECONDS]" or "run N START [SECONDS]".
func (d *sdkDevice) cmd(t *testing.T, sdk, dir, command string, args ...int) *exec.Cmd {
	t.Helper()
	argv := []string{command, dir}
	if command != "record" {
		argv = append(argv, d.s.base, d.serial)
	}
	for _, a := range args {
		argv = append(argv, strconv.Itoa(a))
	}
	c := exec.Command(sdkDriver(t, sdk), argv...)
	c.Env = append([]string{"PATH=" + os.Getenv("PATH")}, d.env...)
	return c
}

// exec runs a driver command to its end and returns what it printed; it
// fails the test unless the command exits 0.
func (d *sdkDevice) exec(t *testing.T, sdk, dir, command string, args ...int) string {
	t.Helper()
	c := d.cmd(t, sdk, dir, command, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		t.Fatalf("%s driver %s %v: %v\n%s\nstderr: %s", sdk, command, args, err, out.Bytes(), tail(errb.Bytes(), 2000))
	}
	return out.String()
}

// printed returns the readings a driver printed as recorded (on disk).
func printed(out string) []int {
	var vs []int
	for _, l := range strings.Split(out, "\n") {
		if v, err := strconv.Atoi(l); err == nil {
			vs = append(vs, v)
		}
	}
	return vs
}

// lastStatus is the status line send and run end with.
func lastStatus(t *testing.T, out string) map[string]float64 {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var st map[string]float64
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &st); err != nil {
		t.Fatalf("status line: %v in %q", err, tail([]byte(out), 500))
	}
	return st
}

func span(from, n int) []int {
	vs := make([]int, n)
	for i := range vs {
		vs[i] = from + i
	}
	return vs
}

// expectStoredOnce waits until the device's stored values settle, then
// fails unless each of want is stored exactly once and nothing else is
// stored but values of maybe (recorded, perhaps not on disk), at most once.
func (d *sdkDevice) expectStoredOnce(t *testing.T, want, maybe []int) {
	t.Helper()
	var counts map[int]uint64
	last, stable := "", 0
	testenv.WaitFor(t, d.serial+"'s values settle", 60*time.Second, func() string { return last }, nil, func() bool {
		time.Sleep(300 * time.Millisecond)
		var err error
		if counts, err = valuesOn(d.s.ch, d.s.db, d.entity); err != nil {
			t.Fatal(err)
		}
		var rows uint64
		for _, n := range counts {
			rows += n
		}
		now := fmt.Sprint(len(counts), " values in ", rows, " rows")
		if now == last {
			stable++
		} else {
			last, stable = now, 0
		}
		return stable >= 2 && len(counts) >= len(want)
	})
	allowed := map[int]bool{}
	for _, v := range maybe {
		allowed[v] = true
	}
	missing, twice, stray := 0, 0, 0
	for _, v := range want {
		allowed[v] = true
		if counts[v] == 0 {
			missing++
		}
	}
	for v, n := range counts {
		if n > 1 {
			twice++
		}
		if !allowed[v] {
			stray++
		}
	}
	t.Logf("%s: %d values on disk, %d stored, %d missing, %d stored twice, %d never recorded", d.serial, len(want), len(counts), missing, twice, stray)
	if missing+twice+stray != 0 {
		t.Fatalf("%s: %d recorded readings missing, %d stored twice, %d stored but never recorded", d.serial, missing, twice, stray)
	}
}

// Each SDK's process is SIGKILLed 50 times while it records and sends (and
// a third queue is driven by the two SDKs in turn): every other run early,
// while it records, the others just after its last reading is on disk,
// while it sends. Every reading that was on disk is then stored exactly once.
func TestSDKKilled(t *testing.T) {
	s := startStack(t, "DEVICE_RATE=0", "LOG_LEVEL=info")
	t.Run("lanes", func(t *testing.T) {
		for li, lane := range []string{"go", "c", "mixed"} {
			d := newSDKDevice(t, s, "sdk-kill-"+lane)
			t.Run(lane, func(t *testing.T) {
				t.Parallel()
				killLane(t, d, lane, (li+1)*1_000_000)
			})
		}
	})
}

func killLane(t *testing.T, d *sdkDevice, lane string, base int) {
	dir := t.TempDir()
	var durable, recorded []int
	sending := 0 // runs killed after their last reading was on disk
	sdk := lane
	for i := range 50 {
		if lane == "mixed" {
			sdk = sdks[i%2]
		}
		start := base + i*40
		c := d.cmd(t, sdk, dir, "run", 40, start, 30)
		pipe, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan int, 64)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(pipe)
			for sc.Scan() {
				if v, err := strconv.Atoi(sc.Text()); err == nil {
					lines <- v
				}
			}
		}()
		var got []int
		if i%2 == 0 {
			time.Sleep(time.Duration(5+rand.IntN(60)) * time.Millisecond)
		} else {
			for v := range lines {
				if got = append(got, v); len(got) == 40 {
					break
				}
			}
			time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
		}
		_ = c.Process.Kill()
		for v := range lines {
			got = append(got, v)
		}
		_ = c.Wait()
		if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && len(got) == 40 {
			sending++
		}
		durable = append(durable, got...)
		recorded = append(recorded, span(start, 40)...)
	}
	st := lastStatus(t, d.exec(t, sdk, dir, "send", 60))
	if st["queued"] != 0 {
		t.Errorf("%s: %v left", d.serial, st)
	}
	t.Logf("%s: %d of 50 runs killed while sending", d.serial, sending)
	d.expectStoredOnce(t, durable, recorded)
	if len(durable) == 0 || sending == 0 {
		t.Errorf("%s: %d readings on disk before a kill, %d runs killed while sending: the test proved nothing", d.serial, len(durable), sending)
	}
}

// A queue whose last segment is cut at a random offset, with a random byte
// flipped before the cut, is sent from its first reading up to the first
// damaged one, each stored once; each SDK sends its own queue and the
// other's.
func TestSDKTornQueue(t *testing.T) {
	s := startStack(t, "DEVICE_RATE=0", "LOG_LEVEL=info")
	seed := time.Now().UnixNano()
	rnd := rand.New(rand.NewPCG(uint64(seed), 34))
	t.Logf("seed %d", seed)
	for i, pair := range [][2]string{{"go", "go"}, {"c", "c"}, {"go", "c"}, {"c", "go"}} {
		recorder, sender := pair[0], pair[1]
		d := newSDKDevice(t, s, "sdk-torn-"+recorder+"-"+sender)
		dir := t.TempDir()
		base := (i + 1) * 1_000_000
		if got := printed(d.exec(t, recorder, dir, "record", 100, base)); len(got) != 100 {
			t.Fatalf("recorded %d", len(got))
		}
		segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
		if len(segs) != 1 {
			t.Fatalf("segments %v", segs)
		}
		b, err := os.ReadFile(segs[0])
		if err != nil {
			t.Fatal(err)
		}
		cut := len(b) - 1 - rnd.IntN(len(b)/4)    // in the last quarter
		flip := len(b)/2 + rnd.IntN(cut-len(b)/2) // in the second half, before the cut
		// Reading v is whole when its record (a 16-byte header starting
		// with the payload's length, then the payload: sdk/go/format.go,
		// the same in C) ends before the damage: it must be stored.
		var whole []int
		at, v := 0, base
		for ; at+16 <= len(b); v++ {
			at += 16 + int(binary.LittleEndian.Uint32(b[at:]))
			if at <= flip {
				whole = append(whole, v)
			}
		}
		if at != len(b) || v != base+100 {
			t.Fatalf("%d records end at %d of the segment's %d bytes, want 100 ending at its end", v-base, at, len(b))
		}
		b = b[:cut]
		b[flip] ^= 1 << rnd.IntN(8)
		if err := os.WriteFile(segs[0], b, 0o600); err != nil {
			t.Fatal(err)
		}
		st := lastStatus(t, d.exec(t, sender, dir, "send", 30))
		if st["queued"] != 0 || int(st["stored"]) < len(whole) {
			t.Errorf("%s: status %v, want at least %d stored", d.serial, st, len(whole))
		}
		d.expectStoredOnce(t, whole, span(base, 100))
		// The readings stored are the first ones, up to the damage.
		counts, err := valuesOn(s.ch, s.db, d.entity)
		if err != nil {
			t.Fatal(err)
		}
		for v := base; v < base+len(counts); v++ {
			if counts[v] != 1 {
				t.Errorf("%s: %d stored readings are not the first %d: %d is missing", d.serial, len(counts), len(counts), v)
			}
		}
	}
}

// The examples a device maker copies run as documented: a reading a second
// for a few seconds, then SIGTERM; what the example had not sent yet stays
// in its queue, which the SDK's driver then sends: every reading recorded is
// stored once.
func TestSDKExamples(t *testing.T) {
	s := startStack(t, "LOG_LEVEL=info")
	for _, sdk := range sdks {
		d := newSDKDevice(t, s, "sdk-sensor-"+sdk)
		if r := s.admin(t, http.MethodPut, "/devices/"+d.serial, `{"inputs":[{"name":"temp","entity":"`+d.serial+`","entityInput":"temp"},{"name":"v"}]}`); r.Status != 200 {
			t.Fatalf("inputs: %d %s", r.Status, r.Raw)
		}
		dir := t.TempDir()
		c := exec.Command(sdkDriver(t, sdk+"-sensor"), s.base, d.serial, dir, "1")
		c.Env = d.env
		var errb bytes.Buffer
		c.Stderr = &errb
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3500 * time.Millisecond)
		_ = c.Process.Signal(syscall.SIGTERM)
		if err := c.Wait(); err != nil {
			t.Errorf("%s sensor: %v\n%s", sdk, err, tail(errb.Bytes(), 2000))
		}
		if bytes.Contains(errb.Bytes(), []byte(strings.TrimPrefix(d.env[0], "DSQ_TOKEN="))) {
			t.Errorf("%s sensor: its log holds the token", sdk)
		}
		if st := lastStatus(t, d.exec(t, sdk, dir, "send", 30)); st["queued"] != 0 {
			t.Errorf("%s: %v left after the sensor", sdk, st)
		}
		// Readings at 0, 1, 2 and 3 s (three at least on a loaded machine),
		// each stored once.
		var n, distinct uint64
		q := fmt.Sprintf("SELECT count(), uniqExact(ts_ns) FROM %s.input_values WHERE entity = ?", s.db)
		testenv.WaitFor(t, d.serial+"'s readings stored", 20*time.Second, func() string { return fmt.Sprint(n, " stored") }, nil, func() bool {
			if err := s.ch.QueryRow(context.Background(), q, d.serial).Scan(&n, &distinct); err != nil {
				t.Fatal(err)
			}
			return n >= 3
		})
		if n != distinct || n > 4 {
			t.Errorf("%s: %d values at %d reading times, want 3 or 4, once each", sdk, n, distinct)
		}
	}
}
