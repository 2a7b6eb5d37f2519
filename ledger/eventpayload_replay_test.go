package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"testing"
)

// chainBeforePayloads is a chain of events recorded, as published records,
// before event data was built from typed payloads: the events of the API
// lifecycles of cmd/quittance/internal/httpapi's TestEventPayloadsReplay
// and TestEventPayloadShapesA2A, run on the code before the change.
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
				got, err := replayData(e, payloads[e.Type])
				if err != nil {
					t.Errorf("%s %d (%s): %v", e.Stream, e.StreamSeq, e.Type, err)
					continue
				}
				if !bytes.Equal(got, e.Data) {
					t.Errorf("%s %d (%s): the payload encodes\n%s\nthe recorded data is\n%s", e.Stream, e.StreamSeq, e.Type, got, e.Data)
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
	if len(types) < 40 {
		t.Errorf("only %d event types replayed", len(types))
	}
}

// replayData decodes e's data into a payload of typ and the obligation
// members (when Apply wrote e: it moved the obligation or the hold) and
// encodes them again in canonical form.
func replayData(e Event, typ reflect.Type) (json.RawMessage, error) {
	if typ == nil {
		return nil, fmt.Errorf("no payload type")
	}
	p := reflect.New(typ)
	if err := json.Unmarshal(e.Data, p.Interface()); err != nil {
		return nil, err
	}
	var move *obligationData
	var members map[string]json.RawMessage
	if err := json.Unmarshal(e.Data, &members); err != nil {
		return nil, err
	}
	if e.ObligationTo != "" || members["hold"] != nil {
		move = &obligationData{}
		if err := json.Unmarshal(e.Data, move); err != nil {
			return nil, err
		}
	}
	raw, err := encodeEventData(e.Type, p.Elem().Interface().(EventPayload), move)
	if err != nil {
		return nil, err
	}
	return CanonicalJSON(raw)
}
