package compensation

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/ledger/report"
)

// Store is the persistence the compensation service needs.
//
// Error contract, for Store, ReceiptTx and Tx: as ledger.Store; a missing
// row is ledger.ErrNotFound (wrapped).
type Store interface {
	// InTx runs fn in one database transaction, committing if fn returns nil.
	// Like ledger.Store.InTx it retries fn on serialization failures and
	// deadlocks, so fn must have no effects outside the Tx.
	InTx(ctx context.Context, fn func(Tx) error) error
	ledger.ThresholdReader
	// WriteOff returns a write-off, or ledger.ErrNotFound.
	WriteOff(ctx context.Context, id uuid.UUID) (WriteOff, error)
	// WriteOffs lists write-offs, newest first (see WriteOffFilter).
	WriteOffs(ctx context.Context, f WriteOffFilter) ([]WriteOff, error)
	// OutboundJobOpen reports whether an outbox job of kind is open (not
	// done: queued, waiting for a retry, or being worked on) for the
	// delegation, as committed now.
	OutboundJobOpen(ctx context.Context, delegationID uuid.UUID, kind ledger.OutboundKind) (bool, error)
}

// ReceiptTx is what ApplyEvidence writes through: ledger.Apply's and a
// status observation's, plus the token ids a signed token uses up and the
// pending write-off a discharge voids. The A2A workers' transactions have it, so they apply
// receipts without being a compensation Tx. Every method takes the time to
// record as a parameter where it records one; the store never reads a clock.
type ReceiptTx interface {
	// ObservationTx is ledger.Apply's, the evidence accepted under the
	// delegation's compensation idempotency key, and what a terminal
	// status needs (its gate, the compensation request it queues): every
	// kind of evidence is applied through it (ApplyEvidence).
	ObservationTx
	// EvidenceFacts returns, in one read, the delegation's stored
	// compensation evidence, its extra remote tasks and its dispatch
	// (EvidenceFacts): what ApplyEvidence decides with besides the locked
	// delegation.
	EvidenceFacts(ctx context.Context, delegationID uuid.UUID) (EvidenceFacts, error)
	// UsedToken returns the record of a token id an org already used, or
	// ledger.ErrNotFound.
	UsedToken(ctx context.Context, orgID, jti string) (UsedToken, error)
	// InsertUsedToken records a token id as used; inserted is false when the
	// org already used it (the row is then left unchanged).
	InsertUsedToken(ctx context.Context, u UsedToken) (inserted bool, err error)
	// RequireExtraTaskCompensation marks an extra remote task of a
	// delegation whose tracked task completed as needing compensation
	// (ExtraTaskCompensation.RequiredAt; a task marked before keeps its time).
	RequireExtraTaskCompensation(ctx context.Context, delegationID uuid.UUID, taskID string, now time.Time) error
	// ResolveExtraTaskCompensation resolves the open compensation of an
	// extra remote task; resolved is false when it was not open.
	ResolveExtraTaskCompensation(ctx context.Context, delegationID uuid.UUID, taskID string, r ExtraTaskResolution, now time.Time) (resolved bool, err error)
	// WriteOffForUpdate loads a write-off and locks its row.
	WriteOffForUpdate(ctx context.Context, id uuid.UUID) (WriteOff, error)
	// UpdateWriteOff writes a write-off's status, approver and execution time.
	UpdateWriteOff(ctx context.Context, w WriteOff) error
}

// Tx is a database transaction of the compensation service: everything it
// reads and writes inside one.
type Tx interface {
	ReceiptTx
	ledger.DelegationLocker
	ledger.ThresholdReader
	access.FourEyesReader
	// Org loads an org without locking it.
	Org(ctx context.Context, id string) (ledger.Org, error)
	// DelegationsByRemoteTaskForUpdate returns every delegation, of any
	// tenant, recording the org's remote task (none, one, or one per
	// tenant), locking each, in id order so concurrent lockers cannot
	// deadlock.
	DelegationsByRemoteTaskForUpdate(ctx context.Context, orgID, taskID string) ([]ledger.Delegation, error)
	// RecordTokenRefusal counts a refused token for its (org, reason) and
	// keeps it as one of the last report.TokenRefusalSampleSize samples.
	RecordTokenRefusal(ctx context.Context, r report.TokenRefusal) error
	// OutboundJobOpen is Store.OutboundJobOpen inside the transaction.
	OutboundJobOpen(ctx context.Context, delegationID uuid.UUID, kind ledger.OutboundKind) (bool, error)
	// RedriveExtraTaskCompensation sets the attempt count of an extra
	// remote task's open compensation back to zero, keeping its round;
	// redriven is false when the compensation was not open.
	RedriveExtraTaskCompensation(ctx context.Context, delegationID uuid.UUID, taskID string, now time.Time) (redriven bool, err error)
	// ClaimPastDeadline returns up to limit delegations in
	// revocation_pending_compensation whose compensation deadline is at or
	// before now, locked with FOR UPDATE SKIP LOCKED: rows another
	// transaction holds are skipped, so concurrent sweepers never take the
	// same delegation. It also takes their streams' locks and reads their
	// heads, for the batch of moves that follows: the events appended to
	// them are then sent with the commit, and their Seq is left 0.
	ClaimPastDeadline(ctx context.Context, now time.Time, limit int) ([]ledger.Delegation, error)
	// Revocation is the same transaction, for identity revocations and
	// the releases they surface.
	Revocation() RevocationTx
	// InsertWriteOff inserts a write-off.
	InsertWriteOff(ctx context.Context, w WriteOff) error
	// RejectWriteOff writes a write-off's rejection: its status, rejecter,
	// reason and time.
	RejectWriteOff(ctx context.Context, w WriteOff) error
}

