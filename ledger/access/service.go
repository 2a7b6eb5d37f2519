package access

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// Service is the access use cases: principals and their credentials,
// authentication and its cache, OpenID Connect identities, and the
// decisions on pending changes under the two-person rule. It holds no
// state of its own but the authentication cache; everything else is in
// the Store.
type Service struct {
	store Store
	// ledger records the core's change requests and applies the core's
	// change kinds when a decision approves one.
	ledger *ledger.Service
	clock  ledger.Clock
	tokens tokenCache
	policy accessPolicy
}

// Config wires a Service.
type Config struct {
	Store Store
	// Ledger is the core service whose pending changes this one decides,
	// and through which it records its own.
	Ledger *ledger.Service
	Clock  ledger.Clock
	// Dev is what `quittance dev` (make run) runs: changes made with the
	// bootstrap credential take effect at once, so one developer can try
	// everything alone. Every other principal is held to the two-person
	// rule in every mode. It must be the ledger's Dev.
	Dev bool
	// PersonCredentialTTL is how long a credential of a person principal
	// lasts unless the request sets its expiry (default 30 days).
	PersonCredentialTTL time.Duration
	// PersonCredentialMaxTTL is the longest a person's credential may be
	// issued for, an expiry the request sets included (default 90 days):
	// a person's credential is not a machine's, and whoever holds a stolen
	// one holds it until it expires.
	PersonCredentialMaxTTL time.Duration
}

// NewService returns a Service.
func NewService(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = ledger.SystemClock{}
	}
	if cfg.PersonCredentialTTL <= 0 {
		cfg.PersonCredentialTTL = DefaultPersonCredentialTTL
	}
	if cfg.PersonCredentialMaxTTL <= 0 {
		cfg.PersonCredentialMaxTTL = max(DefaultPersonCredentialMaxTTL, cfg.PersonCredentialTTL)
	}
	return &Service{
		store: cfg.Store, ledger: cfg.Ledger, clock: cfg.Clock,
		policy: accessPolicy{dev: cfg.Dev, personTTL: cfg.PersonCredentialTTL, personMaxTTL: cfg.PersonCredentialMaxTTL},
	}
}

// Now is the service clock's time at PostgreSQL's precision (microseconds),
// so what is hashed into an event equals what is read back.
func (s *Service) Now() time.Time { return ledger.StoredTime(s.clock.Now()) }

// Store is the persistence of principals, credentials, identities and
// pending changes. Every method takes the time it should record as a
// parameter. Error contract: as ledger.Store.
type Store interface {
	Reader
	// InTx runs fn in one database transaction, committing if fn returns
	// nil, as ledger.Store.InTx (and retried as it is).
	InTx(ctx context.Context, fn func(Tx) error) error
}

// DefaultPersonCredentialTTL is how long a person's credential lasts when
// the request does not say.
const DefaultPersonCredentialTTL = 30 * 24 * time.Hour

// DefaultPersonCredentialMaxTTL is the longest a person's credential may
// be issued for, unless configured otherwise.
const DefaultPersonCredentialMaxTTL = 90 * 24 * time.Hour

// accessPolicy is the service's configuration of principals and approvals.
type accessPolicy struct {
	dev          bool
	personTTL    time.Duration
	personMaxTTL time.Duration
}

// applyOrRequest makes a privileged change in tx, at once or as req
// recorded for a second person, by the core's one rule
// (ledger.Service.ApplyOrRequest).
func (s *Service) applyOrRequest(ctx context.Context, tx Tx, p ledger.Principal, req ledger.ChangeRequest, apply func() error) (*ledger.PendingChange, error) {
	return s.ledger.ApplyOrRequest(ctx, tx, p, req, apply)
}

// principalRequest is a privileged change to one principal, as a
// request function builds it in the transaction once its checks pass.
type principalRequest struct {
	principal ledger.PrincipalRecord // the principal, locked
	req       ledger.ChangeRequest
	// apply makes the change at once and returns the principal after it.
	apply func() (ledger.PrincipalRecord, error)
}

