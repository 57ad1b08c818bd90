package chstore

import (
	"context"
	"time"

	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/query"
)

// Bounds on the lists of a diagnostics answer.
const (
	maxRejections = 20
	maxKeys       = 100
	maxNotes      = 20
	maxFleet      = 100
)

// Diagnostics returns one device's diagnostics over [fromNs, toNs): its
// answers by kind (counted to the minute), latest rejections, unmatched
// keys, how late its readings arrive, and when it was last seen.
func (s *Store) Diagnostics(ctx context.Context, serial string, fromNs, toNs int64) (d query.DeviceDiagnostics, err error) {
	from, to := fromNs/1e9/60*60, toNs/1e9
	db := s.db
	d.Counts, err = collect(ctx, s.reads, "query counts", "scan count",
		"SELECT kind, sum(requests), sum(readings) FROM "+db+".device_stats WHERE serial = ? AND minute >= ? AND minute < ? GROUP BY kind ORDER BY kind",
		[]any{serial, from, to}, func(scan func(...any) error) (c query.KindCount, err error) {
			return c, scan(&c.Kind, &c.Requests, &c.Readings)
		})
	if err != nil {
		return d, err
	}
	var lastNs int64
	err = scanRows(ctx, s.reads, "query last seen", "scan last seen",
		"SELECT max(last_ns), argMax(kind, last_ns) FROM "+db+".device_seen WHERE serial = ?", []any{serial},
		func(scan func(...any) error) error { return scan(&lastNs, &d.LastKind) })
	if err != nil {
		return d, err
	}
	if lastNs > 0 {
		d.LastSeen = query.FormatNs(lastNs)
	}
	d.Rejections, err = collect(ctx, s.reads, "query rejections", "scan rejection",
		"SELECT ts_ns, kind, message, error, source FROM "+db+".device_rejections WHERE serial = ? AND ts_ns >= ? AND ts_ns < ? ORDER BY ts_ns DESC LIMIT ?",
		[]any{serial, fromNs, toNs, maxRejections}, func(scan func(...any) error) (r query.Rejection, err error) {
			var ns int64
			err = scan(&ns, &r.Kind, &r.Message, &r.Error, &r.Source)
			r.At = query.FormatNs(ns)
			return r, err
		})
	if err != nil {
		return d, err
	}
	d.Keys, err = collect(ctx, s.reads, "query keys", "scan key",
		"SELECT key, sum(count), max(ts_ns) AS last, argMax(value, ts_ns) FROM "+db+".device_keys WHERE serial = ? AND ts_ns >= ? AND ts_ns < ? GROUP BY key ORDER BY last DESC LIMIT ?",
		[]any{serial, fromNs, toNs, maxKeys}, func(scan func(...any) error) (k query.UnmatchedKey, err error) {
			var ns int64
			err = scan(&k.Key, &k.Count, &ns, &k.LastValue)
			k.LastAt = query.FormatNs(ns)
			return k, err
		})
	if err != nil {
		return d, err
	}
	d.ReadingTime, err = s.readingTime(ctx, serial, fromNs, toNs)
	return d, err
}

