package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// oidcActor is the actor of what the identity provider does on its own
// authority: recording a principal at a first sign-in, or setting its role.
const oidcActor = "system:oidc"

// OIDCSignIn is a verified ID token, as the console read it.
type OIDCSignIn struct {
	Issuer  string
	Subject string
	// Name is the display name of a principal recorded at a first sign-in.
	Name string
	// Roles are the roles the identity provider's role map gives the
	// person (finance, on-call); at least one.
	Roles []ledger.Role
}

// ErrPrincipalDisabled is returned by SignInOIDC when the identity's
// principal is disabled: it cannot sign in.
var ErrPrincipalDisabled = errors.New("the principal is disabled")

// ErrRoleNotHeld is returned by SignInOIDC when the identity is linked to
// a principal whose role the identity provider does not give the person:
// a session has neither more than the principal holds nor more than the
// identity provider grants.
var ErrRoleNotHeld = errors.New("the identity provider does not give the person the role of the principal it is linked to")

// SignInOIDC resolves a verified OpenID Connect sign-in to the principal
// its console session acts as. An identity seen for the first time gets
// a person principal of its own (OIDCPrincipalID, created by the identity
// provider, with a principal_created event); its role follows the
// identity provider, on-call over finance, and is updated at each
// sign-in. An identity linked to another principal signs in as that one,
// with its role, which the identity provider must also give the person
// (else ErrRoleNotHeld). A disabled principal cannot sign in
// (ErrPrincipalDisabled). Concurrent first sign-ins of one identity
// record one principal.
func (s *Service) SignInOIDC(ctx context.Context, in OIDCSignIn) (ledger.Principal, error) {
	if in.Issuer == "" || in.Subject == "" || len(in.Subject) > 255 || len(in.Issuer) > 2048 {
		return ledger.Principal{}, ledger.Invalid("subject", "the ID token's issuer and subject are required")
	}
	idpRole := ledger.RoleFinance
	switch {
	case slices.Contains(in.Roles, ledger.RoleOncall):
		idpRole = ledger.RoleOncall
	case !slices.Contains(in.Roles, ledger.RoleFinance):
		return ledger.Principal{}, ledger.Invalid("roles", "the identity provider gives no console role")
	}
	var out ledger.Principal
	err := s.store.InTx(ctx, func(tx Tx) error {
		now := s.Now()
		ident, err := tx.OIDCIdentityForUpdate(ctx, in.Issuer, in.Subject)
		if errors.Is(err, ledger.ErrNotFound) {
			if ident, err = s.recordOIDC(ctx, tx, in, idpRole, now); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		r, err := tx.PrincipalForUpdate(ctx, ident.PrincipalID)
		if err != nil {
			return err
		}
		if r.Disabled() {
			return ErrPrincipalDisabled
		}
		role := r.Role
		switch {
		case ident.PrincipalID == ident.RecordedPrincipalID && r.Role != idpRole:
			// The identity's own principal: the identity provider is the
			// authority for its role.
			from := r.Role
			r.Role, r.Tenant = idpRole, ""
			if err := tx.UpdatePrincipal(ctx, r); err != nil {
				return err
			}
			if _, err := ledger.Append(ctx, tx, ledger.Event{Stream: "principal:" + r.ID.String(), Type: ledger.EventTypePrincipalRoleGranted, At: now, Actor: oidcActor},
				ledger.PrincipalRoleGrantedData{RoleGranted: string(idpRole), PreviousRole: string(from), Tenant: "", Issuer: in.Issuer, Subject: in.Subject}); err != nil {
				return err
			}
			role = idpRole
		case ident.PrincipalID != ident.RecordedPrincipalID && !slices.Contains(in.Roles, r.Role):
			return ErrRoleNotHeld
		}
		aliases, err := tx.PrincipalAliases(ctx, r.ID)
		if err != nil {
			return err
		}
		out = ledger.Principal{ID: r.ID, TokenID: r.ID, Name: r.Name, Kind: r.Kind, Role: role, Aliases: aliases}
		return nil
	})
	if err != nil {
		return ledger.Principal{}, err
	}
	return out, nil
}

// recordOIDC records the principal of an identity at its first sign-in,
// and the identity; when a concurrent first sign-in recorded them first,
// it returns the identity that one recorded.
func (s *Service) recordOIDC(ctx context.Context, tx Tx, in OIDCSignIn, role ledger.Role, now time.Time) (ledger.OIDCIdentity, error) {
	id := ledger.OIDCPrincipalID(in.Issuer, in.Subject)
	name := strings.TrimSpace(in.Name)
	if name == "" {
		name = in.Subject
	}
	r := ledger.PrincipalRecord{ID: id, Kind: ledger.KindPerson, Name: name, Role: role, CreatedAt: now}
	created, err := tx.InsertPrincipalIfAbsent(ctx, r)
	if err != nil {
		return ledger.OIDCIdentity{}, err
	}
	if created {
		if _, err := ledger.Append(ctx, tx, ledger.Event{Stream: "principal:" + id.String(), Type: ledger.EventTypePrincipalCreated, At: now, Actor: oidcActor, StreamSeq: 1},
			ledger.PrincipalCreatedData{Kind: string(r.Kind), Name: r.Name, Role: string(r.Role), Tenant: "", Bootstrap: false,
				CreatedBy: "identity_provider", Issuer: in.Issuer, Subject: in.Subject}); err != nil {
			return ledger.OIDCIdentity{}, err
		}
	}
	ident := ledger.OIDCIdentity{Issuer: in.Issuer, Subject: in.Subject, PrincipalID: id, RecordedPrincipalID: id, LinkedAt: now}
	if _, err := tx.InsertOIDCIdentity(ctx, ident); err != nil {
		return ledger.OIDCIdentity{}, err
	}
	// Inserted now or by the concurrent sign-in that won: read it locked.
	return tx.OIDCIdentityForUpdate(ctx, in.Issuer, in.Subject)
}

// RequestOIDCLink asks for the OpenID Connect identity (issuer, subject)
// to sign in as the existing person principal id from now on; it applies
// when the identity's holder confirms it from a console session of that
// identity (ConfirmOIDCLink), never on an approval (under dev, the
// bootstrap principal's applies at once). If the identity has a principal of its
// own, recorded at its first sign-in, that principal becomes the same
// person as id for four-eyes. The principal must be an enabled person,
// not the bootstrap principal, and not itself linked to another; the
// identity must not be linked to another principal already.
func (s *Service) RequestOIDCLink(ctx context.Context, p ledger.Principal, id uuid.UUID, issuer, subject string) (ledger.PrincipalRecord, error) {
	if err := ledger.Authorize(p, ledger.ActionAdminister); err != nil {
		return ledger.PrincipalRecord{}, err
	}
	pl := ledger.OIDCLinkPayload{PrincipalID: id, Issuer: strings.TrimSpace(issuer), Subject: strings.TrimSpace(subject)}
	if u, err := url.Parse(pl.Issuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(pl.Issuer) > 2048 {
		return ledger.PrincipalRecord{}, ledger.Invalid("issuer", "must be the identity provider's issuer URL, exactly as its ID tokens' iss claim")
	}
	if pl.Subject == "" || len(pl.Subject) > 255 {
		return ledger.PrincipalRecord{}, ledger.Invalid("subject", "is required, at most 255 characters: the ID tokens' sub claim")
	}
	r, pending, err := s.requestPrincipalChange(ctx, p, func(tx Tx, now time.Time) (principalRequest, error) {
		r, err := s.checkOIDCLink(ctx, tx, pl)
		if err != nil {
			return principalRequest{}, err
		}
		req := ledger.ChangeRequest{By: p, At: now, Kind: ledger.ChangeOIDCLink, Target: "principal:" + id.String(), Payload: pl,
			Summary: fmt.Sprintf("link OpenID Connect identity %q of %s to principal %q", pl.Subject, pl.Issuer, r.Name)}
		return principalRequest{principal: r, req: req, apply: func() (ledger.PrincipalRecord, error) {
			return s.applyOIDCLink(ctx, tx, p, pl, now, "")
		}}, nil
	})
	s.tokens.flush()
	if err != nil {
		return ledger.PrincipalRecord{}, err
	}
	return s.principalAfterChange(ctx, id, r, pending)
}

// lockPerson locks principal id in tx for a change to how a person signs
// in, and checks it is an enabled person, not the bootstrap principal.
// machine ends the conflict for a machine ("principal %q is a machine"),
// bootstrap the one for the bootstrap principal.
func lockPerson(ctx context.Context, tx Tx, id uuid.UUID, machine, bootstrap string) (ledger.PrincipalRecord, error) {
	r, err := tx.PrincipalForUpdate(ctx, id)
	if err != nil {
		return ledger.PrincipalRecord{}, err
	}
	switch {
	case r.Disabled():
		return ledger.PrincipalRecord{}, ledger.Conflict("principal_disabled", "principal %s is disabled", r.ID)
	case r.Kind != ledger.KindPerson:
		return ledger.PrincipalRecord{}, ledger.Conflict("principal_not_person", "principal %q is a machine%s", r.Name, machine)
	case r.Bootstrap:
		return ledger.PrincipalRecord{}, ledger.Conflict("principal_bootstrap", "the bootstrap principal %s", bootstrap)
	}
	return r, nil
}

// checkOIDCLink checks, in tx, that pl can apply now, and returns the
// principal locked.
func (s *Service) checkOIDCLink(ctx context.Context, tx Tx, pl ledger.OIDCLinkPayload) (ledger.PrincipalRecord, error) {
	r, err := lockPerson(ctx, tx, pl.PrincipalID, "; only people sign in", "cannot be linked to an identity")
	if err != nil {
		return ledger.PrincipalRecord{}, err
	}
	person, err := tx.PrincipalPerson(ctx, r.ID)
	if err != nil {
		return ledger.PrincipalRecord{}, err
	}
	if person != r.ID {
		return ledger.PrincipalRecord{}, ledger.Conflict("principal_linked", "principal %q is the same person as principal %s; link the identity to that one", r.Name, person)
	}
	ident, err := tx.OIDCIdentityForUpdate(ctx, pl.Issuer, pl.Subject)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return r, nil
	case err != nil:
		return ledger.PrincipalRecord{}, err
	case ident.PrincipalID == r.ID:
		return ledger.PrincipalRecord{}, ledger.Conflict("oidc_identity_linked", "the identity already signs in as principal %q", r.Name)
	case ident.PrincipalID != ident.RecordedPrincipalID:
		return ledger.PrincipalRecord{}, ledger.Conflict("oidc_identity_linked", "the identity is linked to another principal, %s", ident.PrincipalID)
	}
	return r, nil
}

// applyOIDCLink links pl's identity to its principal, as p (the
// identity's own principal, confirming; under dev, the bootstrap
// principal asking) made it apply: the identity is recorded, or, if it had a
// principal of its own, it and every identity linked to that principal
// sign in as pl's principal from now on. One principal_oidc_linked event
// records it on the principal's stream.
func (s *Service) applyOIDCLink(ctx context.Context, tx Tx, p ledger.Principal, pl ledger.OIDCLinkPayload, now time.Time, change string) (ledger.PrincipalRecord, error) {
	r, err := s.checkOIDCLink(ctx, tx, pl)
	if err != nil {
		return ledger.PrincipalRecord{}, err
	}
	data := ledger.PrincipalOIDCLinkedData{Issuer: pl.Issuer, Subject: pl.Subject, PendingChangeID: change}
	ident, err := tx.OIDCIdentityForUpdate(ctx, pl.Issuer, pl.Subject)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		if _, err := tx.InsertOIDCIdentity(ctx, ledger.OIDCIdentity{Issuer: pl.Issuer, Subject: pl.Subject, PrincipalID: r.ID, LinkedBy: p.ID, LinkedAt: now}); err != nil {
			return ledger.PrincipalRecord{}, err
		}
	case err != nil:
		return ledger.PrincipalRecord{}, err
	default:
		if err := tx.RelinkOIDCIdentities(ctx, ident.PrincipalID, r.ID, p.ID, now); err != nil {
			return ledger.PrincipalRecord{}, err
		}
		data.SamePerson = ident.PrincipalID.String()
	}
	if _, err := ledger.Append(ctx, tx, ledger.Event{Stream: "principal:" + r.ID.String(), Type: ledger.EventTypePrincipalOIDCLinked, At: now, Actor: p.Actor()}, data); err != nil {
		return ledger.PrincipalRecord{}, err
	}
	return r, nil
}

