package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// flushLog records the size of every flush of a store's write coalescer.
type flushLog struct {
	mu      sync.Mutex
	sizes   []int
	refused int
}

func (l *flushLog) observe(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sizes = append(l.sizes, n)
}

func (l *flushLog) refuse() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refused++
}

func (l *flushLog) snapshot() (sizes []int, refused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sizes), l.refused
}

// setupCoalesced is setup with the write coalescer configured as c, its
// flushes logged.
func setupCoalesced(t *testing.T, c pgstore.Coalescing) (bundle, *flushLog) {
	t.Helper()
	log := &flushLog{}
	c.ObserveBatch, c.Refused = log.observe, log.refuse
	pool := pgtest.Pool(t)
	store := pgstore.New(pool, pgstore.WithCoalescing(c))
	return bundle{pool: pool, store: store, svc: ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch}})}, log
}

// waitUntil polls cond until it holds, or fails the test after 10s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// holdFlusher occupies the store's one flusher with an operation that
// waits until the returned release is called, so that what is written
// meanwhile queues behind it and is flushed together.
func holdFlusher(t *testing.T, store *pgstore.Store) (release func()) {
	t.Helper()
	started, gate := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- store.InTx(context.Background(), func(ledger.Tx) error {
			close(started)
			<-gate
			return nil
		})
	}()
	<-started
	return func() {
		close(gate)
		if err := <-done; err != nil {
			t.Errorf("the operation holding the flusher: %v", err)
		}
	}
}

// together runs ops as concurrent callers, queued in this order behind the
// held flusher of store (Flushers 1, MaxBatch at least len(ops)), so that
// one flush carries them all; it returns each one's answer.
func together(t *testing.T, store *pgstore.Store, ops ...func() error) []error {
	t.Helper()
	release := holdFlusher(t, store)
	errs := make([]error, len(ops))
	var wg sync.WaitGroup
	for i, op := range ops {
		wg.Go(func() { errs[i] = op() })
		waitUntil(t, fmt.Sprintf("operation %d is queued", i), func() bool { return store.QueuedWrites() == i+1 })
	}
	release()
	wg.Wait()
	return errs
}

// budgetState is a budget's amounts and the number of its hold entries.
func budgetState(t *testing.T, b bundle, id string) (available, held, holds int64) {
	t.Helper()
	err := b.pool.QueryRow(context.Background(), `SELECT available_minor, held_minor,
		(SELECT count(*) FROM budget_entries WHERE budget_id = $1 AND kind = 'hold') FROM budgets WHERE id = $1`, id).Scan(&available, &held, &holds)
	if err != nil {
		t.Fatal(err)
	}
	return available, held, holds
}

// checkInvariants fails the test on any broken invariant of the database,
// or a read a flush's pre-read serves unlike the statement itself.
func checkInvariants(t *testing.T, b bundle) {
	t.Helper()
	rep, err := pgstore.CheckInvariants(context.Background(), b.pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		t.Errorf("invariant: %s", v)
	}
	if err := pgstore.CheckServedReads(context.Background(), b.pool); err != nil {
		t.Errorf("served reads: %v", err)
	}
}

// fixtures creates the budget "ops" funded with funded, which orch's
// tenant may hold on, and the org "globex".
func fixtures(t *testing.T, b bundle, funded int64) {
	t.Helper()
	ctx := context.Background()
	if _, _, err := b.svc.PutBudget(ctx, oncall, "ops", ledger.BudgetInput{Currency: "EUR", FundedMinor: funded}); err != nil {
		t.Fatalf("PutBudget: %v", err)
	}
	holdsFor(t, b.store, "ops", orch.Tenant)
	if _, _, err := b.svc.PutOrg(ctx, oncall, "globex", ledger.OrgInput{Name: "Globex"}); err != nil {
		t.Fatalf("PutOrg: %v", err)
	}
}

// creation is the input of a delegation of op holding amount on "ops" at org.
func creation(op, org string, amount int64) ledger.CreateInput {
	return ledger.CreateInput{
		BusinessOperationID: op, OrgID: org, TaskClass: "procurement", BudgetID: "ops",
		Hold: ledger.Money{AmountMinor: amount, Currency: "EUR"}, Remote: ledger.RemoteTask{TaskID: "task-" + op, ContextID: "ctx"},
	}
}

