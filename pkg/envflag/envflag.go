// Package envflag registers command-line flags whose defaults come from
// environment variables of the same name (flag "nats-url" <-> NATS_URL), so
// every setting can be given either way and is documented once.
package envflag

import (
	"flag"
	"fmt"
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

func (s *Set) env(name string) (string, bool) {
	return os.LookupEnv(EnvName(name))
}

func (s *Set) fail(name, v string, err error) {
	if s.err == nil {
		s.err = fmt.Errorf("%s=%q: %w", EnvName(name), v, err)
	}
}

// String registers a string setting.
func (s *Set) String(p *string, name, def, usage string) {
	if v, ok := s.env(name); ok {
		def = v
	}
	s.FS.StringVar(p, name, def, usage+" (env "+EnvName(name)+")")
}

// Int registers an int setting.
func (s *Set) Int(p *int, name string, def int, usage string) {
	if v, ok := s.env(name); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			s.fail(name, v, err)
		} else {
			def = n
		}
	}
	s.FS.IntVar(p, name, def, usage+" (env "+EnvName(name)+")")
}

// Int64 registers an int64 setting.
func (s *Set) Int64(p *int64, name string, def int64, usage string) {
	if v, ok := s.env(name); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			s.fail(name, v, err)
		} else {
			def = n
		}
	}
	s.FS.Int64Var(p, name, def, usage+" (env "+EnvName(name)+")")
}

// Float64 registers a float64 setting.
func (s *Set) Float64(p *float64, name string, def float64, usage string) {
	if v, ok := s.env(name); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			s.fail(name, v, err)
		} else {
			def = f
		}
	}
	s.FS.Float64Var(p, name, def, usage+" (env "+EnvName(name)+")")
}

// Bool registers a bool setting.
func (s *Set) Bool(p *bool, name string, def bool, usage string) {
	if v, ok := s.env(name); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			s.fail(name, v, err)
		} else {
			def = b
		}
	}
	s.FS.BoolVar(p, name, def, usage+" (env "+EnvName(name)+")")
}

// Duration registers a time.Duration setting ("250ms", "5s").
func (s *Set) Duration(p *time.Duration, name string, def time.Duration, usage string) {
	if v, ok := s.env(name); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			s.fail(name, v, err)
		} else {
			def = d
		}
	}
	s.FS.DurationVar(p, name, def, usage+" (env "+EnvName(name)+")")
}

// Parse parses args and returns the first error from the flags or the
// environment.
func (s *Set) Parse(args []string) error {
	if s.err != nil {
		return s.err
	}
	return s.FS.Parse(args)
}
