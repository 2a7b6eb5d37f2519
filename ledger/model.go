package ledger

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Money is an amount in integer minor units of an ISO 4217 currency. Money is
// never a float.
type Money struct {
	AmountMinor int64
	Currency    string
}

// RemoteTask identifies the A2A task at the remote org.
type RemoteTask struct {
	TaskID          string
	ContextID       string
	ProtocolVersion string
}

// Compensation is what Quittance knows about compensation being sought for
// a delegation whose task ended while the gate applied.
type Compensation struct {
	// IdempotencyKey is derived from the delegation, identical across
	// retries and restarts; acks must carry it.
	IdempotencyKey string
	Deadline       time.Time
	Attempts       int
	LastError      string
	Receipt        json.RawMessage
}

// Delegation is one outbound delegation and its two lifecycles.
type Delegation struct {
	ID                  uuid.UUID
	Tenant              string
	BusinessOperationID string
	// RequestHash fingerprints the creating request, so a retry with the same
	// business_operation_id but a different body is detected.
	RequestHash []byte
	OrgID       string
	TaskClass   string
	BudgetID    string
	// Hold is the hold as it stands: a cap on what the work may cost. The
	// orchestrator may raise or lower it while the obligation is held
	// (Service.ChangeHold); it is never changed after.
	Hold   Money
	Remote RemoteTask
	// SettledAmountMinor is what settling spent of the hold (the rest
	// returned to the budget); meaningful only once the obligation is
	// settled.
	SettledAmountMinor int64
	// ReversedAmountMinor is what compensation returned of the hold (the
	// rest spent, as the cost of the cancellation); meaningful only once
	// the obligation is compensated.
	ReversedAmountMinor int64

	TaskStatus   TaskStatus
	TaskStatusAt time.Time
	// TaskStatusUndated: the status came without the agent's date, and
	// TaskStatusAt is when Quittance received it; it orders no later
	// status (a status dated before it is not stale).
	TaskStatusUndated bool
	TaskStatusMessage string
	// LastObservedAt is when Quittance last received an observation of the
	// remote task, whether or not it changed anything (zero before the
	// first). An observation that repeats the current status and message
	// moves only this: it appends no event.
	LastObservedAt time.Time

	ObligationState   ObligationState
	ObligationReason  string
	CancelRequestedAt time.Time
	Compensation      Compensation
	// PendingWriteOffID is the write-off awaiting a second approver, if
	// any (uuid.Nil when none): the compensation service sets and clears
	// it, so evidence that discharges the obligation knows from the locked
	// row whether there is a write-off to void.
	PendingWriteOffID uuid.UUID

	// Version increases by one on every update.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Stream is the name of the delegation's event stream.
func (d Delegation) Stream() string { return DelegationStream(d.ID) }

// DelegationStream names the event stream of delegation id.
func DelegationStream(id uuid.UUID) string { return "delegation:" + id.String() }

// Budget is money set aside for delegations. Always
// Available + Held + Spent + WrittenOff = Funded.
type Budget struct {
	ID         string
	Currency   string
	Funded     int64
	Available  int64
	Held       int64
	Spent      int64
	WrittenOff int64
	// Tenants are the tenants whose orchestrators may hold on the budget
	// (HoldsFor), sorted; none until on-call names one.
	Tenants   []string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Org is a remote organization whose agents Quittance delegates to.
type Org struct {
	ID                string
	Name              string
	SharedCoordinator bool
	// JWKS is the org's public JWK Set, as registered; empty when none.
	JWKS json.RawMessage
	// JWKSURL is the org's own JWKS URL, when its keys come from there
	// rather than from JWKS (never both); empty when none.
	JWKSURL string
	// JWKSFetch is what the ledger last fetched from JWKSURL.
	JWKSFetch             JWKSFetch
	AgentCardURL          string
	AllowedHosts          []string
	RequireSignedReceipts bool
	// RequireSignedCard: the org's agent card is used only when one of
	// its signatures verifies (ledger/DESIGN.md §4.1).
	RequireSignedCard bool
	// CardJKUHosts are the hosts a card signature's jku may name for its
	// key to be fetched from; none: only the org's registered keys sign.
	CardJKUHosts []string
	// CardPin is the card's signing key and compensation params pinned at
	// its first verified use or by an approved change; zero until then.
	CardPin CardPin
	// CardCheck is what the last check of the card found.
	CardCheck             CardCheck
	IdentityRevokedAt     time.Time
	IdentityRevokedReason string
	CreatedAt             time.Time
	UpdatedAt             time.Time
}

// JWKSFetch is the state of an org's JWKS URL: the last valid set fetched
// from it and the last attempt. A failed attempt records its error and
// keeps the set (and so the keys) in force.
type JWKSFetch struct {
	// Set is the last valid JWK Set fetched; its keys are the org's keys in
	// force. Empty until a fetch succeeds.
	Set json.RawMessage
	// FetchedAt is when Set was fetched.
	FetchedAt time.Time
	// AttemptedAt is the last attempt, successful or not.
	AttemptedAt time.Time
	// Error is why the last attempt failed; empty when it succeeded.
	Error string
}

// KeySet is the org's JWK Set in force: the inline JWKS, or the last valid
// set fetched from its JWKS URL. Tokens are verified against it; it is
// empty when the org has no keys.
func (o Org) KeySet() json.RawMessage {
	if o.JWKSURL != "" {
		return o.JWKSFetch.Set
	}
	return o.JWKS
}

// IdentityRevoked reports whether on-call revoked the org's agent identity.
func (o Org) IdentityRevoked() bool { return !o.IdentityRevokedAt.IsZero() }

// DelegationFilter selects delegations for a listing. Empty fields match all.
type DelegationFilter struct {
	Tenant          string
	ObligationState ObligationState
	TaskStatus      TaskStatus
	OrgID           string
	// StatusAfter, when set, keeps the delegations whose task status was
	// observed after it (task_status_at): a task never observed has none.
	StatusAfter time.Time
	// After is the cursor: only delegations listed after it are returned.
	After uuid.UUID
	Limit int
}

// BudgetMove is one movement of money in a budget, journaled.
type BudgetMove struct {
	BudgetID     string
	DelegationID uuid.UUID
	Kind         BudgetMoveKind
	AmountMinor  int64
	At           time.Time
}

// Outcome is where the hold went once the obligation ended: what settling
// spent and returned, what compensation returned and spent, all of it
// returned (released) or written off. It is zero while the hold is active.
func (d Delegation) Outcome() HoldSplit {
	hold := d.Hold.AmountMinor
	switch d.ObligationState {
	case ObligationSettled:
		return HoldSplit{Spent: d.SettledAmountMinor, Returned: hold - d.SettledAmountMinor}
	case ObligationCompensated:
		return HoldSplit{Spent: hold - d.ReversedAmountMinor, Returned: d.ReversedAmountMinor}
	case ObligationReleased:
		return HoldSplit{Returned: hold}
	case ObligationWrittenOff:
		return HoldSplit{WrittenOff: hold}
	case ObligationHeld, ObligationRevocationPendingCompensation, ObligationCompensationUnconfirmed, ObligationEscalated:
	}
	return HoldSplit{}
}