// ConfirmOIDCLink applies a pending oidc_link change on the word of the
// identity it links: p must be a console session signed in through OpenID
// Connect as that identity, on its own principal (the identity is not
// linked yet). Only this applies a link outside dev; the change's approval
// by any principal, its target's included, is refused
// (oidc_link_needs_identity), so the link always has the word of whoever
// holds the identity. The identity's principal must not be the same person
// as the requester, nor, unless the requester is the link's target itself,
// an unaccounted pair with it (CheckSecondPerson): else one human
// holding a token principal and an identity could link the identity to
// another person's principal and act as both. The confirming session ends
// with the link (its principal is no longer its own person).
func (s *Service) ConfirmOIDCLink(ctx context.Context, p ledger.Principal, id uuid.UUID) (ledger.PendingChange, error) {
	if !p.OIDCSession {
		return ledger.PendingChange{}, ledger.Conflict("oidc_link_needs_identity", "a link is confirmed from a console session signed in as the identity it links")
	}
	pre, err := s.store.PendingChange(ctx, id)
	if err != nil {
		return ledger.PendingChange{}, err
	}
	var (
		c        ledger.PendingChange
		decision error
	)
	err = s.store.InTx(ctx, func(tx Tx) error {
		decision = nil
		now := s.Now()
		requester, err := tx.PrincipalForUpdate(ctx, pre.RequestedBy)
		if err != nil {
			return err
		}
		if c, err = tx.PendingChangeForUpdate(ctx, id); err != nil {
			return err
		}
		if c.Kind != ledger.ChangeOIDCLink {
			return ledger.Conflict("oidc_link_needs_identity", "change %s is not a link of an OpenID Connect identity", c.ID)
		}
		if c.Status != ledger.PendingOpen {
			return ledger.Conflict("change_not_pending", "change %s is %s", c.ID, c.Status)
		}
		if !now.Before(c.ExpiresAt) {
			decision = ledger.Conflict("change_expired", "change %s expired at %s", c.ID, c.ExpiresAt.Format(time.RFC3339))
			return s.closeChange(ctx, tx, &c, lapse(now))
		}
		var pl ledger.OIDCLinkPayload
		if err := json.Unmarshal(c.Payload, &pl); err != nil {
			return fmt.Errorf("decode pending change %s: %w", c.ID, err)
		}
		if p.ID != ledger.OIDCPrincipalID(pl.Issuer, pl.Subject) {
			return ledger.Conflict("oidc_identity_mismatch", "change %s links another identity; sign in as that identity to confirm it", c.ID)
		}
		err = CheckSecondPerson(ctx, tx, s.policy.dev, p, c.RequestedBy, SubjectChange)
		if errors.Is(err, ErrIdentityNotLinked) && c.RequestedBy == pl.PrincipalID {
			// The link's own target asked for it: the link is what
			// accounts for the pair.
			err = nil
		}
		if err != nil {
			return err
		}
		if requester.Disabled() {
			decision = ledger.Conflict("requester_disabled", "change %s was asked for by principal %s, disabled since", c.ID, requester.ID)
			return s.closeChange(ctx, tx, &c, refusal(p, "cannot apply: the requester is disabled", now))
		}
		if _, err := s.checkOIDCLink(ctx, tx, pl); err != nil {
			decision = err
			var conflict *ledger.ConflictError
			if errors.As(err, &conflict) || errors.Is(err, ledger.ErrNotFound) {
				return s.closeChange(ctx, tx, &c, refusal(p, "cannot apply: "+err.Error(), now))
			}
			return err
		}
		// Closed before the link applies: once applied, the confirming
		// principal is the same person as the target, which may be the
		// requester.
		if err := s.closeChange(ctx, tx, &c, approval(p, now)); err != nil {
			return err
		}
		_, err = s.applyOIDCLink(ctx, tx, p, pl, now, c.ID.String())
		return err
	})
	s.tokens.flush()
	if err != nil {
		return ledger.PendingChange{}, err
	}
	return c, decision
}

