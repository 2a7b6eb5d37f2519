package access

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// RequestRoleGrant asks for an existing principal to get another role
// (and tenant, for an orchestrator); it applies when a different on-call
// principal approves. Under dev the bootstrap principal's grant applies
// at once.
func (s *Service) RequestRoleGrant(ctx context.Context, p ledger.Principal, id uuid.UUID, role ledger.Role, tenant string) (ledger.PrincipalRecord, error) {
	if err := ledger.Authorize(p, ledger.ActionAdminister); err != nil {
		return ledger.PrincipalRecord{}, err
	}
	if _, err := ledger.ParseRole(string(role)); err != nil {
		return ledger.PrincipalRecord{}, ledger.Invalid("role", "must be orchestrator, finance or oncall")
	}
	if (role == ledger.RoleOrchestrator) != (tenant != "") {
		return ledger.PrincipalRecord{}, ledger.Invalid("tenant", "is required for orchestrators and refused for other roles")
	}
	r, pending, err := s.requestPrincipalChange(ctx, p, func(tx Tx, now time.Time) (principalRequest, error) {
		r, err := tx.PrincipalForUpdate(ctx, id)
		if err != nil {
			return principalRequest{}, err
		}
		if r.Disabled() {
			return principalRequest{}, ledger.Conflict("principal_disabled", "principal %s is disabled", r.ID)
		}
		if role == ledger.RoleOncall && r.Kind != ledger.KindPerson {
			return principalRequest{}, ledger.Invalid("role", "on-call principals are people")
		}
		payload := ledger.RoleGrantPayload{PrincipalID: id, Role: role, Tenant: tenant}
		req := ledger.ChangeRequest{By: p, At: now, Kind: ledger.ChangeRoleGrant, Target: "principal:" + id.String(), Payload: payload,
			Summary: fmt.Sprintf("grant %s%s to principal %q", role, tenantSuffix(tenant), r.Name)}
		return principalRequest{principal: r, req: req, apply: func() (ledger.PrincipalRecord, error) {
			return s.applyRoleGrant(ctx, tx, p.Actor(), payload, now, "")
		}}, nil
	})
	if err == nil && pending != nil {
		err = &ledger.ApprovalRequiredError{Change: *pending}
	}
	return r, err
}

func (s *Service) applyRoleGrant(ctx context.Context, tx Tx, actor string, g ledger.RoleGrantPayload, now time.Time, change string) (ledger.PrincipalRecord, error) {
	r, err := tx.PrincipalForUpdate(ctx, g.PrincipalID)
	if err != nil {
		return ledger.PrincipalRecord{}, err
	}
	if r.Disabled() {
		return ledger.PrincipalRecord{}, ledger.Conflict("principal_disabled", "principal %s is disabled", r.ID)
	}
	from := r.Role
	r.Role, r.Tenant = g.Role, g.Tenant
	if err := tx.UpdatePrincipal(ctx, r); err != nil {
		return ledger.PrincipalRecord{}, err
	}
	data := ledger.PrincipalRoleGrantedData{RoleGranted: string(g.Role), PreviousRole: string(from), Tenant: g.Tenant, PendingChangeID: change}
	_, err = ledger.Append(ctx, tx, ledger.Event{Stream: "principal:" + r.ID.String(), Type: ledger.EventTypePrincipalRoleGranted, At: now, Actor: actor}, data)
	return r, err
}

// ListPendingChanges lists pending changes (newest first), to on-call and
// finance; status "" lists every status.
func (s *Service) ListPendingChanges(ctx context.Context, p ledger.Principal, status ledger.PendingStatus) ([]ledger.PendingChange, error) {
	if err := ledger.Authorize(p, ledger.ActionReadConfiguration); err != nil {
		return nil, err
	}
	return s.store.ListPendingChanges(ctx, status)
}

