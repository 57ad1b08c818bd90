package backfill

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/kvmap"
)

// ErrNotFound is returned for a job that is not in the bucket.
var ErrNotFound = errors.New("backfill not found")

// MaxAge is how long a job is kept after its last change: the console shows
// a month of a device's backfills.
const MaxAge = 30 * 24 * time.Hour

// maxBytes bounds the bucket: a job is ~1 KiB (its inputs at most ~300 KiB).
const maxBytes = 64 << 20

// Store keeps the jobs in a KV bucket: key <serial in base64>.<id>.
type Store struct {
	kv    jetstream.KeyValue
	grace time.Duration // claimGrace, shorter in tests
}

// Open creates the bucket if it is missing and returns a Store over it.
func Open(ctx context.Context, js jetstream.JetStream, bucket string, replicas int, log *zap.Logger) (*Store, error) {
	var kv jetstream.KeyValue
	err := bus.UntilReady(ctx, log, func(ctx context.Context) (err error) {
		kv, err = bus.EnsureBucket(ctx, js, jetstream.KeyValueConfig{
			Bucket:      bucket,
			Description: "backfills: a device's mapping applied to its kept raw messages (ingest-api creates, writer-worker runs)",
			History:     1,
			TTL:         MaxAge,
			MaxBytes:    maxBytes,
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
		}, log)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open backfill bucket %q: %w", bucket, err)
	}
	return &Store{kv: kv, grace: claimGrace}, nil
}

// ValidID reports whether id may be a job's id (a NUID: letters and
// digits), and so part of a key.
func ValidID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func key(serial, id string) string { return kvmap.Key(serial) + "." + id }

// Create stores a new job.
func (s *Store) Create(ctx context.Context, j Job) error {
	b, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("encode backfill: %w", err)
	}
	if _, err := s.kv.Create(ctx, key(j.Serial, j.ID), b); err != nil {
		return fmt.Errorf("store backfill: %w", err)
	}
	return nil
}

// List returns serial's jobs, newest first.
func (s *Store) List(ctx context.Context, serial string) ([]Job, error) {
	jobs, err := s.list(ctx, kvmap.Key(serial)+".*")
	slices.Reverse(jobs)
	return jobs, err
}

// All returns every job, oldest first.
func (s *Store) All(ctx context.Context) ([]Job, error) { return s.list(ctx, "*.*") }

func (s *Store) list(ctx context.Context, keys string) ([]Job, error) {
	var jobs []Job
	err := s.watch(ctx, keys, func(e jetstream.KeyValueEntry, j Job, ok bool) bool {
		if e == nil {
			return false
		}
		if ok {
			jobs = append(jobs, j)
		}
		return true
	}, jetstream.IgnoreDeletes())
	slices.SortFunc(jobs, compareJobs)
	return jobs, err
}

