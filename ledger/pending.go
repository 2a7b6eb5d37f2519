package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// ChangeKind names a privileged change that needs a second on-call
// principal.
type ChangeKind string

// The privileged changes.
const (
	// ChangePrincipalCreate creates a person principal, or any finance or
	// on-call principal, with its first credential.
	ChangePrincipalCreate ChangeKind = "principal_create"
	// ChangeRoleGrant gives an existing principal another role.
	ChangeRoleGrant ChangeKind = "role_grant"
	// ChangeCredentialCreate issues another credential to an existing
	// machine principal, for an on-call principal other than the machine
	// (and, for a rotation, revokes the one it replaces): whoever holds a
	// machine orchestrator's credential can release its tenant's held
	// obligations.
	ChangeCredentialCreate ChangeKind = "credential_create"
	// ChangeOrgUpdate changes an org's keys or where they come from (its
	// inline JWKS or its JWKS URL; keys the org then rotates at the URL
	// need no change), agent endpoint, allowed hosts, shared_coordinator
	// flag or signed-receipt requirement.
	ChangeOrgUpdate ChangeKind = "org_update"
	// ChangeTaskClassUpdate registers a task class or changes its gate,
	// effect capability or compensation timeout.
	ChangeTaskClassUpdate ChangeKind = "task_class_update"
	// ChangeTaskClassPolicyUpdate sets which task classes a tenant's
	// orchestrators may use with an org (ledger/DESIGN.md §2.4): a class
	// the policy lists can make an observed cancel release without
	// evidence.
	ChangeTaskClassPolicyUpdate ChangeKind = "task_class_policy_update"
)

// PendingStatus is where a pending change is in its life.
type PendingStatus string

// The pending change statuses.
const (
	PendingOpen     PendingStatus = "pending"
	PendingApplied  PendingStatus = "applied"
	PendingRefused  PendingStatus = "refused"
	PendingExpired  PendingStatus = "expired"
	maxPendingBatch               = 100
)

// ParsePendingStatus accepts exactly the status names.
func ParsePendingStatus(raw string) (PendingStatus, error) {
	switch st := PendingStatus(raw); st {
	case PendingOpen, PendingApplied, PendingRefused, PendingExpired:
		return st, nil
	}
	return "", fmt.Errorf("unknown pending change status %q", raw)
}

// PendingChange is a privileged change waiting for, or decided by, a
// second on-call principal.
type PendingChange struct {
	ID     uuid.UUID
	Kind   ChangeKind
	Target string
	// Payload is the change as it is applied on approval.
	Payload        json.RawMessage
	Summary        string
	Status         PendingStatus
	RequestedBy    uuid.UUID
	RequestedAt    time.Time
	ExpiresAt      time.Time
	DecidedBy      uuid.UUID
	DecidedAt      time.Time
	DecisionReason string
	// IssuedTokenPart is set only on what the approval of a principal_create
	// change with a split credential returns: the credential's second part,
	// for the approver to hand to the new person. It is never stored.
	IssuedTokenPart string
}

// ApprovalRequiredError is returned by a privileged change that was
// recorded as Change and waits for a different on-call principal; nothing
// else changed.
type ApprovalRequiredError struct {
	Change PendingChange
}

// Error implements error.
func (e *ApprovalRequiredError) Error() string {
	return "approval required: pending change " + e.Change.ID.String()
}

// AwaitingApproval is what a privileged change answers once its
// transaction is over: err if it failed, else an *ApprovalRequiredError
// for pending, the change ApplyOrRequest recorded for a second person, or
// nil if it applied at once.
func AwaitingApproval(pending *PendingChange, err error) error {
	if err == nil && pending != nil {
		return &ApprovalRequiredError{Change: *pending}
	}
	return err
}

// The payloads of the change kinds, as stored in PendingChange.Payload:
// each kind's request records one, its approval decodes it
// (DecodeChangePayload), and the views of pending_view.go read it. Their
// JSON is what the database keeps, so their fields never change meaning.