// requestPrincipalChange runs, in one transaction, prepare (which locks
// and checks the principal and builds the change) and then
// applyOrRequest. It returns the principal (as changed, if the change
// applied at once) and the pending change, if one now waits.
func (s *Service) requestPrincipalChange(ctx context.Context, p ledger.Principal, prepare func(tx Tx, now time.Time) (principalRequest, error)) (ledger.PrincipalRecord, *ledger.PendingChange, error) {
	var (
		r       ledger.PrincipalRecord
		pending *ledger.PendingChange
	)
	err := s.store.InTx(ctx, func(tx Tx) error {
		pending = nil
		pr, err := prepare(tx, s.Now())
		if err != nil {
			return err
		}
		r = pr.principal
		pending, err = s.applyOrRequest(ctx, tx, p, pr.req, func() (err error) {
			r, err = pr.apply()
			return err
		})
		return err
	})
	return r, pending, err
}

// principalAfterChange answers a privileged change of principal id made
// (or asked for) in a committed transaction: the cache forgets what it
// knew of credentials, the principal is read as it is now, with its
// identities, and a change that waits for a second person is an
// ApprovalRequiredError.
func (s *Service) principalAfterChange(ctx context.Context, id uuid.UUID, r ledger.PrincipalRecord, pending *ledger.PendingChange) (ledger.PrincipalRecord, error) {
	if fresh, err := s.store.PrincipalByID(ctx, id); err == nil {
		r = fresh
	}
	if pending != nil {
		return r, &ledger.ApprovalRequiredError{Change: *pending}
	}
	return r, nil
}

// Reader reads principals, credentials and pending changes.
// Error contract: as ledger.Store.
type Reader interface {
	// CredentialByHash returns the credential whose secret hashes to hash,
	// with its principal.
	CredentialByHash(ctx context.Context, hash []byte) (ledger.Token, ledger.PrincipalRecord, error)
	// TouchCredential records that the credential was used at at; it
	// writes at most once a minute per credential.
	TouchCredential(ctx context.Context, id uuid.UUID, at time.Time) error
	PrincipalByID(ctx context.Context, id uuid.UUID) (ledger.PrincipalRecord, error)
	ListPrincipals(ctx context.Context) ([]ledger.PrincipalRecord, error)
	// ListCredentials lists the credentials of one principal, or of all
	// when principalID is uuid.Nil.
	ListCredentials(ctx context.Context, principalID uuid.UUID) ([]ledger.Token, error)
	Credential(ctx context.Context, id uuid.UUID) (ledger.Token, error)
	PendingChange(ctx context.Context, id uuid.UUID) (ledger.PendingChange, error)
	// ListPendingChanges lists changes in status, or all when status is "".
	ListPendingChanges(ctx context.Context, status ledger.PendingStatus) ([]ledger.PendingChange, error)
}

// Tx writes principals, credentials and pending changes inside a
// transaction. Error contract: as ledger.Store.
type Tx interface {
	ledger.EventAppender
	// LockPrincipals serializes the transactions that create principals,
	// so the bootstrap credential's limit holds under concurrency.
	LockPrincipals(ctx context.Context) error
	// CountBootstrapSpent counts the on-call principals that use up the
	// bootstrap credential's allowance: every on-call principal but the
	// bootstrap one, and every principal the bootstrap principal created,
	// disabled or not, so that disabling one never gives it back.
	CountBootstrapSpent(ctx context.Context) (int64, error)
	// TenantInUse reports whether any principal or credential was ever
	// given the tenant, any delegation made in it, or a budget names it.
	TenantInUse(ctx context.Context, tenant string) (bool, error)
	InsertPrincipal(ctx context.Context, r ledger.PrincipalRecord) error
	PrincipalForUpdate(ctx context.Context, id uuid.UUID) (ledger.PrincipalRecord, error)
	// PrincipalByNameForUpdate finds a principal by its case-folded name.
	PrincipalByNameForUpdate(ctx context.Context, nameKey string) (ledger.PrincipalRecord, error)
	// UpdatePrincipal writes r's role, tenant, bootstrap flag and disabling.
	UpdatePrincipal(ctx context.Context, r ledger.PrincipalRecord) error
	// InsertToken records an API credential (its hash, never the secret).
	InsertToken(ctx context.Context, t ledger.Token) error
	TokenForUpdate(ctx context.Context, id uuid.UUID) (ledger.Token, error)
	// RevokeToken revokes one credential; revoked is false when it already
	// was.
	RevokeToken(ctx context.Context, id uuid.UUID, at time.Time, by uuid.UUID, reason string) (revoked bool, err error)
	// RevokePrincipalTokens revokes every credential of a principal not yet
	// revoked and returns their ids.
	RevokePrincipalTokens(ctx context.Context, principalID uuid.UUID, at time.Time, by uuid.UUID, reason string) ([]uuid.UUID, error)
	InsertPendingChange(ctx context.Context, c ledger.PendingChange) error
	PendingChangeForUpdate(ctx context.Context, id uuid.UUID) (ledger.PendingChange, error)
	// DecidePendingChange writes c's status and decision.
	DecidePendingChange(ctx context.Context, c ledger.PendingChange) error
	// OpenPendingChangesOfRequesterForUpdate locks the changes still
	// pending that the principal asked for, oldest first.
	OpenPendingChangesOfRequesterForUpdate(ctx context.Context, requester uuid.UUID) ([]ledger.PendingChange, error)
	// ExpiredPendingChangesForUpdate locks pending changes whose expiry
	// is at or before now, skipping those another transaction holds.
	ExpiredPendingChangesForUpdate(ctx context.Context, now time.Time) ([]ledger.PendingChange, error)
	OIDCTx
	// Ledger is the same transaction as the core's: the approval of a
	// change of the core's kinds applies it there (ledger.Service.ApplyChange).
	Ledger() ledger.Tx
}

