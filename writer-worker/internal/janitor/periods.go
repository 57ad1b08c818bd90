package janitor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/retention"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// The periods the sweep keeps are recorded in one place, the table
// retention_periods: the first copy to start records its own (RETENTION,
// IDEMPOTENCY_WINDOW), and every copy sweeps with the recorded ones. A copy
// started with others logs, once per start, each that differs and keeps
// the recorded one: a single copy with RETENTION=readings=1d would
// otherwise drop every older month for the whole deployment, for good.
// An operator changes them with Set (`writer-worker retention -set`).

// Recorded are the kinds whose periods are recorded, by the names the
// table and Set use (event_keys' is "idempotency").
var Recorded = []retention.Kind{retention.Readings, retention.Minutes, retention.Hours, retention.Messages, retention.Diagnostics, keys}

// settle reads the recorded periods, recording this copy's for the kinds
// that have none, and keeps them in j.periods; it logs each recorded period
// that is not what this copy was configured with.
func (j *Janitor) settle(ctx context.Context) error {
	if j.settled {
		return nil
	}
	have, err := j.store.RecordedPeriods(ctx)
	if err != nil {
		return err
	}
	missing := map[string]time.Duration{}
	for _, k := range Recorded {
		if _, ok := have[string(k)]; !ok {
			missing[string(k)] = j.periods[k]
		}
	}
	if len(missing) > 0 {
		if err := j.store.RecordPeriods(ctx, missing, chstore.PeriodsAtStart, time.Now()); err != nil {
			return fmt.Errorf("record the retention periods: %w", err)
		}
		// Read again: a copy starting at once may have recorded longer ones.
		if have, err = j.store.RecordedPeriods(ctx); err != nil {
			return err
		}
	}
	for _, k := range Recorded {
		d, ok := have[string(k)]
		if !ok {
			return fmt.Errorf("no retention period recorded for %s", k)
		}
		if d != j.periods[k] {
			j.log.Warn("retention period differs from this copy's configuration: the sweep keeps the recorded one (an operator changes it: writer-worker retention -set)",
				zap.String("kind", string(k)), zap.String("configured", retention.FormatPeriod(j.periods[k])),
				zap.String("recorded", retention.FormatPeriod(d)))
		}
		j.periods[k] = d
	}
	j.settled = true
	return nil
}

// Set records the periods spec names ("kind=period,...", kinds of
// Recorded) as the operator's, at now, and returns every recorded period.
// Each is at least an hour; minutes are kept at least as long as readings,
// hours as minutes (kinds not named keep their recorded periods, or the
// defaults if none is).
func Set(ctx context.Context, store *chstore.Store, spec string, now time.Time) (map[string]time.Duration, error) {
	set, err := parseSet(spec)
	if err != nil {
		return nil, err
	}
	have, err := store.RecordedPeriods(ctx)
	if err != nil {
		return nil, err
	}
	after := func(k retention.Kind) time.Duration {
		if d, ok := set[string(k)]; ok {
			return d
		}
		if d, ok := have[string(k)]; ok {
			return d
		}
		return retention.Defaults()[k]
	}
	if after(retention.Minutes) < after(retention.Readings) || after(retention.Hours) < after(retention.Minutes) {
		return nil, errors.New("minutes must be kept at least as long as readings, and hours as minutes (charts of older ranges read them)")
	}
	if err := store.RecordPeriods(ctx, set, chstore.PeriodsByOperator, now); err != nil {
		return nil, err
	}
	return store.RecordedPeriods(ctx)
}

func parseSet(spec string) (map[string]time.Duration, error) {
	set := map[string]time.Duration{}
	for _, item := range strings.Split(spec, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		if !ok || !slices.Contains(Recorded, retention.Kind(k)) {
			return nil, fmt.Errorf("%q: want kind=period, kind one of %v", item, Recorded)
		}
		d, err := retention.ParsePeriod(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		if d < time.Hour {
			return nil, fmt.Errorf("%s: %v is less than an hour", k, d)
		}
		set[k] = d
	}
	if len(set) == 0 {
		return nil, errors.New("no period to set: want kind=period,...")
	}
	return set, nil
}