// readingTime measures how late a device's readings arrive, over the
// messages whose own time was used (a time note means it was refused; a
// reading time equal to the receive time, that the device sent none).
func (s *Store) readingTime(ctx context.Context, serial string, fromNs, toNs int64) (rt query.ReadingTime, err error) {
	const timed = "time_note = '' AND reading_ns != ts_ns"
	var qs []float64
	var maxNs int64
	err = scanRows(ctx, s.reads, "query reading times", "scan reading times",
		"SELECT count(), countIf("+timed+"), quantilesExactIf(0.5, 0.99)(ts_ns - reading_ns, "+timed+"), maxIf(ts_ns - reading_ns, "+timed+") FROM "+
			s.db+".device_messages WHERE serial = ? AND ts_ns >= ? AND ts_ns < ?",
		[]any{serial, fromNs, toNs}, func(scan func(...any) error) error {
			var late []int64
			if err := scan(&rt.Messages, &rt.Timed, &late, &maxNs); err != nil {
				return err
			}
			for _, v := range late {
				qs = append(qs, float64(v))
			}
			return nil
		})
	if err != nil {
		return rt, err
	}
	if rt.Timed > 0 && len(qs) == 2 {
		rt.LateP50Ms, rt.LateP99Ms, rt.LateMaxMs = int64(qs[0])/1e6, int64(qs[1])/1e6, maxNs/1e6
	}
	rt.AtReceive, err = collect(ctx, s.reads, "query time notes", "scan time note",
		"SELECT time_note, count() AS n FROM "+s.db+".device_messages WHERE serial = ? AND ts_ns >= ? AND ts_ns < ? AND time_note != '' GROUP BY time_note ORDER BY n DESC LIMIT ?",
		[]any{serial, fromNs, toNs, maxNotes}, func(scan func(...any) error) (n query.NoteCount, err error) {
			return n, scan(&n.Note, &n.Count)
		})
	return rt, err
}

// Silence: a device is silent when its last authenticated request (of any
// answer; device_seen holds no other) is older than silentIntervals of its
// usual interval, and than silentMin. The usual
// interval is measured on the hourly table over silentLookback (the
// diagnostics' default period): the stored requests after the device's
// first hour there, over the time from that hour's end to its last request.
// A device with fewer than two such requests has no usual interval.
const (
	silentIntervals = 5
	silentMin       = 5 * time.Minute
	silentLookback  = 30 * 24 * time.Hour
)

// silent returns the devices silent now, latest first, in one query run by
// ClickHouse: the serials quiet for silentMin (device_seen), and the
// hourly counts of those with stored requests (found by the table's key),
// one group per device. Its answer is at most maxFleet rows: nothing in
// writer-worker grows with the serials strangers invent, and none of
// them can push a silent device out of the list.
func (s *Store) silent(ctx context.Context, stored string, now time.Time) ([]query.FleetSerial, error) {
	db := s.db
	from := now.Add(-silentLookback).Unix() / 3600 * 3600
	quietNs := now.Add(-silentMin).UnixNano()
	seen := "SELECT serial, max(last_ns) AS last FROM " + db + ".device_seen WHERE serial != '' GROUP BY serial HAVING last < ?"
	// The stored requests after each quiet device's first hour: all its
	// hours' rows at once (one group per device, the first hour's rows
	// summed from the group's arrays), not a group per hour.
	usual := "SELECT serial, min(hour) AS h0, sum(requests) AS n, n - arraySum(arrayFilter((r, h) -> h = h0, groupArray(requests), groupArray(hour))) AS later" +
		" FROM " + db + ".device_stats_hourly WHERE hour >= ? AND kind IN " + stored + " AND serial GLOBAL IN (SELECT serial FROM (" + seen + "))" +
		" GROUP BY serial HAVING later >= 2"
	interval := "(last / 1e9 - (h0 + 3600)) / later"
	return collect(ctx, s.reads, "query silent devices", "scan silent device",
		"SELECT serial, n, last, "+interval+" AS iv FROM ("+seen+") ANY INNER JOIN ("+usual+") USING serial"+
			" WHERE ? - last > ? * 1e9 * "+interval+" ORDER BY last DESC, serial LIMIT ?",
		[]any{quietNs, from, quietNs, now.UnixNano(), silentIntervals, maxFleet},
		func(scan func(...any) error) (d query.FleetSerial, err error) {
			var last int64
			err = scan(&d.Serial, &d.Requests, &last, &d.IntervalS)
			d.LastSeen = query.FormatNs(last)
			return d, err
		})
}