// TestCoalescedBatchAcceptsRefusesAndDeduplicates: one flush carries
// accepted creations, one refused for funds (it wrote before its hold was
// refused), one refused before writing (an unknown org) and a repeat of an
// earlier one with the same business operation id; each is answered as if
// it had run alone, the repeat with the first one's delegation.
func TestCoalescedBatchAcceptsRefusesAndDeduplicates(t *testing.T) {
	t.Parallel()
	b, log := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 1})
	fixtures(t, b, 10_000)
	ctx := context.Background()
	var (
		mu      sync.Mutex
		got     = map[string]ledger.Delegation{}
		created = map[string]bool{}
	)
	create := func(name string, in ledger.CreateInput) func() error {
		return func() error {
			d, c, err := b.svc.CreateDelegation(ctx, orch, in)
			mu.Lock()
			got[name], created[name] = d, c
			mu.Unlock()
			return err
		}
	}
	errs := together(t, b.store,
		create("first", creation("op-1", "globex", 1_000)),
		create("broke", creation("op-2", "globex", 50_000)),
		create("repeat", creation("op-1", "globex", 1_000)),
		create("nobody", creation("op-3", "initech", 1_000)),
		create("second", creation("op-4", "globex", 2_000)),
		create("mismatch", creation("op-4", "globex", 2_500)),
	)
	if sizes, _ := log.snapshot(); !slices.Contains(sizes, 6) {
		t.Fatalf("flush sizes %v: the six operations were not flushed together", sizes)
	}
	if errs[0] != nil || !created["first"] {
		t.Errorf("first creation: created %v, %v", created["first"], errs[0])
	}
	if !errors.Is(errs[1], ledger.ErrInsufficientFunds) {
		t.Errorf("creation beyond the budget: %v, want ErrInsufficientFunds", errs[1])
	}
	if errs[2] != nil || created["repeat"] || got["repeat"].ID != got["first"].ID {
		t.Errorf("repeat: created %v, id %s (first %s), %v; want the first one's delegation", created["repeat"], got["repeat"].ID, got["first"].ID, errs[2])
	}
	if rerr := (*ledger.ReferenceError)(nil); !errors.As(errs[3], &rerr) || rerr.Field != "org_id" {
		t.Errorf("creation at an unknown org: %v, want a reference error of org_id", errs[3])
	}
	if errs[4] != nil || !created["second"] {
		t.Errorf("second creation: created %v, %v", created["second"], errs[4])
	}
	if !errors.Is(errs[5], ledger.ErrIdempotencyMismatch) {
		t.Errorf("the same operation id with another amount: %v, want ErrIdempotencyMismatch", errs[5])
	}
	if available, held, holds := budgetState(t, b, "ops"); available != 7_000 || held != 3_000 || holds != 2 {
		t.Errorf("budget: available %d held %d, %d holds; want 7000, 3000, 2", available, held, holds)
	}
	var delegations int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM delegations`).Scan(&delegations); err != nil || delegations != 2 {
		t.Errorf("%d delegations (%v), want 2", delegations, err)
	}
	checkInvariants(t, b)
}

// TestCoalescedTwoChangesOfOneDelegation: two status reports of one
// delegation in one flush apply one after the other, the second on the
// first one's version, and its stream's chain goes on unbroken.
func TestCoalescedTwoChangesOfOneDelegation(t *testing.T) {
	t.Parallel()
	b, log := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 1})
	d := b.delegation(t, "op-1")
	ctx := context.Background()
	report := func(st ledger.TaskStatus, at time.Time) func() error {
		return func() error {
			_, err := b.comp().ReportTaskStatus(ctx, orch, d.ID, compObservation(st, at))
			return err
		}
	}
	errs := together(t, b.store,
		report(ledger.StatusWorking, epoch.Add(time.Second)),
		report(ledger.StatusCanceled, epoch.Add(2*time.Second)),
	)
	if sizes, _ := log.snapshot(); !slices.Contains(sizes, 2) {
		t.Fatalf("flush sizes %v: the two reports were not flushed together", sizes)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
	}
	got, err := b.store.Delegation(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.TaskStatus != ledger.StatusCanceled || got.Version != d.Version+2 {
		t.Errorf("after both reports: status %s version %d; want canceled, %d", got.TaskStatus, got.Version, d.Version+2)
	}
	events, err := b.store.StreamEvents(ctx, d.Stream())
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 3 {
		t.Errorf("%d events, want 3 (created, working, canceled)", len(events))
	}
	if err := ledger.VerifyChain(events); err != nil {
		t.Errorf("chain: %v", err)
	}
	checkInvariants(t, b)
}

// TestCoalescedHotBudgetRunsOutMidBatch: one hundred creations on one
// budget in one flush, of amounts that do not all fit: each is refused
// exactly when the holds accepted before it, in arrival order, leave too
// little, as if they had run one after the other.
func TestCoalescedHotBudgetRunsOutMidBatch(t *testing.T) {
	t.Parallel()
	b, log := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 128, Flushers: 1})
	const funded = 20_000
	fixtures(t, b, funded)
	ctx := context.Background()
	ops := make([]func() error, 100)
	amounts := make([]int64, len(ops))
	for i := range ops {
		amounts[i] = int64(100 + (i*37)%7*100) // 100 to 700, in no order
		in := creation(fmt.Sprintf("hot-%03d", i), "globex", amounts[i])
		ops[i] = func() error {
			_, _, err := b.svc.CreateDelegation(ctx, orch, in)
			return err
		}
	}
	errs := together(t, b.store, ops...)
	if sizes, _ := log.snapshot(); !slices.Contains(sizes, 100) {
		t.Fatalf("flush sizes %v: the hundred creations were not flushed together", sizes)
	}
	available, accepted := int64(funded), 0
	for i, err := range errs {
		fits := amounts[i] <= available
		switch {
		case fits && err != nil:
			t.Errorf("creation %d of %d with %d available: %v, want it accepted", i, amounts[i], available, err)
		case !fits && !errors.Is(err, ledger.ErrInsufficientFunds):
			t.Errorf("creation %d of %d with %d available: %v, want ErrInsufficientFunds", i, amounts[i], available, err)
		}
		if fits {
			available -= amounts[i]
			accepted++
		}
	}
	if accepted == len(ops) || accepted == 0 {
		t.Fatalf("%d of %d fit: the test does not run out of funds mid-batch", accepted, len(ops))
	}
	gotAvailable, held, holds := budgetState(t, b, "ops")
	if gotAvailable != available || held != funded-available || holds != int64(accepted) {
		t.Errorf("budget: available %d held %d, %d holds; want %d, %d, %d", gotAvailable, held, holds, available, funded-available, accepted)
	}
	checkInvariants(t, b)
}

// TestCoalescedQueueFull: past MaxQueue waiting operations, a write is
// answered ErrUnavailable at once, and nothing of it is applied; the queued
// ones are flushed.
func TestCoalescedQueueFull(t *testing.T) {
	t.Parallel()
	b, log := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, MaxQueue: 2, Flushers: 1})
	fixtures(t, b, 10_000)
	ctx := context.Background()
	release := holdFlusher(t, b.store)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			_, _, errs[i] = b.svc.CreateDelegation(ctx, orch, creation(fmt.Sprintf("queued-%d", i), "globex", 100))
		})
	}
	waitUntil(t, "two operations are queued", func() bool { return b.store.QueuedWrites() == 2 })
	_, _, err := b.svc.CreateDelegation(ctx, orch, creation("overflow", "globex", 100))
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("a write past a full queue: %v, want ErrUnavailable", err)
	}
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("queued creation %d: %v", i, err)
		}
	}
	if _, refused := log.snapshot(); refused != 1 {
		t.Errorf("%d refusals counted, want 1", refused)
	}
	var n int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM delegations WHERE business_operation_id = 'overflow'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the refused write left %d delegations (%v)", n, err)
	}
}

// TestCoalescedFailureAfterWriteSparesNeighbours: an operation that wrote
// and then failed, and one whose write PostgreSQL refuses at the commit,
// are refused alone; their writes are not committed, and the operations
// around them are.
func TestCoalescedFailureAfterWriteSparesNeighbours(t *testing.T) {
	t.Parallel()
	b, _ := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 1})
	fixtures(t, b, 10_000)
	ctx := context.Background()
	create := func(op string) func() error {
		return func() error {
			_, _, err := b.svc.CreateDelegation(ctx, orch, creation(op, "globex", 100))
			return err
		}
	}
	boom := errors.New("boom")
	errs := together(t, b.store,
		create("before"),
		func() error {
			return b.store.InTx(ctx, func(tx ledger.Tx) error {
				if _, err := ledger.Append(ctx, tx, ledger.Event{Stream: "budget:ops", Type: ledger.EventTypeBudgetFunded, At: epoch, Actor: "test"}, nil); err != nil {
					return err
				}
				return boom
			})
		},
		create("between"),
		func() error {
			return b.store.InTx(ctx, func(tx ledger.Tx) error {
				return tx.MoveBudget(ctx, ledger.BudgetMove{BudgetID: "nope", Kind: ledger.MoveFund, AmountMinor: 1, At: epoch})
			})
		},
		create("after"),
	)
	if !errors.Is(errs[1], boom) {
		t.Errorf("the operation that failed after a write: %v, want its own error", errs[1])
	}
	if errs[3] == nil {
		t.Error("a movement of a missing budget was accepted")
	}
	for _, i := range []int{0, 2, 4} {
		if errs[i] != nil {
			t.Errorf("neighbour %d: %v", i, errs[i])
		}
	}
	var events, delegations int
	if err := b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM events WHERE stream = 'budget:ops'), (SELECT count(*) FROM delegations)`).Scan(&events, &delegations); err != nil {
		t.Fatal(err)
	}
	if events != 1 || delegations != 3 {
		t.Errorf("%d budget events (want 1, its funding) and %d delegations (want 3)", events, delegations)
	}
	checkInvariants(t, b)
}

