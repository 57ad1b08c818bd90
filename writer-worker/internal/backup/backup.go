// Package backup writes a deployment's backup into a directory, and
// restores one into a fresh deployment: the NATS streams that hold the
// device registry, the workspace keys and the audit trail (each stream's
// configuration and messages), and the ClickHouse tables of readings, raw
// messages, idempotency records, diagnostics and the minute and hour
// rollups, which outlive the readings (their rows, in blocks). Not in it:
// the rollup's marks (the first rollup after a restore computes the tiers
// again from the readings restored), the work streams (what is in flight is
// answered or redelivered before or after, not restored), backfill jobs.
//
// A backup is taken while ingestion runs: the streams first, then, once the
// raw message log has caught up with what was answered before the backup
// began (Settle), each table. Everything answered stored before it began is
// in it; later writes may be in it too, once each.
package backup

import (
	"compress/gzip"
	"context"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// Tables are the tables backed up, in the order restored.
var Tables = []string{"input_values", "input_minutes", "input_hours", "device_messages", "event_keys", "device_stats", "device_stats_hourly", "device_seen", "device_rejections", "device_keys", "retention_periods"}

// Streams are the streams backed up: the registry's and keys' KV buckets,
// and the audit trail.
func Streams(n bus.Names) []string {
	return []string{"KV_" + n.RegistryBucket, "KV_" + n.KeysBucket, n.AuditStream}
}

// Settle is how long a backup waits after it begins before it reads the
// tables: a reading is answered once its values are stored; its raw message
// and idempotency record follow within the raw log's interval (500 ms) and
// an insert's time (INSERT_TIMEOUT, 3 s), or, when that insert failed, with
// the redelivery after ACK_WAIT (10 s).
const Settle = 15 * time.Second

// BlockRows is the most rows in one block of a table's file.
const BlockRows = 100_000

// Manifest describes a backup; it is written last, so a directory without
// one holds no complete backup.
type Manifest struct {
	Started  time.Time        `json:"started"`
	Finished time.Time        `json:"finished"`
	Version  string           `json:"version"`
	Streams  map[string]int   `json:"streams"` // messages per stream
	Tables   map[string]int64 `json:"tables"`  // rows per table
}

const manifestFile = "manifest.json"

// Backup writes the backup of js's streams and store's tables into dir
// (created; it must not hold a backup already).
func Backup(ctx context.Context, js jetstream.JetStream, names bus.Names, store *chstore.Store, dir, version string) (Manifest, error) {
	m := Manifest{Started: time.Now().UTC(), Version: version, Streams: map[string]int{}, Tables: map[string]int64{}}
	if _, err := os.Stat(filepath.Join(dir, manifestFile)); err == nil {
		return m, fmt.Errorf("%s holds a backup already", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return m, err
	}
	for _, name := range Streams(names) {
		n, err := writeFile(filepath.Join(dir, name+".stream"), func(enc *gob.Encoder) (int64, error) {
			k, err := dumpStream(ctx, js, name, enc)
			return int64(k), err
		})
		if err != nil {
			return m, fmt.Errorf("back up stream %s: %w", name, err)
		}
		m.Streams[name] = int(n)
	}
	select {
	case <-ctx.Done():
		return m, ctx.Err()
	case <-time.After(time.Until(m.Started.Add(Settle))):
	}
	if err := backupTables(ctx, store, dir, m.Tables); err != nil {
		return m, err
	}
	m.Finished = time.Now().UTC()
	b, _ := json.MarshalIndent(m, "", "  ")
	return m, os.WriteFile(filepath.Join(dir, manifestFile), append(b, '\n'), 0o600)
}

// backupTables writes every table's rows into dir, counting them in counts.
func backupTables(ctx context.Context, store *chstore.Store, dir string, counts map[string]int64) error {
	for _, table := range Tables {
		n, err := writeFile(filepath.Join(dir, table+".table"), func(enc *gob.Encoder) (int64, error) {
			var rows int64
			err := store.DumpTable(ctx, table, BlockRows, func(b chstore.Block) error {
				rows += int64(b.Rows)
				return enc.Encode(b)
			})
			return rows, err
		})
		if err != nil {
			return fmt.Errorf("back up table %s: %w", table, err)
		}
		counts[table] = n
	}
	return nil
}

// writeFile writes path as a gzip'd gob stream that fill encodes.
func writeFile(path string, fill func(*gob.Encoder) (int64, error)) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	n, err := fill(gob.NewEncoder(zw))
	err = errors.Join(err, zw.Close(), f.Sync(), f.Close())
	return n, err
}

// readFile decodes path's gob stream with each, until its end.
func readFile(path string, each func(*gob.Decoder) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return each(gob.NewDecoder(zr))
}

// restoreTables loads every table's rows from dir, checking that each
// file holds as many as want says.
func restoreTables(ctx context.Context, store *chstore.Store, dir string, want map[string]int64) error {
	for _, table := range Tables {
		if _, ok := want[table]; !ok && table == "retention_periods" {
			// A backup by a release before the periods were recorded:
			// the first copy to start records its own.
			continue
		}
		var rows int64
		err := readFile(filepath.Join(dir, table+".table"), func(dec *gob.Decoder) error {
			for {
				var blk chstore.Block
				if err := dec.Decode(&blk); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				if err := store.LoadBlock(ctx, table, blk); err != nil {
					return err
				}
				rows += int64(blk.Rows)
			}
		})
		if err != nil {
			return fmt.Errorf("restore table %s: %w", table, err)
		}
		if rows != want[table] {
			return fmt.Errorf("table %s: %d rows in the backup, its manifest says %d", table, rows, want[table])
		}
	}
	return nil
}

// Restore loads the backup in dir into a fresh deployment, whose streams
// are named names: its tables (schema applied first) and streams must be
// empty, and the backup must be of streams of those names (the same
// NATS_PREFIX). Run it before the programs start on that deployment.
func Restore(ctx context.Context, js jetstream.JetStream, names bus.Names, store *chstore.Store, dir string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return m, fmt.Errorf("no complete backup in %s: %w", dir, err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", manifestFile, err)
	}
	if err := sameStreams(m, names); err != nil {
		return m, err
	}
	if err := store.Migrate(ctx); err != nil {
		return m, err
	}
	for _, table := range Tables {
		if n, err := store.Rows(ctx, table); err != nil || n > 0 {
			return m, errors.Join(err, fmt.Errorf("table %s is not empty (%d rows): restore into a fresh deployment", table, n))
		}
	}
	for name := range m.Streams {
		if err := emptyOrMissing(ctx, js, name); err != nil {
			return m, err
		}
	}
	if err := restoreTables(ctx, store, dir, m.Tables); err != nil {
		return m, err
	}
	for _, name := range Streams(names) {
		want := m.Streams[name]
		var n int
		err := readFile(filepath.Join(dir, name+".stream"), func(dec *gob.Decoder) error {
			var err error
			n, err = loadStream(ctx, js, dec)
			return err
		})
		if err != nil {
			return m, fmt.Errorf("restore stream %s: %w", name, err)
		}
		if n != want {
			return m, fmt.Errorf("stream %s: %d messages in the backup, its manifest says %d", name, n, want)
		}
	}
	return m, nil
}

// sameStreams checks that m is a backup of the streams names has: a
// backup restored under another NATS_PREFIX would land in streams the
// programs never read (its devices all unknown), and only these names
// are read from the backup's directory.
func sameStreams(m Manifest, names bus.Names) error {
	want := Streams(names)
	ok := len(m.Streams) == len(want)
	for _, name := range want {
		if _, in := m.Streams[name]; !in {
			ok = false
		}
	}
	if !ok {
		got := make([]string, 0, len(m.Streams))
		for name := range m.Streams {
			got = append(got, name)
		}
		slices.Sort(got)
		return fmt.Errorf("the backup holds the streams %s, this deployment's are %s: restore with the NATS_PREFIX the backup was taken with", strings.Join(got, ", "), strings.Join(want, ", "))
	}
	return nil
}
