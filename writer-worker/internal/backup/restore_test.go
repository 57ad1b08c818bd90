package backup

import (
	"context"
	"encoding/gob"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore/chtest"
)

// A backup is restored under the NATS_PREFIX it was taken with, or not at
// all: under another, its registry would land in a bucket no program
// reads, every device unknown, and the restore would report success.
func TestRestoreUnderAnotherPrefixIsRefused(t *testing.T) {
	ctx := context.Background()
	taken := bus.NamesFor("fleet.eu")
	dir := backupOfStreams(t, taken)
	_, js := testenv.Connect(t)
	_, db := testenv.ClickHouseDB(t)
	store := chtest.Open(t, "ingest_writer", db)

	_, err := Restore(ctx, js, bus.NamesFor("devices"), store, dir)
	if err == nil || !strings.Contains(err.Error(), "restore with the NATS_PREFIX the backup was taken with") {
		t.Fatalf("restore of a fleet.eu backup under the prefix devices: %v", err)
	}
	if _, err := js.Stream(ctx, "KV_"+taken.RegistryBucket); err == nil {
		t.Fatal("the refused restore created the backup's registry stream")
	}

	if _, err := Restore(ctx, js, taken, store, dir); err != nil {
		t.Fatalf("restore under the backup's own prefix: %v", err)
	}
	kv, err := js.KeyValue(ctx, taken.RegistryBucket)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "U04tMQ"); err != nil || string(e.Value()) != `{"serial":"SN-1"}` {
		t.Fatalf("restored registry record: %v", err)
	}
}

// backupOfStreams writes a backup of names' streams (one registry record,
// one audit record) and of empty tables, as Backup does, and returns its
// directory.
func backupOfStreams(t *testing.T, names bus.Names) string {
	t.Helper()
	ctx := context.Background()
	_, js := testenv.Connect(t)
	for _, bucket := range []string{names.RegistryBucket, names.KeysBucket} {
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket}); err != nil {
			t.Fatal(err)
		}
	}
	kv, _ := js.KeyValue(ctx, names.RegistryBucket)
	if _, err := kv.Put(ctx, "U04tMQ", []byte(`{"serial":"SN-1"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: names.AuditStream, Subjects: []string{names.AuditSubject()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, names.AuditSubject(), []byte(`{"action":"create"}`)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m := Manifest{Streams: map[string]int{}, Tables: map[string]int64{}}
	for _, name := range Streams(names) {
		n, err := writeFile(filepath.Join(dir, name+".stream"), func(enc *gob.Encoder) (int64, error) {
			k, err := dumpStream(ctx, js, name, enc)
			return int64(k), err
		})
		if err != nil {
			t.Fatal(err)
		}
		m.Streams[name] = int(n)
	}
	for _, table := range Tables {
		if _, err := writeFile(filepath.Join(dir, table+".table"), func(*gob.Encoder) (int64, error) { return 0, nil }); err != nil {
			t.Fatal(err)
		}
		m.Tables[table] = 0
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, manifestFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}
