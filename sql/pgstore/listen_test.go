package pgstore_test

import (
	"context"
	"testing"
	"time"
)

// TestListenerComesBackAtOnceAfterEveryLoss: a LISTEN connection lost
// after it listened (terminated, as a failover ends it) is replaced at
// once, the sixth time as the first: the wait between attempts grows only
// while attempts fail, so a long-lived replica does not wait seconds for
// its wake-ups after a failover because of the blips before it. The
// connection is found by its application_name, as on-call finds it.
func TestListenerComesBackAtOnceAfterEveryLoss(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wake, stop := b.store.FeedWake()
	defer stop()
	select { // the first connection wakes its subscribers once it listens
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("the listener did not listen within 10s")
	}
	for i := range 6 {
		start := time.Now()
		var killed int
		err := b.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'quittance listen quittance_events'`).Scan(&killed)
		if err != nil || killed != 1 {
			t.Fatalf("loss %d: terminated %d listeners (%v), want 1", i+1, killed, err)
		}
		select { // the new connection wakes its subscribers once it listens
		case <-wake:
		case <-time.After(10 * time.Second):
			t.Fatalf("loss %d: the listener did not come back within 10s", i+1)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("loss %d: the listener came back after %s, want well under a second", i+1, took.Round(time.Millisecond))
		}
	}
}
