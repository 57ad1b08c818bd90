// Package resolve maps the keys of an event's data onto the entity inputs
// they are connected to: mapper-worker does it for every event, and
// writer-worker's backfill for kept raw messages under a newer mapping.
package resolve

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/jsonobj"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
)

// ErrPayload marks an event whose payload cannot be read.
var ErrPayload = errors.New("unreadable payload")

// Event maps ev's data onto dev's connected inputs. Keys that match no
// connected input are ignored (and, but for the device's timestamp input,
// told to unmatched, if set) and null values are skipped. When no key
// matches a connected input the outcome is NoConnections and no value is
// kept; a match whose values are all null is still Stored (with nothing but
// the raw message to write).
func Event(ev event.Event, dev *registry.Entry, unmatched func(key string, value []byte)) (event.Mapped, error) {
	m := event.Mapped{ID: ev.ID, Serial: ev.Serial, ReceivedNs: ev.ReceivedNs, ReadingNs: ev.ReadingNs, TimeNote: ev.TimeNote, Group: ev.Group, Token: ev.Token, Payload: ev.Payload, Outcome: outcome.NoConnections}
	if !dev.Connected() && unmatched == nil {
		return m, nil
	}
	if !json.Valid(ev.Payload) {
		if !dev.Connected() {
			return m, nil
		}
		return m, fmt.Errorf("%w: not JSON", ErrPayload)
	}
	data := jsonobj.Value(ev.Payload, "data")
	if jsonobj.IsNull(data) {
		return m, nil
	}
	var buf [16]jsonobj.Member
	members, ok := jsonobj.Members(data, buf[:0])
	if !ok {
		if !dev.Connected() {
			return m, nil
		}
		return m, fmt.Errorf("%w: data is not an object", ErrPayload)
	}
	// The last of repeated names counts, as in a map: walk backwards and
	// skip a name already seen.
	var seen names
	matched := false
	for i := len(members) - 1; i >= 0; i-- {
		name := members[i].Name
		if !seen.add(name) {
			continue
		}
		route, ok := dev.Route(name)
		if !ok {
			if unmatched != nil && name != dev.Device.TimestampInput {
				unmatched(name, members[i].Value)
			}
			continue
		}
		matched = true
		if raw := members[i].Value; !jsonobj.IsNull(raw) {
			m.Values = append(m.Values, event.Value{DeviceInput: name, Entity: route.Entity, Input: route.Input, JSON: raw})
		}
	}
	slices.Reverse(m.Values) // in the order sent
	if matched {
		m.Outcome = outcome.Stored
	}
	return m, nil
}

// names is a set of the few input names of one reading.
type names struct {
	list []string
	set  map[string]struct{}
}

// add reports whether name was new.
func (n *names) add(name string) bool {
	if n.set == nil {
		if !slices.Contains(n.list, name) {
			n.list = append(n.list, name)
			if len(n.list) > 16 {
				n.set = make(map[string]struct{}, 2*len(n.list))
				for _, s := range n.list {
					n.set[s] = struct{}{}
				}
			}
			return true
		}
		return false
	}
	if _, ok := n.set[name]; ok {
		return false
	}
	n.set[name] = struct{}{}
	return true
}
