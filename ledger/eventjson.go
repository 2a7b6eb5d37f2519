package ledger

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
)

// EventRecord is the published JSON form of an Event: what the API's event
// lists, the evidence endpoint, the event streams and webhook deliveries
// carry. It holds everything ComputeHash reads, so anyone who receives a
// stream's records can turn them back into events (Event) and check the
// chain with VerifyChain. Its field names are part of the audit contract.
// It carries encoding/json tags only: the HTTP layer describes the fields
// for its API documentation with a type of its own.
type EventRecord struct {
	// Seq is the event's position in the whole log; the SSE id of streamed
	// events.
	Seq int64 `json:"seq"`
	// Stream is the hash chain the event belongs to (one per delegation,
	// org, budget, …).
	Stream string `json:"stream"`
	// StreamSeq is the event's position in its stream, from 1.
	StreamSeq int32 `json:"stream_seq"`
	// DelegationID is the UUID of the delegation the event is about; absent
	// for events of no delegation.
	DelegationID string `json:"delegation_id,omitempty"`
	// Type is what the event records: one of the EventType catalogue.
	Type EventType `json:"type"`
	At   time.Time `json:"at"`
	// Actor is who caused the event: "token:<name>" (an API principal),
	// "org:<id>" (signed evidence), "system:…" (a worker or the sweep) or
	// "remote:unverified" (a refused token).
	Actor string `json:"actor"`
	// ObligationFrom is the obligation state before the event; absent when
	// the event moved none.
	ObligationFrom ObligationState `json:"obligation_from,omitempty"`
	// ObligationTo is the obligation state after the event; absent when the
	// event moved none.
	ObligationTo ObligationState `json:"obligation_to,omitempty"`
	// Data is the event's data, as stored.
	Data json.RawMessage `json:"data"`
	// Evidence is the verbatim signed token the event rests on.
	Evidence string `json:"evidence,omitempty"`
	// PrevHash is the hex hash of the previous event in the stream; 64
	// zeros for the first.
	PrevHash string `json:"prev_hash"`
	// Hash is the hex sha256 over prev_hash and the event's canonical
	// content.
	Hash string `json:"hash"`
}

// NewEventRecord returns the published form of e.
func NewEventRecord(e Event) EventRecord {
	r := EventRecord{
		Seq: e.Seq, Stream: e.Stream, StreamSeq: e.StreamSeq, Type: e.Type, At: e.At, Actor: e.Actor,
		ObligationFrom: e.ObligationFrom, ObligationTo: e.ObligationTo, Evidence: e.Evidence,
		PrevHash: hex.EncodeToString(e.PrevHash), Hash: hex.EncodeToString(e.Hash),
	}
	if e.DelegationID != uuid.Nil {
		r.DelegationID = e.DelegationID.String()
	}
	if len(e.Data) > 0 {
		r.Data = e.Data
	}
	return r
}

// Event returns the event r publishes, for VerifyChain. It fails when a
// hash is not hex or the delegation id is not a UUID.
func (r EventRecord) Event() (Event, error) {
	prev, err := hex.DecodeString(r.PrevHash)
	if err != nil {
		return Event{}, errors.New("prev_hash is not hex")
	}
	hash, err := hex.DecodeString(r.Hash)
	if err != nil {
		return Event{}, errors.New("hash is not hex")
	}
	var delegation uuid.UUID
	if r.DelegationID != "" {
		if delegation, err = uuid.Parse(r.DelegationID); err != nil {
			return Event{}, errors.New("delegation_id is not a UUID")
		}
	}
	return Event{
		Seq: r.Seq, Stream: r.Stream, StreamSeq: r.StreamSeq, DelegationID: delegation, Type: r.Type, At: r.At,
		Actor: r.Actor, ObligationFrom: r.ObligationFrom, ObligationTo: r.ObligationTo,
		Data: r.Data, Evidence: r.Evidence, PrevHash: prev, Hash: hash,
	}, nil
}
