// Package readtime finds a reading's time: the request's ts, the device's
// timestamp input, or the receive time, in that order, within bounds.
package readtime

import (
	"errors"
	"time"
)

// ErrSyntax is returned for a string that is not a date-time this package
// reads.
var ErrSyntax = errors.New("not an RFC 3339 date-time")

// Parse reads an RFC 3339 / ISO 8601 date-time: YYYY-MM-DD, then T or t,
// then hh:mm:ss, an optional fraction after '.' or ',' (digits below a nanosecond
// dropped), and
// an optional zone: Z, z, ±hh:mm or ±hhmm. A time without a zone is UTC.
// Field ranges are checked (no February 30th, no second 60).
func Parse(s string) (time.Time, error) {
	if len(s) < 19 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') || s[13] != ':' || s[16] != ':' {
		return time.Time{}, ErrSyntax
	}
	year, ok1 := digits(s[0:4])
	month, ok2 := digits(s[5:7])
	day, ok3 := digits(s[8:10])
	hour, ok4 := digits(s[11:13])
	minute, ok5 := digits(s[14:16])
	sec, ok6 := digits(s[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return time.Time{}, ErrSyntax
	}
	rest := s[19:]
	nsec := 0
	if len(rest) > 0 && (rest[0] == '.' || rest[0] == ',') {
		n := 1
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		frac := rest[1:n]
		if len(frac) == 0 {
			return time.Time{}, ErrSyntax
		}
		if len(frac) > 9 {
			frac = frac[:9] // below a nanosecond: truncated, as Go does
		}
		v, _ := digits(frac)
		for range 9 - len(frac) {
			v *= 10
		}
		nsec, rest = v, rest[n:]
	}
	offset := 0
	switch {
	case rest == "" || rest == "Z" || rest == "z":
	case rest[0] == '+' || rest[0] == '-':
		mmAt := 3 // ±hhmm, or ±hh:mm
		if len(rest) == 6 && rest[3] == ':' {
			mmAt = 4
		}
		if len(rest) != mmAt+2 {
			return time.Time{}, ErrSyntax
		}
		hh, ok1 := digits(rest[1:3])
		mm, ok2 := digits(rest[mmAt:])
		if !ok1 || !ok2 || hh > 23 || mm > 59 {
			return time.Time{}, ErrSyntax
		}
		offset = (hh*60 + mm) * 60
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return time.Time{}, ErrSyntax
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, ErrSyntax
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	return t.Add(-time.Duration(offset) * time.Second), nil
}

// digits reads a run of ASCII digits.
func digits(s string) (int, bool) {
	v := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

func daysIn(month, year int) int {
	return time.Date(year, time.Month(month)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}
