package claimlog

import (
	"context"
	"slices"
)

// Entry is what an entry of the log holds: Status[i] of IDs[i].
type Entry struct {
	IDs    []string
	Status []Status
}

// Holds reports whether the entry holds id (at some place of it).
func (e Entry) Holds(id string) bool { return e.Of(id) == Held }

// Of is what the entry holds of id: Held at some place of it, else Blocked
// at some place, else Unknown (an id it does not list included).
func (e Entry) Of(id string) Status {
	st := Unknown
	for i, x := range e.IDs {
		switch {
		case x != id:
		case e.Status[i] == Held:
			return Held
		case e.Status[i] == Blocked:
			st = Blocked
		}
	}
	return st
}

// decision is what the entry tagged tag (one under own) holds.
func (f *follower) decision(tag string) (Entry, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.decided[tag]
	return e, ok
}

// waitDecision returns what the entry tagged tag (one under own) holds once a
// reading has read it, or ctx's error.
func (f *follower) waitDecision(ctx context.Context, tag string) (Entry, error) {
	f.mu.Lock()
	if e, ok := f.decided[tag]; ok {
		f.mu.Unlock()
		return e, nil
	}
	ch := make(chan struct{})
	f.byTag[tag] = append(f.byTag[tag], ch)
	f.mu.Unlock()
	select {
	case <-ch:
		e, _ := f.decision(tag)
		return e, nil
	case <-ctx.Done():
		f.mu.Lock()
		defer f.mu.Unlock()
		if e, ok := f.decided[tag]; ok {
			return e, nil
		}
		cs := slices.DeleteFunc(f.byTag[tag], func(x chan struct{}) bool { return x == ch })
		if len(cs) == 0 {
			delete(f.byTag, tag)
		} else {
			f.byTag[tag] = cs
		}
		return Entry{}, ctx.Err()
	}
}
