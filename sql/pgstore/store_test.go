package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

var (
	oncall = ledger.Principal{Role: ledger.RoleOncall, Name: "oncall"}
	orch   = ledger.Principal{Role: ledger.RoleOrchestrator, Name: "orch", Tenant: "acme"}
	epoch  = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
)

type bundle struct {
	pool  *pgxpool.Pool
	store *pgstore.Store
	svc   *ledger.Service
}

func setup(t *testing.T) bundle {
	t.Helper()
	return setupOn(pgtest.Pool(t))
}

// privateSetup is setup on a private cluster, for tests that time what
// the feed serves: its cut waits for every transaction open on the
// server, and other tests' transactions would hold it back.
func privateSetup(t *testing.T) bundle {
	t.Helper()
	return setupOn(pgtest.PrivatePool(t))
}

func setupOn(pool *pgxpool.Pool) bundle {
	store := pgstore.New(pool)
	return bundle{pool: pool, store: store, svc: ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch}})}
}

// holdsFor names tenants on a budget through the store, as an approved
// budget_tenants_update change does (the two-person change itself is
// tested through the API).
func holdsFor(t *testing.T, store *pgstore.Store, budget string, tenants ...string) {
	t.Helper()
	err := store.InTx(context.Background(), func(tx ledger.Tx) error {
		return tx.SetBudgetTenants(context.Background(), budget, tenants, epoch)
	})
	if err != nil {
		t.Fatalf("name tenants %v on budget %s: %v", tenants, budget, err)
	}
}

// comp is the compensation service on b's store, at epoch: the one that
// applies a reported task status (ledger/DESIGN.md §3).
func (b bundle) comp() *compensation.Service {
	return compensation.NewService(compensation.Config{Store: b.store.Compensation(), Clock: fixedClock{epoch}})
}

// delegation creates a budget, an org and a procurement delegation.
func (b bundle) delegation(t *testing.T, op string) ledger.Delegation {
	t.Helper()
	ctx := context.Background()
	if _, _, err := b.svc.PutBudget(ctx, oncall, "ops", ledger.BudgetInput{Currency: "EUR", FundedMinor: 10_000}); err != nil {
		t.Fatalf("PutBudget: %v", err)
	}
	holdsFor(t, b.store, "ops", orch.Tenant)
	if _, _, err := b.svc.PutOrg(ctx, oncall, "globex", ledger.OrgInput{Name: "Globex"}); err != nil {
		t.Fatalf("PutOrg: %v", err)
	}
	d, created, err := b.svc.CreateDelegation(ctx, orch, ledger.CreateInput{
		BusinessOperationID: op, OrgID: "globex", TaskClass: "procurement", BudgetID: "ops",
		Hold: ledger.Money{AmountMinor: 1_250, Currency: "EUR"}, Remote: ledger.RemoteTask{TaskID: "task-" + op, ContextID: "ctx"},
	})
	if err != nil || !created {
		t.Fatalf("CreateDelegation: created %v, %v", created, err)
	}
	return d
}

func (b bundle) report(t *testing.T, id uuid.UUID, st ledger.TaskStatus, at time.Time) ledger.Delegation {
	t.Helper()
	d, err := b.comp().ReportTaskStatus(context.Background(), orch, id, compensation.Observation{Status: st, Timestamp: at})
	if err != nil {
		t.Fatalf("ReportTaskStatus(%s): %v", st, err)
	}
	return d
}

// eventsDigest is every column of every event, to show rows are unchanged.
func eventsDigest(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	err := pool.QueryRow(context.Background(),
		`SELECT count(*) || ':' || coalesce(string_agg(md5(e::text), ',' ORDER BY seq), '') FROM events e`).Scan(&s)
	if err != nil {
		t.Fatalf("digest events: %v", err)
	}
	return s
}

func wantSQLState(t *testing.T, err error, code, what string) *pgconn.PgError {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		t.Fatalf("%s: error %v, want SQLSTATE %s", what, err, code)
	}
	if pgErr.Code != code {
		t.Fatalf("%s: SQLSTATE %s (%s), want %s", what, pgErr.Code, pgErr.Message, code)
	}
	return pgErr
}

func TestEventsAreAppendOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d := b.delegation(t, "op-1")
	b.report(t, d.ID, ledger.StatusWorking, epoch)
	ctx := context.Background()
	before := eventsDigest(t, b.pool)

	for _, stmt := range []string{
		`UPDATE events SET actor = 'mallory'`,
		`UPDATE events SET data = '{}'::jsonb WHERE stream_seq = 1`,
		`DELETE FROM events`,
		`DELETE FROM events WHERE stream = '` + d.Stream() + `' AND stream_seq = 2`,
		`TRUNCATE events`,
		`TRUNCATE events CASCADE`,
	} {
		_, err := b.pool.Exec(ctx, stmt)
		pgErr := wantSQLState(t, err, "42501", stmt)
		if pgErr.Message == "" {
			t.Fatalf("%s: refusal without a message", stmt)
		}
		if got := eventsDigest(t, b.pool); got != before {
			t.Fatalf("%s changed events:\nbefore %s\nafter  %s", stmt, before, got)
		}
	}
	// Appending still works.
	b.report(t, d.ID, ledger.StatusInputRequired, epoch.Add(time.Second))
	if got := eventsDigest(t, b.pool); got == before {
		t.Fatal("appending an event after the refusals changed nothing")
	}
}

func TestEventChainVerifiesAndBreaksWhenTampered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	d := b.delegation(t, "op-chain")
	b.report(t, d.ID, ledger.StatusSubmitted, epoch)
	b.report(t, d.ID, ledger.StatusWorking, epoch.Add(time.Second))
	b.report(t, d.ID, ledger.StatusSubmitted, epoch)                           // stale: another status, older
	b.report(t, d.ID, ledger.StatusCanceled, epoch.Add(2*time.Second))         // → revocation_pending_compensation
	b.report(t, d.ID, ledger.StatusCanceled, epoch.Add(3*time.Second))         // a repeat: no event
	got := b.report(t, d.ID, ledger.StatusCompleted, epoch.Add(4*time.Second)) // status_conflict
	if _, err := b.svc.RequestCancel(ctx, orch, d.ID); err == nil {
		t.Fatal("cancel of a terminal task accepted")
	}
	if got.ObligationState != ledger.ObligationRevocationPendingCompensation {
		t.Fatalf("obligation %s, want revocation_pending_compensation", got.ObligationState)
	}

	events, err := b.store.StreamEvents(ctx, d.Stream())
	if err != nil {
		t.Fatal(err)
	}
	wantTypes := []ledger.EventType{
		ledger.EventTypeDelegationCreated, ledger.EventTypeTaskStatusChanged, ledger.EventTypeTaskStatusChanged,
		ledger.EventTypeTaskStatusStale, ledger.EventTypeTaskStatusChanged, ledger.EventTypeStatusConflict,
	}
	if len(events) != len(wantTypes) {
		t.Fatalf("%d events, want %d", len(events), len(wantTypes))
	}
	for i, e := range events {
		if e.Type != wantTypes[i] {
			t.Errorf("event %d type %s, want %s", i+1, e.Type, wantTypes[i])
		}
		if e.DelegationID != d.ID {
			t.Errorf("event %d delegation %s", i+1, e.DelegationID)
		}
	}
	if err := ledger.VerifyChain(events); err != nil {
		t.Fatalf("chain of an untouched stream: %v", err)
	}
	// The budget stream verifies too.
	budgetEvents, err := b.store.StreamEvents(ctx, "budget:ops")
	if err != nil || len(budgetEvents) == 0 {
		t.Fatalf("budget events: %d, %v", len(budgetEvents), err)
	}
	if err := ledger.VerifyChain(budgetEvents); err != nil {
		t.Fatalf("budget chain: %v", err)
	}

	// A superuser goes around the trigger and edits one row.
	tamper(t, b.pool, `UPDATE events SET data = jsonb_set(data, '{state}', '"completed"') WHERE stream = '`+d.Stream()+`' AND stream_seq = 5`)
	events, err = b.store.StreamEvents(ctx, d.Stream())
	if err != nil {
		t.Fatal(err)
	}
	var ce *ledger.ChainError
	if err := ledger.VerifyChain(events); !errors.As(err, &ce) || ce.StreamSeq != 5 {
		t.Fatalf("chain after editing event 5: %v, want a ChainError at 5", err)
	}
	// The trigger is back on.
	if _, err := b.pool.Exec(ctx, `DELETE FROM events WHERE stream = $1`, d.Stream()); err == nil {
		t.Fatal("the trigger stayed disabled")
	}
}

func TestEventChainBreaksWhenARowIsDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	d := b.delegation(t, "op-del")
	b.report(t, d.ID, ledger.StatusWorking, epoch)
	b.report(t, d.ID, ledger.StatusCompleted, epoch.Add(time.Second))
	tamper(t, b.pool,
		`DELETE FROM events WHERE stream = '`+d.Stream()+`' AND stream_seq = 2`,
		`UPDATE events SET stream_seq = 2 WHERE stream = '`+d.Stream()+`' AND stream_seq = 3`,
	)
	events, err := b.store.StreamEvents(ctx, d.Stream())
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 {
		t.Fatalf("%d events after deleting one of 3", len(events))
	}
	if err := ledger.VerifyChain(events); err == nil {
		t.Fatal("chain verifies after a row was deleted and the rest renumbered")
	}
}