// lastSeen fills in the last request of each listed serial ("" apart):
// the later of its last authenticated request (device_seen) and its last
// rejection, so that a serial only strangers post is listed with when
// they last did.
func (s *Store) lastSeen(ctx context.Context, lists ...[]query.FleetSerial) error {
	var serials []string
	for _, l := range lists {
		for _, d := range l {
			serials = append(serials, d.Serial)
		}
	}
	if len(serials) == 0 {
		return nil
	}
	last := map[string]int64{}
	err := scanRows(ctx, s.reads, "query last seen", "scan last seen",
		"SELECT serial, max(ns) FROM (SELECT serial, last_ns AS ns FROM "+s.db+".device_seen WHERE serial IN ? UNION ALL SELECT serial, ts_ns AS ns FROM "+
			s.db+".device_rejections WHERE serial IN ?) GROUP BY serial", []any{set(serials), set(serials)},
		func(scan func(...any) error) error {
			var serial string
			var ns int64
			err := scan(&serial, &ns)
			last[serial] = ns
			return err
		})
	for _, l := range lists {
		for i := range l {
			if ns := last[l[i].Serial]; ns > 0 {
				l[i].LastSeen = query.FormatNs(ns)
			}
		}
	}
	return err
}

// Fleet returns the fleet view: devices silent now (by their last
// silentLookback), and over [fromNs, toNs) the serials with the most
// rejections and the serials not provisioned that posted.
func (s *Store) Fleet(ctx context.Context, fromNs, toNs int64, now time.Time) (f query.FleetView, err error) {
	stored := "('" + outcome.Stored.String() + "', '" + outcome.PartlyStored.String() + "', '" + outcome.NoConnections.String() + "')"
	if f.Silent, err = s.silent(ctx, stored, now); err != nil {
		return f, err
	}
	table, col, from := "device_stats", "minute", fromNs/1e9/60*60
	if toNs-fromNs > int64(25*time.Hour) { // a week: the hourly table
		table, col, from = "device_stats_hourly", "hour", fromNs/1e9/3600*3600
	}
	rng := " FROM " + s.db + "." + table + " WHERE " + col + " >= ? AND " + col + " < ? AND "
	notFound := "'" + outcome.DeviceNotFound.String() + "'"
	f.MostRejected, err = collect(ctx, s.reads, "query most rejected", "scan most rejected",
		"SELECT serial, sum(requests) AS n"+rng+"serial != '' AND kind NOT IN "+stored+" AND kind != "+notFound+" GROUP BY serial ORDER BY n DESC, serial LIMIT ?",
		[]any{from, toNs / 1e9, maxFleet}, func(scan func(...any) error) (d query.FleetSerial, err error) {
			return d, scan(&d.Serial, &d.Requests)
		})
	if err != nil {
		return f, err
	}
	err = scanRows(ctx, s.reads, "query unknown serials", "scan unknown serial",
		"SELECT serial, sum(requests) AS n, min("+col+")"+rng+"kind = "+notFound+" GROUP BY serial ORDER BY n DESC, serial LIMIT ?",
		[]any{from, toNs / 1e9, maxFleet + 1}, func(scan func(...any) error) error {
			var d query.FleetSerial
			var first int64
			if err := scan(&d.Serial, &d.Requests, &first); err != nil {
				return err
			}
			if d.Serial == "" {
				f.UnknownUntracked = d.Requests
				return nil
			}
			d.FirstSeen = query.FormatNs(first * 1e9)
			if len(f.Unknown) < maxFleet {
				f.Unknown = append(f.Unknown, d)
			}
			return nil
		})
	if err != nil {
		return f, err
	}
	f.Unnamed, err = collect(ctx, s.reads, "query unnamed requests", "scan unnamed requests",
		"SELECT kind, sum(requests) AS n, sum(readings)"+rng+"serial = '' AND kind != "+notFound+" GROUP BY kind ORDER BY n DESC, kind", []any{from, toNs / 1e9},
		func(scan func(...any) error) (c query.KindCount, err error) {
			return c, scan(&c.Kind, &c.Requests, &c.Readings)
		})
	if err != nil {
		return f, err
	}
	return f, s.lastSeen(ctx, f.MostRejected, f.Unknown)
}
