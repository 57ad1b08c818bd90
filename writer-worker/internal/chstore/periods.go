package chstore

import (
	"context"
	"time"
)

// The sources of a row of retention_periods.
const (
	PeriodsAtStart    = "start"    // recorded by the first copy to start
	PeriodsByOperator = "operator" // recorded by `writer-worker retention -set`
)

// RecordedPeriods returns the retention period recorded for each kind in
// retention_periods: the latest an operator set, or else the longest a
// copy recorded at its start (copies starting at once may both record).
func (s *Store) RecordedPeriods(ctx context.Context) (map[string]time.Duration, error) {
	type row struct {
		kind, source  string
		period, setNs int64
	}
	rows, err := collect(ctx, s.pipe, "read the recorded retention periods", "scan a retention period",
		"SELECT kind, source, period_ns, set_ns FROM "+s.db+".retention_periods", nil,
		func(scan func(...any) error) (r row, err error) {
			err = scan(&r.kind, &r.source, &r.period, &r.setNs)
			return r, err
		})
	if err != nil {
		return nil, err
	}
	set := map[string]int64{} // when the operator's period of a kind was set
	out := map[string]time.Duration{}
	for _, r := range rows {
		switch {
		case r.source == PeriodsByOperator && r.setNs >= set[r.kind]:
			set[r.kind], out[r.kind] = r.setNs, time.Duration(r.period)
		case r.source != PeriodsByOperator && set[r.kind] == 0:
			out[r.kind] = max(out[r.kind], time.Duration(r.period))
		}
	}
	return out, nil
}

// RecordPeriods records periods by kind from source at now.
func (s *Store) RecordPeriods(ctx context.Context, periods map[string]time.Duration, source string, now time.Time) error {
	kinds := make([]string, 0, len(periods))
	for k := range periods {
		kinds = append(kinds, k)
	}
	return s.insert(ctx, "retention_periods", "kind, period_ns, set_ns, source", len(kinds), 4, func(i int, a []any) {
		a[0], a[1], a[2], a[3] = kinds[i], int64(periods[kinds[i]]), now.UnixNano(), source
	})
}
