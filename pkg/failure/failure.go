// Package failure says whether an error may pass by itself: the one
// distinction the retry policy (pkg/settle) needs from the code that fails.
// It depends on nothing, so storage code marks its errors without knowing
// the policy.
package failure

import "errors"

// Kind says whether a failure may pass by itself.
type Kind uint8

const (
	// Transient failures (a connection lost, a timeout, a server
	// overloaded or with too many parts) may pass: the work is tried again.
	Transient Kind = iota
	// Permanent failures (the data was rejected, a message cannot be
	// decoded) fail the same way every time: never retried.
	Permanent
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

// KindOf is the kind of err: permanent when anything in its chain was marked
// so, transient otherwise. An unmarked error is retried (bounded by the
// delivery limit), never dropped on a guess.
func KindOf(err error) Kind {
	var p permanentError
	if errors.As(err, &p) {
		return Permanent
	}
	return Transient
}
