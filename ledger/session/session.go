package session

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// Source says how a session was signed in.
type Source string

// The sources.
const (
	// SourceToken: with an existing API token, which the session names; the
	// session ends when the token is revoked.
	SourceToken Source = "token"
	// SourceOIDC: through the OpenID Connect identity provider; the
	// principal is the one access.Service.SignInOIDC resolved the identity
	// to, and the session ends when that principal is disabled.
	SourceOIDC Source = "oidc"
)

// Session is one signed-in browser.
type Session struct {
	// IDHash is the SHA-256 of the session id; the id itself is never kept.
	IDHash []byte
	Source Source
	// Principal is who the session acts as.
	Principal ledger.Principal
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Store is the persistence of sessions.
//
// Error contract: SessionByHash returns ledger.ErrNotFound (wrapped) for a
// session that does not exist, has expired at now, whose token is revoked,
// or whose principal is disabled.
type Store interface {
	InsertSession(ctx context.Context, s Session) error
	// SessionByHash returns the live session; for a token session the
	// principal is read from the token as it is now, and every session's
	// principal carries the other principals of the same person
	// (ledger.Principal.Aliases).
	SessionByHash(ctx context.Context, hash []byte, now time.Time) (Session, error)
	DeleteSession(ctx context.Context, hash []byte) error
	// DeleteExpiredSessions deletes the sessions expired at now.
	DeleteExpiredSessions(ctx context.Context, now time.Time) (int64, error)
	// SessionsOf lists a principal's live sessions, newest first.
	SessionsOf(ctx context.Context, principalID uuid.UUID, now time.Time) ([]Session, error)
}

// DefaultTTL is how long a session lasts when Config.TTL is zero.
const DefaultTTL = 8 * time.Hour

// Service starts, resolves and ends sessions.
type Service struct {
	store Store
	clock ledger.Clock
	ttl   time.Duration
}

// Config wires a Service.
type Config struct {
	Store Store
	Clock ledger.Clock
	// TTL is how long a session lasts from sign-in; DefaultTTL when zero.
	TTL time.Duration
}

// NewService returns a Service.
func NewService(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = ledger.SystemClock{}
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	return &Service{store: cfg.Store, clock: cfg.Clock, ttl: cfg.TTL}
}

// ErrNoSession is returned for a session id that names no live session.
var ErrNoSession = errors.New("no such session")

func (s *Service) now() time.Time { return ledger.StoredTime(s.clock.Now()) }

// TTL is how long a new session lasts.
func (s *Service) TTL() time.Duration { return s.ttl }

// Start begins a session for p and returns its id, to be given to the
// browser and nowhere else. A token session must carry the token's id as
// p.TokenID.
func (s *Service) Start(ctx context.Context, p ledger.Principal, src Source) (string, Session, error) {
	if p.TokenID == uuid.Nil || p.Name == "" {
		return "", Session{}, errors.New("start session: principal without id or name")
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", Session{}, fmt.Errorf("start session: %w", err)
	}
	id := base64.RawURLEncoding.EncodeToString(b)
	now := s.now()
	sess := Session{IDHash: hash(id), Source: src, Principal: p, CreatedAt: now, ExpiresAt: now.Add(s.ttl)}
	if err := s.store.InsertSession(ctx, sess); err != nil {
		return "", Session{}, fmt.Errorf("start session: %w", err)
	}
	return id, sess, nil
}

// Resolve returns the live session with id, or ErrNoSession.
func (s *Service) Resolve(ctx context.Context, id string) (Session, error) {
	if id == "" || len(id) > 128 {
		return Session{}, ErrNoSession
	}
	sess, err := s.store.SessionByHash(ctx, hash(id), s.now())
	if errors.Is(err, ledger.ErrNotFound) {
		return Session{}, ErrNoSession
	}
	if err != nil {
		return Session{}, fmt.Errorf("resolve session: %w", err)
	}
	return sess, nil
}

// End ends the session with id; ending an unknown session does nothing.
func (s *Service) End(ctx context.Context, id string) error {
	if id == "" {
		return nil
	}
	return s.store.DeleteSession(ctx, hash(id))
}

// Sweep deletes expired sessions and returns how many.
func (s *Service) Sweep(ctx context.Context) (int64, error) {
	return s.store.DeleteExpiredSessions(ctx, s.now())
}

// Of lists p's live sessions, newest first.
func (s *Service) Of(ctx context.Context, p ledger.Principal) ([]Session, error) {
	return s.store.SessionsOf(ctx, p.TokenID, s.now())
}

// CSRFToken is the anti-forgery token of the session with id: an HMAC of
// a fixed label keyed with the id. It is put in the session's forms; a
// page from another site can neither read the id (an HttpOnly cookie) nor
// compute the token.
func CSRFToken(id string) string {
	mac := hmac.New(sha256.New, []byte(id))
	mac.Write([]byte("quittance/console/csrf/v1"))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// ValidCSRF reports whether token is the anti-forgery token of session id,
// in constant time.
func ValidCSRF(id, token string) bool {
	return id != "" && hmac.Equal([]byte(CSRFToken(id)), []byte(token))
}

// Hash is the stored form of a session id.
func Hash(id string) []byte { return hash(id) }

func hash(id string) []byte {
	sum := sha256.Sum256([]byte(id))
	return sum[:]
}