// PrincipalCreatePayload is a principal_create change: the principal with
// its first credential.
type PrincipalCreatePayload struct {
	Principal PrincipalRecord `json:"principal"`
	// Token is the first credential; for a person's split credential its
	// Hash is empty until the approval sets it.
	Token Token `json:"token"`
	// TokenPartHash is, for a split credential, the SHA-256 of the part
	// the requester holds: the approval makes the second part and stores
	// the joined credential's hash. Neither part, nor anything that
	// rebuilds the token, is stored.
	TokenPartHash []byte `json:"token_part_hash,omitempty"`
}

// CredentialCreatePayload is a credential_create change: another
// credential of an existing machine principal.
type CredentialCreatePayload struct {
	Token Token `json:"token"`
	// Rotates is the credential the new one replaces, revoked when the
	// change applies; uuid.Nil for none.
	Rotates uuid.UUID `json:"rotates,omitempty"`
}

// RoleGrantPayload is a role_grant change.
type RoleGrantPayload struct {
	PrincipalID uuid.UUID `json:"principal_id"`
	Role        Role      `json:"role"`
	Tenant      string    `json:"tenant"`
}

type orgUpdatePayload struct {
	ID    string   `json:"id"`
	Input OrgInput `json:"input"`
	// Base is the org's registration when the change was asked for; the
	// approval is refused if the org changed since (checkOrgUnchanged).
	Base *orgBase `json:"base,omitempty"`
}

type taskClassPayload struct {
	Class TaskClass `json:"class"`
}

// PendingChangeWriter records pending changes: what RequestChange writes
// through, a ledger Tx or the access store's. Error contract: as Store.
type PendingChangeWriter interface {
	EventAppender
	InsertPendingChange(ctx context.Context, c PendingChange) error
}

// ChangeRequest is a privileged change to record as pending.
type ChangeRequest struct {
	// By is the principal asking.
	By Principal
	// At is when it asks; the change expires PendingChangeTTL later.
	At   time.Time
	Kind ChangeKind
	// Target names what the change is about ("org:<id>", "principal:<id>").
	Target string
	// Payload is what the approval applies, encoded as JSON (one of the
	// kinds' payloads).
	Payload any
	// Summary says in one line what the change does, for approvers.
	Summary string
}

