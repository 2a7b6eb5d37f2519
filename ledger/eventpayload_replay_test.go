package ledger

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"testing"
)

// chainBeforePayloads is a chain of events recorded, as published records,
// before event data was built from typed payloads (on commit 5d85dd1): one
// list of records per database, holding the events of the API lifecycles
// of cmd/quittance/internal/httpapi's TestEventPayloadsReplay and
// TestEventPayloadShapesA2A, and, from a run of that package's whole suite,
// every stream (of at most 40 events) that showed an event type with
// members, or empty members, not shown before: 67 of the catalogue's types.
const chainBeforePayloads = "testdata/chain_before_typed_payloads.json"

// TestRecordedChainReplays: the chain recorded before typed payloads still
// verifies, stream by stream, and every event's data, decoded into its
// type's payload (with, on an event Apply wrote, the obligation members
// Apply adds) and encoded again as Append encodes it, is the data stored
// then, byte for byte once canonical: the payload types write what the
// maps wrote, so every hash stays the same.
func TestRecordedChainReplays(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(chainBeforePayloads)
	if err != nil {
		t.Fatal(err)
	}
	var runs [][]EventRecord
	if err := json.Unmarshal(raw, &runs); err != nil {
		t.Fatal(err)
	}
	payloads := map[EventType]reflect.Type{}
	for _, p := range eventPayloads {
		payloads[p.EventType()] = reflect.TypeOf(p)
	}
	covered := map[EventType]bool{}
	n := 0
	for _, run := range runs {
		streams := map[string][]Event{}
		for _, r := range run {
			e, err := r.Event()
			if err != nil {
				t.Fatal(err)
			}
			streams[e.Stream] = append(streams[e.Stream], e)
		}
		for s, events := range streams {
			slices.SortFunc(events, func(a, b Event) int { return int(a.StreamSeq - b.StreamSeq) })
			if err := VerifyChain(events); err != nil {
				t.Errorf("stream %s: %v", s, err)
			}
			for _, e := range events {
				n++
				got, want, err := replayData(e, payloads[e.Type])
				if err != nil {
					t.Errorf("%s %d (%s): %v", e.Stream, e.StreamSeq, e.Type, err)
					continue
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s %d (%s): the payload encodes\n%s\nthe recorded data is\n%s", e.Stream, e.StreamSeq, e.Type, got, want)
					continue
				}
				covered[e.Type] = true
			}
		}
	}
	var types []string
	for typ := range covered {
		types = append(types, string(typ))
	}
	slices.Sort(types)
	t.Logf("%d events of %d types replayed: %v", n, len(types), types)
	if len(types) < 60 {
		t.Errorf("only %d event types replayed", len(types))
	}
}

// replayData decodes the data e was given to the store with into a
// payload of typ and the obligation members (when Apply wrote e: it moved
// the obligation or the hold), encodes them again as Append does, and
// returns that with the data it must equal. The data given is the stored
// data, and the comparison is of canonical forms, except for an event
// whose data had to be cleaned to be stored: the data given is then kept
// in it (RawDataKey), and compared byte for byte.
func replayData(e Event, typ reflect.Type) (got, want json.RawMessage, err error) {
	if typ == nil {
		return nil, nil, fmt.Errorf("no payload type")
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(e.Data, &members); err != nil {
		return nil, nil, err
	}
	given, canonical := json.RawMessage(e.Data), true
	if b64, ok := members[RawDataKey]; ok {
		var s string
		if err := json.Unmarshal(b64, &s); err != nil {
			return nil, nil, err
		}
		if given, err = base64.StdEncoding.DecodeString(s); err != nil {
			return nil, nil, err
		}
		canonical = false
	}
	p := reflect.New(typ)
	if err := json.Unmarshal(given, p.Interface()); err != nil {
		return nil, nil, err
	}
	var move *obligationData
	if e.ObligationTo != "" || members["hold"] != nil {
		move = &obligationData{}
		if err := json.Unmarshal(given, move); err != nil {
			return nil, nil, err
		}
	}
	if got, err = encodeEventData(e.Type, p.Elem().Interface().(EventPayload), move); err != nil {
		return nil, nil, err
	}
	if canonical {
		got, err = CanonicalJSON(got)
	}
	return got, given, err
}
