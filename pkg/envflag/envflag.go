// Package envflag registers command-line flags whose defaults come from
// environment variables of the same name (flag "nats-url" <-> NATS_URL), so
// every setting can be given either way and is documented once.
package envflag

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Set wraps a FlagSet and remembers the first environment value that could
// not be parsed, reported by Err after parsing.
type Set struct {
	FS  *flag.FlagSet
	err error
}

// New returns a Set for program name.
func New(name string) *Set {
	return &Set{FS: flag.NewFlagSet(name, flag.ContinueOnError)}
}

// EnvName is the environment variable for flag name.
func EnvName(name string) string {
	return strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// register defaults a flag from its environment variable (parsed by parse)
// and adds it with define, the FlagSet's own XxxVar.
func register[T any](s *Set, p *T, name string, def T, usage string, parse func(string) (T, error), define func(*T, string, T, string)) {
	if v, ok := os.LookupEnv(EnvName(name)); ok {
		if x, err := parse(v); err == nil {
			def = x
		} else if s.err == nil {
			s.err = fmt.Errorf("%s=%q: %w", EnvName(name), v, err)
		}
	}
	define(p, name, def, usage+" (env "+EnvName(name)+")")
}

// String registers a string setting. The usage text shows its default
// with the password of any URL in it (user:password@, in a comma-separated
// list too) masked: Secret says why.
func (s *Set) String(p *string, name, def, usage string) {
	register(s, p, name, def, usage, func(v string) (string, error) { return v, nil }, s.FS.StringVar)
	f := s.FS.Lookup(name)
	f.DefValue = maskURLPasswords(f.DefValue)
}

// Secret registers a string setting whose value is never shown. Go's usage
// text (-h, or any mistyped flag) prints every default, and a default here
// is the environment's value: a password or key would reach the terminal,
// or a container's log.
func (s *Set) Secret(p *string, name, usage string) {
	register(s, p, name, "", usage, func(v string) (string, error) { return v, nil }, s.FS.StringVar)
	s.FS.Lookup(name).DefValue = ""
}

// maskURLPasswords returns v, a value or a comma-separated list, with the
// password of each URL in it replaced by "xxxxx".
func maskURLPasswords(v string) string {
	parts := strings.Split(v, ",")
	for i, part := range parts {
		if u, err := url.Parse(strings.TrimSpace(part)); err == nil && u.User != nil {
			if _, set := u.User.Password(); set {
				parts[i] = u.Redacted()
			}
		}
	}
	return strings.Join(parts, ",")
}

// Int registers an int setting.
func (s *Set) Int(p *int, name string, def int, usage string) {
	register(s, p, name, def, usage, strconv.Atoi, s.FS.IntVar)
}

// Int64 registers an int64 setting.
func (s *Set) Int64(p *int64, name string, def int64, usage string) {
	register(s, p, name, def, usage, func(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) }, s.FS.Int64Var)
}

// Float64 registers a float64 setting.
func (s *Set) Float64(p *float64, name string, def float64, usage string) {
	register(s, p, name, def, usage, func(v string) (float64, error) { return strconv.ParseFloat(v, 64) }, s.FS.Float64Var)
}

// Bool registers a bool setting.
func (s *Set) Bool(p *bool, name string, def bool, usage string) {
	register(s, p, name, def, usage, strconv.ParseBool, s.FS.BoolVar)
}

// Duration registers a time.Duration setting ("250ms", "5s").
func (s *Set) Duration(p *time.Duration, name string, def time.Duration, usage string) {
	register(s, p, name, def, usage, time.ParseDuration, s.FS.DurationVar)
}

// Parse parses args and returns the first error from the flags or the
// environment.
func (s *Set) Parse(args []string) error {
	if s.err != nil {
		return s.err
	}
	return s.FS.Parse(args)
}