// RequestChange records r as a pending change with its change_requested
// event, in tx, and returns it. Every kind's request goes through here,
// whichever package owns the kind (ledger/DESIGN.md §6).
func (s *Service) RequestChange(ctx context.Context, tx PendingChangeWriter, r ChangeRequest) (PendingChange, error) {
	raw, err := json.Marshal(r.Payload)
	if err != nil {
		return PendingChange{}, fmt.Errorf("encode pending change: %w", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return PendingChange{}, err
	}
	c := PendingChange{
		ID: id, Kind: r.Kind, Target: r.Target, Payload: raw, Summary: r.Summary, Status: PendingOpen,
		RequestedBy: r.By.ID, RequestedAt: r.At, ExpiresAt: r.At.Add(s.changes.pendingTTL),
	}
	if err := tx.InsertPendingChange(ctx, c); err != nil {
		return PendingChange{}, err
	}
	_, err = Append(ctx, tx, Event{Stream: "pending_change:" + id.String(), Type: EventTypeChangeRequested, At: r.At, Actor: r.By.Actor(), StreamSeq: 1},
		ChangeRequestedData{Kind: string(r.Kind), Target: r.Target, Summary: r.Summary, ExpiresAt: c.ExpiresAt.Format(time.RFC3339Nano)})
	return c, err
}

// ApplyOrRequest makes a privileged change in tx: at once, by apply, where
// p may make it alone (AppliesAtOnce); else it records req for a second
// person (RequestChange) and returns that pending change. Every privileged
// change, the core's and ledger/access's alike, decides here
// (ledger/DESIGN.md §6); AwaitingApproval turns the pending change into
// the caller's answer after the transaction.
func (s *Service) ApplyOrRequest(ctx context.Context, tx PendingChangeWriter, p Principal, req ChangeRequest, apply func() error) (*PendingChange, error) {
	if s.changes.immediate(p) {
		return nil, apply()
	}
	pc, err := s.RequestChange(ctx, tx, req)
	return &pc, err
}

// changeApplier applies an approved pending change of one kind in tx, as
// approved by p. The string result is for kinds that hand the approver a
// secret; the core's hand none and return "".
type changeApplier func(s *Service, ctx context.Context, tx Tx, p Principal, c PendingChange, now time.Time) (string, error)

// changeAppliers is the table of the core's change kinds: the file that
// owns each kind provides its applier, beside the request that records
// it. The kinds of principals, credentials and identities are
// ledger/access's, which applies them itself and the rest through
// ApplyChange.
var changeAppliers = map[ChangeKind]changeApplier{
	ChangeOrgUpdate:             (*Service).applyOrgChange,             // admin.go
	ChangeTaskClassUpdate:       (*Service).applyTaskClassChange,       // admin.go
	ChangeTaskClassPolicyUpdate: (*Service).applyTaskClassPolicyChange, // dispatchguard.go
	ChangeWriteOffThreshold:     (*Service).applyThresholdChange,       // threshold.go
	ChangeBudgetTenants:         (*Service).applyBudgetTenantsChange,   // budgettenants.go
	ChangeOrgCardAccept:         (*Service).applyOrgCardChange,         // agentcard.go
}

// ApplyChange applies c, an approved change of one of the core's kinds
// (org, task class, task-class policy, write-off threshold, budget
// tenants), as approved by p, in tx. A kind the core does not own is an
// error: the access service applies its own kinds before asking here.
func (s *Service) ApplyChange(ctx context.Context, tx Tx, p Principal, c PendingChange, now time.Time) error {
	apply, ok := changeAppliers[c.Kind]
	if !ok {
		return fmt.Errorf("pending change %s: unknown kind %q", c.ID, c.Kind)
	}
	_, err := apply(s, ctx, tx, p, c, now)
	return err
}

// DecodeChangePayload decodes the payload of c.
func DecodeChangePayload[P any](c PendingChange) (P, error) {
	var pl P
	if err := json.Unmarshal(c.Payload, &pl); err != nil {
		return pl, fmt.Errorf("decode pending change %s: %w", c.ID, err)
	}
	return pl, nil
}

// ChangeOIDCLink links an OpenID Connect identity to an existing person
// principal: whoever holds the identity signs in as that principal. The
// identity's holder confirms it (access.Service.ConfirmOIDCLink); no approval applies it.
const ChangeOIDCLink ChangeKind = "oidc_link"

// OIDCLinkPayload is an oidc_link change.
type OIDCLinkPayload struct {
	PrincipalID uuid.UUID `json:"principal_id"`
	Issuer      string    `json:"issuer"`
	Subject     string    `json:"subject"`
}

// ChangeNoIdentityProviderAccount marks a person principal as a person
// with no account at the identity provider: an OpenID Connect identity
// signing in on its own cannot then be that person.
const ChangeNoIdentityProviderAccount ChangeKind = "no_identity_provider_account"

// NoIdentityProviderAccountPayload is a no_identity_provider_account
// change.
type NoIdentityProviderAccountPayload struct {
	PrincipalID uuid.UUID `json:"principal_id"`
}

// DefaultPendingChangeTTL is how long a privileged change waits for its
// second approver.
const DefaultPendingChangeTTL = 24 * time.Hour

// changePolicy is how the core's privileged changes are asked for.
type changePolicy struct {
	dev        bool
	pendingTTL time.Duration
}

// immediate reports whether p's privileged changes take effect without a
// second approver: only the bootstrap principal's, and only under dev.
func (c changePolicy) immediate(p Principal) bool { return c.dev && p.Bootstrap }

// AppliesAtOnce reports whether p's privileged changes, the core's and
// access's alike, take effect without a second approver: only the
// bootstrap principal's, and only under dev (ledger/DESIGN.md §6).
func (s *Service) AppliesAtOnce(p Principal) bool { return s.changes.immediate(p) }
