package pgstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
		wg.Go(func() { errs[i] = s.inTx(ctx, fn) })
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

// TestCoalescedCommitOfUnknownOutcome: when the connection fails as the
// commit is sent, with no answer from PostgreSQL, every operation of the
// flush is answered the error, and none is run again (whether it
// committed is for its caller's retry to find out). A connection
// PostgreSQL itself ends (a FATAL error) is a known outcome: nothing was
// committed, and the flush replays (the test above).
func TestCoalescedCommitOfUnknownOutcome(t *testing.T) {
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
			// The socket is gone under the flush: its COMMIT is sent
			// into nothing, and no answer comes back.
			if err := t2.conn.conn.conn.Conn().PgConn().Conn().Close(); err != nil {
				t.Error(err)
			}
			return nil
		},
	)
	for i, err := range errs {
		if err == nil {
			t.Errorf("operation %d was answered success by a commit that never came back", i)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the operations ran %d times, want once: a commit of unknown outcome is not retried", n)
	}
	if n := budgetsExist(t, s, "a", "b", "c"); n != 0 {
		t.Errorf("%d budgets exist; the connection closed before the commit reached PostgreSQL", n)
	}
}