// RequestNoIdentityProviderAccount asks for person principal id to be
// marked as having no identity-provider account; it applies when a
// different on-call person approves (under dev, the bootstrap principal's
// applies at once). Until a person principal is so marked or linked to an
// identity, outside dev, an identity signing in on its own and that
// principal are never the two persons of a four-eyes decision
// (CheckSecondPerson).
func (s *Service) RequestNoIdentityProviderAccount(ctx context.Context, p ledger.Principal, id uuid.UUID) (ledger.PrincipalRecord, error) {
	if err := ledger.Authorize(p, ledger.ActionAdminister); err != nil {
		return ledger.PrincipalRecord{}, err
	}
	r, pending, err := s.requestPrincipalChange(ctx, p, func(tx Tx, now time.Time) (principalRequest, error) {
		r, err := s.checkNoIdentityProviderAccount(ctx, tx, id)
		if err != nil {
			return principalRequest{}, err
		}
		pl := ledger.NoIdentityProviderAccountPayload{PrincipalID: id}
		req := ledger.ChangeRequest{By: p, At: now, Kind: ledger.ChangeNoIdentityProviderAccount, Target: "principal:" + id.String(), Payload: pl,
			Summary: fmt.Sprintf("mark principal %q as a person with no identity-provider account", r.Name)}
		return principalRequest{principal: r, req: req, apply: func() (ledger.PrincipalRecord, error) {
			return r, s.applyNoIdentityProviderAccount(ctx, tx, p, pl, now, "")
		}}, nil
	})
	s.tokens.flush()
	if err != nil {
		return ledger.PrincipalRecord{}, err
	}
	return s.principalAfterChange(ctx, id, r, pending)
}

