package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// EventTimeSlack is how much earlier than the event before it in its stream
// an event may be dated before its chain is broken. An event's time is
// the ledger's clock when its transaction began, taken before the
// transaction waited for the stream's lock; so of two transactions
// appending to one stream at once, the second to take the lock may carry
// the earlier time, by as long as it waited, and replicas' clocks differ
// by a little. More than that is not a race: it is an event written with a
// backdated time, as whoever holds the service's database role could
// append one (say, a token accepted "before" its key was retired).
const EventTimeSlack = time.Minute

// Event is one entry of the append-only audit log. Events form one hash
// chain per stream: Hash = sha256 of the canonical content, which includes
// PrevHash, the previous event's hash in the same stream.
type Event struct {
	Seq            int64
	Stream         string
	StreamSeq      int32
	DelegationID   uuid.UUID
	Type           EventType
	At             time.Time
	Actor          string
	ObligationFrom ObligationState
	ObligationTo   ObligationState
	Data           json.RawMessage
	// Evidence is a verbatim token (a JWS) the event rests on, kept so it can
	// be verified again later.
	Evidence string
	PrevHash []byte
	Hash     []byte
}

// GenesisHash is the PrevHash of the first event of every stream.
var GenesisHash = make([]byte, sha256.Size)

// ComputeHash returns the event's hash over its canonical content: a JSON
// object with sorted keys holding the event's fields and its data in
// canonical form (CanonicalJSON), so anyone can recompute it. The store
// keeps the data exactly as hashed (StorableEvent produces it), next to the
// jsonb copy queries read: jsonb normalises numbers (1e2 is 100), so a hash
// recomputed from it would break on data that jsonb rewrites. Events
// stored before the exact copy was kept are hashed from their jsonb data,
// as they always were.
func (e Event) ComputeHash() ([]byte, error) {
	data, err := CanonicalJSON(e.Data)
	if err != nil {
		return nil, fmt.Errorf("canonicalize event data: %w", err)
	}
	return e.hashOver(data)
}

// HashedEvent is StorableEvent(e) with its Hash (ComputeHash): how the
// store seals an event it appends. The data StorableEvent returns is in
// canonical form already, so it is hashed as it is, not decoded again.
func HashedEvent(e Event) (Event, error) {
	e, err := StorableEvent(e)
	if err != nil {
		return Event{}, err
	}
	data := e.Data
	if len(data) == 0 {
		data = json.RawMessage("null") // as CanonicalJSON has it
	}
	if e.Hash, err = e.hashOver(data); err != nil {
		return Event{}, err
	}
	return e, nil
}

// hashOver is e's hash with data, its data in canonical form.
func (e Event) hashOver(data json.RawMessage) ([]byte, error) {
	delegation := ""
	if e.DelegationID != uuid.Nil {
		delegation = e.DelegationID.String()
	}
	content, err := json.Marshal(hashContent{
		Actor:          e.Actor,
		At:             e.At.UTC().Format(time.RFC3339Nano),
		Data:           data,
		DelegationID:   delegation,
		Evidence:       e.Evidence,
		ObligationFrom: string(e.ObligationFrom),
		ObligationTo:   string(e.ObligationTo),
		PrevHash:       hex.EncodeToString(e.PrevHash),
		Stream:         e.Stream,
		StreamSeq:      e.StreamSeq,
		Type:           string(e.Type),
	})
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(content)
	return sum[:], nil
}

// hashContent is what an event's hash covers. Its fields are declared in
// the order of their keys, so that it encodes to the object with sorted
// keys that ComputeHash documents (as a map of them would, without
// sorting a map's keys for every event; FuzzHashContent checks the two
// agree).
type hashContent struct {
	Actor          string          `json:"actor"`
	At             string          `json:"at"`
	Data           json.RawMessage `json:"data"`
	DelegationID   string          `json:"delegation_id"`
	Evidence       string          `json:"evidence"`
	ObligationFrom string          `json:"obligation_from"`
	ObligationTo   string          `json:"obligation_to"`
	PrevHash       string          `json:"prev_hash"`
	Stream         string          `json:"stream"`
	StreamSeq      int32           `json:"stream_seq"`
	Type           string          `json:"type"`
}

// ChainError reports the first event at which a stream's hash chain breaks.
type ChainError struct {
	Stream    string
	StreamSeq int32
	Problem   string
}

// Error implements error.
func (e *ChainError) Error() string {
	return fmt.Sprintf("event chain %s broken at %d: %s", e.Stream, e.StreamSeq, e.Problem)
}

// VerifyChain checks that events, one stream's events in stream order,
// form an unbroken hash chain from the genesis hash, and that no event is
// dated more than EventTimeSlack before the event before it.
func VerifyChain(events []Event) error { return VerifyChainWithin(events, EventTimeSlack) }

// VerifyChainWithin is VerifyChain with slack instead of EventTimeSlack:
// an event dated more than slack before the event before it breaks the
// chain (verify-chain and verify-pack take it as --event-time-slack).
func VerifyChainWithin(events []Event, slack time.Duration) error {
	prev := GenesisHash
	for i, e := range events {
		if e.StreamSeq != int32(i+1) {
			return &ChainError{Stream: e.Stream, StreamSeq: e.StreamSeq, Problem: fmt.Sprintf("expected sequence %d", i+1)}
		}
		if !bytes.Equal(e.PrevHash, prev) {
			return &ChainError{Stream: e.Stream, StreamSeq: e.StreamSeq, Problem: "prev_hash does not match the previous event"}
		}
		sum, err := e.ComputeHash()
		if err != nil {
			return &ChainError{Stream: e.Stream, StreamSeq: e.StreamSeq, Problem: err.Error()}
		}
		if !bytes.Equal(sum, e.Hash) {
			return &ChainError{Stream: e.Stream, StreamSeq: e.StreamSeq, Problem: "hash does not match the content"}
		}
		if i > 0 && e.At.Before(events[i-1].At.Add(-slack)) {
			return &ChainError{Stream: e.Stream, StreamSeq: e.StreamSeq, Problem: fmt.Sprintf(
				"dated %s, %s before the event before it (%s): more than %s earlier is a backdated event",
				e.At.UTC().Format(time.RFC3339Nano), events[i-1].At.Sub(e.At), events[i-1].At.UTC().Format(time.RFC3339Nano), slack)}
		}
		prev = e.Hash
	}
	return nil
}
