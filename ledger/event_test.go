package ledger_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// buildChain links events the way the store does: stream_seq from 1,
// prev_hash from the genesis hash, hash over the content.
func buildChain(t *testing.T, events []ledger.Event) []ledger.Event {
	t.Helper()
	prev := ledger.GenesisHash
	for i := range events {
		events[i].StreamSeq = int32(i + 1)
		events[i].PrevHash = prev
		h, err := events[i].ComputeHash()
		if err != nil {
			t.Fatalf("hash event %d: %v", i+1, err)
		}
		events[i].Hash = h
		prev = h
	}
	return events
}

func sampleChain(t *testing.T) []ledger.Event {
	t.Helper()
	id := uuid.MustParse("01920000-0000-7000-8000-000000000001")
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	stream := ledger.DelegationStream(id)
	return buildChain(t, []ledger.Event{
		{Stream: stream, DelegationID: id, Type: ledger.EventTypeDelegationCreated, At: at, Actor: "token:orch",
			Data: json.RawMessage(`{"amount_minor": 1250, "currency": "EUR"}`)},
		{Stream: stream, DelegationID: id, Type: ledger.EventTypeTaskStatusChanged, At: at.Add(time.Second), Actor: "token:orch",
			Data: json.RawMessage(`{"state": "working"}`)},
		{Stream: stream, DelegationID: id, Type: ledger.EventTypeTaskStatusChanged, At: at.Add(2 * time.Second), Actor: "token:orch",
			ObligationFrom: ledger.ObligationHeld, ObligationTo: ledger.ObligationRevocationPendingCompensation,
			Data: json.RawMessage(`{"state": "canceled", "reason": "compensation_required"}`)},
		{Stream: stream, DelegationID: id, Type: ledger.EventTypeStatusConflict, At: at.Add(3 * time.Second), Actor: "token:orch",
			Data: json.RawMessage(`{"state": "completed"}`), Evidence: "eyJhbGciOiJFZERTQSJ9.e30.sig"},
	})
}

func clone(events []ledger.Event) []ledger.Event {
	out := make([]ledger.Event, len(events))
	for i, e := range events {
		e.Data = bytes.Clone(e.Data)
		e.PrevHash = bytes.Clone(e.PrevHash)
		e.Hash = bytes.Clone(e.Hash)
		out[i] = e
	}
	return out
}

func TestVerifyChainAcceptsBuiltChain(t *testing.T) {
	t.Parallel()
	if err := ledger.VerifyChain(sampleChain(t)); err != nil {
		t.Fatalf("VerifyChain of a well-built chain: %v", err)
	}
	if err := ledger.VerifyChain(nil); err != nil {
		t.Fatalf("VerifyChain of an empty stream: %v", err)
	}
}

func TestVerifyChainCatchesTampering(t *testing.T) {
	t.Parallel()
	cases := map[string]func([]ledger.Event) []ledger.Event{
		"changed data": func(es []ledger.Event) []ledger.Event {
			es[0].Data = json.RawMessage(`{"amount_minor": 1, "currency": "EUR"}`)
			return es
		},
		"changed actor": func(es []ledger.Event) []ledger.Event { es[1].Actor = "token:someone-else"; return es },
		"changed time":  func(es []ledger.Event) []ledger.Event { es[2].At = es[2].At.Add(time.Microsecond); return es },
		"changed type":  func(es []ledger.Event) []ledger.Event { es[3].Type = ledger.EventTypeTaskStatusDuplicate; return es },
		"changed obligation_to": func(es []ledger.Event) []ledger.Event {
			es[2].ObligationTo = ledger.ObligationReleased
			return es
		},
		"changed evidence": func(es []ledger.Event) []ledger.Event { es[3].Evidence = "forged"; return es },
		"changed delegation": func(es []ledger.Event) []ledger.Event {
			es[1].DelegationID = uuid.MustParse("01920000-0000-7000-8000-000000000002")
			return es
		},
		"changed stored hash": func(es []ledger.Event) []ledger.Event { es[3].Hash[0] ^= 1; return es },
		"removed first event": func(es []ledger.Event) []ledger.Event { return es[1:] },
		"removed middle event": func(es []ledger.Event) []ledger.Event {
			return append(es[:1:1], es[2:]...)
		},
		"removed middle event, renumbered": func(es []ledger.Event) []ledger.Event {
			es = append(es[:1:1], es[2:]...)
			for i := range es {
				es[i].StreamSeq = int32(i + 1)
			}
			return es
		},
		"reordered events": func(es []ledger.Event) []ledger.Event {
			es[1], es[2] = es[2], es[1]
			return es
		},
		"reordered events, renumbered": func(es []ledger.Event) []ledger.Event {
			es[1], es[2] = es[2], es[1]
			es[1].StreamSeq, es[2].StreamSeq = 2, 3
			return es
		},
		// An attacker who rewrites prev_hash and recomputes the row's own
		// hash still breaks the link to the previous event.
		"changed prev_hash, hash recomputed": func(es []ledger.Event) []ledger.Event {
			es[2].PrevHash = bytes.Repeat([]byte{0xab}, 32)
			es[2].Hash, _ = es[2].ComputeHash()
			return es
		},
		"changed prev_hash of the first event": func(es []ledger.Event) []ledger.Event {
			es[0].PrevHash = bytes.Repeat([]byte{1}, 32)
			return es
		},
		// Rewriting one event and recomputing its hash breaks the next link.
		"changed data, hash recomputed": func(es []ledger.Event) []ledger.Event {
			es[1].Data = json.RawMessage(`{"state": "completed"}`)
			es[1].Hash, _ = es[1].ComputeHash()
			return es
		},
	}
	for name, tamper := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			es := tamper(clone(sampleChain(t)))
			err := ledger.VerifyChain(es)
			var ce *ledger.ChainError
			if !errors.As(err, &ce) {
				t.Fatalf("VerifyChain accepted a chain with a %s (err %v)", name, err)
			}
			if ce.Stream == "" || ce.Problem == "" || ce.Error() == "" {
				t.Fatalf("ChainError lacks detail: %+v", ce)
			}
		})
	}
}

