package chstore

import (
	"cmp"
	"slices"
	"time"
)

// A lookup of stored events by id (StoredEvents, StoredValues) names at
// most LookupIDs events (an event id is ~40 bytes of the query: within
// max_query_size, 256 KiB), and reads only the span of reading time its
// events lie in. Events more than LookupGap apart in reading time are
// looked up apart: one old reading costs a lookup of its own, not a scan of
// everything since it.
const (
	LookupIDs = 2000
	LookupGap = 7 * 24 * time.Hour
)

// TimedID is an event id and its reading time.
type TimedID struct {
	ID string
	Ns int64
}

// Nearby calls lookup once for each group of evs near each other in
// reading time, in reading-time order: at most LookupIDs ids, no two
// neighbours more than LookupGap apart, and the group's span [minNs,
// maxNs]. It stops at lookup's first error. evs is sorted in place.
func Nearby(evs []TimedID, lookup func(ids []string, minNs, maxNs int64) error) error {
	slices.SortFunc(evs, func(a, b TimedID) int { return cmp.Compare(a.Ns, b.Ns) })
	ids := make([]string, 0, min(len(evs), LookupIDs))
	for start := 0; start < len(evs); {
		end := start + 1
		for end < len(evs) && end-start < LookupIDs && evs[end].Ns-evs[end-1].Ns <= int64(LookupGap) {
			end++
		}
		ids = ids[:0]
		for _, e := range evs[start:end] {
			ids = append(ids, e.ID)
		}
		if err := lookup(ids, evs[start].Ns, evs[end-1].Ns); err != nil {
			return err
		}
		start = end
	}
	return nil
}
