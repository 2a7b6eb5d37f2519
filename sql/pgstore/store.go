package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
	"github.com/quittance/quittance/ledger/webhook"
	"github.com/quittance/quittance/sql/migrations"
)

// Store implements ledger.Store and report.Feed on a pgx pool; its views
// (A2A, Compensation, Webhooks) implement the other domains' stores on the
// same pool and transactions.
type Store struct {
	reader
	pool        *pgxpool.Pool
	afterCommit func([]ledger.Event)
	// migrated is set once Ping has found every migration applied: a
	// binary's migrations, once applied, stay applied, so later pings
	// only ask whether the database answers.
	migrated atomic.Bool

	// feedListen wakes event stream readers (FeedWake), webhookListen the
	// webhook workers (WebhookWake).
	feedListen, webhookListen *listener
	// notify sends the wake-ups of other replicas after commits.
	notify notifier
	// writes carries inTx's operations (coalesce.go).
	writes coalescer
}

var (
	_ ledger.Store = (*Store)(nil)
	_ report.Feed  = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithAfterCommit registers fn to receive the events each transaction
// appended, after it commits (and only then): metrics and notifications are
// derived from what is durable, never from what might roll back.
func WithAfterCommit(fn func([]ledger.Event)) Option {
	return func(s *Store) { s.afterCommit = fn }
}

// New returns a Store on pool.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{reader: reader{q: newQueries(pool)}, pool: pool}
	s.writes = coalescer{s: s, cfg: DefaultCoalescing}
	s.feedListen = newListener(s, channelEvents)
	s.webhookListen = newListener(s, channelWebhooks)
	s.notify.send, s.notify.interval = s.sendNotification, notifyInterval
	for _, o := range opts {
		o(s)
	}
	return s
}

// Pool returns the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Ping reports whether the database answers and has every migration applied.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	if s.migrated.Load() {
		return nil
	}
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	pending, err := migrations.Pending(ctx, db)
	if err != nil {
		return err
	}
	if pending {
		return errors.New("database has pending migrations")
	}
	s.migrated.Store(true)
	return nil
}

// maxTxAttempts bounds retries of transactions PostgreSQL aborted for
// serialization failures or deadlocks.
const maxTxAttempts = 5

// InTx runs fn in a transaction, which it may share with other callers'
// operations (inTx), and returns once that transaction has committed.
func (s *Store) InTx(ctx context.Context, fn func(ledger.Tx) error) error {
	return s.inTx(ctx, func(t *tx) error { return fn(t) })
}

// inTx is every InTx: each domain's (the Store's, its views') passes the
// transaction to its fn as that domain's Tx, which *tx implements, so
// retries, commit and after-commit hooks are the same for all. fn runs in
// a flush of the write coalescer, with the operations of other callers in
// the same transaction (ledger/DESIGN.md §5, "The write path"): it must be
// an operation that may share its transaction (no transaction-wide
// settings or locks it relies on releasing), and may run more than once.
func (s *Store) inTx(ctx context.Context, fn func(*tx) error) error {
	return s.writes.do(ctx, fn)
}

// inTxAlone runs fn in a transaction of its own, retrying it when
// PostgreSQL reports a serialization failure or deadlock: for work that
// needs its own transaction (an advisory lock it tests, a cut of the
// feed), and for the operations of a flush that failed as a whole.
func (s *Store) inTxAlone(ctx context.Context, fn func(*tx) error) error {
	var err error
	for attempt := 1; attempt <= maxTxAttempts; attempt++ {
		var t *tx
		t, err = s.inTxOnce(ctx, fn)
		if err == nil {
			s.afterCommitted(t.appended, t.conn.conn.deliveries)
			return nil
		}
		if !retryable(err) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(attempt) * 5 * time.Millisecond)
	}
	return err
}

// afterCommitted runs the after-commit hooks for the events a commit
// appended.
func (s *Store) afterCommitted(appended []ledger.Event, deliveriesQueued bool) {
	if len(appended) == 0 {
		return
	}
	s.eventsCommitted(deliveriesQueued)
	if s.afterCommit != nil {
		s.afterCommit(appended)
	}
}

// inTxOnce runs fn in one transaction and returns it, committed.
func (s *Store) inTxOnce(ctx context.Context, fn func(*tx) error) (*tx, error) {
	pgtx := &txConn{pool: s.pool}
	defer pgtx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	t := newTx(&opConn{conn: pgtx, owner: 1}, &txShared{})
	if keys, ok := ledger.WriteKeysOf(ctx); ok {
		if err := preRead(ctx, pgtx, t.txShared, merge(keys)); err != nil {
			return nil, interpretError(err)
		}
	}
	if err := fn(t); err != nil {
		return nil, interpretError(err)
	}
	// The buffered updates and evidence go before the budgets' movements,
	// as in a flush: budgets are the last locks a transaction takes.
	pgtx.queueUpdates(ctx)
	pgtx.queueEvidence(ctx)
	if err := t.queueMoves(); err != nil {
		return nil, err
	}
	if err := pgtx.Commit(ctx); err != nil {
		return nil, interpretError(commitError(err))
	}
	return t, nil
}

func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40001" || pgErr.Code == "40P01"
	}
	return false
}

// interpretError turns PostgreSQL's errors into the ledger's.
func interpretError(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w", ledger.ErrNotFound)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "22021", "22P05": // character_not_in_repertoire, untranslatable_character
			// Text PostgreSQL cannot store (a NUL character). Every
			// parameter is cleaned on its way (storableDB), so this is
			// only text built inside a statement; still the request's
			// fault, not the server's.
			return &ledger.ValidationError{Field: "body", Problem: "text must not contain NUL characters"}
		}
	}
	return err
}

// A2A returns the store as the A2A workers' Store: the same pool and
// transactions, with the outbox and A2A tracking statements added.
func (s *Store) A2A() delegate.Store { return a2aStore{s} }

// a2aStore adapts Store to delegate.Store.
type a2aStore struct{ *Store }

// InTx runs fn in a transaction of the underlying Store (see inTx).
func (a a2aStore) InTx(ctx context.Context, fn func(delegate.Tx) error) error {
	return a.inTx(ctx, func(t *tx) error { return fn(t) })
}

// Orchestrator returns the store as the orchestrator use cases' Store
// (delegate.OrchestratorStore): the same pool and transactions, each
// handed over as the small delegate.OrchestratorTx.
func (s *Store) Orchestrator() delegate.OrchestratorStore { return orchestratorStore{s} }

// orchestratorStore adapts Store to delegate.OrchestratorStore.
type orchestratorStore struct{ *Store }

// InTx runs fn in a transaction of the underlying Store (see inTx).
func (o orchestratorStore) InTx(ctx context.Context, fn func(delegate.OrchestratorTx) error) error {
	return o.inTx(ctx, func(t *tx) error { return fn(t) })
}

// Compensation returns the store as the compensation service's Store: the
// same pool and transactions, with the compensation statements added.
func (s *Store) Compensation() compensation.Store { return compensationStore{s} }

// compensationStore adapts Store to compensation.Store.
type compensationStore struct{ *Store }

// InTx runs fn in a transaction of the underlying Store (see inTx).
func (c compensationStore) InTx(ctx context.Context, fn func(compensation.Tx) error) error {
	return c.inTx(ctx, func(t *tx) error { return fn(t) })
}

// Webhooks returns the store as the webhook service's Store.
func (s *Store) Webhooks() webhook.Store { return webhookStore{s} }

// webhookStore adapts Store to webhook.Store.
type webhookStore struct{ *Store }
