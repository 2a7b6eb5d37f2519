package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// deadlocks is PostgreSQL's count of deadlocks detected in the database
// of dbURL (pg_stat_database), read on a connection of its own. A
// backend reports its count when it exits, so the count is read after
// the pools that may have deadlocked are closed.
func deadlocks(t *testing.T, dbURL string) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	// A closed backend's statistics reach the shared counters as it
	// exits; wait for the last of them (each query is a transaction of
	// its own, so it reads the counters afresh).
	for range 20 {
		var backends int
		err := conn.QueryRow(ctx, `SELECT (SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()),
			(SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid())`).Scan(&n, &backends)
		if err != nil {
			t.Fatal(err)
		}
		if backends == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return n
}

// replicaPool opens a pool of its own on dbURL, as a replica of the
// service has, closed by the returned close (and at the latest when the
// test ends).
func replicaPool(t *testing.T, dbURL string) (*pgxpool.Pool, func()) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 6
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	closePool := func() { once.Do(pool.Close) }
	t.Cleanup(closePool)
	return pool, closePool
}

// TestCoalescedReplicasDoNotDeadlock: two coalesced stores on pools of
// their own (two replicas) flush, concurrently, operations on the same few
// delegations and budgets in random orders: hold changes, task statuses,
// cancel requests and creations, some with the same business operation id
// on both. Each flush's sorted, locking pre-read takes its rows in one
// order, so no flush waits for another in a cycle: PostgreSQL detects no
// deadlock, every operation is answered as alone (accepted, or refused by
// the obligation machine), and the invariants and every chain verify.
func TestCoalescedReplicasDoNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.URL(t)
	const replicas, callers, rounds, budgets, shared = 2, 12, 25, 3, 12
	type replica struct {
		pool  *pgxpool.Pool
		close func()
		svc   *ledger.Service
		comp  *compensation.Service
		log   *flushLog
	}
	rs := make([]replica, replicas)
	for i := range rs {
		pool, closePool := replicaPool(t, dbURL)
		log := &flushLog{}
		store := pgstore.New(pool, pgstore.WithCoalescing(pgstore.Coalescing{
			MaxBatch: 16, Flushers: 2, ObserveBatch: log.observe, Refused: log.refuse,
		}))
		rs[i] = replica{
			pool: pool, close: closePool, log: log,
			svc:  ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch}}),
			comp: compensation.NewService(compensation.Config{Store: store.Compensation(), Clock: fixedClock{epoch}}),
		}
		if i == 0 {
			b := bundle{pool: pool, store: store, svc: rs[i].svc}
			for k := range budgets {
				id := fmt.Sprintf("b%d", k)
				if _, _, err := b.svc.PutBudget(ctx, oncall, id, ledger.BudgetInput{Currency: "EUR", FundedMinor: 100_000_000}); err != nil {
					t.Fatal(err)
				}
				holdsFor(t, store, id, orch.Tenant)
			}
			if _, _, err := b.svc.PutOrg(ctx, oncall, "globex", ledger.OrgInput{Name: "Globex"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := deadlocks(t, dbURL)
	ids := make([]uuid.UUID, shared)
	for i := range ids {
		in := creation(fmt.Sprintf("shared-%d", i), "globex", 100)
		in.BudgetID = fmt.Sprintf("b%d", i%budgets)
		d, _, err := rs[0].svc.CreateDelegation(ctx, orch, in)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = d.ID
	}

	var (
		wg                  sync.WaitGroup
		accepted, refusedOp atomic.Int64
		mu                  sync.Mutex
		failures            []error
	)
	for r := range rs {
		for c := range callers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(r), uint64(c)))
				for round := range rounds {
					id := ids[rng.IntN(len(ids))]
					var err error
					switch rng.IntN(5) {
					case 0:
						_, err = rs[r].svc.ChangeHold(ctx, orch, id, int64(100+rng.IntN(100)))
					case 1:
						at := epoch.Add(time.Duration(1+rng.IntN(1000)) * time.Millisecond)
						_, err = rs[r].comp.ReportTaskStatus(ctx, orch, id, compObservation(ledger.StatusWorking, at))
					case 2:
						_, err = rs[r].svc.RequestCancel(ctx, orch, id)
					case 3:
						// The same business operation id on both replicas.
						in := creation(fmt.Sprintf("both-%d-%d", c, round), "globex", 10)
						in.BudgetID = fmt.Sprintf("b%d", (c+round)%budgets)
						in.Remote.TaskID = fmt.Sprintf("task-both-%d-%d", c, round)
						_, _, err = rs[r].svc.CreateDelegation(ctx, orch, in)
					default:
						in := creation(fmt.Sprintf("r%d-%d-%d", r, c, round), "globex", 10)
						in.BudgetID = fmt.Sprintf("b%d", rng.IntN(budgets))
						_, _, err = rs[r].svc.CreateDelegation(ctx, orch, in)
					}
					var conflict *ledger.ConflictError
					var transition *ledger.TransitionError
					switch {
					case err == nil:
						accepted.Add(1)
					case errors.As(err, &conflict), errors.As(err, &transition):
						refusedOp.Add(1)
					default:
						mu.Lock()
						failures = append(failures, err)
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	for _, err := range failures {
		t.Errorf("operation failed: %v", err)
	}
	multi := 0
	for _, r := range rs {
		sizes, _ := r.log.snapshot()
		for _, n := range sizes {
			if n > 1 {
				multi++
			}
		}
	}
	t.Logf("%d operations accepted, %d refused; %d flushes carried more than one", accepted.Load(), refusedOp.Load(), multi)
	if multi == 0 {
		t.Error("no flush carried more than one operation: nothing was coalesced")
	}
	checkInvariants(t, bundle{pool: rs[0].pool})
	for _, r := range rs {
		r.close()
	}
	if n := deadlocks(t, dbURL) - before; n != 0 {
		t.Errorf("PostgreSQL detected %d deadlocks between the replicas' flushes, want none", n)
	}
}
