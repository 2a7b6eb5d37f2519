package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// tracedStore is a coalesced store (one flusher) on a pool whose
// statements are counted by name, with fixtures' budget and org.
func tracedStore(t *testing.T) (bundle, *statementNames) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	names := &statementNames{}
	cfg.ConnConfig.Tracer = names
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := pgstore.New(pool, pgstore.WithCoalescing(pgstore.Coalescing{MaxBatch: 16, Flushers: 1}))
	b := bundle{pool: pool, store: store, svc: ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch}})}
	fixtures(t, b, 10_000)
	names.sent()
	return b, names
}

// created is one creation's answer.
type created struct {
	d   ledger.Delegation
	new bool
}

// create returns an operation creating in, whose answer it keeps in out.
func create(b bundle, in ledger.CreateInput, out *created) func() error {
	return func() error {
		d, isNew, err := b.svc.CreateDelegation(context.Background(), orch, in)
		*out = created{d, isNew}
		return err
	}
}

// delegationsOf counts the delegations recording business operation op.
func delegationsOf(t *testing.T, pool *pgxpool.Pool, op string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM delegations WHERE business_operation_id = $1`, op).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCoalescedCreationsInsertInOneStatement: a flush's creations whose
// business operation ids and remote tasks its pre-read found unrecorded
// insert their delegations in one statement (insertbatch.go). A repeat in
// the same flush, and a repeat of a committed creation, send their insert
// as before and are answered as before: with the delegation recorded,
// created false, or a conflict for another request with the same id.
func TestCoalescedCreationsInsertInOneStatement(t *testing.T) {
	t.Parallel()
	b, names := tracedStore(t)
	ctx := context.Background()
	committed, _, err := b.svc.CreateDelegation(ctx, orch, creation("committed", "globex", 10))
	if err != nil {
		t.Fatal(err)
	}
	names.sent()
	const fresh = 6
	answers := make([]created, fresh+3)
	var ops []func() error
	for i := range fresh {
		ops = append(ops, create(b, creation(fmt.Sprintf("new-%d", i), "globex", 10), &answers[i]))
	}
	ops = append(ops,
		create(b, creation("twice", "globex", 10), &answers[fresh]),
		create(b, creation("twice", "globex", 10), &answers[fresh+1]),
		create(b, creation("committed", "globex", 10), &answers[fresh+2]))
	errs := together(t, b.store, ops...)
	sent := names.sent()
	if sent["DelegationInsertBatch"] != 1 || sent["DelegationInsert"] != 2 {
		t.Errorf("the flush sent %d DelegationInsertBatch and %d DelegationInsert, want 1 and 2 (the repeats)",
			sent["DelegationInsertBatch"], sent["DelegationInsert"])
	}
	for i := range fresh + 1 {
		if errs[i] != nil || !answers[i].new {
			t.Errorf("creation %d: created %v, %v; want created", i, answers[i].new, errs[i])
		}
	}
	if a := answers[fresh+1]; errs[fresh+1] != nil || a.new || a.d.ID != answers[fresh].d.ID {
		t.Errorf("the repeat in the flush: %v, created %v, %v; want the first one's %v", a.d.ID, a.new, errs[fresh+1], answers[fresh].d.ID)
	}
	if a := answers[fresh+2]; errs[fresh+2] != nil || a.new || a.d.ID != committed.ID {
		t.Errorf("the repeat of a committed creation: %v, created %v, %v; want %v", a.d.ID, a.new, errs[fresh+2], committed.ID)
	}

	// Another request with an id a creation before it in the flush
	// recorded is refused as alone; its neighbours commit.
	other := creation("again", "globex", 10)
	other.Hold.AmountMinor = 11
	errs = together(t, b.store,
		create(b, creation("again", "globex", 10), &answers[0]),
		create(b, other, &answers[1]),
		create(b, creation("after", "globex", 10), &answers[2]))
	if errs[0] != nil || !answers[0].new || errs[2] != nil || !answers[2].new {
		t.Errorf("the mismatch's neighbours: %v, %v", errs[0], errs[2])
	}
	if !errors.Is(errs[1], ledger.ErrIdempotencyMismatch) {
		t.Errorf("another request with the id: %v, want ErrIdempotencyMismatch", errs[1])
	}
	for _, op := range []string{"twice", "committed", "new-0", "again", "after"} {
		if n := delegationsOf(t, b.pool, op); n != 1 {
			t.Errorf("%d delegations record %s, want 1", n, op)
		}
	}
	checkInvariants(t, b)
}

// waitersOf counts the sessions of pool's database waiting for a lock.
func waitersOf(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// openTx runs fn in a transaction of store that stays open, once fn
// returns, until release is called; it returns the transaction's answer.
func openTx(t *testing.T, store *pgstore.Store, fn func(ctx context.Context, tx compensation.Tx) error) (release func() error) {
	t.Helper()
	ctx := context.Background()
	ran, gate, done := make(chan error, 1), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- store.Compensation().InTx(ctx, func(tx compensation.Tx) error {
			err := fn(ctx, tx)
			ran <- err
			<-gate
			return err
		})
	}()
	if err := <-ran; err != nil {
		close(gate)
		t.Fatal(err)
	}
	return func() error {
		close(gate)
		return <-done
	}
}

// TestCoalescedRacedInsertRunsAgainAlone: a writer that takes no lock
// records a business operation id, and a used token id, after a flush
// proved them unrecorded and answered its buffered inserts "inserted". The
// batch's statement inserts fewer rows than it carries: exactly those
// operations are refused and run again alone, where they read what is
// recorded (another request with the id; a replayed token), never
// answered on the wrong "inserted"; their neighbours commit.
func TestCoalescedRacedInsertRunsAgainAlone(t *testing.T) {
	t.Parallel()
	b, _ := tracedStore(t)
	ctx := context.Background()
	victim, _, err := b.svc.CreateDelegation(ctx, orch, creation("victim", "globex", 10))
	if err != nil {
		t.Fatal(err)
	}
	other := pgstore.New(b.pool)
	raced := ledger.Delegation{
		ID: uuid.New(), Tenant: orch.Tenant, BusinessOperationID: "raced", RequestHash: []byte("another request"),
		OrgID: "globex", TaskClass: "procurement", BudgetID: "ops", Hold: ledger.Money{AmountMinor: 10, Currency: "EUR"},
		TaskStatus: ledger.StatusUnknown, ObligationState: ledger.ObligationHeld, Version: 1, CreatedAt: epoch, UpdatedAt: epoch,
	}
	answers := make([]created, 2)
	errs := racedFlush(t, b, other, func(ctx context.Context, tx compensation.Tx) error {
		lt, ok := tx.(ledger.Tx) // one transaction serves both domains
		if !ok {
			return errors.New("the compensation transaction is no ledger transaction")
		}
		_, err := lt.InsertDelegation(ctx, raced)
		return err
	}, create(b, creation("raced", "globex", 10), &answers[0]), create(b, creation("neighbour", "globex", 10), &answers[1]))
	if !errors.Is(errs[0], ledger.ErrIdempotencyMismatch) || answers[0].new {
		t.Errorf("the raced creation: created %v, %v; want ErrIdempotencyMismatch", answers[0].new, errs[0])
	}
	if errs[1] != nil || !answers[1].new {
		t.Errorf("its neighbour: created %v, %v; want created", answers[1].new, errs[1])
	}
	if n := delegationsOf(t, b.pool, "raced"); n != 1 {
		t.Errorf("%d delegations record raced, want 1", n)
	}

	replayed := make([]bool, 2)
	errs = racedFlush(t, b, other, func(ctx context.Context, tx compensation.Tx) error {
		_, err := tx.InsertUsedToken(ctx, compensation.UsedToken{OrgID: "globex", JTI: "raced-jti", DelegationID: victim.ID, TokenSHA256: []byte{9}, UsedAt: epoch})
		return err
	}, useToken(b.store, "globex", "raced-jti", victim.ID, []byte{1}, &replayed[0]),
		useToken(b.store, "globex", "neighbour-jti", victim.ID, []byte{2}, &replayed[1]))
	if errs[0] != nil || !replayed[0] {
		t.Errorf("the raced token: replayed %v, %v; want replayed", replayed[0], errs[0])
	}
	if errs[1] != nil || replayed[1] {
		t.Errorf("its neighbour: replayed %v, %v; want recorded", replayed[1], errs[1])
	}
}

// racedFlush runs ops in one flush of b's store while a transaction of
// other, which took no lock, holds what insert wrote uncommitted: it
// commits once the flush waits for it (its buffered inserts' statement
// does). It returns the ops' answers.
func racedFlush(t *testing.T, b bundle, other *pgstore.Store, insert func(context.Context, compensation.Tx) error, ops ...func() error) []error {
	t.Helper()
	release := openTx(t, other, insert)
	var errs []error
	var wg sync.WaitGroup
	wg.Go(func() { errs = together(t, b.store, ops...) })
	waitUntil(t, "the flush waits for the open transaction", func() bool { return waitersOf(t, b.pool) > 0 })
	if err := release(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	return errs
}

// useToken returns an operation that claims org's jti for delegation d as
// the evidence path does: read, and record it if unused; replayed says
// whether it was used already (read so, or not inserted).
func useToken(store *pgstore.Store, org, jti string, d uuid.UUID, sum []byte, replayed *bool) func() error {
	return func() error {
		ctx := context.Background()
		return store.Compensation().InTx(ctx, func(tx compensation.Tx) error {
			*replayed = false
			if _, err := tx.UsedToken(ctx, org, jti); err == nil {
				*replayed = true
				return nil
			} else if !errors.Is(err, ledger.ErrNotFound) {
				return err
			}
			inserted, err := tx.InsertUsedToken(ctx, compensation.UsedToken{OrgID: org, JTI: jti, DelegationID: d, TokenSHA256: sum, UsedAt: epoch})
			*replayed = !inserted
			return err
		})
	}
}

// TestCoalescedUsedTokensInOneStatement: a flush's used token ids that its
// operations read as unused are recorded in one statement; a replay in the
// same flush reads the first use (the read writes the buffer first), and a
// replay in a later flush reads the committed one.
func TestCoalescedUsedTokensInOneStatement(t *testing.T) {
	t.Parallel()
	b, names := tracedStore(t)
	d, _, err := b.svc.CreateDelegation(context.Background(), orch, creation("tokens", "globex", 10))
	if err != nil {
		t.Fatal(err)
	}
	names.sent()
	replayed := make([]bool, 4)
	errs := together(t, b.store,
		useToken(b.store, "globex", "j-1", d.ID, []byte{1}, &replayed[0]),
		useToken(b.store, "globex", "j-2", d.ID, []byte{2}, &replayed[1]),
		useToken(b.store, "globex", "j-3", d.ID, []byte{3}, &replayed[2]),
		useToken(b.store, "globex", "j-1", d.ID, []byte{4}, &replayed[3]))
	sent := names.sent()
	if sent["UsedTokenInsertBatch"] != 1 || sent["UsedTokenInsert"] != 0 {
		t.Errorf("the flush sent %d UsedTokenInsertBatch and %d UsedTokenInsert, want 1 and 0",
			sent["UsedTokenInsertBatch"], sent["UsedTokenInsert"])
	}
	for i, want := range []bool{false, false, false, true} {
		if errs[i] != nil || replayed[i] != want {
			t.Errorf("use %d: replayed %v, %v; want %v", i, replayed[i], errs[i], want)
		}
	}
	errs = together(t, b.store,
		useToken(b.store, "globex", "j-2", d.ID, []byte{6}, &replayed[0]),
		useToken(b.store, "globex", "j-4", d.ID, []byte{7}, &replayed[1]))
	for i, want := range []bool{true, false} {
		if errs[i] != nil || replayed[i] != want {
			t.Errorf("later flush, use %d: replayed %v, %v; want %v", i, replayed[i], errs[i], want)
		}
	}
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM used_token_ids`).Scan(&n); err != nil || n != 4 {
		t.Errorf("%d used token ids (%v), want 4", n, err)
	}
}

