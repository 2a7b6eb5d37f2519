package pgstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// statementNames records the sqlc names of the statements a pool sends,
// alone or in batches, and its round trips.
type statementNames struct {
	mu    sync.Mutex
	names []string
	// trips are the round trips sent (a statement alone, or a batch),
	// each as its statements' names (a text without one as itself).
	trips []string
}

// note notes one round trip of the statements sqls.
func (s *statementNames) note(sqls ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	trip := make([]string, len(sqls))
	for i, sql := range sqls {
		trip[i] = sql
		if name, ok := strings.CutPrefix(sql, "-- name: "); ok {
			trip[i] = strings.Fields(name)[0]
			s.names = append(s.names, trip[i])
		}
	}
	s.trips = append(s.trips, strings.Join(trip, ", "))
}

func (s *statementNames) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.note(d.SQL)
	return ctx
}
func (s *statementNames) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *statementNames) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	sqls := make([]string, len(d.Batch.QueuedQueries))
	for i, q := range d.Batch.QueuedQueries {
		sqls[i] = q.SQL
	}
	s.note(sqls...)
	return ctx
}
func (s *statementNames) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (s *statementNames) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// inOrder returns the names of the statements sent since the last call
// (of it or of sent), in the order they were sent, and forgets them.
func (s *statementNames) inOrder() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := s.names
	s.names = nil
	return names
}

// roundTrips returns the round trips sent since its last call, in the
// order they were sent, and forgets them.
func (s *statementNames) roundTrips() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	trips := s.trips
	s.trips = nil
	return trips
}

// sent returns how many statements of each name were sent since the last
// call, and forgets them.
func (s *statementNames) sent() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := map[string]int{}
	for _, name := range s.names {
		n[name]++
	}
	s.names = nil
	return n
}

// TestStatusChangeMarksObservedInItsUpdate: a reported status that changes
// the delegation marks it observed in the same UPDATE (one new row
// version, not two), and a repeat, which changes nothing, marks it with
// DelegationMarkObserved alone; either way last_observed_at is the time
// of the observation and never goes back.
func TestStatusChangeMarksObservedInItsUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	names := &statementNames{}
	cfg.ConnConfig.Tracer = names
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := pgstore.New(pool)
	b := bundle{pool: pool, store: store, svc: ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch}})}
	d := b.delegation(t, "observed")
	observedAt := func() time.Time {
		var at time.Time
		if err := pool.QueryRow(ctx, `SELECT last_observed_at FROM delegations WHERE id = $1`, d.ID).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	report := func(now time.Time) ledger.Delegation {
		t.Helper()
		comp := compensation.NewService(compensation.Config{Store: store.Compensation(), Clock: fixedClock{now}})
		got, err := comp.ReportTaskStatus(ctx, orch, d.ID, compObservation(ledger.StatusWorking, epoch.Add(time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	names.sent() // the set-up's

	// The change: one update of the row, which marks it observed.
	first := epoch.Add(time.Minute)
	got := report(first)
	sent := names.sent()
	if sent["DelegationUpdate"]+sent["DelegationUpdateBatch"] != 1 || sent["DelegationMarkObserved"] != 0 {
		t.Errorf("the status change sent %d updates of the row and %d DelegationMarkObserved, want 1 and 0",
			sent["DelegationUpdate"]+sent["DelegationUpdateBatch"], sent["DelegationMarkObserved"])
	}
	if at := observedAt(); !at.Equal(first) || !got.LastObservedAt.Equal(first) {
		t.Errorf("after the change: last_observed_at %v (answered %v), want %v", at, got.LastObservedAt, first)
	}

	// A repeat changes nothing: the mark alone.
	later := epoch.Add(2 * time.Minute)
	got = report(later)
	sent = names.sent()
	if sent["DelegationUpdate"]+sent["DelegationUpdateBatch"] != 0 || sent["DelegationMarkObserved"] != 1 {
		t.Errorf("the repeat sent %d updates of the row and %d DelegationMarkObserved, want 0 and 1",
			sent["DelegationUpdate"]+sent["DelegationUpdateBatch"], sent["DelegationMarkObserved"])
	}
	if at := observedAt(); !at.Equal(later) || !got.LastObservedAt.Equal(later) {
		t.Errorf("after the repeat: last_observed_at %v (answered %v), want %v", at, got.LastObservedAt, later)
	}

	// An observation dated earlier than the last never moves it back.
	report(first)
	if at := observedAt(); !at.Equal(later) {
		t.Errorf("after an earlier repeat: last_observed_at %v, want %v", at, later)
	}
}
