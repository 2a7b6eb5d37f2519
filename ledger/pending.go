package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

type principalCreatePayload struct {
	Principal PrincipalRecord `json:"principal"`
	// Token is the first credential; for a person's split credential its
	// Hash is empty until the approval sets it.
	Token Token `json:"token"`
	// TokenPartHash is, for a split credential, the SHA-256 of the part
	// the requester holds: the approval makes the second part and stores
	// the joined credential's hash (joinedTokenHash). Neither part, nor
	// anything that rebuilds the token, is stored.
	TokenPartHash []byte `json:"token_part_hash,omitempty"`
}

type credentialCreatePayload struct {
	Token Token `json:"token"`
	// Rotates is the credential the new one replaces, revoked when the
	// change applies; uuid.Nil for none.
	Rotates uuid.UUID `json:"rotates,omitempty"`
}

type roleGrantPayload struct {
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

// requestChange records a pending change and its change_requested event.
func (s *Service) requestChange(ctx context.Context, tx Tx, p Principal, now time.Time, kind ChangeKind, target string, payload any, summary string) (PendingChange, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return PendingChange{}, fmt.Errorf("encode pending change: %w", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return PendingChange{}, err
	}
	c := PendingChange{
		ID: id, Kind: kind, Target: target, Payload: raw, Summary: summary, Status: PendingOpen,
		RequestedBy: p.ID, RequestedAt: now, ExpiresAt: now.Add(s.access.pendingTTL),
	}
	if err := tx.InsertPendingChange(ctx, c); err != nil {
		return PendingChange{}, err
	}
	_, err = Append(ctx, tx, Event{Stream: "pending_change:" + id.String(), Type: EventTypeChangeRequested, At: now, Actor: p.Actor(), StreamSeq: 1},
		ChangeRequestedData{Kind: string(kind), Target: target, Summary: summary, ExpiresAt: c.ExpiresAt.Format(time.RFC3339Nano)})
	return c, err
}

// RequestRoleGrant asks for an existing principal to get another role
// (and tenant, for an orchestrator); it applies when a different on-call
// principal approves. Under dev the bootstrap principal's grant applies
// at once.
func (s *Service) RequestRoleGrant(ctx context.Context, p Principal, id uuid.UUID, role Role, tenant string) (PrincipalRecord, error) {
	if err := require(p, RoleOncall); err != nil {
		return PrincipalRecord{}, err
	}
	if _, err := ParseRole(string(role)); err != nil {
		return PrincipalRecord{}, Invalid("role", "must be orchestrator, finance or oncall")
	}
	if (role == RoleOrchestrator) != (tenant != "") {
		return PrincipalRecord{}, Invalid("tenant", "is required for orchestrators and refused for other roles")
	}
	var (
		r       PrincipalRecord
		pending *PendingChange
	)
	err := s.store.InTx(ctx, func(tx Tx) error {
		pending = nil
		now := s.Now()
		var err error
		if r, err = tx.PrincipalForUpdate(ctx, id); err != nil {
			return err
		}
		if r.Disabled() {
			return Conflict("principal_disabled", "principal %s is disabled", r.ID)
		}
		if role == RoleOncall && r.Kind != KindPerson {
			return Invalid("role", "on-call principals are people")
		}
		payload := roleGrantPayload{PrincipalID: id, Role: role, Tenant: tenant}
		if s.access.immediate(p) {
			r, err = s.applyRoleGrant(ctx, tx, p.Actor(), payload, now, "")
			return err
		}
		pc, err := s.requestChange(ctx, tx, p, now, ChangeRoleGrant, "principal:"+id.String(), payload,
			fmt.Sprintf("grant %s%s to principal %q", role, tenantSuffix(tenant), r.Name))
		pending = &pc
		return err
	})
	if err == nil && pending != nil {
		err = &ApprovalRequiredError{Change: *pending}
	}
	return r, err
}

func (s *Service) applyRoleGrant(ctx context.Context, tx Tx, actor string, g roleGrantPayload, now time.Time, change string) (PrincipalRecord, error) {
	r, err := tx.PrincipalForUpdate(ctx, g.PrincipalID)
	if err != nil {
		return PrincipalRecord{}, err
	}
	if r.Disabled() {
		return PrincipalRecord{}, Conflict("principal_disabled", "principal %s is disabled", r.ID)
	}
	from := r.Role
	r.Role, r.Tenant = g.Role, g.Tenant
	if err := tx.UpdatePrincipal(ctx, r); err != nil {
		return PrincipalRecord{}, err
	}
	data := PrincipalRoleGrantedData{RoleGranted: string(g.Role), PreviousRole: string(from), Tenant: g.Tenant, PendingChangeID: change}
	_, err = Append(ctx, tx, Event{Stream: "principal:" + r.ID.String(), Type: EventTypePrincipalRoleGranted, At: now, Actor: actor}, data)
	return r, err
}

// ListPendingChanges lists pending changes (newest first), to on-call and
// finance; status "" lists every status.
func (s *Service) ListPendingChanges(ctx context.Context, p Principal, status PendingStatus) ([]PendingChange, error) {
	if err := require(p, RoleOncall, RoleFinance); err != nil {
		return nil, err
	}
	return s.store.ListPendingChanges(ctx, status)
}

// GetPendingChange returns a pending change to on-call and finance.
func (s *Service) GetPendingChange(ctx context.Context, p Principal, id uuid.UUID) (PendingChange, error) {
	if err := require(p, RoleOncall, RoleFinance); err != nil {
		return PendingChange{}, err
	}
	return s.store.PendingChange(ctx, id)
}

// ApprovePendingChange applies a pending change on behalf of a second
// on-call principal, in one transaction with its change_approved event.
// A change whose requester is disabled is refused (requester_disabled).
// The requesting person may not approve it (ErrSelfApproval), whatever
// credential, name or principal of theirs it uses (Principal.SamePerson).
// A change that is not pending is a conflict
// (change_not_pending); one past its expiry is expired and refused
// (change_expired). A change that no longer applies (the principal name
// was taken meanwhile) is refused with the reason and the error returned.
func (s *Service) ApprovePendingChange(ctx context.Context, p Principal, id uuid.UUID) (PendingChange, error) {
	return s.decide(ctx, p, id, true, "")
}

// RefusePendingChange refuses a pending change; any on-call principal may,
// including the one who asked (to withdraw it).
func (s *Service) RefusePendingChange(ctx context.Context, p Principal, id uuid.UUID, reason string) (PendingChange, error) {
	if strings.TrimSpace(reason) == "" || len(reason) > MaxTextLen {
		return PendingChange{}, Invalid("reason", "is required, at most %d characters", MaxTextLen)
	}
	return s.decide(ctx, p, id, false, reason)
}

func (s *Service) decide(ctx context.Context, p Principal, id uuid.UUID, approve bool, reason string) (PendingChange, error) {
	if err := require(p, RoleOncall); err != nil {
		return PendingChange{}, err
	}
	var (
		c        PendingChange
		decision error
		asker    uuid.UUID
	)
	if approve {
		// Who asked never changes: read it first, so the requester's row
		// is locked before the change's, in the order DisablePrincipal
		// takes them.
		pre, err := s.store.PendingChange(ctx, id)
		if err != nil {
			return PendingChange{}, err
		}
		asker = pre.RequestedBy
	}
	err := s.store.InTx(ctx, func(tx Tx) error {
		decision = nil
		now := s.Now()
		var requester PrincipalRecord
		if approve {
			var err error
			if requester, err = tx.PrincipalForUpdate(ctx, asker); err != nil {
				return err
			}
		}
		var err error
		if c, err = tx.PendingChangeForUpdate(ctx, id); err != nil {
			return err
		}
		if c.Status != PendingOpen {
			return Conflict("change_not_pending", "change %s is %s", c.ID, c.Status)
		}
		if !now.Before(c.ExpiresAt) {
			decision = Conflict("change_expired", "change %s expired at %s", c.ID, c.ExpiresAt.Format(time.RFC3339))
			return s.closeChange(ctx, tx, &c, PendingExpired, uuid.Nil, "system:pending_changes", "not decided in time", now, EventTypeChangeExpired)
		}
		if !approve {
			return s.closeChange(ctx, tx, &c, PendingRefused, p.ID, p.Actor(), reason, now, EventTypeChangeRefused)
		}
		if err := s.checkApprover(ctx, tx, p, c); err != nil {
			return err
		}
		if requester.Disabled() {
			// Disabling withdraws a principal's open changes; this guards
			// any that a disable left open (one committed by a replica
			// that did not withdraw them): a disabled principal's request
			// never takes effect.
			decision = Conflict("requester_disabled", "change %s was asked for by principal %s, disabled since", c.ID, requester.ID)
			return s.closeChange(ctx, tx, &c, PendingRefused, p.ID, p.Actor(), "cannot apply: the requester is disabled", now, EventTypeChangeRefused)
		}
		part, err := s.applyChange(ctx, tx, p, c, now)
		if err != nil {
			var conflict *ConflictError
			var invalid *ValidationError
			if errors.As(err, &conflict) || errors.As(err, &invalid) || errors.Is(err, ErrNotFound) {
				// The change can no longer apply: it is refused, for good.
				decision = err
				return s.closeChange(ctx, tx, &c, PendingRefused, p.ID, p.Actor(), "cannot apply: "+err.Error(), now, EventTypeChangeRefused)
			}
			return err
		}
		if err := s.closeChange(ctx, tx, &c, PendingApplied, p.ID, p.Actor(), "", now, EventTypeChangeApproved); err != nil {
			return err
		}
		c.IssuedTokenPart = part
		return nil
	})
	// An applied change may have changed who is the same person as whom
	// (oidc_link): cached principals are read again.
	s.tokens.flush()
	if err != nil {
		return PendingChange{}, err
	}
	return c, decision
}

// checkApprover refuses p as the second person of c: a link, which its
// identity confirms instead; anyone the two-person rule refuses
// (CheckSecondPerson).
func (s *Service) checkApprover(ctx context.Context, tx Tx, p Principal, c PendingChange) error {
	if c.Kind == ChangeOIDCLink {
		// Whoever holds the identity confirms it (ConfirmOIDCLink); no
		// approver, the link's target included, speaks for them.
		return Conflict("oidc_link_needs_identity", "change %s is confirmed by the identity it links: its holder signs in to the console through OpenID Connect and confirms it there", c.ID)
	}
	return CheckSecondPerson(ctx, tx, s.access.dev, p, c.RequestedBy, SubjectChange)
}

// applyChange applies c as approved by p, in tx. It returns the second
// part of the split credential it issued, if any.
func (s *Service) applyChange(ctx context.Context, tx Tx, p Principal, c PendingChange, now time.Time) (string, error) {
	decode := func(v any) error {
		if err := json.Unmarshal(c.Payload, v); err != nil {
			return fmt.Errorf("decode pending change %s: %w", c.ID, err)
		}
		return nil
	}
	switch c.Kind {
	case ChangePrincipalCreate:
		var pl principalCreatePayload
		if err := decode(&pl); err != nil {
			return "", err
		}
		return s.applyPrincipalCreate(ctx, tx, p, pl, now, c.ID.String())
	case ChangeCredentialCreate:
		var pl credentialCreatePayload
		if err := decode(&pl); err != nil {
			return "", err
		}
		return "", s.applyCredentialCreate(ctx, tx, p, pl, now, c.ID.String())
	case ChangeRoleGrant:
		var pl roleGrantPayload
		if err := decode(&pl); err != nil {
			return "", err
		}
		_, err := s.applyRoleGrant(ctx, tx, p.Actor(), pl, now, c.ID.String())
		return "", err
	case ChangeOrgUpdate:
		var pl orgUpdatePayload
		if err := decode(&pl); err != nil {
			return "", err
		}
		if err := s.checkOrgInput(pl.ID, pl.Input); err != nil {
			return "", err
		}
		if err := checkOrgUnchanged(ctx, tx, pl.ID, pl.Base); err != nil {
			return "", err
		}
		_, _, err := s.applyOrg(ctx, tx, pl.ID, pl.Input, applied{actor: p.Actor(), at: now, change: c.ID.String()})
		return "", err
	case ChangeTaskClassUpdate:
		var pl taskClassPayload
		if err := decode(&pl); err != nil {
			return "", err
		}
		return "", s.applyTaskClass(ctx, tx, p.Actor(), pl.Class, now, c.ID.String())
	case ChangeTaskClassPolicyUpdate:
		var pl taskClassPolicyPayload
		if err := decode(&pl); err != nil {
			return "", err
		}
		return "", s.applyTaskClassPolicy(ctx, tx, p.Actor(), pl.Policy, now, c.ID.String())
	case ChangeWriteOffThreshold:
		return "", s.applyThresholdChange(ctx, tx, p, c, now)
	case ChangeBudgetTenants:
		return "", s.applyBudgetTenantsChange(ctx, tx, p, c, now)
	case ChangeOIDCLink:
		var pl oidcLinkPayload
		if err := decode(&pl); err != nil {
			return "", err
		}
		_, err := s.applyOIDCLink(ctx, tx, p, pl, now, c.ID.String())
		return "", err
	case ChangeNoIdentityProviderAccount:
		var pl noIdentityProviderAccountPayload
		if err := decode(&pl); err != nil {
			return "", err
		}
		return "", s.applyNoIdentityProviderAccount(ctx, tx, p, pl, now, c.ID.String())
	}
	return "", fmt.Errorf("pending change %s: unknown kind %q", c.ID, c.Kind)
}

// applyPrincipalCreate creates an approved principal_create change's
// principal with its first credential. A split credential's second part is
// made here, returned for the approver and never stored: only the joined
// credential's hash is.
func (s *Service) applyPrincipalCreate(ctx context.Context, tx Tx, p Principal, pl principalCreatePayload, now time.Time, change string) (string, error) {
	if _, err := tx.PrincipalByNameForUpdate(ctx, NameKey(pl.Principal.Name)); err == nil {
		return "", Conflict("principal_name_taken", "a principal named %q exists", pl.Principal.Name)
	} else if !errors.Is(err, ErrNotFound) {
		return "", err
	}
	if pl.Principal.Kind == KindPerson && len(pl.TokenPartHash) == 0 {
		// Asked for before credentials were split: its requester was given
		// the whole token, so it never takes effect.
		return "", Conflict("credential_not_split", "the credential of person %q was given whole to its requester; ask again", pl.Principal.Name)
	}
	part := ""
	if len(pl.TokenPartHash) > 0 {
		part = newTokenPart(true)
		pl.Token.Hash = joinedTokenHash(pl.TokenPartHash, part)
	}
	return part, s.createPrincipal(ctx, tx, p.Actor(), pl.Principal, pl.Token, now, change)
}

func (s *Service) closeChange(ctx context.Context, tx Tx, c *PendingChange, st PendingStatus, by uuid.UUID, actor, reason string, now time.Time, typ EventType) error {
	c.Status, c.DecidedBy, c.DecidedAt, c.DecisionReason = st, by, now, reason
	if err := tx.DecidePendingChange(ctx, *c); err != nil {
		return err
	}
	data, err := changeDecided(typ, ChangeDecision{Kind: string(c.Kind), Target: c.Target, Status: string(st), Reason: reason})
	if err != nil {
		return err
	}
	_, err = Append(ctx, tx, Event{Stream: "pending_change:" + c.ID.String(), Type: typ, At: now, Actor: actor}, data)
	return err
}

// ExpirePendingChanges expires every pending change past its expiry, one
// change_expired event each, and returns how many. The sweep calls it; it
// is safe on every replica at once.
func (s *Service) ExpirePendingChanges(ctx context.Context) (int, error) {
	n := 0
	err := s.store.InTx(ctx, func(tx Tx) error {
		n = 0
		now := s.Now()
		due, err := tx.ExpiredPendingChangesForUpdate(ctx, now)
		if err != nil {
			return err
		}
		for i := range due {
			if err := s.closeChange(ctx, tx, &due[i], PendingExpired, uuid.Nil, "system:pending_changes", "not decided in time", now, EventTypeChangeExpired); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}