// TestCoalescedReplicasCreateOnce: two replicas (stores on pools of their
// own) create with the same business operation ids at once, in flushes of
// many: each id gets exactly one delegation, created once, and every
// answer names it.
func TestCoalescedReplicasCreateOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.URL(t)
	const ops, callers = 8, 6
	var svcs [2]*ledger.Service
	for i := range svcs {
		pool, _ := replicaPool(t, dbURL)
		store := pgstore.New(pool, pgstore.WithCoalescing(pgstore.Coalescing{MaxBatch: 16, Flushers: 2}))
		svcs[i] = ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch}})
		if i == 0 {
			fixtures(t, bundle{pool: pool, store: store, svc: svcs[i]}, 1_000_000)
		}
	}
	type answer struct {
		op  int
		id  uuid.UUID
		new bool
		err error
	}
	answers := make(chan answer, 2*callers*ops)
	var wg sync.WaitGroup
	for r := range svcs {
		for c := range callers {
			wg.Go(func() {
				for k := range ops {
					op := (k + c) % ops
					d, isNew, err := svcs[r].CreateDelegation(ctx, orch, creation(fmt.Sprintf("both-%d", op), "globex", 10))
					answers <- answer{op, d.ID, isNew, err}
				}
			})
		}
	}
	wg.Wait()
	close(answers)
	ids, news := map[int]uuid.UUID{}, map[int]int{}
	for a := range answers {
		if a.err != nil {
			t.Errorf("creation %d: %v", a.op, a.err)
			continue
		}
		if id, ok := ids[a.op]; ok && id != a.id {
			t.Errorf("creation %d answered %v and %v", a.op, id, a.id)
		}
		ids[a.op] = a.id
		if a.new {
			news[a.op]++
		}
	}
	pool, _ := replicaPool(t, dbURL)
	for op := range ops {
		if news[op] != 1 {
			t.Errorf("creation %d answered created %d times, want once", op, news[op])
		}
		if n := delegationsOf(t, pool, fmt.Sprintf("both-%d", op)); n != 1 {
			t.Errorf("%d delegations record both-%d, want 1", n, op)
		}
	}
}
