package chstore

import (
	"context"
	"fmt"
	"regexp"
	"time"
)

// The sweeps of retention (writer-worker/internal/janitor) act on each
// server's own tables: a Distributed table has no parts, and a partition
// dropped on one replica of a shard is dropped on its others by
// replication.

// partitionID is what toYear, toYYYYMM and toYYYYMMDD partitions are named.
var partitionID = regexp.MustCompile(`^[0-9]{4}([0-9]{2}([0-9]{2})?)?$`)

// PartitionEnd is when the partition named id (a year, month or day of
// UTC) ends; false for a name of another form.
func PartitionEnd(id string) (time.Time, bool) {
	if !partitionID.MatchString(id) {
		return time.Time{}, false
	}
	switch len(id) {
	case 4:
		t, err := time.Parse("2006", id)
		return t.AddDate(1, 0, 0), err == nil
	case 6:
		t, err := time.Parse("200601", id)
		return t.AddDate(0, 1, 0), err == nil
	}
	t, err := time.Parse("20060102", id)
	return t.AddDate(0, 0, 1), err == nil
}

// DropPartitionsBefore drops the partitions of table on this server that
// end at or before cutoff, and returns how many it dropped.
func (s *Store) DropPartitionsBefore(ctx context.Context, table string, cutoff time.Time) (int, error) {
	ids, err := collect(ctx, s.conn, "list partitions of "+table, "scan partition",
		"SELECT DISTINCT partition_id FROM system.parts WHERE database = ? AND table = ? AND active",
		[]any{s.db, table}, func(scan func(...any) error) (p string, err error) {
			err = scan(&p)
			return p, err
		})
	if err != nil {
		return 0, err
	}
	dropped := 0
	for _, id := range ids {
		if end, ok := PartitionEnd(id); !ok || end.After(cutoff) {
			continue
		}
		// id is digits only (PartitionEnd matched it): safe to splice.
		if err := s.conn.Exec(ctx, "ALTER TABLE "+s.db+"."+table+" DROP PARTITION ID '"+id+"'"); err != nil {
			return dropped, fmt.Errorf("drop partition %s of %s: %w", id, table, err)
		}
		dropped++
	}
	return dropped, nil
}

// DeleteSeenBefore deletes the rows of device_seen (named table on this
// server) last seen before cutoffNs: it has no time partitions, one row per
// serial. The delete is a mutation, asked for only when there is a row to
// delete; it reports whether it asked.
func (s *Store) DeleteSeenBefore(ctx context.Context, table string, cutoffNs int64) (bool, error) {
	var n uint64
	if err := s.conn.QueryRow(ctx, "SELECT count() FROM "+s.db+"."+table+" WHERE last_ns < ?", cutoffNs).Scan(&n); err != nil {
		return false, fmt.Errorf("count expired rows of %s: %w", table, err)
	}
	if n == 0 {
		return false, nil
	}
	if err := s.conn.Exec(ctx, "ALTER TABLE "+s.db+"."+table+" DELETE WHERE last_ns < ?", cutoffNs); err != nil {
		return false, fmt.Errorf("delete expired rows of %s: %w", table, err)
	}
	return true, nil
}
