// Package registry holds the device records (serial, access token, connection
// type, inputs, entity mapping) in a JetStream KV bucket, and the in-memory
// copy of it that every process consults on the request path.
package registry

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Connection types. Only API devices may post events over HTTP.
const (
	ConnectionAPI  = "API"
	ConnectionMQTT = "MQTT"
)

// Limits on what the workspace API accepts, so a single record stays small.
const (
	MaxSerialLen = 128
	MaxNameLen   = 128
	MaxTokenLen  = 512
	MaxInputs    = 1024
)

// ErrInvalid marks a device record the workspace API must refuse.
var ErrInvalid = errors.New("invalid device")

// Device is the stored record, and the workspace API's request (View is
// its answer).
type Device struct {
	Serial         string `json:"serial"`
	ConnectionType string `json:"connectionType"`
	// AccessToken is a token in a workspace request (PUT: the device's only
	// token from then on), and in records written before tokens were kept
	// as digests (Upgrade rewrites them). The store never writes it.
	AccessToken string `json:"accessToken,omitempty"`
	// Tokens are the tokens that authenticate the device, the primary
	// first, at most MaxTokens (see tokens.go).
	Tokens []Token `json:"tokens,omitempty"`
	// TokenSeq numbers the tokens ever given to the device: a token added
	// without a name is named token-<TokenSeq>, never a name used before.
	TokenSeq int     `json:"tokenSeq,omitempty"`
	Inputs   []Input `json:"inputs"`
	// TimestampInput names the key of data that holds the reading's time
	// (an RFC 3339 string or epoch milliseconds), if the device sends one.
	// It is stored as a value only if it is also a connected input.
	TimestampInput string `json:"timestampInput,omitempty"`
}

// Input is a named device input. When Entity is set the input is connected,
// and its values are stored as Entity's input EntityInput.
type Input struct {
	Name        string `json:"name"`
	Entity      string `json:"entity,omitempty"`
	EntityInput string `json:"entityInput,omitempty"`
}

// Normalize validates d and fills the defaults: a connected input without
// entityInput uses its own name.
func (d *Device) Normalize() error {
	if err := checkName("serial", d.Serial, MaxSerialLen); err != nil {
		return err
	}
	switch d.ConnectionType {
	case ConnectionAPI, ConnectionMQTT:
	case "":
		d.ConnectionType = ConnectionAPI
	default:
		return fmt.Errorf("%w: connectionType must be %q or %q", ErrInvalid, ConnectionAPI, ConnectionMQTT)
	}
	if err := checkToken(d.AccessToken); d.AccessToken != "" && err != nil {
		return err
	}
	if d.TimestampInput != "" {
		if err := checkName("timestampInput", d.TimestampInput, MaxNameLen); err != nil {
			return err
		}
	}
	if len(d.Inputs) > MaxInputs {
		return fmt.Errorf("%w: at most %d inputs", ErrInvalid, MaxInputs)
	}
	if d.Inputs == nil {
		d.Inputs = []Input{}
	}
	seen := make(map[string]struct{}, len(d.Inputs))
	for i := range d.Inputs {
		in := &d.Inputs[i]
		if err := checkName("input name", in.Name, MaxNameLen); err != nil {
			return err
		}
		if _, dup := seen[in.Name]; dup {
			return fmt.Errorf("%w: input %q is listed twice", ErrInvalid, in.Name)
		}
		seen[in.Name] = struct{}{}
		if in.Entity == "" {
			if in.EntityInput != "" {
				return fmt.Errorf("%w: input %q has entityInput but no entity", ErrInvalid, in.Name)
			}
			continue
		}
		if err := checkName("entity", in.Entity, MaxNameLen); err != nil {
			return err
		}
		if in.EntityInput == "" {
			in.EntityInput = in.Name
		}
		if err := checkName("entityInput", in.EntityInput, MaxNameLen); err != nil {
			return err
		}
	}
	return nil
}

func checkName(what, s string, max int) error {
	if s == "" || len(s) > max || !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s must be 1 to %d bytes of UTF-8", ErrInvalid, what, max)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s must not contain control characters", ErrInvalid, what)
		}
	}
	return nil
}
