package submit

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/event"
)

// Without CLAIM_FIRST, keyed submissions go out at once, all of them, in a
// message tagged with the claims log entry that lists their claims (the
// writers store what it holds); the submissions whose claim an earlier
// attempt holds are told so, and this copy releases nothing (the writers
// release what they drop).
func TestKeyedSubmissionsGoWithTheirClaims(t *testing.T) {
	js, _ := stream(t)
	claims := openClaims(t, js)
	if held := takeAll(t, claims, "k-held"); !held[0] {
		t.Fatal("k-held not taken")
	}
	l := lim(10, 1<<20)
	l.claimFirst = false
	p := newPublisher("ev.in", l, js, claims, nil, zap.NewNop())
	subs := []*submission{sub("k0", ev("k0", 1)), sub("k-held", ev("k1", 1), ev("k2", 1)), sub("k0", ev("k0", 1)), sub("", ev("u0", 1))}
	publishAll(t, p, subs)
	st, err := js.Stream(context.Background(), "EV")
	if err != nil {
		t.Fatal(err)
	}
	var keyed *struct {
		ids []string
		tag string
	}
	for seq := uint64(1); seq <= 2; seq++ {
		m, err := st.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := event.DecodeEvents(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(bus.ClaimedHeader) != "1" {
			continue
		}
		keyed = &struct {
			ids []string
			tag string
		}{tag: m.Header.Get(bus.ClaimTagHeader)}
		for _, e := range evs {
			keyed.ids = append(keyed.ids, e.ID)
		}
	}
	if keyed == nil || !reflect.DeepEqual(keyed.ids, []string{"k0", "k1", "k2", "k0"}) || keyed.tag == "" {
		t.Fatalf("keyed message %+v: want every keyed event, tagged", keyed)
	}
	// The tag names the entry of their claims, in the claims stream.
	cst, err := js.Stream(context.Background(), bus.DefaultNames.ClaimsStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cst.GetLastMsgForSubject(context.Background(), bus.DefaultNames.ClaimLogSubject(keyed.tag))
	if err != nil || string(m.Data) != "k0\nk-held\nk0" {
		t.Fatalf("entry %s: %v %v", keyed.tag, m, err)
	}
	if _, err := cst.GetLastMsgForSubject(context.Background(), bus.DefaultNames.ClaimFreeSubject(keyed.tag)); err == nil {
		t.Fatal("ingest-api released claims of an entry the writers decide")
	}
	toldTaken(t, subs, [][]string{nil, {"k1", "k2"}, {"k0"}, nil})
}

// When the claims log refuses an entry, no writer will store the events
// that went out with it: their submissions are told why at once.
func TestKeyedSubmissionsWhoseEntryIsRefusedAreTold(t *testing.T) {
	js, _ := stream(t)
	claims := openClaims(t, js)
	cst, err := js.Stream(context.Background(), bus.DefaultNames.ClaimsStream)
	if err != nil {
		t.Fatal(err)
	}
	sc := cst.CachedInfo().Config
	sc.MaxMsgSize = 1 // every entry refused
	if _, err := js.UpdateStream(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	l := lim(10, 1<<20)
	l.claimFirst = false
	p := newPublisher("ev.in", l, js, claims, nil, zap.NewNop())
	if err := toldNotStored(t, p, sub("k0", ev("k0", 1)), 10*time.Second); !strings.Contains(err.Error(), "claim") {
		t.Fatalf("refusal reported as %v", err)
	}
}
