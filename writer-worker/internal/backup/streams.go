package backup

import (
	"context"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// streamHeader opens a stream's file: its configuration, as JSON.
type streamHeader struct {
	Config []byte
}

// message is one kept message of a stream.
type message struct {
	Subject string
	Header  map[string][]string
	Data    []byte
}

// dumpStream writes stream name's configuration and messages, up to its
// last one when it began; of a KV bucket, each key's latest value (deleted
// keys left out). It returns how many messages it wrote.
func dumpStream(ctx context.Context, js jetstream.JetStream, name string, enc *gob.Encoder) (int, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	info := st.CachedInfo()
	cfg, _ := json.Marshal(info.Config)
	if err := enc.Encode(streamHeader{Config: cfg}); err != nil {
		return 0, err
	}
	var msgs []message
	latest := map[string]int{} // KV: subject -> index in msgs
	kv := strings.HasPrefix(name, "KV_")
	if last := info.State.LastSeq; info.State.Msgs > 0 {
		cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return 0, err
		}
		idle := time.Now()
		for done := false; !done; {
			batch, err := cons.FetchNoWait(1000)
			if err != nil {
				return 0, err
			}
			got := 0
			for m := range batch.Messages() {
				got++
				md, err := m.Metadata()
				if err != nil {
					return 0, err
				}
				if md.Sequence.Stream > last {
					done = true
					break
				}
				msg := message{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
				if i, ok := latest[msg.Subject]; ok && kv {
					msgs[i] = msg
				} else {
					latest[msg.Subject] = len(msgs)
					msgs = append(msgs, msg)
				}
				if md.Sequence.Stream == last || md.NumPending == 0 {
					done = true
				}
			}
			if err := batch.Error(); err != nil {
				return 0, err
			}
			switch {
			case got > 0:
				idle = time.Now()
			case time.Since(idle) > 5*time.Second:
				return 0, fmt.Errorf("stream %s: no messages for 5 s before sequence %d", name, last)
			default:
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	n := 0
	for _, m := range msgs {
		if kv && m.Header != nil && nats.Header(m.Header).Get("KV-Operation") != "" {
			continue // a deleted or purged key
		}
		if err := enc.Encode(m); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// emptyOrMissing checks that stream name may be restored into.
func emptyOrMissing(ctx context.Context, js jetstream.JetStream, name string) error {
	st, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if n := st.CachedInfo().State.Msgs; n > 0 {
		return fmt.Errorf("stream %s is not empty (%d messages): restore into a fresh deployment", name, n)
	}
	return nil
}

// loadStream creates the stream of dec's file when it is missing and
// publishes its messages in their order; it returns how many.
func loadStream(ctx context.Context, js jetstream.JetStream, dec *gob.Decoder) (int, error) {
	var h streamHeader
	if err := dec.Decode(&h); err != nil {
		return 0, err
	}
	var cfg jetstream.StreamConfig
	if err := json.Unmarshal(h.Config, &cfg); err != nil {
		return 0, err
	}
	if _, err := js.Stream(ctx, cfg.Name); errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			return 0, fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
	} else if err != nil {
		return 0, err
	}
	n := 0
	for {
		var m message
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
		h := nats.Header{}
		for k, vs := range m.Header {
			if !strings.HasPrefix(k, "Nats-") {
				h[k] = vs
			}
		}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: h, Data: m.Data}); err != nil {
			return n, fmt.Errorf("publish to %s: %w", cfg.Name, err)
		}
		n++
	}
}
