package access

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// bootstrapOncallLimit is how many on-call principals the bootstrap
// credential may create outside dev.
const bootstrapOncallLimit = 2

// NameKey is the case-folded form of a principal's name, under which names
// are unique: "Alice" and "alice" are one principal.
func NameKey(name string) string { return strings.ToLower(strings.TrimSpace(name)) }

// WatchCredentials keeps the authentication cache coherent with the
// database until ctx ends: while it listens, every credential change on any
// replica empties the cache at once; while it does not (before it starts,
// or after the connection fails until it is back), and whenever the
// listener has not proven its connection alive within the last second,
// nothing is cached and every request is authenticated against the
// database. Without a watcher
// in the store it returns at once and nothing is ever cached. The wait
// between attempts grows while they fail and starts again from the
// shortest once one listened, so a connection lost in a failover is
// replaced at once, however many were lost before.
func (s *Service) WatchCredentials(ctx context.Context) error {
	w, ok := s.store.(CredentialWatcher)
	if !ok {
		return nil
	}
	defer s.tokens.invalidate(false)
	const first = 100 * time.Millisecond
	for wait := first; ctx.Err() == nil; wait = min(wait*2, 5*time.Second) {
		var listened atomic.Bool
		alive := func() {
			listened.Store(true)
			s.tokens.prove()
		}
		err := w.WatchCredentials(ctx, alive, func() { s.tokens.invalidate(true) })
		s.tokens.invalidate(false)
		if ctx.Err() != nil {
			break
		}
		_ = err // a failed connection is retried; the cache stays off meanwhile
		if listened.Load() {
			wait = first
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return nil
}

// Authenticate resolves a bearer token to its principal. The credential
// must be neither revoked nor expired, and its principal not disabled. A
// principal found valid is cached (see WatchCredentials).
//
// Outside dev the bootstrap credential is refused here (ErrForbidden), for
// every request of every API, stream and console sign-in: it may create the
// first two on-call principals and nothing else, and that one operation
// authenticates it with AuthenticateBootstrap. This is the one place that
// keeps it from everything else, so no read path needs its own check.
func (s *Service) Authenticate(ctx context.Context, secret string) (ledger.Principal, error) {
	p, err := s.AuthenticateBootstrap(ctx, secret)
	if err == nil && !p.Permits(ledger.ActionSignIn) {
		return ledger.Principal{}, ledger.ErrForbidden
	}
	return p, err
}

// AuthenticateBootstrap is Authenticate that also accepts the bootstrap
// credential outside dev (as RoleBootstrap): only for the operation the
// bootstrap credential may do, CreateToken, which limits it to the first
// two on-call principals.
func (s *Service) AuthenticateBootstrap(ctx context.Context, secret string) (ledger.Principal, error) {
	if secret == "" {
		return ledger.Principal{}, ledger.ErrUnauthenticated
	}
	hash, now := HashToken(secret), s.clock.Now()
	if p, ok := s.tokens.get(hash, now); ok {
		return p, nil
	}
	gen := s.tokens.generation()
	t, r, err := s.store.CredentialByHash(ctx, hash)
	if errors.Is(err, ledger.ErrNotFound) {
		return ledger.Principal{}, ledger.ErrUnauthenticated
	}
	if err != nil {
		return ledger.Principal{}, fmt.Errorf("look up token: %w", err)
	}
	if !t.Usable(now) || r.Disabled() {
		return ledger.Principal{}, ledger.ErrUnauthenticated
	}
	p := principalOf(t, r, s.policy.dev)
	if err := s.store.TouchCredential(ctx, t.ID, s.Now()); err != nil {
		return ledger.Principal{}, fmt.Errorf("record token use: %w", err)
	}
	s.tokens.put(hash, p, now, gen)
	return p, nil
}

// CachedPrincipal returns the principal of secret if it is in the
// authentication cache, without asking the database: the rate limiter's
// way to tell a known credential from an unknown one for free.
func (s *Service) CachedPrincipal(secret string) (ledger.Principal, bool) {
	if secret == "" {
		return ledger.Principal{}, false
	}
	return s.tokens.get(HashToken(secret), s.clock.Now())
}

func principalOf(t ledger.Token, r ledger.PrincipalRecord, dev bool) ledger.Principal {
	p := ledger.Principal{
		ID: r.ID, TokenID: t.ID, Name: r.Name, Kind: r.Kind, Role: r.Role, Tenant: r.Tenant,
		Bootstrap: r.Bootstrap, CredentialExpiresAt: t.ExpiresAt, Aliases: r.Aliases,
	}
	if r.Bootstrap && !dev {
		p.Role = ledger.RoleBootstrap
	}
	return p
}

// TokenInput asks for a new API credential: for the principal of that name
// (case-insensitively) if one exists, else for a new principal.
type TokenInput struct {
	Role   ledger.Role
	Tenant string
	Name   string
	// Kind is the new principal's kind; by default orchestrators are
	// machines and finance and on-call people. On-call is always a person.
	Kind ledger.PrincipalKind
	// ExpiresAt is when the credential stops working; zero for the
	// default (PersonCredentialTTL for people, never for machines).
	ExpiresAt time.Time
	// Label names the credential itself (default the principal's name).
	Label string
}

// IssuedToken is a credential just issued: the secret is shown once.
type IssuedToken struct {
	Token     ledger.Token
	Principal ledger.PrincipalRecord
	// Secret is the whole bearer token; empty for a split credential.
	Secret string
	// SecretPart is, for a split credential (a person principal created
	// for another on-call principal than its requester: the request waits
	// for approval), the first of its two parts, for the requester; the
	// approval gives the approver the second (PendingChange.IssuedTokenPart).
	// Neither alone is a credential: the person joins them.
	SecretPart string
	// Pending is set when the principal (principal_create) or the
	// credential (credential_create) does not exist until a second on-call
	// principal approves; the credential works from then on.
	Pending *ledger.PendingChange
}

// CreateToken issues a credential. Naming an existing principal (its name,
// any case) adds a credential to it: on-call may do so for itself at once,
// and for a machine principal when a different on-call principal approves
// (credential_create); never for another person. Naming a new one creates
// the principal: the first machine orchestrator of a tenant nobody has
// used yet at once, since it can release nothing that exists; any other
// principal — a person, a finance or on-call principal, an orchestrator
// for a tenant that already has a principal or delegations — only when a
// different on-call principal approves (principal_create). Whatever waits
// for approval is in the result's Pending, and its credential works from
// the approval on. A person's credential that waits for approval is split
// (IssuedToken.SecretPart): the requester never holds a working credential
// of another person. The bootstrap credential may create the first two
// on-call principals at once and nothing else, except under dev.
func (s *Service) CreateToken(ctx context.Context, p ledger.Principal, in TokenInput) (IssuedToken, error) {
	if err := ledger.Authorize(p, ledger.ActionIssueCredentials); err != nil {
		return IssuedToken{}, err
	}
	if err := s.checkTokenInput(&in); err != nil {
		return IssuedToken{}, err
	}
	if !in.ExpiresAt.IsZero() && !in.ExpiresAt.After(s.Now()) {
		return IssuedToken{}, ledger.Invalid("expires_at", "must be in the future")
	}
	secret := NewTokenSecret()
	var out IssuedToken
	err := s.store.InTx(ctx, func(tx Tx) error {
		out = IssuedToken{Secret: secret}
		req := tokenRequest{by: p, in: in, secret: secret, at: s.Now()}
		if err := tx.LockPrincipals(ctx); err != nil {
			return err
		}
		existing, err := tx.PrincipalByNameForUpdate(ctx, NameKey(in.Name))
		switch {
		case err == nil:
			return s.issueToExisting(ctx, tx, req, existing, &out)
		case !errors.Is(err, ledger.ErrNotFound):
			return err
		}
		return s.issueToNew(ctx, tx, req, &out)
	})
	if err != nil {
		return IssuedToken{}, err
	}
	return out, nil
}

// tokenRequest is a CreateToken call inside its transaction: who asks,
// what for, the new secret and the time.
type tokenRequest struct {
	by     ledger.Principal
	in     TokenInput
	secret string
	at     time.Time
}

// stamp records who makes a change and when, for its events: by req's
// principal, applying no pending change.
func (req tokenRequest) stamp() stamp { return stamp{actor: req.by.Actor(), at: req.at} }

// issueToExisting issues req's credential to the existing principal r, at
// once (to itself; under dev, by the bootstrap principal) or, for a
// machine principal of someone else, as a credential_create change.
func (s *Service) issueToExisting(ctx context.Context, tx Tx, req tokenRequest, r ledger.PrincipalRecord, out *IssuedToken) error {
	p, in := req.by, req.in
	if !p.Permits(ledger.ActionSignIn) {
		// The bootstrap credential creates new principals only.
		return ledger.ErrForbidden
	}
	if r.Disabled() {
		return ledger.Conflict("principal_disabled", "principal %s is disabled", r.ID)
	}
	if r.Role != in.Role || r.Tenant != in.Tenant {
		return ledger.Conflict("principal_role_mismatch", "principal %q is %s%s; granting another role is a separate, approved change",
			r.Name, r.Role, tenantSuffix(r.Tenant))
	}
	out.Principal = r
	var err error
	if out.Token, err = s.newToken(r, in, req.secret, req.at); err != nil {
		return err
	}
	issue := func() error { return s.addToken(ctx, tx, req.stamp(), r, out.Token) }
	switch {
	case r.ID == p.ID:
		return issue()
	case r.Kind == ledger.KindPerson && !s.ledger.AppliesAtOnce(p):
		return ledger.Conflict("credential_for_another_person", "principal %q is a person; a person's further credentials are issued to themselves", r.Name)
	}
	out.Pending, err = s.applyOrRequest(ctx, tx, p, credentialRequest(p, r, ledger.CredentialCreatePayload{Token: out.Token}, req.at), issue)
	return err
}

// issueToNew creates req's principal with its first credential, at once
// where CreateToken allows it, else as a principal_create change.
func (s *Service) issueToNew(ctx context.Context, tx Tx, req tokenRequest, out *IssuedToken) error {
	r, t, err := s.newPrincipal(req)
	if err != nil {
		return err
	}
	out.Principal, out.Token = r, t
	now, err := s.createsAtOnce(ctx, tx, req)
	if err != nil || now {
		if err == nil {
			err = s.createPrincipal(ctx, tx, req.stamp(), r, t)
		}
		return err
	}
	return s.requestPrincipal(ctx, tx, req, out)
}

// newPrincipal is req's new principal with its first credential, not yet
// stored.
func (s *Service) newPrincipal(req tokenRequest) (ledger.PrincipalRecord, ledger.Token, error) {
	in := req.in
	id, err := uuid.NewV7()
	if err != nil {
		return ledger.PrincipalRecord{}, ledger.Token{}, err
	}
	r := ledger.PrincipalRecord{ID: id, Kind: in.Kind, Name: strings.TrimSpace(in.Name), Role: in.Role, Tenant: in.Tenant, CreatedBy: req.by.ID, CreatedAt: req.at}
	tokenID, err := uuid.NewV7()
	if err != nil {
		return ledger.PrincipalRecord{}, ledger.Token{}, err
	}
	expires, err := s.expiry(r.Kind, in.ExpiresAt, req.at)
	if err != nil {
		return ledger.PrincipalRecord{}, ledger.Token{}, err
	}
	t := ledger.Token{
		ID: tokenID, PrincipalID: id, Name: in.Label, Role: in.Role, Tenant: in.Tenant, Hash: HashToken(req.secret),
		CreatedAt: req.at, ExpiresAt: expires,
	}
	return r, t, nil
}

// createsAtOnce reports whether req's new principal is created without a
// second approver: one of the first on-call principals the bootstrap
// credential may create (the only thing it may), anything the bootstrap
// principal asks for under dev, and the first machine orchestrator of a
// tenant nobody has used yet.
func (s *Service) createsAtOnce(ctx context.Context, tx Tx, req tokenRequest) (bool, error) {
	p, in := req.by, req.in
	switch {
	case !p.Permits(ledger.ActionSignIn): // the bootstrap credential
		if in.Role != ledger.RoleOncall {
			return false, ledger.ErrForbidden
		}
		n, err := tx.CountBootstrapSpent(ctx)
		if err != nil {
			return false, err
		}
		if n >= bootstrapOncallLimit {
			return false, ledger.Conflict("bootstrap_exhausted", "the bootstrap credential creates the first %d on-call principals only; they exist or existed", bootstrapOncallLimit)
		}
		return true, nil
	case s.ledger.AppliesAtOnce(p):
		return true, nil
	case in.Role == ledger.RoleOrchestrator && in.Kind == ledger.KindMachine:
		used, err := tx.TenantInUse(ctx, in.Tenant)
		return !used, err
	}
	return false, nil
}

// requestPrincipal records the principal_create change of out's principal
// and credential. A person's credential is split: the requester gets the
// first part, the approver the second, and only the first part's hash is
// kept until the approval stores the joined credential's hash.
func (s *Service) requestPrincipal(ctx context.Context, tx Tx, req tokenRequest, out *IssuedToken) error {
	r := out.Principal
	pl := ledger.PrincipalCreatePayload{Principal: r, Token: out.Token}
	if r.Kind == ledger.KindPerson {
		out.Secret, out.SecretPart = "", newTokenPart(false)
		pl.Token.Hash, pl.TokenPartHash = nil, sha256Of(out.SecretPart)
		out.Token = pl.Token
	}
	pc, err := s.ledger.RequestChange(ctx, tx, ledger.ChangeRequest{
		By: req.by, At: req.at, Kind: ledger.ChangePrincipalCreate, Target: "principal:" + r.ID.String(), Payload: pl,
		Summary: fmt.Sprintf("create %s principal %q (%s%s)", r.Kind, r.Name, r.Role, tenantSuffix(r.Tenant)),
	})
	out.Pending = &pc
	return err
}

func tenantSuffix(tenant string) string {
	if tenant == "" {
		return ""
	}
	return ", tenant " + tenant
}

// expiry is when a new credential of a principal of kind expires: asked,
// or by default PersonCredentialTTL for a person and never for a machine.
// A person's is at most PersonCredentialMaxTTL away.
func (s *Service) expiry(kind ledger.PrincipalKind, asked, now time.Time) (time.Time, error) {
	switch {
	case kind == ledger.KindPerson && asked.After(now.Add(s.policy.personMaxTTL)):
		return time.Time{}, ledger.Invalid("expires_at", "is at most %s away for a person's credential (QUITTANCE_PERSON_CREDENTIAL_MAX_TTL)", s.policy.personMaxTTL)
	case !asked.IsZero():
		return ledger.StoredTime(asked), nil
	case kind == ledger.KindPerson:
		return now.Add(s.policy.personTTL), nil
	}
	return time.Time{}, nil
}

func (s *Service) checkTokenInput(in *TokenInput) error {
	if _, err := ledger.ParseRole(string(in.Role)); err != nil {
		return ledger.Invalid("role", "must be orchestrator, finance or oncall")
	}
	if strings.TrimSpace(in.Name) == "" || len(in.Name) > 200 {
		return ledger.Invalid("name", "is required, at most 200 characters")
	}
	switch {
	case in.Role == ledger.RoleOrchestrator && in.Tenant == "":
		return ledger.Invalid("tenant", "is required for orchestrator tokens")
	case in.Role != ledger.RoleOrchestrator && in.Tenant != "":
		return ledger.Invalid("tenant", "applies to orchestrator tokens only")
	case in.Tenant != "":
		if err := ledger.CheckID("tenant", in.Tenant); err != nil {
			return err
		}
	}
	switch in.Kind {
	case "":
		in.Kind = ledger.KindPerson
		if in.Role == ledger.RoleOrchestrator {
			in.Kind = ledger.KindMachine
		}
	case ledger.KindPerson, ledger.KindMachine:
	default:
		return ledger.Invalid("kind", "must be person or machine")
	}
	if in.Role == ledger.RoleOncall && in.Kind != ledger.KindPerson {
		return ledger.Invalid("kind", "on-call principals are people")
	}
	if len(in.Label) > 200 {
		return ledger.Invalid("label", "is at most 200 characters")
	}
	if strings.TrimSpace(in.Label) == "" {
		in.Label = strings.TrimSpace(in.Name)
	}
	return nil
}

// newToken is a new credential of the existing principal r, not yet
// stored.
func (s *Service) newToken(r ledger.PrincipalRecord, in TokenInput, secret string, now time.Time) (ledger.Token, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return ledger.Token{}, err
	}
	expires, err := s.expiry(r.Kind, in.ExpiresAt, now)
	if err != nil {
		return ledger.Token{}, err
	}
	return ledger.Token{
		ID: id, PrincipalID: r.ID, Name: in.Label, Role: r.Role, Tenant: r.Tenant, Hash: HashToken(secret),
		CreatedAt: now, ExpiresAt: expires,
	}, nil
}

// stamp is who makes a change and when, as its events record it.
type stamp struct {
	actor string
	at    time.Time
	// change is the id of the pending change it applies; "" for none.
	change string
}

// addToken stores t, a new credential of the existing principal r, with
// its token_created event (naming the pending change it applies, if any).
func (s *Service) addToken(ctx context.Context, tx Tx, st stamp, r ledger.PrincipalRecord, t ledger.Token) error {
	if err := tx.InsertToken(ctx, t); err != nil {
		return err
	}
	data := tokenData(t, r)
	data.PendingChangeID = st.change
	_, err := ledger.Append(ctx, tx, ledger.Event{Stream: "token:" + t.ID.String(), Type: ledger.EventTypeTokenCreated, At: st.at, Actor: st.actor, StreamSeq: 1}, data)
	return err
}

// credentialRequest is the credential_create change p asks for at now:
// pl's credential for the machine principal r, issued when a different
// on-call principal approves.
func credentialRequest(p ledger.Principal, r ledger.PrincipalRecord, pl ledger.CredentialCreatePayload, now time.Time) ledger.ChangeRequest {
	summary := fmt.Sprintf("issue a credential to %s principal %q (%s%s)", r.Kind, r.Name, r.Role, tenantSuffix(r.Tenant))
	if pl.Rotates != uuid.Nil {
		summary = fmt.Sprintf("rotate credential %s of %s principal %q (%s%s)", pl.Rotates, r.Kind, r.Name, r.Role, tenantSuffix(r.Tenant))
	}
	return ledger.ChangeRequest{By: p, At: now, Kind: ledger.ChangeCredentialCreate, Target: "principal:" + r.ID.String(), Payload: pl, Summary: summary}
}

// applyCredentialCreate issues an approved credential_create change's
// credential, revoking the one it rotates, as p approved it.
func (s *Service) applyCredentialCreate(ctx context.Context, tx Tx, p ledger.Principal, pl ledger.CredentialCreatePayload, now time.Time, change string) error {
	r, err := tx.PrincipalForUpdate(ctx, pl.Token.PrincipalID)
	if err != nil {
		return err
	}
	if r.Disabled() {
		return ledger.Conflict("principal_disabled", "principal %s is disabled", r.ID)
	}
	if r.Role != pl.Token.Role || r.Tenant != pl.Token.Tenant {
		return ledger.Conflict("principal_role_mismatch", "principal %q is %s%s now", r.Name, r.Role, tenantSuffix(r.Tenant))
	}
	if pl.Rotates != uuid.Nil {
		old, err := tx.TokenForUpdate(ctx, pl.Rotates)
		if err != nil {
			return err
		}
		if err := s.revokeToken(ctx, tx, p, &old, "rotated", now); err != nil {
			return err
		}
	}
	return s.addToken(ctx, tx, stamp{actor: p.Actor(), at: now, change: change}, r, pl.Token)
}

func tokenData(t ledger.Token, r ledger.PrincipalRecord) ledger.TokenCreatedData {
	data := ledger.TokenCreatedData{
		Name: t.Name, Role: string(r.Role), Tenant: r.Tenant, PrincipalID: r.ID.String(), PrincipalName: r.Name,
	}
	if !t.ExpiresAt.IsZero() {
		data.ExpiresAt = t.ExpiresAt.Format(time.RFC3339Nano)
	}
	return data
}

// createPrincipal inserts r with its first credential t, and their events.
func (s *Service) createPrincipal(ctx context.Context, tx Tx, st stamp, r ledger.PrincipalRecord, t ledger.Token) error {
	if err := tx.InsertPrincipal(ctx, r); err != nil {
		return err
	}
	data := ledger.PrincipalCreatedData{Kind: string(r.Kind), Name: r.Name, Role: string(r.Role), Tenant: r.Tenant, Bootstrap: r.Bootstrap, PendingChangeID: st.change}
	if r.CreatedBy != uuid.Nil {
		data.CreatedBy = r.CreatedBy.String()
	}
	if _, err := ledger.Append(ctx, tx, ledger.Event{Stream: "principal:" + r.ID.String(), Type: ledger.EventTypePrincipalCreated, At: st.at, Actor: st.actor, StreamSeq: 1}, data); err != nil {
		return err
	}
	if err := tx.InsertToken(ctx, t); err != nil {
		return err
	}
	_, err := ledger.Append(ctx, tx, ledger.Event{Stream: "token:" + t.ID.String(), Type: ledger.EventTypeTokenCreated, At: st.at, Actor: st.actor, StreamSeq: 1}, tokenData(t, r))
	return err
}

// EnsureToken makes sure a credential with exactly this secret exists, with
// a principal of its own; both are created if missing. An on-call one is
// the bootstrap credential (QUITTANCE_BOOTSTRAP_TOKEN) and its principal
// the bootstrap principal. A credential revoked (or whose principal was
// disabled) is never brought back: EnsureToken returns
// ErrCredentialRetired, so an operator can retire the bootstrap credential
// without first removing it from every replica's configuration.
func (s *Service) EnsureToken(ctx context.Context, in TokenInput, secret string) (ledger.Token, error) {
	t, err := s.existingBootstrap(ctx, in, secret)
	if !errors.Is(err, ledger.ErrNotFound) {
		return t, err
	}
	if err := s.checkTokenInput(&in); err != nil {
		return ledger.Token{}, err
	}
	t, err = s.insertBootstrap(ctx, in, secret)
	if err == nil {
		return t, nil
	}
	// Every replica calls EnsureToken at start-up, so several may call it at
	// once on a database that has no such token yet: all of them find it
	// missing and insert it, and the unique token hash (and principal name)
	// lets one insert commit while the others fail — PostgreSQL makes a
	// conflicting insert wait for the first one's transaction, so by then
	// the winner's row is committed. A failed insert is therefore followed
	// by a second look-up: a token found then is the one the concurrent
	// start created, and the loser starts as well.
	if found, lookupErr := s.existingBootstrap(ctx, in, secret); lookupErr == nil {
		return found, nil
	} else if !errors.Is(lookupErr, ledger.ErrNotFound) {
		return ledger.Token{}, errors.Join(err, lookupErr)
	}
	return ledger.Token{}, err
}

// ErrCredentialRetired is returned by EnsureToken when the credential with
// that secret exists but was revoked or its principal disabled: an operator
// retired it, and it stays retired (start-up goes on without it).
var ErrCredentialRetired = errors.New("the credential was revoked or its principal disabled")

// existingBootstrap returns the credential with this secret if it exists as
// the one in asks for (marking its principal as the bootstrap principal when
// it predates principals), ErrNotFound if there is none,
// ErrCredentialRetired if it was revoked or its principal disabled, and an
// error if it exists as another role or tenant.
func (s *Service) existingBootstrap(ctx context.Context, in TokenInput, secret string) (ledger.Token, error) {
	t, r, err := s.store.CredentialByHash(ctx, HashToken(secret))
	if err != nil {
		return ledger.Token{}, err
	}
	if r.Role != in.Role || r.Tenant != in.Tenant {
		return ledger.Token{}, fmt.Errorf("bootstrap token already exists as %s token %q", r.Role, t.Name)
	}
	if !t.RevokedAt.IsZero() || r.Disabled() {
		return t, ErrCredentialRetired
	}
	if r.Bootstrap || in.Role != ledger.RoleOncall {
		return t, nil
	}
	// A token created before principals existed: mark its principal.
	err = s.store.InTx(ctx, func(tx Tx) error {
		r, err := tx.PrincipalForUpdate(ctx, r.ID)
		if err != nil {
			return err
		}
		r.Bootstrap = true
		return tx.UpdatePrincipal(ctx, r)
	})
	return t, err
}

// insertBootstrap creates the bootstrap principal with its one credential.
func (s *Service) insertBootstrap(ctx context.Context, in TokenInput, secret string) (ledger.Token, error) {
	var t ledger.Token
	err := s.store.InTx(ctx, func(tx Tx) error {
		now := s.Now()
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		tokenID, err := uuid.NewV7()
		if err != nil {
			return err
		}
		// The principal takes the asked name, or, when a principal has it,
		// the name with the id appended.
		name := strings.TrimSpace(in.Name)
		if _, err := tx.PrincipalByNameForUpdate(ctx, NameKey(name)); err == nil {
			name += "-" + id.String()
		} else if !errors.Is(err, ledger.ErrNotFound) {
			return err
		}
		r := ledger.PrincipalRecord{ID: id, Kind: in.Kind, Name: name, Role: in.Role, Tenant: in.Tenant, Bootstrap: in.Role == ledger.RoleOncall, CreatedAt: now}
		t = ledger.Token{ID: tokenID, PrincipalID: id, Name: in.Label, Role: in.Role, Tenant: in.Tenant, Hash: HashToken(secret), CreatedAt: now}
		return s.createPrincipal(ctx, tx, stamp{actor: "system:bootstrap", at: now}, r, t)
	})
	return t, err
}

// ListPrincipals lists every principal, to on-call and finance.
func (s *Service) ListPrincipals(ctx context.Context, p ledger.Principal) ([]ledger.PrincipalRecord, error) {
	if err := ledger.Authorize(p, ledger.ActionReadConfiguration); err != nil {
		return nil, err
	}
	return s.store.ListPrincipals(ctx)
}

// GetPrincipal returns a principal to on-call and finance, and to itself.
func (s *Service) GetPrincipal(ctx context.Context, p ledger.Principal, id uuid.UUID) (ledger.PrincipalRecord, error) {
	if p.ID != id {
		if err := ledger.Authorize(p, ledger.ActionReadConfiguration); err != nil {
			return ledger.PrincipalRecord{}, err
		}
	}
	return s.store.PrincipalByID(ctx, id)
}

// ListCredentials lists credentials, never their secrets: on-call sees
// everyone's (or one principal's), anyone else only their own.
func (s *Service) ListCredentials(ctx context.Context, p ledger.Principal, principalID uuid.UUID) ([]ledger.Token, error) {
	if err := ledger.Authorize(p, ledger.ActionSignIn); err != nil {
		return nil, err
	}
	if !p.Permits(ledger.ActionManageAllCredentials) {
		if principalID != uuid.Nil && principalID != p.ID {
			return nil, ledger.ErrForbidden
		}
		principalID = p.ID
	}
	return s.store.ListCredentials(ctx, principalID)
}

// RevokeCredential revokes one credential: on-call may revoke any, anyone
// their own. It takes effect on every replica within a second and ends the
// credential's open event streams. Revoking a revoked credential is a
// conflict (token_already_revoked).
func (s *Service) RevokeCredential(ctx context.Context, p ledger.Principal, id uuid.UUID, reason string) (ledger.Token, error) {
	if len(reason) > ledger.MaxTextLen {
		return ledger.Token{}, ledger.Invalid("reason", "is at most %d characters", ledger.MaxTextLen)
	}
	var t ledger.Token
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		t, err = tx.TokenForUpdate(ctx, id)
		if err != nil {
			return err
		}
		if t.PrincipalID != p.ID && !p.Permits(ledger.ActionManageAllCredentials) {
			return ledger.ErrNotFound
		}
		return s.revokeToken(ctx, tx, p, &t, reason, s.Now())
	})
	s.tokens.flush()
	return t, err
}