// checkNoIdentityProviderAccount checks, in tx, that principal id can be
// marked now, and returns it locked: an enabled person, not the bootstrap
// principal, not an identity's own principal, no identity linked to it,
// not marked already.
func (s *Service) checkNoIdentityProviderAccount(ctx context.Context, tx Tx, id uuid.UUID) (ledger.PrincipalRecord, error) {
	r, err := lockPerson(ctx, tx, id, "", "is no person's")
	if err != nil {
		return ledger.PrincipalRecord{}, err
	}
	if !r.NoIdentityProviderAccountAt.IsZero() {
		return ledger.PrincipalRecord{}, ledger.Conflict("principal_marked", "principal %q is already marked as having no identity-provider account", r.Name)
	}
	full, err := s.store.PrincipalByID(ctx, id)
	if err != nil {
		return ledger.PrincipalRecord{}, err
	}
	if full.CreatedByIdentityProvider || len(full.OIDC) > 0 || len(full.Aliases) > 0 {
		return ledger.PrincipalRecord{}, ledger.Conflict("principal_linked", "principal %q has an OpenID Connect identity", r.Name)
	}
	return r, nil
}

// applyNoIdentityProviderAccount marks pl's principal, as p approved (or,
// under dev, asked) it, with a principal_no_identity_provider_account
// event on its stream.
func (s *Service) applyNoIdentityProviderAccount(ctx context.Context, tx Tx, p ledger.Principal, pl ledger.NoIdentityProviderAccountPayload, now time.Time, change string) error {
	if _, err := s.checkNoIdentityProviderAccount(ctx, tx, pl.PrincipalID); err != nil {
		return err
	}
	if _, err := tx.MarkNoIdentityProviderAccount(ctx, pl.PrincipalID, p.ID, now); err != nil {
		return err
	}
	data := ledger.PrincipalNoIdentityProviderAccountData{PendingChangeID: change}
	_, err := ledger.Append(ctx, tx, ledger.Event{Stream: "principal:" + pl.PrincipalID.String(), Type: ledger.EventTypePrincipalNoIdentityProviderAccount, At: now, Actor: p.Actor()}, data)
	return err
}

// applyOIDCLinkChange applies a confirmed oidc_link change.
func (s *Service) applyOIDCLinkChange(ctx context.Context, tx Tx, p ledger.Principal, c ledger.PendingChange, now time.Time) (string, error) {
	pl, err := ledger.DecodeChangePayload[ledger.OIDCLinkPayload](c)
	if err != nil {
		return "", err
	}
	_, err = s.applyOIDCLink(ctx, tx, p, pl, now, c.ID.String())
	return "", err
}

// applyNoIdentityProviderAccountChange applies an approved
// no_identity_provider_account change.
func (s *Service) applyNoIdentityProviderAccountChange(ctx context.Context, tx Tx, p ledger.Principal, c ledger.PendingChange, now time.Time) (string, error) {
	pl, err := ledger.DecodeChangePayload[ledger.NoIdentityProviderAccountPayload](c)
	if err != nil {
		return "", err
	}
	return "", s.applyNoIdentityProviderAccount(ctx, tx, p, pl, now, c.ID.String())
}
