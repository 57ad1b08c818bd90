// Package mapping resolves the keys of an event's data to the entity inputs
// they are connected to, and runs the consumer that does so for every event.
package mapping

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
)

// errPayload marks an event whose payload cannot be read; it is dropped.
var errPayload = errors.New("unreadable payload")

// Resolve maps ev's data onto dev's connected inputs. Keys that match no
// connected input are ignored and null values are skipped. When no key
// matches a connected input the outcome is NoConnections and no value is
// kept; a match whose values are all null is still Stored (with nothing but
// the raw message to write).
func Resolve(ev event.Event, dev *registry.Entry) (event.Mapped, error) {
	m := event.Mapped{ID: ev.ID, Serial: ev.Serial, ReceivedNs: ev.ReceivedNs, ReadingNs: ev.ReadingNs, TimeNote: ev.TimeNote, Group: ev.Group, Payload: ev.Payload, Outcome: outcome.NoConnections}
	if !dev.Connected() {
		return m, nil
	}
	var body struct {
		Data map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(ev.Payload, &body); err != nil {
		return m, fmt.Errorf("%w: %v", errPayload, err)
	}
	matched := false
	for name, raw := range body.Data {
		route, ok := dev.Route(name)
		if !ok {
			continue
		}
		matched = true
		if isNull(raw) {
			continue
		}
		m.Values = append(m.Values, event.Value{DeviceInput: name, Entity: route.Entity, Input: route.Input, JSON: raw})
	}
	if matched {
		m.Outcome = outcome.Stored
	}
	return m, nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}