// TestCoalescedRefusedEventBatchIsReplayed: a flush's events are written
// in one statement (eventbatch.go); when PostgreSQL refuses it, the refusal
// is no one operation's, so the flush's operations run again one at a
// time: the one whose event was refused is answered with its refusal, its
// neighbours are accepted, their events chained and in the feed.
func TestCoalescedRefusedEventBatchIsReplayed(t *testing.T) {
	t.Parallel()
	b, _ := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 1})
	fixtures(t, b, 10_000)
	ctx := context.Background()
	create := func(op string) func() error {
		return func() error {
			_, _, err := b.svc.CreateDelegation(ctx, orch, creation(op, "globex", 100))
			return err
		}
	}
	errs := together(t, b.store,
		create("before"),
		func() error {
			return b.store.InTx(ctx, func(tx ledger.Tx) error {
				// The stream has events: its first position is taken, which
				// only the batch's INSERT finds out.
				_, err := ledger.Append(ctx, tx, ledger.Event{Stream: "budget:ops", StreamSeq: 1, Type: ledger.EventTypeBudgetFunded, At: epoch, Actor: "test"}, nil)
				return err
			})
		},
		create("after"),
	)
	var pgErr *pgconn.PgError
	if !errors.As(errs[1], &pgErr) || pgErr.Code != "23505" {
		t.Errorf("the operation whose event took a taken position: %v, want its unique violation", errs[1])
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil {
			t.Errorf("neighbour %d: %v", i, errs[i])
		}
	}
	var events, delegations, unpositioned int
	if err := b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM events WHERE stream = 'budget:ops'),
		(SELECT count(*) FROM delegations),
		(SELECT count(*) FROM events e WHERE NOT EXISTS (SELECT 1 FROM event_positions p WHERE p.seq = e.seq))`).Scan(&events, &delegations, &unpositioned); err != nil {
		t.Fatal(err)
	}
	if events != 1 || delegations != 2 || unpositioned != 0 {
		t.Errorf("%d budget events (want 1, its funding), %d delegations (want 2), %d events without a feed position", events, delegations, unpositioned)
	}
	checkInvariants(t, b)
}

// TestCoalescedUnderConcurrency: concurrent callers' writes share
// transactions (fewer flushes than operations), and every one is applied.
func TestCoalescedUnderConcurrency(t *testing.T) {
	t.Parallel()
	b, log := setupCoalesced(t, pgstore.Coalescing{})
	fixtures(t, b, 1_000_000)
	ctx := context.Background()
	const callers, each = 32, 8
	var wg sync.WaitGroup
	errs := make(chan error, callers*each)
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				d, _, err := b.svc.CreateDelegation(ctx, orch, creation(fmt.Sprintf("c%d-%d", c, i), "globex", 10))
				if err == nil {
					_, err = b.comp().ReportTaskStatus(ctx, orch, d.ID, compObservation(ledger.StatusWorking, epoch.Add(time.Second)))
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	sizes, _ := log.snapshot()
	ops := 0
	for _, n := range sizes {
		ops += n
	}
	if ops < 2*callers*each || len(sizes) >= ops || slices.Max(sizes) < 2 {
		t.Errorf("%d flushes carried %d operations (largest %d): want fewer flushes than operations", len(sizes), ops, slices.Max(sizes))
	}
	t.Logf("%d flushes carried %d operations (largest %d)", len(sizes), ops, slices.Max(sizes))
	if _, _, holds := budgetState(t, b, "ops"); holds != callers*each {
		t.Errorf("%d holds, want %d", holds, callers*each)
	}
	checkInvariants(t, b)
}

// TestCoalescedCallerGoneBeforeFlush: an operation whose caller leaves
// while it waits for a flush is withdrawn, never applied.
func TestCoalescedCallerGoneBeforeFlush(t *testing.T) {
	t.Parallel()
	b, _ := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 1})
	fixtures(t, b, 10_000)
	release := holdFlusher(t, b.store)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := b.svc.CreateDelegation(ctx, orch, creation("gone", "globex", 100))
		done <- err
	}()
	waitUntil(t, "the creation is queued", func() bool { return b.store.QueuedWrites() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("a creation whose caller left: %v, want context.Canceled", err)
	}
	release()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM delegations`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d delegations (%v), want none", n, err)
	}
}