func (s *Service) revokeToken(ctx context.Context, tx Tx, p ledger.Principal, t *ledger.Token, reason string, now time.Time) error {
	ok, err := tx.RevokeToken(ctx, t.ID, now, p.ID, reason)
	if err != nil {
		return err
	}
	if !ok {
		return ledger.Conflict("token_already_revoked", "credential %s is already revoked", t.ID)
	}
	t.RevokedAt, t.RevokedBy, t.RevokeReason = now, p.ID, reason
	return appendTokenRevoked(ctx, tx, stamp{actor: p.Actor(), at: now}, t.ID, t.PrincipalID, reason)
}

// appendTokenRevoked records, as st, that credential id of principal was
// revoked.
func appendTokenRevoked(ctx context.Context, tx Tx, st stamp, id, principal uuid.UUID, reason string) error {
	_, err := ledger.Append(ctx, tx, ledger.Event{Stream: "token:" + id.String(), Type: ledger.EventTypeTokenRevoked, At: st.at, Actor: st.actor},
		ledger.TokenRevokedData{PrincipalID: principal.String(), Reason: reason})
	return err
}

// RotateCredential issues a new credential for the principal of
// credential id, with the same lifetime policy, and revokes the old one,
// in one transaction. The caller rotates its own credentials at once;
// on-call also those of machine principals, when a different on-call
// principal approves (a credential_create change in the result's Pending;
// the old credential works until then).
func (s *Service) RotateCredential(ctx context.Context, p ledger.Principal, id uuid.UUID, expiresAt time.Time) (IssuedToken, error) {
	if err := ledger.Authorize(p, ledger.ActionSignIn); err != nil {
		return IssuedToken{}, err
	}
	if !expiresAt.IsZero() && !expiresAt.After(s.Now()) {
		return IssuedToken{}, ledger.Invalid("expires_at", "must be in the future")
	}
	secret := NewTokenSecret()
	var out IssuedToken
	err := s.store.InTx(ctx, func(tx Tx) error {
		out = IssuedToken{Secret: secret}
		now := s.Now()
		old, err := tx.TokenForUpdate(ctx, id)
		if err != nil {
			return err
		}
		r, err := tx.PrincipalForUpdate(ctx, old.PrincipalID)
		if err != nil {
			return err
		}
		switch {
		case r.ID == p.ID:
		case p.Permits(ledger.ActionManageAllCredentials) && r.Kind == ledger.KindMachine:
		case p.Permits(ledger.ActionManageAllCredentials):
			return ledger.Conflict("credential_for_another_person", "principal %q is a person; only they rotate their credentials", r.Name)
		default:
			return ledger.ErrNotFound
		}
		if r.Disabled() {
			return ledger.Conflict("principal_disabled", "principal %s is disabled", r.ID)
		}
		out.Principal = r
		if out.Token, err = s.newToken(r, TokenInput{Label: old.Name, ExpiresAt: expiresAt}, secret, now); err != nil {
			return err
		}
		rotate := func() error {
			if err := s.revokeToken(ctx, tx, p, &old, "rotated", now); err != nil {
				return err
			}
			return s.addToken(ctx, tx, stamp{actor: p.Actor(), at: now}, r, out.Token)
		}
		switch {
		case r.ID == p.ID:
			return rotate()
		case !old.RevokedAt.IsZero() && !s.ledger.AppliesAtOnce(p):
			return ledger.Conflict("token_already_revoked", "credential %s is already revoked", old.ID)
		}
		out.Pending, err = s.applyOrRequest(ctx, tx, p, credentialRequest(p, r, ledger.CredentialCreatePayload{Token: out.Token, Rotates: old.ID}, now), rotate)
		return err
	})
	s.tokens.flush()
	if err != nil {
		return IssuedToken{}, err
	}
	return out, nil
}

