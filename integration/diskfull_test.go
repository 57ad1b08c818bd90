package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

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
	s.admin(t, "PUT", "/devices/df", `{"accessToken":"tok-5f0c2b9e71d4-df","inputs":[{"name":"t","entity":"df","entityInput":"t"}]}`)
	stored := map[int]bool{}
	post := func(v int, key string) reply {
		h := bearer("tok-5f0c2b9e71d4-df")
		if key != "" {
			h = keyHeader("tok-5f0c2b9e71d4-df", key)
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

// jetStreamOn starts a stack whose NATS server keeps JetStream on disk,
// with nats-server's own store limit (three quarters of the disk's free
// space) unless storeLimit is set.
func jetStreamOn(t *testing.T, disk string, storeLimit int64, env ...string) *stack {
	t.Helper()
	ns := testenv.NATSControlWith(t, namesIn(nil), func(o *server.Options) {
		o.StoreDir = disk
		o.JetStreamMaxStore = storeLimit
	})
	s := newStack(t, testenv.ClickHouseAddr(t), ns.Server().ClientURL(), append([]string{"DEVICE_RATE=0", "OUTCOME_TIMEOUT=1s"}, env...)...)
	s.nats = ns
	s.start("writer-worker")
	s.start("mapper-worker")
	s.start("ingest-api")
	s.waitReady()
	s.admin(t, "PUT", "/devices/jf", `{"accessToken":"tok-5f0c2b9e71d4-jf","inputs":[{"name":"t","entity":"jf","entityInput":"t"}]}`)
	return s
}

// postJF posts reading v of device jf and notes it in stored when it is
// answered stored; any other answer must be 503 with Retry-After.
func postJF(t *testing.T, s *stack, stored map[int]bool, v int) reply {
	t.Helper()
	r := s.post(t, fmt.Sprintf(`{"serial":"jf","data":{"t":%d}}`, v), bearer("tok-5f0c2b9e71d4-jf"))
	switch {
	case r.Status == 200:
		stored[v] = true
	case r.Status != 503 || r.Header.Get("Retry-After") == "" || r.Body["success"] != false:
		t.Fatalf("reading %d answered %d %s, want 200 or 503 with Retry-After", v, r.Status, r.Raw)
	}
	return r
}

// backlogJF posts a backlog of 400 readings of 2 KB each (~0.9 MB in the
// events stream) numbered from first.
func backlogJF(t *testing.T, s *stack, first int) reply {
	t.Helper()
	pad := strings.Repeat("x", 2000)
	msgs := make([]string, 400)
	for i := range msgs {
		msgs[i] = fmt.Sprintf(`{"data":{"t":%d,"pad":"%s"}}`, first+i, pad)
	}
	return s.postBacklog(t, `{"serial":"jf","messages":[`+strings.Join(msgs, ",")+`]}`, bearer("tok-5f0c2b9e71d4-jf"))
}

// checkStoredOnce fails unless every reading of jf answered stored is
// stored exactly once.
func checkStoredOnce(t *testing.T, s *stack, stored map[int]bool) {
	t.Helper()
	for v := range stored {
		if n := s.count(t, "input_values WHERE entity = 'jf' AND value_json = ?", fmt.Sprint(v)); n != 1 {
			t.Fatalf("reading %d answered stored is there %d times", v, n)
		}
	}
}

// JetStream's storage limit is reached (the mapper is down; the events
// stream fills to NATS_STREAM_MAX_BYTES): publishes are refused at once,
// 503 with Retry-After, ingest-api counts them for want of storage (the
// alert's metric); once the mapper is back and drains the stream,
// ingestion resumes by itself. The disk has room for every stream's limit
// (nats-server refuses to create a stream whose limit does not fit its
// store), so the mapper can always move events on.
func TestJetStreamStorageLimit(t *testing.T) {
	disk := smallDisk(t, "512m")
	s := jetStreamOn(t, disk, 0, "NATS_STREAM_MAX_BYTES=16777216")
	stored := map[int]bool{}
	if r := postJF(t, s, stored, 1); r.Status != 200 {
		t.Fatalf("before the fault: %d %s", r.Status, r.Raw)
	}
	s.kill(t, "mapper-worker", os.Interrupt)
	refused := 0
	for b := 0; refused == 0; b++ {
		if b == 40 {
			t.Fatal("40 backlogs (36 MB) accepted into a stream of 16 MB")
		}
		r := backlogJF(t, s, 1_000_000+b*1000)
		if r.Status != 503 || r.Header.Get("Retry-After") == "" {
			t.Fatalf("backlog %d with the mapper down answered %d %.300s, want 503 with Retry-After", b, r.Status, r.Raw)
		}
		if strings.Contains(string(r.Raw), "not accepted") {
			refused++
		}
	}
	if n := s.scrape(t, "ingest-api")["ingest_api_stream_full_total"]; n < 1 {
		t.Fatalf("ingest_api_stream_full_total = %v, want the refusals counted", n)
	}
	s.start("mapper-worker")
	v := 200
	eventually(t, 120*time.Second, func() bool {
		v++
		return postJF(t, s, stored, v).Status == 200
	})
	checkStoredOnce(t, s, stored)
}

// JetStream's disk itself fills (something else fills it: a store limit
// above the disk, another program): nats-server answers no publish it has
// no space for, so requests are answered 503 with Retry-After when their
// wait for the outcome ends, and nothing is reported stored. nats-server
// stays so after space is freed, until it is restarted; then ingestion
// resumes by itself (the programs reconnect), every stored reading once.
func TestJetStreamDiskFull(t *testing.T) {
	disk := smallDisk(t, "512m")
	s := jetStreamOn(t, disk, 1<<40, "NATS_STREAM_MAX_BYTES=16777216")
	stored := map[int]bool{}
	if r := postJF(t, s, stored, 1); r.Status != 200 {
		t.Fatalf("before the fault: %d %s", r.Status, r.Raw)
	}
	free := fillDisk(t, disk)
	for v := 100; v < 110; v++ {
		if r := postJF(t, s, stored, v); r.Status == 200 {
			t.Logf("reading %d stored with the disk full", v)
		}
	}
	free()
	// nats-server (v2.15.2) answers no publish after a write found its disk
	// full, even once space is freed: measured, 60 s without an answer.
	// Restarted, it recovers its streams and the programs reconnect.
	time.Sleep(2 * time.Second)
	if r := postJF(t, s, stored, 150); r.Status == 200 {
		t.Log("nats-server recovered by itself once space was freed")
	} else {
		s.nats.Stop()
		s.nats.Start()
	}
	v := 200
	eventually(t, 60*time.Second, func() bool {
		v++
		return postJF(t, s, stored, v).Status == 200
	})
	checkStoredOnce(t, s, stored)
}