// GetPendingChange returns a pending change to on-call and finance.
func (s *Service) GetPendingChange(ctx context.Context, p ledger.Principal, id uuid.UUID) (ledger.PendingChange, error) {
	if err := ledger.Authorize(p, ledger.ActionReadConfiguration); err != nil {
		return ledger.PendingChange{}, err
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
func (s *Service) ApprovePendingChange(ctx context.Context, p ledger.Principal, id uuid.UUID) (ledger.PendingChange, error) {
	return s.decide(ctx, p, id, true, "")
}

// RefusePendingChange refuses a pending change; any on-call principal may,
// including the one who asked (to withdraw it).
func (s *Service) RefusePendingChange(ctx context.Context, p ledger.Principal, id uuid.UUID, reason string) (ledger.PendingChange, error) {
	if strings.TrimSpace(reason) == "" || len(reason) > ledger.MaxTextLen {
		return ledger.PendingChange{}, ledger.Invalid("reason", "is required, at most %d characters", ledger.MaxTextLen)
	}
	return s.decide(ctx, p, id, false, reason)
}

func (s *Service) decide(ctx context.Context, p ledger.Principal, id uuid.UUID, approve bool, reason string) (ledger.PendingChange, error) {
	if err := ledger.Authorize(p, ledger.ActionAdminister); err != nil {
		return ledger.PendingChange{}, err
	}
	var (
		c        ledger.PendingChange
		decision error
		asker    uuid.UUID
	)
	if approve {
		// Who asked never changes: read it first, so the requester's row
		// is locked before the change's, in the order DisablePrincipal
		// takes them.
		pre, err := s.store.PendingChange(ctx, id)
		if err != nil {
			return ledger.PendingChange{}, err
		}
		asker = pre.RequestedBy
	}
	err := s.store.InTx(ctx, func(tx Tx) error {
		decision = nil
		now := s.Now()
		var requester ledger.PrincipalRecord
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
		if c.Status != ledger.PendingOpen {
			return ledger.Conflict("change_not_pending", "change %s is %s", c.ID, c.Status)
		}
		if !now.Before(c.ExpiresAt) {
			decision = ledger.Conflict("change_expired", "change %s expired at %s", c.ID, c.ExpiresAt.Format(time.RFC3339))
			return s.closeChange(ctx, tx, &c, lapse(now))
		}
		if !approve {
			return s.closeChange(ctx, tx, &c, refusal(p, reason, now))
		}
		if err := s.checkApprover(ctx, tx, p, c); err != nil {
			return err
		}
		if requester.Disabled() {
			// Disabling withdraws a principal's open changes; this guards
			// any that a disable left open (one committed by a replica
			// that did not withdraw them): a disabled principal's request
			// never takes effect.
			decision = ledger.Conflict("requester_disabled", "change %s was asked for by principal %s, disabled since", c.ID, requester.ID)
			return s.closeChange(ctx, tx, &c, refusal(p, "cannot apply: the requester is disabled", now))
		}
		part, err := s.applyAccessChange(ctx, tx, p, c, now)
		if err != nil {
			var conflict *ledger.ConflictError
			var invalid *ledger.ValidationError
			if errors.As(err, &conflict) || errors.As(err, &invalid) || errors.Is(err, ledger.ErrNotFound) {
				// The change can no longer apply: it is refused, for good.
				decision = err
				return s.closeChange(ctx, tx, &c, refusal(p, "cannot apply: "+err.Error(), now))
			}
			return err
		}
		if err := s.closeChange(ctx, tx, &c, approval(p, now)); err != nil {
			return err
		}
		c.IssuedTokenPart = part
		return nil
	})
	// An applied change may have changed who is the same person as whom
	// (oidc_link): cached principals are read again.
	s.tokens.flush()
	if err != nil {
		return ledger.PendingChange{}, err
	}
	return c, decision
}

// checkApprover refuses p as the second person of c: a link, which its
// identity confirms instead; anyone the two-person rule refuses
// (CheckSecondPerson).
func (s *Service) checkApprover(ctx context.Context, tx Tx, p ledger.Principal, c ledger.PendingChange) error {
	if c.Kind == ledger.ChangeOIDCLink {
		// Whoever holds the identity confirms it (ConfirmOIDCLink); no
		// approver, the link's target included, speaks for them.
		return ledger.Conflict("oidc_link_needs_identity", "change %s is confirmed by the identity it links: its holder signs in to the console through OpenID Connect and confirms it there", c.ID)
	}
	return CheckSecondPerson(ctx, tx, s.policy.dev, p, c.RequestedBy, SubjectChange)
}

// applyPrincipalCreateChange applies an approved principal_create change.
func (s *Service) applyPrincipalCreateChange(ctx context.Context, tx Tx, p ledger.Principal, c ledger.PendingChange, now time.Time) (string, error) {
	pl, err := ledger.DecodeChangePayload[ledger.PrincipalCreatePayload](c)
	if err != nil {
		return "", err
	}
	return s.applyPrincipalCreate(ctx, tx, p, pl, now, c.ID.String())
}

// applyRoleGrantChange applies an approved role_grant change.
func (s *Service) applyRoleGrantChange(ctx context.Context, tx Tx, p ledger.Principal, c ledger.PendingChange, now time.Time) (string, error) {
	pl, err := ledger.DecodeChangePayload[ledger.RoleGrantPayload](c)
	if err != nil {
		return "", err
	}
	_, err = s.applyRoleGrant(ctx, tx, p.Actor(), pl, now, c.ID.String())
	return "", err
}

// applyPrincipalCreate creates an approved principal_create change's
// principal with its first credential. A split credential's second part is
// made here, returned for the approver and never stored: only the joined
// credential's hash is.
func (s *Service) applyPrincipalCreate(ctx context.Context, tx Tx, p ledger.Principal, pl ledger.PrincipalCreatePayload, now time.Time, change string) (string, error) {
	if _, err := tx.PrincipalByNameForUpdate(ctx, NameKey(pl.Principal.Name)); err == nil {
		return "", ledger.Conflict("principal_name_taken", "a principal named %q exists", pl.Principal.Name)
	} else if !errors.Is(err, ledger.ErrNotFound) {
		return "", err
	}
	if pl.Principal.Kind == ledger.KindPerson && len(pl.TokenPartHash) == 0 {
		// Asked for before credentials were split: its requester was given
		// the whole token, so it never takes effect.
		return "", ledger.Conflict("credential_not_split", "the credential of person %q was given whole to its requester; ask again", pl.Principal.Name)
	}
	part := ""
	if len(pl.TokenPartHash) > 0 {
		part = newTokenPart(true)
		pl.Token.Hash = joinedTokenHash(pl.TokenPartHash, part)
	}
	return part, s.createPrincipal(ctx, tx, stamp{actor: p.Actor(), at: now, change: change}, pl.Principal, pl.Token)
}

// closing is how a pending change ends: its status, who decided (uuid.Nil
// and a system actor for an expiry), why, when, and the event that
// records it.
type closing struct {
	status ledger.PendingStatus
	by     uuid.UUID
	actor  string
	reason string
	at     time.Time
	event  ledger.EventType
}

// lapse closes a change not decided in time.
func lapse(now time.Time) closing {
	return closing{status: ledger.PendingExpired, actor: "system:pending_changes", reason: "not decided in time", at: now, event: ledger.EventTypeChangeExpired}
}

// refusal closes a change p refused (or that could not apply), for reason.
func refusal(p ledger.Principal, reason string, now time.Time) closing {
	return closing{status: ledger.PendingRefused, by: p.ID, actor: p.Actor(), reason: reason, at: now, event: ledger.EventTypeChangeRefused}
}

// approval closes a change p approved and that applied.
func approval(p ledger.Principal, now time.Time) closing {
	return closing{status: ledger.PendingApplied, by: p.ID, actor: p.Actor(), at: now, event: ledger.EventTypeChangeApproved}
}

// closeChange records c's end as how says, with its event.
func (s *Service) closeChange(ctx context.Context, tx Tx, c *ledger.PendingChange, how closing) error {
	c.Status, c.DecidedBy, c.DecidedAt, c.DecisionReason = how.status, how.by, how.at, how.reason
	if err := tx.DecidePendingChange(ctx, *c); err != nil {
		return err
	}
	data, err := ledger.ChangeDecidedData(how.event, ledger.ChangeDecision{Kind: string(c.Kind), Target: c.Target, Status: string(how.status), Reason: how.reason})
	if err != nil {
		return err
	}
	_, err = ledger.Append(ctx, tx, ledger.Event{Stream: "pending_change:" + c.ID.String(), Type: how.event, At: how.at, Actor: how.actor}, data)
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
			if err := s.closeChange(ctx, tx, &due[i], lapse(now)); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// accessApplier applies an approved pending change of one of the access
// kinds in tx, as approved by p. It returns the second part of a split
// credential when the change issues one (principal_create), else "".
type accessApplier func(s *Service, ctx context.Context, tx Tx, p ledger.Principal, c ledger.PendingChange, now time.Time) (string, error)

// accessAppliers is the table of the change kinds of principals,
// credentials and identities: the file that owns each kind provides its
// applier, beside the request that records it. Every other kind is the
// core's (ledger.Service.ApplyChange).
var accessAppliers = map[ledger.ChangeKind]accessApplier{
	ledger.ChangePrincipalCreate:           (*Service).applyPrincipalCreateChange,           // pending.go
	ledger.ChangeRoleGrant:                 (*Service).applyRoleGrantChange,                 // pending.go
	ledger.ChangeCredentialCreate:          (*Service).applyCredentialCreateChange,          // principals.go
	ledger.ChangeOIDCLink:                  (*Service).applyOIDCLinkChange,                  // oidc.go
	ledger.ChangeNoIdentityProviderAccount: (*Service).applyNoIdentityProviderAccountChange, // oidc.go
}

// applyAccessChange applies c as approved by p, in tx: through
// accessAppliers, or the core for its own kinds. It returns the second
// part of the split credential it issued, if any.
func (s *Service) applyAccessChange(ctx context.Context, tx Tx, p ledger.Principal, c ledger.PendingChange, now time.Time) (string, error) {
	if apply, ok := accessAppliers[c.Kind]; ok {
		return apply(s, ctx, tx, p, c, now)
	}
	return "", s.ledger.ApplyChange(ctx, tx.Ledger(), p, c, now)
}
