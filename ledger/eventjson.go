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
type EventRecord struct {
	Seq            int64           `json:"seq" doc:"The event's position in the whole log; the SSE id of streamed events."`
	Stream         string          `json:"stream" doc:"The hash chain the event belongs to (one per delegation, org, budget, …)."`
	StreamSeq      int32           `json:"stream_seq" doc:"The event's position in its stream, from 1."`
	DelegationID   string          `json:"delegation_id,omitempty" format:"uuid" doc:"The delegation the event is about; absent for events of no delegation."`
	Type           EventType       `json:"type"`
	At             time.Time       `json:"at"`
	Actor          string          `json:"actor"`
	ObligationFrom ObligationState `json:"obligation_from,omitempty" doc:"The obligation state before the event; absent when the event moved none."`
	ObligationTo   ObligationState `json:"obligation_to,omitempty" doc:"The obligation state after the event; absent when the event moved none."`
	Data           json.RawMessage `json:"data" doc:"The event's data, as stored."`
	Evidence       string          `json:"evidence,omitempty" doc:"The verbatim signed token the event rests on."`
	PrevHash       string          `json:"prev_hash" doc:"Hex hash of the previous event in the stream; 64 zeros for the first."`
	Hash           string          `json:"hash" doc:"Hex sha256 over prev_hash and the event's canonical content."`
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
