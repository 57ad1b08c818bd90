// Package retention is the RETENTION setting: how long each kind of kept
// data lives. writer-worker enforces the ClickHouse kinds (internal/janitor
// drops whole partitions past them); ingest-api gives the audit trail's to
// its stream.
package retention

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devicehub/eventservice/pkg/envflag"
)

// Kind is one kind of kept data.
type Kind string

// The kinds, with their defaults in Defaults.
const (
	Readings    Kind = "readings"    // input_values: every reading as sent
	Minutes     Kind = "minutes"     // input_minutes: the minute rollup
	Hours       Kind = "hours"       // input_hours: the hour rollup
	Messages    Kind = "messages"    // device_messages: the raw messages (Messages tab, backfill source)
	Diagnostics Kind = "diagnostics" // device_stats, _hourly, device_rejections, device_keys, device_seen
	Audit       Kind = "audit"       // the audit trail (JetStream stream <PREFIX>_AUDIT)
)

// Day and Year are the units a period may also be written in ("90d", "1y").
const (
	Day  = 24 * time.Hour
	Year = 365 * Day
)

// Periods holds a period for every kind.
type Periods map[Kind]time.Duration

// Defaults: raw readings and messages for a quarter (the oldest reading
// time ingest-api accepts, MAX_READING_AGE, is 90 days too, so a backlog
// never lands in a dropped month), minutes for a year of 30-day charts,
// hours for ten years of long-range charts, the diagnostics for a month
// (the console shows a week), the audit trail for a year and a review's
// month.
func Defaults() Periods {
	return Periods{Readings: 90 * Day, Minutes: Year, Hours: 10 * Year, Messages: 90 * Day, Diagnostics: 30 * Day, Audit: 400 * Day}
}

// kinds in the order String writes them.
var kinds = []Kind{Readings, Minutes, Hours, Messages, Diagnostics, Audit}

// Parse reads "kind=period,..." (periods in d, y, or Go's units: "90d",
// "1y", "36h"); kinds not named keep their defaults. Every period must be
// at least an hour.
func Parse(s string) (Periods, error) {
	p := Defaults()
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		kind := Kind(strings.TrimSpace(k))
		if !ok || !slices.Contains(kinds, kind) {
			return nil, fmt.Errorf("%q: want kind=period, kind one of %v", item, kinds)
		}
		d, err := ParsePeriod(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
		if d < time.Hour {
			return nil, fmt.Errorf("%s: %v is less than an hour", kind, d)
		}
		p[kind] = d
	}
	if p[Minutes] < p[Readings] || p[Hours] < p[Minutes] {
		return nil, fmt.Errorf("minutes must be kept at least as long as readings, and hours as minutes (charts of older ranges read them)")
	}
	return p, nil
}

// ParsePeriod reads one period: "90d", "1y", or in Go's units ("36h").
func ParsePeriod(v string) (time.Duration, error) {
	for suffix, unit := range map[string]time.Duration{"d": Day, "y": Year} {
		if n, ok := strings.CutSuffix(v, suffix); ok {
			f, err := strconv.ParseFloat(n, 64)
			if err != nil || f <= 0 {
				return 0, fmt.Errorf("bad period %q", v)
			}
			return time.Duration(f * float64(unit)), nil
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("bad period %q", v)
	}
	return d, nil
}

// String writes p as Parse reads it, in whole days, years or hours.
func (p Periods) String() string {
	var b strings.Builder
	for i, k := range kinds {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%s", k, FormatPeriod(p[k]))
	}
	return b.String()
}

// FormatPeriod writes d as ParsePeriod reads it, in whole years, days or
// Go's units.
func FormatPeriod(d time.Duration) string {
	switch {
	case d%Year == 0:
		return fmt.Sprintf("%dy", d/Year)
	case d%Day == 0:
		return fmt.Sprintf("%dd", d/Day)
	}
	return d.String()
}

// Config is the RETENTION setting, for the programs that enforce it.
type Config struct {
	Spec    string
	Periods Periods // parsed from Spec by Validate
}

// Register adds RETENTION.
func (c *Config) Register(s *envflag.Set) {
	s.String(&c.Spec, "retention", Defaults().String(), "how long each kind of kept data lives, kind=period,... (d, y, or h): readings, minutes and hours (the rollups), messages (raw), diagnostics, audit; kinds not named keep their defaults. Whole partitions (months of readings, minutes and messages, years of hours, days of diagnostics) are dropped once they end before now minus the period")
}

// Validate parses Spec; it refuses AUDIT_MAX_AGE, which RETENTION's audit
// period replaces (ignoring it would shorten a longer trail).
func (c *Config) Validate() error {
	if v, ok := os.LookupEnv("AUDIT_MAX_AGE"); ok {
		return fmt.Errorf("AUDIT_MAX_AGE=%s is replaced by RETENTION's audit period: RETENTION=audit=%s", v, v)
	}
	p, err := Parse(c.Spec)
	if err != nil {
		return fmt.Errorf("RETENTION: %w", err)
	}
	c.Periods = p
	return nil
}
