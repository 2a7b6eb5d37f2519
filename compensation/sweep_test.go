package compensation_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// stoppedClock is a ledger.Clock that only moves when told to.
type stoppedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stoppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stoppedClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

var (
	oncall = ledger.Principal{Role: ledger.RoleOncall, Name: "oncall", TokenID: uuid.MustParse("00000000-0000-7000-8000-000000000001")}
	orch   = ledger.Principal{Role: ledger.RoleOrchestrator, Name: "orch", Tenant: "acme"}
)

type bundle struct {
	pool   *pgxpool.Pool
	store  *pgstore.Store
	clock  *stoppedClock
	ledger *ledger.Service
	comp   *compensation.Service
}

func setupDB(t *testing.T, start time.Time) *bundle {
	t.Helper()
	pool := pgtest.Pool(t)
	store := pgstore.New(pool)
	clock := &stoppedClock{t: start}
	b := &bundle{
		pool: pool, store: store, clock: clock,
		ledger: ledger.NewService(ledger.Config{Store: store, Clock: clock}),
		comp:   compensation.NewService(compensation.Config{Store: store.Compensation(), Clock: clock, LedgerID: "ledger", SweepBatchSize: 7}),
	}
	ctx := context.Background()
	if _, _, err := b.ledger.PutBudget(ctx, oncall, "ops", ledger.BudgetInput{Currency: "EUR", FundedMinor: 1_000_000_000}); err != nil {
		t.Fatal(err)
	}
	// The budget names orch's tenant, as an approved budget_tenants_update
	// change does (the two-person change is tested through the API).
	if err := store.InTx(ctx, func(tx ledger.Tx) error { return tx.SetBudgetTenants(ctx, "ops", []string{orch.Tenant}, start) }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.ledger.PutOrg(ctx, oncall, "org-b", ledger.OrgInput{Name: "B"}); err != nil {
		t.Fatal(err)
	}
	return b
}

// pending creates a procurement delegation whose task was canceled, so it
// waits for compensation with a deadline 72h after the clock's time.
func (b *bundle) pending(t *testing.T, op string, amount int64) ledger.Delegation {
	t.Helper()
	ctx := context.Background()
	d, _, err := b.ledger.CreateDelegation(ctx, orch, ledger.CreateInput{
		BusinessOperationID: op, OrgID: "org-b", TaskClass: "procurement", BudgetID: "ops",
		Hold: ledger.Money{AmountMinor: amount, Currency: "EUR"}, Remote: ledger.RemoteTask{TaskID: "task-" + op},
	})
	if err != nil {
		t.Fatal(err)
	}
	d, err = b.comp.ReportTaskStatus(ctx, orch, d.ID, compensation.Observation{Status: ledger.StatusCanceled})
	if err != nil || d.ObligationState != ledger.ObligationRevocationPendingCompensation {
		t.Fatalf("cancel: %v, state %s", err, d.ObligationState)
	}
	return d
}

func (b *bundle) countEvents(t *testing.T, typ ledger.EventType) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM events WHERE type = $1", string(typ)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSweepReplicasNeverDoubleApply: several service instances sweep the
// same database at once; every due obligation moves exactly once, none that
// is not due moves, and no money moves.
func TestSweepReplicasNeverDoubleApply(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	b := setupDB(t, start)
	const due = 40
	for i := range due {
		b.pending(t, fmt.Sprintf("due-%d", i), 100)
	}
	b.clock.set(start.Add(48 * time.Hour))
	notDue := b.pending(t, "not-due", 100)
	budget, _ := b.store.Budget(context.Background(), "ops")

	now := start.Add(ledger.DefaultCompensationTimeout + time.Hour)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		moved int
	)
	for range 6 {
		replica := compensation.NewService(compensation.Config{Store: b.store.Compensation(), Clock: b.clock, LedgerID: "ledger", SweepBatchSize: 3})
		wg.Go(func() {
			n, err := replica.Sweep(context.Background(), now)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			moved += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if moved != due {
		t.Fatalf("replicas moved %d in total, want %d", moved, due)
	}
	if n := b.countEvents(t, ledger.EventTypeDeadlinePassed); n != due {
		t.Fatalf("%d deadline events, want %d", n, due)
	}
	if d, _ := b.store.Delegation(context.Background(), notDue.ID); d.ObligationState != ledger.ObligationRevocationPendingCompensation {
		t.Fatalf("a delegation not yet due is %s", d.ObligationState)
	}
	after, _ := b.store.Budget(context.Background(), "ops")
	if after.Held != budget.Held || after.Available != budget.Available {
		t.Fatalf("the sweep moved money: %+v -> %+v", budget, after)
	}
}

// TestTenYearsWithoutEvidence runs the periodic sweeper for ten simulated
// years (testing/synctest's fake clock drives its timer and its notion of
// now) against the real database, with no evidence ever arriving: the
// obligation becomes compensation_unconfirmed once, at its first sweep after
// the deadline, and the hold stays exactly where it was — time alone never
// releases money.
//
// The database is reached from a goroutine outside the bubble, because
// network I/O cannot run on the fake clock: each tick hands its fake "now"
// to that goroutine and waits for the real Sweep to finish. Blocking on a
// channel from outside the bubble is not durable, so the fake clock stands
// still while the database works.
func TestTenYearsWithoutEvidence(t *testing.T) {
	// synctest's clock starts at 2000-01-01 00:00 UTC; the delegation is
	// canceled then, so its deadline falls inside the simulated decade.
	epoch := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	b := setupDB(t, epoch)
	d := b.pending(t, "decade", 123_456)
	budgetBefore, err := b.store.Budget(context.Background(), "ops")
	if err != nil {
		t.Fatal(err)
	}

	// Both channels are made outside the bubble, so the worker may use them.
	requests := make(chan time.Time)
	replies := make(chan sweepResult)
	worker := make(chan struct{})
	go func() { // outside the bubble: real I/O
		defer close(worker)
		for now := range requests {
			n, err := b.comp.Sweep(context.Background(), now)
			st := ledger.ObligationState("")
			if got, gerr := b.store.Delegation(context.Background(), d.ID); gerr == nil {
				st = got.ObligationState
			}
			replies <- sweepResult{now: now, moved: n, err: err, state: st}
		}
	}()

	const interval = 24 * time.Hour
	decade := epoch.AddDate(10, 0, 0).Sub(epoch)
	var results []sweepResult
	synctest.Test(t, func(t *testing.T) {
		if !time.Now().Equal(epoch) {
			t.Fatalf("synctest's clock starts at %s, not %s", time.Now(), epoch)
		}
		ctx, cancel := context.WithCancel(t.Context())
		sweeper := &compensation.Sweeper{
			Interval: interval,
			Clock:    ledger.SystemClock{}, // the bubble's fake time
			Sweep: func(ctx context.Context, now time.Time) (int, error) {
				requests <- now
				res := <-replies
				results = append(results, res)
				return res.moved, res.err
			},
		}
		done := make(chan error)
		go func() { done <- sweeper.Run(ctx) }()
		time.Sleep(decade + interval/2) // past the last tick, never at one
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	close(requests)
	<-worker

	// Ticks at 0, 24h, 48h, … up to the decade: the loop really ran on the
	// simulated clock.
	if want := int(decade/interval) + 1; len(results) != want {
		t.Fatalf("%d sweeps in ten simulated years, want %d", len(results), want)
	}
	movedAt := -1
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("sweep %d at %s: %v", i, r.now, r.err)
		}
		if want := epoch.Add(time.Duration(i) * interval); !r.now.Equal(want) {
			t.Fatalf("sweep %d ran at %s, want %s", i, r.now, want)
		}
		if r.moved > 0 {
			if movedAt >= 0 || r.moved != 1 {
				t.Fatalf("sweep %d moved %d (earlier move at sweep %d)", i, r.moved, movedAt)
			}
			movedAt = i
		}
		wantState := ledger.ObligationRevocationPendingCompensation
		if movedAt >= 0 {
			wantState = ledger.ObligationCompensationUnconfirmed
		}
		if r.state != wantState {
			t.Fatalf("after sweep %d at %s the obligation is %s, want %s", i, r.now, r.state, wantState)
		}
	}
	// The deadline is 72h after the cancel: the sweep at 72h moves it.
	if movedAt != 3 {
		t.Fatalf("the obligation moved at sweep %d, want 3 (the first at or after the 72h deadline)", movedAt)
	}

	got, err := b.store.Delegation(context.Background(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ObligationState != ledger.ObligationCompensationUnconfirmed || got.ObligationState.Hold() != ledger.HoldActive {
		t.Fatalf("after ten years: %s, hold %s", got.ObligationState, got.ObligationState.Hold())
	}
	budgetAfter, err := b.store.Budget(context.Background(), "ops")
	if err != nil {
		t.Fatal(err)
	}
	if budgetAfter.Held != budgetBefore.Held || budgetAfter.Available != budgetBefore.Available ||
		budgetAfter.Spent != budgetBefore.Spent || budgetAfter.WrittenOff != budgetBefore.WrittenOff {
		t.Fatalf("ten years of sweeps moved money: %+v -> %+v", budgetBefore, budgetAfter)
	}
	if n := b.countEvents(t, ledger.EventTypeDeadlinePassed); n != 1 {
		t.Fatalf("%d deadline events, want 1", n)
	}
	var entries int
	if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM budget_entries WHERE delegation_id = $1", d.ID).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	if entries != 1 {
		t.Fatalf("%d journal entries for the delegation, want only its hold", entries)
	}
}

type sweepResult struct {
	now   time.Time
	moved int
	err   error
	state ledger.ObligationState
}

// TestSweeperSchedule checks the loop alone under synctest: a sweep at
// start, then one per interval after the previous one ends, failures
// retried at the next tick, and a prompt stop when the context ends.
func TestSweeperSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		calls := 0
		s := &compensation.Sweeper{
			Interval: 30 * time.Second,
			Sweep: func(ctx context.Context, now time.Time) (int, error) {
				calls++
				at = append(at, now.Sub(start))
				time.Sleep(5 * time.Second) // a slow sweep delays the next one
				if calls == 2 {
					return 0, fmt.Errorf("database unavailable")
				}
				return 0, nil
			},
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- s.Run(ctx) }()
		time.Sleep(100 * time.Second)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want := []time.Duration{0, 35 * time.Second, 70 * time.Second}
		if fmt.Sprint(at) != fmt.Sprint(want) {
			t.Fatalf("sweeps at %v, want %v", at, want)
		}
		if err := (&compensation.Sweeper{}).Run(t.Context()); err == nil {
			t.Fatal("a zero interval must be refused")
		}
	})
}
