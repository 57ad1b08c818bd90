// Package failure says whether an error may pass by itself: the one
// distinction the retry policy (pkg/settle) needs from the code that fails.
// It depends on nothing, so storage code marks its errors without knowing
// the policy.
package failure

import (
	"errors"
	"time"
)

// Kind says whether a failure may pass by itself.
type Kind uint8

const (
	// Transient failures (a connection lost, a timeout, a server
	// overloaded or with too many parts) may pass: the work is tried again.
	Transient Kind = iota
	// Permanent failures (the data was rejected, a message cannot be
	// decoded) fail the same way every time: never retried.
	Permanent
	// Throttled failures name how long to wait (a server that said when
	// to come back): tried again after that wait, not sooner.
	Throttled
)

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// AsPermanent marks err as permanent; nil stays nil.
func AsPermanent(err error) error {
	if err == nil || KindOf(err) == Permanent {
		return err
	}
	return permanentError{err}
}

// KindOf is the kind of err: permanent or throttled when anything in its
// chain was marked so (permanent first), transient otherwise. An unmarked error is retried (bounded by the
// delivery limit), never dropped on a guess.
func KindOf(err error) Kind {
	var p permanentError
	var t throttledError
	switch {
	case errors.As(err, &p):
		return Permanent
	case errors.As(err, &t):
		return Throttled
	}
	return Transient
}

type throttledError struct {
	err  error
	wait time.Duration
}

func (e throttledError) Error() string { return e.err.Error() }
func (e throttledError) Unwrap() error { return e.err }

// AsThrottled marks err as throttled for wait; nil stays nil.
func AsThrottled(err error, wait time.Duration) error {
	if err == nil {
		return nil
	}
	return throttledError{err, wait}
}

// WaitOf is how long a throttled err asks to wait (0 for other kinds).
func WaitOf(err error) time.Duration {
	var t throttledError
	if errors.As(err, &t) {
		return t.wait
	}
	return 0
}
