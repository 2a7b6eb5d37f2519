package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// TestStreamLocksDoNotTakePoolConnections holds more stream locks than the
// pool has connections and checks that the store still answers: a lock is
// held for as long as a task is streamed, so locks taken on pooled
// connections would stall every query once a few tasks stream.
func TestStreamLocksDoNotTakePoolConnections(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	ctx := t.Context()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	a2a := pgstore.New(pool).A2A()
	quick, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var release0 func()

	for i := range 4 {
		unlock, ok, err := a2a.TryLock(quick, fmt.Sprintf("test-stream-%d", i))
		if err != nil || !ok {
			t.Fatalf("lock %d: acquired %v, %v", i, ok, err)
		}
		// Released before the pool closes (cleanups run last first).
		release := sync.OnceFunc(unlock)
		t.Cleanup(release)
		if i == 0 {
			release0 = release
		}
	}
	if _, err := a2a.DelegationsToStream(quick, 10); err != nil {
		t.Fatalf("a query while 4 locks are held on a pool of 2: %v", err)
	}

	// The lock is exclusive across connections, and free again once released.
	if _, ok, err := a2a.TryLock(ctx, "test-stream-0"); err != nil || ok {
		t.Fatalf("a held lock was acquired again: %v, %v", ok, err)
	}
	release0()
	unlock, ok, err := a2a.TryLock(ctx, "test-stream-0")
	if err != nil || !ok {
		t.Fatalf("a released lock could not be taken: %v, %v", ok, err)
	}
	unlock()
}