// TestMayWrite: the classifier that decides whether a refused operation
// can leave its flush's transaction going on.
func TestMayWrite(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]bool{
		"-- name: X :one\nSELECT * FROM budgets WHERE id = $1":                              false,
		"-- name: X :one\nSELECT * FROM budgets WHERE id = $1 FOR UPDATE":                   false,
		"SELECT * FROM delegations WHERE id = $1 FOR NO KEY UPDATE":                         false,
		"SELECT updated_at FROM delegations -- update nothing\nWHERE id = $1":               false,
		"INSERT INTO events (stream) VALUES ($1)":                                           true,
		"WITH moved AS (UPDATE budgets SET x = 1 RETURNING *) SELECT * FROM moved":          true,
		"SELECT set_config('synchronous_commit', 'off', true)":                              true,
		"SELECT quittance_note_shared_remote_task($1, $2)":                                  true,
		"delete from outbox_jobs where id = $1":                                             true,
		"SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))":                       false,
		"SELECT s.stream FROM unnest($1::text[]) s CROSS JOIN LATERAL event_stream_head(s)": false,
	} {
		if got := pgstore.MayWrite(sql); got != want {
			t.Errorf("mayWrite(%q) = %v, want %v", sql, got, want)
		}
	}
}

// TestReadsEvents: the classifier that decides which statements a
// transaction's buffered events are written before.
func TestReadsEvents(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]bool{
		"-- name: EventListByStream :many\nSELECT * FROM events WHERE stream = $1":                 true,
		"-- name: X :many\nSELECT * FROM event_positions p JOIN events e USING (seq)":              true,
		"-- name: EventStreamHeadsLocked :many\nSELECT h.* FROM event_stream_head($1) h":           true,
		"-- name: X :many\nSELECT * FROM reporting.anomalies_v1":                                   true,
		"-- name: X :one\nSELECT count(*) FROM webhook_deliveries":                                 true,
		"-- name: X :exec\nSELECT quittance_find_shared_remote_tasks()":                            true,
		"-- name: EventStreamHead :one\nSELECT h.stream_seq FROM event_stream_head($1::text) AS h": false,
		"-- name: DelegationUpdate :execrows\nUPDATE delegations SET version = version + 1":        false,
		"-- name: X :many\nSELECT * FROM budgets WHERE id = ANY($1) FOR UPDATE":                    false,
		"COMMIT": false,
	} {
		if got := pgstore.ReadsEvents(sql); got != want {
			t.Errorf("readsEvents(%q) = %v, want %v", sql, got, want)
		}
	}
}