// TestComputeHashCanonical: the hash does not depend on key order or
// whitespace of the data (PostgreSQL's jsonb rewrites both), but does on
// every value.
func TestComputeHashCanonical(t *testing.T) {
	t.Parallel()
	base := ledger.Event{
		Stream: "delegation:x", StreamSeq: 7, Type: "t", Actor: "a", PrevHash: ledger.GenesisHash,
		At: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC),
	}
	hash := func(data string) []byte {
		e := base
		e.Data = json.RawMessage(data)
		h, err := e.ComputeHash()
		if err != nil {
			t.Fatalf("ComputeHash(%s): %v", data, err)
		}
		return h
	}
	want := hash(`{"a":1,"b":{"x":[1,2,{"p":"q","o":null}],"y":true},"long_key":"v"}`)
	for _, same := range []string{
		`{"long_key":"v","b":{"y":true,"x":[1,2,{"o":null,"p":"q"}]},"a":1}`,
		"{\n  \"a\": 1,\n  \"b\": { \"x\": [ 1, 2, { \"p\": \"q\", \"o\": null } ], \"y\": true },\n\t\"long_key\": \"v\"\n}\n",
		`{"a": 1, "b": {"x": [1, 2, {"o": null, "p": "q"}], "y": true}, "long_key": "v"}`, // jsonb's output form
	} {
		if got := hash(same); !bytes.Equal(got, want) {
			t.Errorf("hash of %s differs from the same data in another key order/whitespace", same)
		}
	}
	for _, different := range []string{
		`{"a":2,"b":{"x":[1,2,{"p":"q","o":null}],"y":true},"long_key":"v"}`,
		`{"a":1,"b":{"x":[2,1,{"p":"q","o":null}],"y":true},"long_key":"v"}`,
		`{"a":1,"b":{"x":[1,2,{"p":"q","o":null}],"y":false},"long_key":"v"}`,
		`{"a":"1","b":{"x":[1,2,{"p":"q","o":null}],"y":true},"long_key":"v"}`,
		`{"a":1,"b":{"x":[1,2,{"p":"q"}],"y":true},"long_key":"v"}`,
	} {
		if got := hash(different); bytes.Equal(got, want) {
			t.Errorf("hash of %s equals that of different data", different)
		}
	}
	// Same instant in another zone hashes the same: the hash uses UTC.
	e1, e2 := base, base
	e1.Data, e2.Data = json.RawMessage(`{}`), json.RawMessage(`{}`)
	e2.At = e2.At.In(time.FixedZone("X", 5*3600))
	h1, _ := e1.ComputeHash()
	h2, _ := e2.ComputeHash()
	if !bytes.Equal(h1, h2) {
		t.Error("the same instant in another time zone hashes differently")
	}
	// Large integers keep their literal value (no float rounding).
	if bytes.Equal(hash(`{"n":9007199254740993}`), hash(`{"n":9007199254740992}`)) {
		t.Error("integers above 2^53 collapse to the same hash")
	}
	// Malformed data is an error, never a silent hash.
	bad := base
	bad.Data = json.RawMessage(`{"a":`)
	if _, err := bad.ComputeHash(); err == nil {
		t.Error("ComputeHash accepted malformed JSON data")
	}
}