// CredentialWatcher tells the service when any credential or principal
// changes, on any replica: the store's PostgreSQL LISTEN/NOTIFY.
type CredentialWatcher interface {
	// WatchCredentials listens until ctx ends or the connection fails. It
	// calls changed after each commit that revoked, expired or disabled
	// anything, and alive once it listens and then each time it has proven
	// its connection alive (a notification, or a ping answered), at least
	// every CredentialWatchInterval while the connection works.
	WatchCredentials(ctx context.Context, alive, changed func()) error
}

// CredentialWatchInterval is how often a CredentialWatcher proves its
// connection alive. The authentication cache is trusted only within
// credentialWatchTrust of the last proof: a connection that died silently
// would otherwise keep a revoked credential cached for tokenCacheTTL.
const CredentialWatchInterval = 250 * time.Millisecond

// OIDCTx reads and writes OpenID Connect identities inside a transaction.
// Error contract: as ledger.Store.
type OIDCTx interface {
	// OIDCIdentityForUpdate returns the identity, locked, or ErrNotFound.
	OIDCIdentityForUpdate(ctx context.Context, issuer, subject string) (ledger.OIDCIdentity, error)
	// InsertOIDCIdentity records the identity unless it exists, and
	// reports whether it did; a concurrent insert of the same identity
	// makes it wait for that transaction, then report false.
	InsertOIDCIdentity(ctx context.Context, id ledger.OIDCIdentity) (bool, error)
	// RelinkOIDCIdentities points every identity that signs in as from at
	// to instead, as linked by by at at.
	RelinkOIDCIdentities(ctx context.Context, from, to, by uuid.UUID, at time.Time) error
	// InsertPrincipalIfAbsent inserts r unless a principal with its id
	// exists, and reports whether it did; when r's name is taken by
	// another principal, r is stored under its name with its id appended
	// to the name's key, so it cannot take that principal's name.
	InsertPrincipalIfAbsent(ctx context.Context, r ledger.PrincipalRecord) (bool, error)
	// PrincipalAliases returns the other principals of the same person.
	PrincipalAliases(ctx context.Context, id uuid.UUID) ([]uuid.UUID, error)
	// PrincipalPerson returns the principal that is id's person: id itself
	// unless id was recorded for an identity since linked to another.
	PrincipalPerson(ctx context.Context, id uuid.UUID) (uuid.UUID, error)
	// MarkNoIdentityProviderAccount records that principal id's person
	// has no identity-provider account, as by decided at at; marked is
	// false when it already was.
	MarkNoIdentityProviderAccount(ctx context.Context, id, by uuid.UUID, at time.Time) (marked bool, err error)
	FourEyesReader
}