func TestBudgetConservationConstraint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, _, err := b.svc.PutBudget(ctx, oncall, "ops", ledger.BudgetInput{Currency: "EUR", FundedMinor: 1_000}); err != nil {
		t.Fatal(err)
	}
	digest := func() string {
		var s string
		if err := b.pool.QueryRow(ctx, `SELECT b::text FROM budgets b WHERE id = 'ops'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := digest()
	for _, stmt := range []string{
		`UPDATE budgets SET held_minor = held_minor + 1 WHERE id = 'ops'`,
		`UPDATE budgets SET available_minor = available_minor - 1 WHERE id = 'ops'`,
		`UPDATE budgets SET funded_minor = funded_minor + 5 WHERE id = 'ops'`,
		`UPDATE budgets SET spent_minor = 10, available_minor = available_minor - 9 WHERE id = 'ops'`,
		`INSERT INTO budgets (id, currency, funded_minor, available_minor, held_minor, spent_minor, written_off_minor, created_at, updated_at)
		 VALUES ('bad', 'EUR', 100, 50, 10, 10, 10, now(), now())`,
	} {
		_, err := b.pool.Exec(ctx, stmt)
		pgErr := wantSQLState(t, err, "23514", stmt)
		if pgErr.ConstraintName != "budgets_conservation" {
			t.Fatalf("%s: violated %s, want budgets_conservation", stmt, pgErr.ConstraintName)
		}
	}
	if got := digest(); got != before {
		t.Fatalf("budget changed: %s → %s", before, got)
	}
	// A conserving change passes: the constraint is not simply refusing everything.
	if _, err := b.pool.Exec(ctx, `UPDATE budgets SET held_minor = 7, available_minor = available_minor - 7 WHERE id = 'ops'`); err != nil {
		t.Fatalf("a conserving update was refused: %v", err)
	}
}

func TestMoveBudgetInsufficientFunds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, _, err := b.svc.PutBudget(ctx, oncall, "ops", ledger.BudgetInput{Currency: "EUR", FundedMinor: 1_000}); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		var s string
		err := b.pool.QueryRow(ctx, `SELECT (SELECT b::text FROM budgets b WHERE id = 'ops') || ' entries=' || (SELECT count(*) FROM budget_entries)`).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := state()
	err := b.store.InTx(ctx, func(tx ledger.Tx) error {
		return tx.MoveBudget(ctx, ledger.BudgetMove{BudgetID: "ops", Kind: ledger.MoveHold, AmountMinor: 1_001, At: epoch})
	})
	if !errors.Is(err, ledger.ErrInsufficientFunds) {
		t.Fatalf("hold of 1001 on 1000: %v, want ErrInsufficientFunds", err)
	}
	if got := state(); got != before {
		t.Fatalf("a refused hold changed the budget or journal:\n%s\n%s", before, got)
	}
	// A refused hold fails its whole transaction, even when it is sent
	// with the commit: a hold that alone would fit, queued before it, and
	// an event appended before it are not committed either.
	err = b.store.InTx(ctx, func(tx ledger.Tx) error {
		if err := tx.MoveBudget(ctx, ledger.BudgetMove{BudgetID: "ops", Kind: ledger.MoveHold, AmountMinor: 600, At: epoch}); err != nil {
			return err
		}
		if _, err := ledger.Append(ctx, tx, ledger.Event{Stream: "budget:ops", Type: ledger.EventTypeBudgetFunded, At: epoch, Actor: "test"}, nil); err != nil {
			return err
		}
		return tx.MoveBudget(ctx, ledger.BudgetMove{BudgetID: "ops", Kind: ledger.MoveHold, AmountMinor: 600, At: epoch})
	})
	if !errors.Is(err, ledger.ErrInsufficientFunds) {
		t.Fatalf("two holds of 600 on 1000: %v, want ErrInsufficientFunds", err)
	}
	if got := state(); got != before {
		t.Fatalf("a transaction with a refused hold changed the budget or journal:\n%s\n%s", before, got)
	}
	var events int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE stream = 'budget:ops'`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 1 {
		t.Fatalf("budget stream has %d events after a refused transaction, want 1 (its funding)", events)
	}
	err = b.store.InTx(ctx, func(tx ledger.Tx) error {
		return tx.MoveBudget(ctx, ledger.BudgetMove{BudgetID: "ops", Kind: ledger.MoveHold, AmountMinor: 1_000, At: epoch})
	})
	if err != nil {
		t.Fatalf("hold of exactly the available amount: %v", err)
	}
	var avail, held, entries int64
	if err := b.pool.QueryRow(ctx, `SELECT available_minor, held_minor, (SELECT count(*) FROM budget_entries WHERE kind = 'hold') FROM budgets WHERE id = 'ops'`).Scan(&avail, &held, &entries); err != nil {
		t.Fatal(err)
	}
	if avail != 0 || held != 1_000 || entries != 1 {
		t.Fatalf("after refused holds and an exact hold: available %d held %d hold entries %d; want 0, 1000, 1", avail, held, entries)
	}
	// Moving more than is held out of held is refused too, and the budget stays whole.
	err = b.store.InTx(ctx, func(tx ledger.Tx) error {
		return tx.MoveBudget(ctx, ledger.BudgetMove{BudgetID: "ops", Kind: ledger.MoveSpend, AmountMinor: 1_001, At: epoch})
	})
	if err == nil {
		t.Fatal("spending more than held succeeded")
	}
	// A missing budget is not "insufficient funds" silently succeeding.
	err = b.store.InTx(ctx, func(tx ledger.Tx) error {
		return tx.MoveBudget(ctx, ledger.BudgetMove{BudgetID: "nope", Kind: ledger.MoveReturn, AmountMinor: 1, At: epoch})
	})
	if err == nil {
		t.Fatal("moving money on a missing budget succeeded")
	}
}

// TestAppendEventSerializesOneStream: concurrent appends to one stream get
// consecutive sequence numbers and one unbroken chain.
func TestAppendEventSerializesOneStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- b.store.InTx(ctx, func(tx ledger.Tx) error {
				_, err := tx.AppendEvent(ctx, ledger.Event{
					Stream: "test:concurrent", Type: "test", At: epoch, Actor: "test",
					Data: []byte(fmt.Sprintf(`{"i": %d}`, i)),
				})
				return err
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	events, err := b.store.StreamEvents(ctx, "test:concurrent")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != n {
		t.Fatalf("%d events, want %d", len(events), n)
	}
	if err := ledger.VerifyChain(events); err != nil {
		t.Fatalf("chain after concurrent appends: %v", err)
	}
}

// TestAppendEventStartingAStream: an event appended as a stream's first
// (StreamSeq 1, no head read) starts the chain, and is refused without a
// trace when the stream already has events.
func TestAppendEventStartingAStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	start := func() error {
		return b.store.InTx(ctx, func(tx ledger.Tx) error {
			_, err := tx.AppendEvent(ctx, ledger.Event{Stream: "test:new", StreamSeq: 1, Type: "test", At: epoch, Actor: "test", Data: []byte(`{}`)})
			return err
		})
	}
	if err := start(); err != nil {
		t.Fatalf("start a new stream: %v", err)
	}
	if err := start(); err == nil {
		t.Fatal("a second first event was appended")
	}
	events, err := b.store.StreamEvents(ctx, "test:new")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 {
		t.Fatalf("%d events, want 1", len(events))
	}
	if err := ledger.VerifyChain(events); err != nil {
		t.Fatalf("chain of a started stream: %v", err)
	}
}

func TestStoreErrorContract(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.store.Delegation(ctx, uuid.New()); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("missing delegation: %v, want ErrNotFound", err)
	}
	if _, err := b.store.Budget(ctx, "nope"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("missing budget: %v, want ErrNotFound", err)
	}
	if _, err := b.store.TaskClass(ctx, "nope"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("missing task class: %v, want ErrNotFound", err)
	}
	d := b.delegation(t, "op-v")
	stale := d // version 1
	b.report(t, d.ID, ledger.StatusWorking, epoch)
	err := b.store.InTx(ctx, func(tx ledger.Tx) error {
		stale.Version++ // claims to follow version 1, but the row is at 2
		stale.TaskStatus = ledger.StatusCompleted
		return tx.UpdateDelegation(ctx, stale)
	})
	if !errors.Is(err, ledger.ErrConcurrentUpdate) {
		t.Fatalf("update from a stale version: %v, want ErrConcurrentUpdate", err)
	}
	got, err := b.store.Delegation(ctx, d.ID)
	if err != nil || got.TaskStatus != ledger.StatusWorking || got.Version != 2 {
		t.Fatalf("after a refused stale update: %s v%d, %v", got.TaskStatus, got.Version, err)
	}
	// Round trip of what was written.
	if got.Hold != d.Hold || got.Remote.TaskID != d.Remote.TaskID || got.BudgetID != "ops" || !got.TaskStatusAt.Equal(epoch) {
		t.Fatalf("delegation read back differs: %+v", got)
	}
}
