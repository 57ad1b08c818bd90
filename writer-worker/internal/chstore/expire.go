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

// keyZone finds the time zone a partition key names: this release's
// tables say 'UTC'; those created before it name none, and ClickHouse
// computed their partitions in the server's zone (<timezone>).
var keyZone = regexp.MustCompile(`'([A-Za-z][A-Za-z0-9_+/-]*)'`)

// PartitionEnd is when the partition named id (a year, month or day) ends,
// as a wall time in the zone of the table's partition key; false for a
// name of another form.
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

// partitionEnds returns when each partition of table on this server ends,
// by partition id. The partitions' wall times are read in the zone the
// table's key names, or, for a key that names none (tables created by
// earlier releases), in the server's: ClickHouse itself converts them, with
// the zone data that named the partitions. system.parts' min_time and
// max_time are of no help: they are kept for Date and DateTime columns,
// and the keys are of Int64 nanoseconds.
func (s *Store) partitionEnds(ctx context.Context, table string) (map[string]time.Time, error) {
	var key string
	if err := s.pipe.conn().QueryRow(ctx, "SELECT partition_key FROM system.tables WHERE database = ? AND name = ?", s.db, table).Scan(&key); err != nil {
		return nil, fmt.Errorf("read the partition key of %s: %w", table, err)
	}
	ids, err := collect(ctx, s.pipe, "list partitions of "+table, "scan partition",
		"SELECT DISTINCT partition_id FROM system.parts WHERE database = ? AND table = ? AND active",
		[]any{s.db, table}, func(scan func(...any) error) (p string, err error) {
			err = scan(&p)
			return p, err
		})
	if err != nil {
		return nil, err
	}
	var named, walls []string
	for _, id := range ids {
		if end, ok := PartitionEnd(id); ok {
			named, walls = append(named, id), append(walls, end.Format(time.DateTime))
		}
	}
	if len(named) == 0 {
		return nil, nil
	}
	zone := ""
	if m := keyZone.FindStringSubmatch(key); m != nil {
		// Letters, digits and _+/- only (keyZone): safe to splice.
		zone = ", '" + m[1] + "'"
	}
	var secs []uint32
	if err := s.pipe.conn().QueryRow(ctx, "SELECT arrayMap(w -> toUnixTimestamp(toDateTime(w"+zone+")), ?)", walls).Scan(&secs); err != nil {
		return nil, fmt.Errorf("read when the partitions of %s end: %w", table, err)
	}
	ends := make(map[string]time.Time, len(named))
	for i, id := range named {
		ends[id] = time.Unix(int64(secs[i]), 0)
	}
	return ends, nil
}

// DropPartitionsBefore drops the partitions of table on this server that
// end at or before cutoff, and returns how many it dropped.
func (s *Store) DropPartitionsBefore(ctx context.Context, table string, cutoff time.Time) (int, error) {
	ends, err := s.partitionEnds(ctx, table)
	if err != nil {
		return 0, err
	}
	dropped := 0
	for id, end := range ends {
		if end.After(cutoff) {
			continue
		}
		// id is digits only (PartitionEnd matched it): safe to splice.
		if err := s.pipe.conn().Exec(ctx, "ALTER TABLE "+s.db+"."+table+" DROP PARTITION ID '"+id+"'"); err != nil {
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
	if err := s.pipe.conn().QueryRow(ctx, "SELECT count() FROM "+s.db+"."+table+" WHERE last_ns < ?", cutoffNs).Scan(&n); err != nil {
		return false, fmt.Errorf("count expired rows of %s: %w", table, err)
	}
	if n == 0 {
		return false, nil
	}
	if err := s.pipe.conn().Exec(ctx, "ALTER TABLE "+s.db+"."+table+" DELETE WHERE last_ns < ?", cutoffNs); err != nil {
		return false, fmt.Errorf("delete expired rows of %s: %w", table, err)
	}
	return true, nil
}