// TestCoalescedLaterOperationReadsEarlierEvents: an operation reads the
// events the operations before it in its flush appended, though they are
// written together at the flush's end: the read writes them first.
func TestCoalescedLaterOperationReadsEarlierEvents(t *testing.T) {
	t.Parallel()
	b, _ := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 1})
	ctx := context.Background()
	appendTo := func(stream string) func() error {
		return func() error {
			return b.store.InTx(ctx, func(tx ledger.Tx) error {
				_, err := ledger.Append(ctx, tx, ledger.Event{Stream: stream, Type: ledger.EventTypeBudgetFunded, At: epoch, Actor: "test"}, nil)
				return err
			})
		}
	}
	var seen []ledger.Event
	errs := together(t, b.store,
		appendTo("test:read"), appendTo("test:read"),
		func() error {
			return b.store.InTx(ctx, func(tx ledger.Tx) error {
				r := tx.(interface {
					StreamEvents(context.Context, string) ([]ledger.Event, error)
				})
				var err error
				seen, err = r.StreamEvents(ctx, "test:read")
				return err
			})
		},
		appendTo("test:read"),
	)
	for i, err := range errs {
		if err != nil {
			t.Errorf("operation %d: %v", i, err)
		}
	}
	if len(seen) != 2 || seen[0].StreamSeq != 1 || seen[1].StreamSeq != 2 || seen[1].Seq <= seen[0].Seq {
		t.Errorf("the third operation read %d events of the stream (%+v), want the two appended before it", len(seen), seen)
	}
	all, err := b.store.StreamEvents(ctx, "test:read")
	if err != nil {
		t.Fatal(err)
	}
	if err := ledger.VerifyChain(all); err != nil || len(all) != 3 {
		t.Errorf("the stream has %d events, chain: %v; want 3, chained", len(all), err)
	}
}