// Follow tells unfinished how many jobs are queued or running, at first
// and whenever that changes, until ctx ends: writer-worker copies look for
// the lease only while there is work.
func (s *Store) Follow(ctx context.Context, unfinished func(n int)) error {
	open := make(map[string]bool)
	err := s.watch(ctx, "*.*", func(e jetstream.KeyValueEntry, j Job, ok bool) bool {
		if e != nil {
			if ok && !j.Finished() {
				open[e.Key()] = true
			} else {
				delete(open, e.Key())
			}
		}
		unfinished(len(open))
		return true
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// watch hands f each job of keys as the watch delivers it (ok: a job that
// could be read; e nil: the bucket's contents so far are all delivered)
// until f returns false (nil), or the watch or ctx ends (an error).
func (s *Store) watch(ctx context.Context, keys string, f func(e jetstream.KeyValueEntry, j Job, ok bool) bool, opts ...jetstream.WatchOpt) error {
	w, err := s.kv.Watch(ctx, keys, opts...)
	if err != nil {
		return fmt.Errorf("watch backfills: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("watch backfills: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watch backfills: ended")
			}
			var j Job
			read := e != nil && e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &j) == nil
			if !f(e, j, read) {
				return nil
			}
		}
	}
}

func compareJobs(a, b Job) int {
	return cmp.Or(cmp.Compare(a.CreatedNs, b.CreatedNs), cmp.Compare(a.ID, b.ID))
}

// maxConflicts bounds an Update's retries while others change the job.
const maxConflicts = 16

// Update reads a job, lets change alter it and stores the result if nobody
// changed the job meanwhile, else reads it again (ingest-api cancels while
// writer-worker records progress).
func (s *Store) Update(ctx context.Context, serial, id string, change func(j *Job) error) (Job, error) {
	k := key(serial, id)
	for range maxConflicts {
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return Job{}, ErrNotFound
		}
		if err != nil {
			return Job{}, fmt.Errorf("read backfill: %w", err)
		}
		var j Job
		if err := json.Unmarshal(e.Value(), &j); err != nil {
			return Job{}, fmt.Errorf("read backfill: %w", err)
		}
		if err := change(&j); err != nil {
			return j, err
		}
		b, err := json.Marshal(j)
		if err != nil {
			return Job{}, fmt.Errorf("encode backfill: %w", err)
		}
		_, err = s.kv.Update(ctx, k, b, e.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return Job{}, fmt.Errorf("store backfill: %w", err)
		}
		return j, nil
	}
	return Job{}, fmt.Errorf("store backfill: changed by others %d times in a row", maxConflicts)
}

// Lease is one of the writers' shared tasks, held by one writer-worker
// copy at a time: the backfill runner (LeaseRunner) and the rollup
// (LeaseRollup). Its holder renews it before each step and records how
// far it got in DoneNs.
type Lease struct {
	Owner   string `json:"owner"`
	UntilNs int64  `json:"untilNs"`
	DoneNs  int64  `json:"doneNs,omitempty"`
}

// The leases' keys (job keys hold a dot, these none).
const (
	LeaseRunner = "runner"
	LeaseRollup = "rollup"
)

// TakeLease takes or renews lease name for owner until now+ttl, and sets
// its DoneNs to done unless done is 0. It returns the lease as it stands
// and whether owner holds it (false: another copy does, and the lease is
// that copy's). The runner's lease keeps two copies from running backfills
// at once (two runs over one device could both find a value missing and
// both store it).
func (s *Store) TakeLease(ctx context.Context, name, owner string, now time.Time, ttl time.Duration, done int64) (Lease, bool, error) {
	l := Lease{Owner: owner, UntilNs: now.Add(ttl).UnixNano(), DoneNs: done}
	var prior Lease
	e, err := s.kv.Get(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		b, _ := json.Marshal(l)
		_, err = s.kv.Create(ctx, name, b)
	case err != nil:
		return Lease{}, false, fmt.Errorf("read lease %s: %w", name, err)
	default:
		if json.Unmarshal(e.Value(), &prior) == nil && prior.Owner != owner && prior.UntilNs > now.UnixNano() {
			return prior, false, nil
		}
		if done == 0 {
			l.DoneNs = prior.DoneNs
		}
		b, _ := json.Marshal(l)
		_, err = s.kv.Update(ctx, name, b, e.Revision())
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return prior, false, nil
	}
	if err != nil {
		return Lease{}, false, fmt.Errorf("take lease %s: %w", name, err)
	}
	return l, true, nil
}

// Release gives up owner's lease name, if it holds it, keeping its DoneNs.
func (s *Store) Release(ctx context.Context, name, owner string) {
	e, err := s.kv.Get(ctx, name)
	if err != nil {
		return
	}
	var l Lease
	if json.Unmarshal(e.Value(), &l) == nil && l.Owner == owner {
		l.UntilNs = 0
		b, _ := json.Marshal(l)
		_, _ = s.kv.Update(ctx, name, b, e.Revision())
	}
}
