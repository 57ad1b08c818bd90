package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/pkg/kvmap"
)

// A device's slot holds the id of its latest backfill, under a key of three
// tokens that no job watch ("*.*") matches. Starting a backfill takes the
// slot by compare-and-set, so that two starts at once, on any ingest-api
// copies, cannot both find none queued or running.

// claimGrace is how long a slot naming a job not stored yet counts as
// taken: its start stores the job right after taking the slot (a start
// that died in between frees the slot after it).
const claimGrace = time.Minute

func slotKey(serial string) string { return "slot." + kvmap.Key(serial) + ".latest" }

// Claim takes serial's slot for the job id, unless the job the slot names
// is queued or running: then it returns that job's id and takes nothing.
func (s *Store) Claim(ctx context.Context, serial, id string) (busy string, err error) {
	k := slotKey(serial)
	for range maxConflicts {
		e, err := s.kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			_, err = s.kv.Create(ctx, k, []byte(id))
		case err != nil:
			return "", fmt.Errorf("read backfill slot: %w", err)
		default:
			prev := string(e.Value())
			j, err := s.get(ctx, serial, prev)
			switch {
			case err == nil && !j.Finished():
				return prev, nil
			case errors.Is(err, ErrNotFound) && time.Since(e.Created()) < s.grace:
				return prev, nil
			case err != nil && !errors.Is(err, ErrNotFound):
				return "", err
			}
			_, err = s.kv.Update(ctx, k, []byte(id), e.Revision())
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // another start took it meanwhile: see whose
		}
		if err != nil {
			return "", fmt.Errorf("take backfill slot: %w", err)
		}
		return "", nil
	}
	return "", fmt.Errorf("take backfill slot: taken by others %d times in a row", maxConflicts)
}

// Unclaim gives serial's slot back if it still names the job id (whose
// start failed before storing it).
func (s *Store) Unclaim(ctx context.Context, serial, id string) error {
	e, err := s.kv.Get(ctx, slotKey(serial))
	if err != nil || string(e.Value()) != id {
		return nil
	}
	if err := s.kv.Delete(ctx, slotKey(serial), jetstream.LastRevision(e.Revision())); err != nil {
		return fmt.Errorf("give backfill slot back: %w", err)
	}
	return nil
}

// get reads one job.
func (s *Store) get(ctx context.Context, serial, id string) (Job, error) {
	var j Job
	if !ValidID(id) {
		return j, ErrNotFound
	}
	e, err := s.kv.Get(ctx, key(serial, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return j, ErrNotFound
	}
	if err != nil {
		return j, fmt.Errorf("read backfill: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &j); err != nil {
		return j, fmt.Errorf("read backfill: %w", err)
	}
	return j, nil
}
