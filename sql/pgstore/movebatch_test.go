package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
)

// countBudgetVersions makes the database note every new version of a
// budget row (an UPDATE of it), and returns how many each budget got since.
func countBudgetVersions(t *testing.T, b bundle) func(id string) int {
	t.Helper()
	ctx := context.Background()
	for _, s := range []string{
		`CREATE TABLE test_budget_versions (budget_id text NOT NULL)`,
		`CREATE FUNCTION test_note_budget_version() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN INSERT INTO test_budget_versions VALUES (NEW.id); RETURN NEW; END $$`,
		`CREATE TRIGGER test_note_budget_version AFTER UPDATE ON budgets
		 FOR EACH ROW EXECUTE FUNCTION test_note_budget_version()`,
	} {
		if _, err := b.pool.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	return func(id string) int {
		var n int
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM test_budget_versions WHERE budget_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// journalEntry is a row of budget_entries as reconciliation reads it.
type journalEntry struct {
	kind       string
	amount     int64
	delegation string
	at         time.Time
}

// journal is the budget's entries, in their order.
func journal(t *testing.T, b bundle, budget string) []journalEntry {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT kind, amount_minor, coalesce(delegation_id::text, ''), at
		FROM budget_entries WHERE budget_id = $1 ORDER BY id`, budget)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []journalEntry
	for rows.Next() {
		var e journalEntry
		if err := rows.Scan(&e.kind, &e.amount, &e.delegation, &e.at); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// budgetTotals are a budget's five amounts, which must add up.
func budgetTotals(t *testing.T, b bundle, id string) (funded, available, held, spent, writtenOff int64) {
	t.Helper()
	err := b.pool.QueryRow(context.Background(), `SELECT funded_minor, available_minor, held_minor, spent_minor, written_off_minor
		FROM budgets WHERE id = $1`, id).Scan(&funded, &available, &held, &spent, &writtenOff)
	if err != nil {
		t.Fatal(err)
	}
	if available+held+spent+writtenOff != funded {
		t.Errorf("budget %s: available %d + held %d + spent %d + written off %d != funded %d", id, available, held, spent, writtenOff, funded)
	}
	return funded, available, held, spent, writtenOff
}

// TestCoalescedHotBudgetOneVersionPerFlush: fifty creations holding on one
// budget in one flush write one new version of the budget's row (their
// movements are one statement, one net update), and the journal gets every
// hold, in the order the creations arrived, each naming its delegation.
func TestCoalescedHotBudgetOneVersionPerFlush(t *testing.T) {
	t.Parallel()
	b, log := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 64, Flushers: 1})
	const funded = 100_000
	fixtures(t, b, funded)
	versions := countBudgetVersions(t, b)
	ctx := context.Background()
	ops := make([]func() error, 50)
	ids := make([]uuid.UUID, len(ops))
	var total int64
	for i := range ops {
		amount := int64(100 + i)
		total += amount
		in := creation(fmt.Sprintf("one-version-%02d", i), "globex", amount)
		ops[i] = func() error {
			d, _, err := b.svc.CreateDelegation(ctx, orch, in)
			ids[i] = d.ID
			return err
		}
	}
	for i, err := range together(t, b.store, ops...) {
		if err != nil {
			t.Fatalf("creation %d: %v", i, err)
		}
	}
	if sizes, _ := log.snapshot(); !slices.Contains(sizes, len(ops)) {
		t.Fatalf("flush sizes %v: the creations were not flushed together", sizes)
	}
	if n := versions("ops"); n != 1 {
		t.Errorf("the flush wrote %d versions of the budget's row, want 1", n)
	}
	entries := journal(t, b, "ops")
	holds := slices.DeleteFunc(slices.Clone(entries), func(e journalEntry) bool { return e.kind != string(ledger.MoveHold) })
	if len(holds) != len(ops) {
		t.Fatalf("%d hold entries, want %d", len(holds), len(ops))
	}
	for i, e := range holds {
		if e.delegation != ids[i].String() || e.amount != int64(100+i) || !e.at.Equal(epoch) {
			t.Errorf("hold entry %d: %+v, want delegation %s, amount %d at %s", i, e, ids[i], 100+i, epoch)
		}
	}
	f, available, held, spent, writtenOff := budgetTotals(t, b, "ops")
	if f != funded || available != funded-total || held != total || spent != 0 || writtenOff != 0 {
		t.Errorf("budget: funded %d available %d held %d spent %d written off %d; want %d, %d, %d, 0, 0",
			f, available, held, spent, writtenOff, funded, funded-total, total)
	}
	checkInvariants(t, b)
}

// move is an operation of the tests below: movements made through the
// store's InTx, in one transaction.
func move(b bundle, moves ...ledger.BudgetMove) func() error {
	return func() error {
		return b.store.InTx(context.Background(), func(tx ledger.Tx) error {
			for _, m := range moves {
				if err := tx.MoveBudget(context.Background(), m); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// TestCoalescedNetMoveHidesNoOverdraft: a flush's net change of a budget
// cannot hide an overdraft its movements, one at a time, would make. A hold
// the budget cannot cover, made before a return that would cover it, is
// refused in the flush (and, run again alone once the return committed, is
// then accepted, after it in the journal); an operation whose own hold
// precedes its own return is refused as it would be alone.
func TestCoalescedNetMoveHidesNoOverdraft(t *testing.T) {
	t.Parallel()
	b, log := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 1})
	fixtures(t, b, 1_000)
	hold := func(n int64) ledger.BudgetMove {
		return ledger.BudgetMove{BudgetID: "ops", Kind: ledger.MoveHold, AmountMinor: n, At: epoch}
	}
	ret := func(n int64) ledger.BudgetMove {
		return ledger.BudgetMove{BudgetID: "ops", Kind: ledger.MoveReturn, AmountMinor: n, At: epoch.Add(time.Second)}
	}
	if err := move(b, hold(600))(); err != nil { // available 400, held 600
		t.Fatal(err)
	}
	before := len(journal(t, b, "ops"))
	errs := together(t, b.store,
		move(b, hold(500)),           // 500 of 400: refused in the flush
		move(b, hold(700), ret(600)), // its own hold overdraws before its return
		move(b, ret(600)),            // would cover the first, after it
	)
	if sizes, _ := log.snapshot(); !slices.Contains(sizes, 3) {
		t.Fatalf("flush sizes %v: the operations were not flushed together", sizes)
	}
	if errs[0] != nil {
		t.Errorf("the hold run again alone after the return: %v, want it accepted", errs[0])
	}
	if !errors.Is(errs[1], ledger.ErrInsufficientFunds) {
		t.Errorf("a hold of 700 on 400 before its own return: %v, want ErrInsufficientFunds", errs[1])
	}
	if errs[2] != nil {
		t.Errorf("the return: %v", errs[2])
	}
	var kinds []string
	for _, e := range journal(t, b, "ops")[before:] {
		kinds = append(kinds, fmt.Sprintf("%s %d", e.kind, e.amount))
	}
	if want := []string{"return 600", "hold 500"}; !slices.Equal(kinds, want) {
		t.Errorf("journal after the flush %v, want %v: the hold committed before the return it needed", kinds, want)
	}
	_, available, held, _, _ := budgetTotals(t, b, "ops")
	if available != 500 || held != 500 {
		t.Errorf("budget: available %d held %d, want 500, 500", available, held)
	}
}

// TestMoveBudgetAloneHidesNoOverdraft: a transaction alone (a flush of
// one operation) sends each movement in a statement of its own, so a hold
// its budget cannot cover is refused even when a return made after it in
// the same transaction would have covered it.
func TestMoveBudgetAloneHidesNoOverdraft(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, _, err := b.svc.PutBudget(ctx, oncall, "ops", ledger.BudgetInput{Currency: "EUR", FundedMinor: 1_000}); err != nil {
		t.Fatal(err)
	}
	versions := countBudgetVersions(t, b)
	err := move(b,
		ledger.BudgetMove{BudgetID: "ops", Kind: ledger.MoveHold, AmountMinor: 600, At: epoch},
		ledger.BudgetMove{BudgetID: "ops", Kind: ledger.MoveReturn, AmountMinor: 600, At: epoch},
	)()
	if err != nil {
		t.Fatal(err)
	}
	if n := versions("ops"); n != 2 {
		t.Errorf("a transaction alone of two movements wrote %d versions of the budget, want 2 (one statement each)", n)
	}
	err = move(b,
		ledger.BudgetMove{BudgetID: "ops", Kind: ledger.MoveHold, AmountMinor: 1_200, At: epoch},
		ledger.BudgetMove{BudgetID: "ops", Kind: ledger.MoveReturn, AmountMinor: 600, At: epoch},
	)()
	if !errors.Is(err, ledger.ErrInsufficientFunds) || !strings.Contains(err.Error(), "hold 1200 on budget ops") {
		t.Errorf("a hold of 1200 on 1000 before a return: %v, want the hold's ErrInsufficientFunds", err)
	}
	if _, available, held, _, _ := budgetTotals(t, b, "ops"); available != 1_000 || held != 0 {
		t.Errorf("budget: available %d held %d, want 1000, 0", available, held)
	}
	checkInvariants(t, b)
}

// TestCoalescedMissingBudget: a movement of a budget that does not exist
// is refused, with the same text (PostgreSQL's foreign key, named as the
// movement), alone and in a flush; in a flush its
// neighbours are accepted, and two such operations are each refused.
func TestCoalescedMissingBudget(t *testing.T) {
	t.Parallel()
	b, _ := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 1})
	fixtures(t, b, 1_000)
	nope := func(id string) ledger.BudgetMove {
		return ledger.BudgetMove{BudgetID: id, Kind: ledger.MoveFund, AmountMinor: 5, At: epoch}
	}
	hold := ledger.BudgetMove{BudgetID: "ops", Kind: ledger.MoveHold, AmountMinor: 10, At: epoch}
	const want = "fund 5 on budget nope: no such budget"
	if err := move(b, nope("nope"))(); err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("alone: %v, want %q", err, want)
	}
	errs := together(t, b.store, move(b, hold), move(b, nope("nope")), move(b, hold))
	if errs[1] == nil || !strings.HasSuffix(errs[1].Error(), want) {
		t.Errorf("in a flush: %v, want %q", errs[1], want)
	}
	errs = append(errs, together(t, b.store, move(b, hold), move(b, nope("nope")), move(b, nope("nada")), move(b, hold))...)
	if errs[4] == nil || !strings.HasSuffix(errs[4].Error(), want) || errs[5] == nil || !strings.HasSuffix(errs[5].Error(), "fund 5 on budget nada: no such budget") {
		t.Errorf("two in a flush: %v and %v, want each refused", errs[4], errs[5])
	}
	for _, i := range []int{0, 2, 3, 6} {
		if errs[i] != nil {
			t.Errorf("neighbour %d: %v", i, errs[i])
		}
	}
	if _, available, held, _, _ := budgetTotals(t, b, "ops"); available != 960 || held != 40 {
		t.Errorf("budget: available %d held %d, want 960, 40", available, held)
	}
}

// TestCoalescedMovesOfEveryKind: a flush of every kind of movement on two
// budgets applies each budget's net change, keeps every movement's journal
// row as made, in the order made, and the budgets add up.
func TestCoalescedMovesOfEveryKind(t *testing.T) {
	t.Parallel()
	b, log := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 1})
	fixtures(t, b, 1_000)
	ctx := context.Background()
	if _, _, err := b.svc.PutBudget(ctx, oncall, "dev", ledger.BudgetInput{Currency: "EUR", FundedMinor: 500}); err != nil {
		t.Fatal(err)
	}
	versions := countBudgetVersions(t, b)
	m := func(budget string, k ledger.BudgetMoveKind, n int64, s int) ledger.BudgetMove {
		return ledger.BudgetMove{BudgetID: budget, Kind: k, AmountMinor: n, At: epoch.Add(time.Duration(s) * time.Second)}
	}
	ops := [][]ledger.BudgetMove{
		{m("ops", ledger.MoveHold, 400, 1)},
		{m("dev", ledger.MoveHold, 300, 2), m("dev", ledger.MoveSpend, 100, 3)},
		{m("ops", ledger.MoveSpend, 150, 4), m("ops", ledger.MoveReturn, 50, 5), m("ops", ledger.MoveWriteOff, 100, 6)},
		{m("ops", ledger.MoveFund, 250, 7)},
		{m("dev", ledger.MoveReturn, 200, 8)},
	}
	calls := make([]func() error, len(ops))
	for i, o := range ops {
		calls[i] = move(b, o...)
	}
	for i, err := range together(t, b.store, calls...) {
		if err != nil {
			t.Fatalf("operation %d: %v", i, err)
		}
	}
	if sizes, _ := log.snapshot(); !slices.Contains(sizes, len(ops)) {
		t.Fatalf("flush sizes %v: the operations were not flushed together", sizes)
	}
	for _, id := range []string{"ops", "dev"} {
		if n := versions(id); n != 1 {
			t.Errorf("budget %s: %d versions written by the flush, want 1", id, n)
		}
		var want []journalEntry
		for _, o := range ops {
			for _, mv := range o {
				if mv.BudgetID == id {
					want = append(want, journalEntry{kind: string(mv.Kind), amount: mv.AmountMinor, at: mv.At})
				}
			}
		}
		got := journal(t, b, id)[1:] // after its funding
		if !slices.EqualFunc(got, want, func(a, b journalEntry) bool {
			return a.kind == b.kind && a.amount == b.amount && a.at.Equal(b.at) && a.delegation == ""
		}) {
			t.Errorf("budget %s journal %+v, want %+v", id, got, want)
		}
	}
	var updatedAt time.Time
	if err := b.pool.QueryRow(ctx, `SELECT updated_at FROM budgets WHERE id = 'ops'`).Scan(&updatedAt); err != nil || !updatedAt.Equal(epoch.Add(7*time.Second)) {
		t.Errorf("budget ops updated at %s (%v), want its latest movement's %s", updatedAt, err, epoch.Add(7*time.Second))
	}
	type totals struct{ funded, available, held, spent, writtenOff int64 }
	for id, want := range map[string]totals{
		"ops": {funded: 1_250, available: 900, held: 0 + 400 - 150 - 50 - 100, spent: 150, writtenOff: 100},
		"dev": {funded: 500, available: 400, held: 0, spent: 100},
	} {
		var got totals
		got.funded, got.available, got.held, got.spent, got.writtenOff = budgetTotals(t, b, id)
		if got != want {
			t.Errorf("budget %s: %+v, want %+v", id, got, want)
		}
	}
}
