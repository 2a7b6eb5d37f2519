package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// EvidenceChannel names how evidence reached the ledger: one of the
// channels below for compensation evidence; for a terminal task status
// (TaskEnd), the observation's source (TaskEnd.Channel).
type EvidenceChannel string

// The evidence channels.
const (
	// ChannelHTTP: a signed token posted to /v1/compensation/acks or
	// /v1/compensation/declarations.
	ChannelHTTP EvidenceChannel = "http"
	// ChannelA2AReceipt: a compensation receipt answering Quittance's own
	// A2A compensation request.
	ChannelA2AReceipt EvidenceChannel = "a2a_receipt"
	// ChannelAtomicCancel: a compensation receipt on a terminal task, from
	// an agent that compensates with the cancel (atomic
	// cancel-and-compensate): in the reply to Quittance's cancel, or on
	// the task as fetched after it.
	ChannelAtomicCancel EvidenceChannel = "atomic_cancel"
)

// EvidenceStatus says what became of stored compensation evidence.
type EvidenceStatus string

// The evidence statuses.
const (
	// EvidenceReceived: verified while the obligation was held, waiting
	// for the gating terminal status to be observed.
	EvidenceReceived EvidenceStatus = "received"
	// EvidenceApplied: the evidence moved the obligation.
	EvidenceApplied EvidenceStatus = "applied"
	// EvidenceUnused: received early, but the task ended in a way that
	// does not call for compensation; an anomaly.
	EvidenceUnused EvidenceStatus = "unused"
)

// StoredEvidence is the one piece of compensation evidence accepted for a
// delegation, under its compensation idempotency key (ledger/DESIGN.md §3).
// compensation.ApplyEvidence writes it, and applies it when it was received
// early and the gating terminal status arrives.
type StoredEvidence struct {
	// DelegationID is the delegation the evidence is for.
	DelegationID uuid.UUID
	// IdempotencyKey is the delegation's compensation idempotency key.
	IdempotencyKey string
	// Kind is what the evidence proves: EventCompensationAck or
	// EventDeclarationVerified.
	Kind ObligationEvent
	// Channel is how it arrived.
	Channel EvidenceChannel
	// PayloadSHA256 is the sha256 of what the evidence asserts (its kind
	// and receipt id), the same however often it is re-signed; evidence
	// with the same key and another payload is a conflict.
	PayloadSHA256 []byte
	// Status says whether it was applied, waits, or was never used.
	Status EvidenceStatus
	// Receipt is what the delegation shows as compensation.receipt once
	// the evidence is applied.
	Receipt json.RawMessage
	// Data is the event data describing the evidence (kind, jti, receipt
	// id, channel, token sha256), repeated on the event that applies it.
	Data json.RawMessage
	// Token is the signed token (or a receipt's jws) verbatim; empty for a
	// channel-authenticated receipt.
	Token string
	// ReceivedAt is when the ledger accepted it.
	ReceivedAt time.Time
	// DecidedAt is when it was applied or found unused; zero while received.
	DecidedAt time.Time
}

// EvidenceTx reads and writes stored compensation evidence inside a
// transaction that holds the delegation's row lock.
type EvidenceTx interface {
	// CompensationEvidence returns the delegation's stored evidence, or
	// ErrNotFound.
	CompensationEvidence(ctx context.Context, delegationID uuid.UUID) (StoredEvidence, error)
	// PutCompensationEvidence inserts e, or, when the delegation has
	// evidence already, updates its status and decision time only.
	PutCompensationEvidence(ctx context.Context, e StoredEvidence) error
}

// Held is what stored evidence means to TerminalStatusEvent: evidence
// still waiting as received is in hand; anything else is none.
func (e StoredEvidence) Held() HeldEvidence {
	switch {
	case e.Status != EvidenceReceived:
		return HeldEvidenceNone
	case e.Kind == EventCompensationAck && e.Channel == ChannelAtomicCancel:
		return HeldEvidenceAtomicAck
	case e.Kind == EventCompensationAck:
		return HeldEvidenceAck
	case e.Kind == EventDeclarationVerified:
		return HeldEvidenceDeclaration
	}
	return HeldEvidenceNone
}

// ReversedAmountKey is the member of StoredEvidence.Data (and of the event
// data of applied evidence) that carries how much of the hold an ack says
// was reversed; absent: the whole hold.
const ReversedAmountKey = "reversed_amount_minor"

// ReversedAmountMinor is the reversed amount stored evidence carries, nil
// for the whole hold, at most hold: a remote that reversed more than the
// hold (it was lowered after the ack arrived) undid all of what is held,
// so nothing of it is spent.
func (e StoredEvidence) ReversedAmountMinor(hold int64) (*int64, error) {
	var data map[string]json.RawMessage
	if len(e.Data) > 0 {
		if err := json.Unmarshal(e.Data, &data); err != nil {
			return nil, fmt.Errorf("stored evidence of delegation %s: %w", e.DelegationID, err)
		}
	}
	raw, ok := data[ReversedAmountKey]
	if !ok {
		return nil, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil || n < 0 {
		return nil, fmt.Errorf("stored evidence of delegation %s: %s is not a non-negative integer: %s", e.DelegationID, ReversedAmountKey, raw)
	}
	n = min(n, hold)
	return &n, nil
}

// The kinds of signed token the ledger stores, by their JWS "typ"
// (compensation.TokenKind).
const (
	TokenKindAck         = "compensation-ack+jwt"
	TokenKindDeclaration = "no-compensation-required+jwt"
)

// TokenKindKey and TokenAcceptedAtKey are the members of an event's data
// that say how the ledger accepted the signed token the event stores
// (Event.Evidence): the kind it verified it as, and when — the time whose
// keys in force and expiry it was judged by. Every event that stores a
// token has both, with the same values on every event that stores the
// same token (TokenAcceptance); audit.StoredTokens reads them, and derives
// them for events written before they existed.
const (
	TokenKindKey       = "token_kind"
	TokenAcceptedAtKey = "token_accepted_at"
)
