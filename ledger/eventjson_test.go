package ledger_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/ledger"
)

// TestEventRecordRoundTripVerifies: a stream's events published as JSON
// records, decoded by a client and turned back into events, still verify;
// a tampered record does not.
func TestEventRecordRoundTripVerifies(t *testing.T) {
	t.Parallel()
	events := sampleChain(t)
	records := make([]ledger.EventRecord, len(events))
	for i, e := range events {
		records[i] = ledger.NewEventRecord(e)
	}
	raw, err := json.Marshal(records)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"seq"`, `"stream"`, `"stream_seq"`, `"delegation_id"`, `"type"`, `"at"`, `"actor"`,
		`"obligation_from"`, `"obligation_to"`, `"data"`, `"evidence"`, `"prev_hash"`, `"hash"`} {
		if !strings.Contains(string(raw), field) {
			t.Errorf("published records lack %s: %s", field, raw)
		}
	}
	decode := func(raw []byte) []ledger.Event {
		t.Helper()
		var got []ledger.EventRecord
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		out := make([]ledger.Event, len(got))
		for i, r := range got {
			if out[i], err = r.Event(); err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
		}
		return out
	}
	if err := ledger.VerifyChain(decode(raw)); err != nil {
		t.Fatalf("VerifyChain of the published records: %v", err)
	}
	tampered := strings.Replace(string(raw), `"working"`, `"completed"`, 1)
	if err := ledger.VerifyChain(decode([]byte(tampered))); err == nil {
		t.Fatal("VerifyChain accepted a record whose data was changed")
	}
}

// TestEventRecordOfNoDelegation: the record of an event of no delegation (a
// budget's, an org's) has no delegation_id, publishes empty data as null,
// and still verifies; malformed hashes and ids are refused.
func TestEventRecordOfNoDelegation(t *testing.T) {
	t.Parallel()
	events := buildChain(t, []ledger.Event{{Stream: "budget:ops", Type: ledger.EventTypeBudgetFunded, At: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), Actor: "token:oncall", Data: json.RawMessage{}}})
	raw, err := json.Marshal(ledger.NewEventRecord(events[0]))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "delegation_id") || !strings.Contains(string(raw), `"data":null`) {
		t.Fatalf("record of a budget event: %s", raw)
	}
	var r ledger.EventRecord
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	e, err := r.Event()
	if err != nil {
		t.Fatal(err)
	}
	if err := ledger.VerifyChain([]ledger.Event{e}); err != nil {
		t.Fatalf("VerifyChain of a budget event's record: %v", err)
	}
	for _, bad := range []ledger.EventRecord{{PrevHash: "zz"}, {Hash: "zz"}, {DelegationID: "not-a-uuid"}} {
		if _, err := bad.Event(); err == nil {
			t.Errorf("Event() of %+v: no error", bad)
		}
	}
}
