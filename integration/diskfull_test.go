package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
)

// smallDisk mounts a tmpfs of size (as mount(8) reads it: "256m") for the
// test and returns its directory.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root (CI runs as root)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a %s tmpfs: %v\n%s", size, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fillDisk writes a file into dir until its filesystem has no space left,
// and returns the function that removes it.
func fillDisk(t *testing.T, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for len(chunk) >= 512 {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			chunk = chunk[:len(chunk)/2]
		}
	}
	_ = f.Close()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("disk filled: %d bytes left", int64(st.Bavail)*st.Bsize)
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// ClickHouse's disk fills while devices post: every request is answered
// 503 with Retry-After or stored, nothing answered stored is missing, the
// writer counts the failed inserts (the alert's metric), and once space is
// freed ingestion resumes by itself: keyed readings refused meanwhile are
// stored once on their retries.
func TestClickHouseDiskFull(t *testing.T) {
	disk := smallDisk(t, "400m")
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "deploy", "clickhouse", "server.sh")
	chDir := filepath.Join(disk, "clickhouse")
	tcp, http := testenv.FreePort(t), testenv.FreePort(t)
	if out, err := exec.Command(script, "start", chDir, fmt.Sprint(tcp), fmt.Sprint(http)).CombinedOutput(); err != nil {
		t.Fatalf("start ClickHouse on the small disk: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(script, "stop", chDir).Run() })
	s := startStackOn(t, fmt.Sprintf("127.0.0.1:%d", tcp))
	s.admin(t, "PUT", "/devices/df", `{"accessToken":"tok-df","inputs":[{"name":"t","entity":"df","entityInput":"t"}]}`)
	stored := map[int]bool{}
	post := func(v int, key string) reply {
		h := bearer("tok-df")
		if key != "" {
			h = keyHeader("tok-df", key)
		}
		r := s.post(t, fmt.Sprintf(`{"serial":"df","data":{"t":%d}}`, v), h)
		switch {
		case r.Status == 200:
			stored[v] = true
		case r.Status != 503 || r.Header.Get("Retry-After") == "" || r.Body["success"] != false:
			t.Fatalf("reading %d answered %d %s (Retry-After %q), want 200 or 503 with Retry-After", v, r.Status, r.Raw, r.Header.Get("Retry-After"))
		}
		return r
	}
	for v := range 10 {
		if r := post(v, ""); r.Status != 200 {
			t.Fatalf("before the disk filled: %d %s", r.Status, r.Raw)
		}
	}

	free := fillDisk(t, disk)
	refused := 0
	var refusedKeys []int
	for v := 100; v < 120; v++ {
		key := ""
		if v%2 == 0 {
			key = fmt.Sprint("df-", v)
		}
		if r := post(v, key); r.Status == 503 {
			refused++
			if key != "" {
				refusedKeys = append(refusedKeys, v)
			}
		}
	}
	// ClickHouse 18.16 with no space closes the connection of an insert
	// (it cannot even log why): the writer counts storage failures, what
	// DeviceEventsStorageFailing watches. A current release answers
	// NOT_ENOUGH_SPACE, counted as a full disk too.
	m := s.scrape(t, "writer-worker")
	failures := m[`writer_worker_storage_failures_total{table="input_values"}`]
	t.Logf("disk full: %d of 20 readings refused; writer counted %v failed inserts, %v of them as a full disk", refused, failures, m["writer_worker_disk_full_failures_total"])
	if refused == 0 || failures < 1 {
		t.Fatalf("with the disk full %d readings were refused and %v inserts counted as failed", refused, failures)
	}

	free()
	// Ingestion resumes by itself: the devices' next tries are stored.
	v := 200
	eventually(t, 60*time.Second, func() bool {
		v++
		return post(v, "").Status == 200
	})
	for _, k := range refusedKeys {
		if r := post(k, fmt.Sprint("df-", k)); r.Status != 200 {
			t.Fatalf("the retry of keyed reading %d after the disk was freed: %d %s", k, r.Status, r.Raw)
		}
	}
	for v := range stored {
		if n := s.count(t, "input_values WHERE entity = 'df' AND value_json = ?", fmt.Sprint(v)); n != 1 {
			t.Fatalf("reading %d answered stored is there %d times", v, n)
		}
	}
}
