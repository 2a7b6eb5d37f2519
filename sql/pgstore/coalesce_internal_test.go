package pgstore

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgtest"
)

// killFlushConnection terminates the backend of t's transaction and waits
// until it is gone, as a crash of PostgreSQL's process would.
func killFlushConnection(tb testing.TB, s *Store, t *tx) {
	tb.Helper()
	ctx := context.Background()
	pid := t.conn.conn.conn.Conn().PgConn().PID()
	if _, err := s.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		tb.Errorf("terminate backend %d: %v", pid, err)
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var alive bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive); err != nil || !alive {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	tb.Errorf("backend %d still alive", pid)
}

// flushTogether queues fns behind s's held flusher (Flushers 1), so one
// flush carries them all, and returns each one's answer.
func flushTogether(t *testing.T, s *Store, fns ...func(*tx) error) []error {
	t.Helper()
	return flushTogetherKeyed(t, s, nil, fns...)
}

// flushTogetherKeyed is flushTogether with fns[i] naming keys[i] (none
// past the end of keys).
func flushTogetherKeyed(t *testing.T, s *Store, keys []ledger.WriteKeys, fns ...func(*tx) error) []error {
	t.Helper()
	ctx := context.Background()
	started, gate := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- s.inTx(ctx, func(*tx) error {
			close(started)
			<-gate
			return nil
		})
	}()
	<-started
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		opCtx := ctx
		if i < len(keys) {
			opCtx = ledger.WithWriteKeys(ctx, keys[i])
		}
		wg.Go(func() { errs[i] = s.inTx(opCtx, fn) })
		deadline := time.Now().Add(10 * time.Second)
		for {
			s.writes.mu.Lock()
			n := len(s.writes.queue)
			s.writes.mu.Unlock()
			if n == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("operation %d never queued", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	close(gate)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	return errs
}

func insertBudget(id string) func(*tx) error {
	return func(t *tx) error {
		return t.InsertBudget(context.Background(), ledger.Budget{ID: id, Currency: "EUR", CreatedAt: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)})
	}
}

func budgetsExist(t *testing.T, s *Store, ids ...string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM budgets WHERE id = ANY($1)`, ids).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCoalescedConnectionLostMidFlushReplaysAlone: a flush whose connection
// is lost before its commit was sent failed for no operation's fault: each
// of its operations runs again alone, and all are applied.
func TestCoalescedConnectionLostMidFlushReplaysAlone(t *testing.T) {
	t.Parallel()
	s := New(pgtest.Pool(t), WithCoalescing(Coalescing{MaxBatch: 16, Flushers: 1}))
	var killed atomic.Bool
	errs := flushTogether(t, s,
		insertBudget("a"),
		func(t2 *tx) error {
			if !killed.Swap(true) {
				killFlushConnection(t, s, t2)
			}
			return insertBudget("b")(t2)
		},
		insertBudget("c"),
	)
	for i, err := range errs {
		if err != nil {
			t.Errorf("operation %d: %v", i, err)
		}
	}
	if n := budgetsExist(t, s, "a", "b", "c"); n != 3 {
		t.Errorf("%d of the 3 budgets exist after the replay", n)
	}
}

// TestCoalescedCommitNeverSent: when the socket is gone under a flush, its
// COMMIT never leaves (pgconn says nothing was sent), so nothing of the
// flush can have committed and each operation runs again alone: the two
// that leave the connection alone commit once each; the one that breaks
// its connection again is answered unavailable (503: send it again).
func TestCoalescedCommitNeverSent(t *testing.T) {
	t.Parallel()
	s := New(pgtest.Pool(t), WithCoalescing(Coalescing{MaxBatch: 16, Flushers: 1}))
	var runs atomic.Int32
	errs := flushTogether(t, s,
		insertBudget("a"),
		insertBudget("b"),
		func(t2 *tx) error {
			runs.Add(1)
			if err := insertBudget("c")(t2); err != nil {
				return err
			}
			if err := t2.conn.conn.conn.Conn().PgConn().Conn().Close(); err != nil {
				t.Error(err)
			}
			return nil
		},
	)
	if errs[0] != nil || errs[1] != nil {
		t.Errorf("the operations that kept their connection: %v, %v; want both committed on their replay", errs[0], errs[1])
	}
	if !errors.Is(errs[2], ledger.ErrUnavailable) {
		t.Errorf("the operation whose COMMIT never left: %v, want unavailable", errs[2])
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the breaking operation ran %d times, want twice (in the flush, then alone)", n)
	}
	if n := budgetsExist(t, s, "a", "b", "c"); n != 2 {
		t.Errorf("%d budgets exist, want a and b", n)
	}
}

// TestJudgeCommit: a COMMIT that failed is replayed only where nothing can
// have committed; a lost connection after it was sent, or a shutdown's
// FATAL error (which may follow a local commit waiting for a synchronous
// standby), is answered outcome unknown and never replayed.
func TestJudgeCommit(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want flushOutcome
	}{
		{"refused by PostgreSQL", &pgconn.PgError{Code: "23514"}, replay},
		{"rolled back", pgx.ErrTxCommitRollback, replay},
		{"connection reset after sending", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, unknown},
		{"admin shutdown", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, unknown},
		// A statement before the COMMIT in its batch was answered with an
		// error, so PostgreSQL never ran the COMMIT.
		{"read-only before the COMMIT", &commitSkipped{&pgconn.PgError{Code: "25006"}}, replay},
		{"admin shutdown before the COMMIT", &commitSkipped{&pgconn.PgError{Severity: "FATAL", Code: "57P01"}}, replay},
	} {
		r := judgeCommit(&txConn{}, c.err)
		if r.outcome != c.want {
			t.Errorf("%s: outcome %d, want %d", c.name, r.outcome, c.want)
		}
		if c.want == unknown && !errors.Is(r.err, ledger.ErrOutcomeUnknown) {
			t.Errorf("%s: answer %v, want outcome unknown", c.name, r.err)
		}
	}
}

// TestStatementRefused: only a statement's own refusal makes its operation
// the flush's culprit; a shutdown, a read-only standby, a lost connection,
// a deadlock or a serialization failure is the whole flush's, so every
// operation is replayed alone (and answered 503 if the database is still
// going away) instead of one being refused for it.
func TestStatementRefused(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, true},
		{&pgconn.PgError{Code: "23505"}, true}, // unique_violation
		{&pgconn.PgError{Code: "P0001"}, true}, // raise_exception (a trigger's refusal)
		{&pgconn.PgError{Code: "57P01"}, false},
		{&pgconn.PgError{Code: "57P02"}, false},
		{&pgconn.PgError{Code: "25006"}, false},
		{&pgconn.PgError{Code: "08006"}, false},
		{&pgconn.PgError{Code: "40001"}, false},
		{&pgconn.PgError{Code: "40P01"}, false},
		{syscall.ECONNRESET, false},
	} {
		if got := statementRefused(c.err); got != c.want {
			t.Errorf("statementRefused(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