// RevocationTx is the part of a transaction that revokes an org's
// identity and follows up the releases on a revoked identity it surfaces
// (Tx.Revocation). Error contract: as Store.
type RevocationTx interface {
	// OrgForUpdate loads an org and locks its row until the transaction ends.
	OrgForUpdate(ctx context.Context, id string) (ledger.Org, error)
	// PutOrg writes an org; it never clears a recorded identity revocation.
	PutOrg(ctx context.Context, o ledger.Org) error
	// OpenDelegationsOfOrgForUpdate returns every delegation of the org whose
	// obligation can still be escalated (held,
	// revocation_pending_compensation, compensation_unconfirmed), locking
	// each, in id order so concurrent lockers cannot deadlock.
	OpenDelegationsOfOrgForUpdate(ctx context.Context, orgID string) ([]ledger.Delegation, error)
	// DeclaredReleasesOfOrgForUpdate returns every delegation of the org
	// released on one of its declarations (obligation released, reason
	// no_compensation_declared), locking each, in id order.
	DeclaredReleasesOfOrgForUpdate(ctx context.Context, orgID string) ([]ledger.Delegation, error)
	// UnannouncedRevokedReleasesForUpdate returns up to limit delegations
	// with a release on a revoked identity but no
	// released_on_revoked_identity event (those migration 00020 surfaced),
	// locked with FOR UPDATE SKIP LOCKED, in id order.
	UnannouncedRevokedReleasesForUpdate(ctx context.Context, limit int) ([]ledger.Delegation, error)
	// RevokedReleaseAnnounced reports whether the delegation has its
	// released_on_revoked_identity event, as committed now.
	RevokedReleaseAnnounced(ctx context.Context, delegationID uuid.UUID) (bool, error)
	// InsertRevokedRelease records a release on a revoked identity; a
	// delegation already recorded is left unchanged.
	InsertRevokedRelease(ctx context.Context, r report.RevokedRelease) error
	// RevokedReleaseForUpdate loads the release on a revoked identity of a
	// delegation and locks it, or returns ledger.ErrNotFound.
	RevokedReleaseForUpdate(ctx context.Context, delegationID uuid.UUID) (report.RevokedRelease, error)
	// AcknowledgeRevokedRelease writes r's acknowledgement.
	AcknowledgeRevokedRelease(ctx context.Context, r report.RevokedRelease) error
}

// UsedToken records that an org used a token id (jti): the same id is never
// accepted twice from that org, and the token's hash tells an identical
// resubmission (answered idempotently) from a replay (refused).
type UsedToken struct {
	// OrgID is the issuing org.
	OrgID string
	// JTI is the token's "jti" claim.
	JTI string
	// DelegationID is the delegation the token was presented for.
	DelegationID uuid.UUID
	// TokenSHA256 is the sha256 of the token as received.
	TokenSHA256 []byte
	// UsedAt is when the token was accepted.
	UsedAt time.Time
}

// WriteOffStatus is where a write-off is in its four-eyes lifecycle.
type WriteOffStatus string

// The write-off statuses.
const (
	// WriteOffPendingApproval: above the threshold, waiting for a second
	// on-call identity.
	WriteOffPendingApproval WriteOffStatus = "pending_approval"
	// WriteOffExecuted: the obligation was written off and the hold lost.
	WriteOffExecuted WriteOffStatus = "executed"
	// WriteOffVoid: the obligation was discharged by evidence (or otherwise
	// left the states a write-off applies to) before approval.
	WriteOffVoid WriteOffStatus = "void"
	// WriteOffRejected: a second on-call identity refused the write-off,
	// with a reason; the obligation stays open and the hold active.
	WriteOffRejected WriteOffStatus = "rejected"
)

// WriteOff is a named on-call human accepting the loss of a delegation's
// held amount, with a reason.
type WriteOff struct {
	// ID identifies the write-off.
	ID uuid.UUID
	// DelegationID is the delegation written off.
	DelegationID uuid.UUID
	// Amount is the delegation's hold at the time of the request.
	Amount ledger.Money
	// Reason is why the loss is accepted; always non-empty.
	Reason string
	// Reference is an optional external reference (a ticket, an incident).
	Reference string
	// Status is where the write-off is.
	Status WriteOffStatus
	// RequestedBy is the name of the requesting on-call token.
	RequestedBy string
	// RequestedByID is the id of the requesting on-call principal.
	RequestedByID uuid.UUID
	// ApprovedBy is the name of the approving on-call token, if any.
	ApprovedBy string
	// ApprovedByID is the id of the approving on-call principal, if any.
	ApprovedByID uuid.UUID
	// CreatedAt is when the write-off was requested.
	CreatedAt time.Time
	// ExecutedAt is when the obligation was written off; zero until then.
	ExecutedAt time.Time
	// RejectedBy and RejectedByID name the on-call principal that
	// rejected the write-off (RejectedByID is the principal's id; rows
	// rejected before migration 00039 stored the credential's, and were
	// rewritten to the principal's), RejectionReason says why, and
	// RejectedAt when; empty unless the write-off was rejected.
	RejectedBy      string
	RejectedByID    uuid.UUID
	RejectionReason string
	RejectedAt      time.Time
}