// compObservation is a reported task status at at.
func compObservation(st ledger.TaskStatus, at time.Time) compensation.Observation {
	return compensation.Observation{Status: st, Timestamp: at}
}

// TestCoalescedPanicIsItsCallers: an operation that panics in a flush
// panics in its caller's goroutine, as it would alone, and its neighbours
// are applied.
func TestCoalescedPanicIsItsCallers(t *testing.T) {
	t.Parallel()
	b, _ := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 1})
	fixtures(t, b, 10_000)
	ctx := context.Background()
	var recovered any
	errs := together(t, b.store,
		func() error {
			_, _, err := b.svc.CreateDelegation(ctx, orch, creation("before", "globex", 100))
			return err
		},
		func() (err error) {
			defer func() { recovered = recover() }()
			return b.store.InTx(ctx, func(tx ledger.Tx) error {
				if err := tx.MoveBudget(ctx, ledger.BudgetMove{BudgetID: "ops", Kind: ledger.MoveHold, AmountMinor: 1, At: epoch}); err != nil {
					return err
				}
				panic("operation bug")
			})
		},
		func() error {
			_, _, err := b.svc.CreateDelegation(ctx, orch, creation("after", "globex", 100))
			return err
		},
	)
	if recovered != "operation bug" {
		t.Errorf("the caller of the panicking operation recovered %v", recovered)
	}
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("neighbours: %v, %v", errs[0], errs[2])
	}
	if available, held, holds := budgetState(t, b, "ops"); available != 9_800 || held != 200 || holds != 2 {
		t.Errorf("budget: available %d held %d, %d holds; want 9800, 200, 2", available, held, holds)
	}
}