// DisablePrincipal disables a principal, revokes all its credentials and
// withdraws (refuses) the changes it asked for that are still pending, one
// change_refused event each by p, at once: on-call only (and not on itself, so the last on-call cannot
// lock everyone out by mistake). Disabling a disabled principal is a
// conflict (principal_disabled).
func (s *Service) DisablePrincipal(ctx context.Context, p ledger.Principal, id uuid.UUID, reason string) (ledger.PrincipalRecord, int64, error) {
	if err := ledger.Authorize(p, ledger.ActionAdminister); err != nil {
		return ledger.PrincipalRecord{}, 0, err
	}
	if strings.TrimSpace(reason) == "" || len(reason) > ledger.MaxTextLen {
		return ledger.PrincipalRecord{}, 0, ledger.Invalid("reason", "is required, at most %d characters", ledger.MaxTextLen)
	}
	if id == p.ID {
		return ledger.PrincipalRecord{}, 0, ledger.Conflict("disable_self", "a principal cannot disable itself; revoke your credentials instead")
	}
	var (
		r       ledger.PrincipalRecord
		revoked int64
	)
	err := s.store.InTx(ctx, func(tx Tx) error {
		now := s.Now()
		var err error
		if r, err = tx.PrincipalForUpdate(ctx, id); err != nil {
			return err
		}
		if r.Disabled() {
			return ledger.Conflict("principal_disabled", "principal %s is already disabled", r.ID)
		}
		r.DisabledAt, r.DisabledBy, r.DisabledReason = now, p.ID, reason
		if err := tx.UpdatePrincipal(ctx, r); err != nil {
			return err
		}
		ended, err := tx.RevokePrincipalTokens(ctx, r.ID, now, p.ID, "principal disabled: "+reason)
		if err != nil {
			return err
		}
		// Each credential it ends is recorded on its own stream, as a
		// revocation one by one is.
		for _, id := range ended {
			if err := appendTokenRevoked(ctx, tx, stamp{actor: p.Actor(), at: now}, id, r.ID, "principal disabled: "+reason); err != nil {
				return err
			}
		}
		revoked = int64(len(ended))
		// Its open changes are withdrawn: what a principal no longer
		// trusted asked for must not be approved later.
		open, err := tx.OpenPendingChangesOfRequesterForUpdate(ctx, r.ID)
		if err != nil {
			return err
		}
		for i := range open {
			if err := s.closeChange(ctx, tx, &open[i], refusal(p, "requester disabled: "+reason, now)); err != nil {
				return err
			}
		}
		_, err = ledger.Append(ctx, tx, ledger.Event{Stream: "principal:" + r.ID.String(), Type: ledger.EventTypePrincipalDisabled, At: now, Actor: p.Actor()},
			ledger.PrincipalDisabledData{Reason: reason, CredentialsRevoked: revoked, ChangesWithdrawn: len(open)})
		return err
	})
	s.tokens.flush()
	return r, revoked, err
}

// Run does the service's background work until ctx ends: it keeps the
// authentication cache coherent (WatchCredentials) and expires pending
// changes past their expiry every interval (default a minute).
func (s *Service) Run(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = time.Minute
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.WatchCredentials(ctx)
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			<-done
			return nil
		case <-t.C:
			_, _ = s.ExpirePendingChanges(ctx) // retried on the next tick
		}
	}
}

// applyCredentialCreateChange applies an approved credential_create change.
func (s *Service) applyCredentialCreateChange(ctx context.Context, tx Tx, p ledger.Principal, c ledger.PendingChange, now time.Time) (string, error) {
	pl, err := ledger.DecodeChangePayload[ledger.CredentialCreatePayload](c)
	if err != nil {
		return "", err
	}
	return "", s.applyCredentialCreate(ctx, tx, p, pl, now, c.ID.String())
}
