package httpapi

import (
	"encoding/json"
	"time"

	"github.com/quittance/quittance/ledger"
)

// EventRecord is an event as the API publishes it (event lists, the
// evidence chain, the event streams): ledger.EventRecord with the
// documentation of its fields. It has ledger.EventRecord's fields, in the
// same order with the same JSON names, so one converts to the other and
// the JSON is byte for byte what webhook deliveries carry and what
// verify-chain reads back.
type EventRecord struct {
	Seq            int64                  `json:"seq" doc:"The event's position in the whole log; the SSE id of streamed events."`
	Stream         string                 `json:"stream" doc:"The hash chain the event belongs to (one per delegation, org, budget, …)."`
	StreamSeq      int32                  `json:"stream_seq" doc:"The event's position in its stream, from 1."`
	DelegationID   string                 `json:"delegation_id,omitempty" format:"uuid" doc:"The delegation the event is about; absent for events of no delegation."`
	Type           ledger.EventType       `json:"type"`
	At             time.Time              `json:"at"`
	Actor          string                 `json:"actor"`
	ObligationFrom ledger.ObligationState `json:"obligation_from,omitempty" doc:"The obligation state before the event; absent when the event moved none."`
	ObligationTo   ledger.ObligationState `json:"obligation_to,omitempty" doc:"The obligation state after the event; absent when the event moved none."`
	Data           json.RawMessage        `json:"data" doc:"The event's data, as stored."`
	Evidence       string                 `json:"evidence,omitempty" doc:"The verbatim signed token the event rests on."`
	PrevHash       string                 `json:"prev_hash" doc:"Hex hash of the previous event in the stream; 64 zeros for the first."`
	Hash           string                 `json:"hash" doc:"Hex sha256 over prev_hash and the event's canonical content."`
}

// eventRecord returns the published form of e.
func eventRecord(e ledger.Event) EventRecord { return EventRecord(ledger.NewEventRecord(e)) }
