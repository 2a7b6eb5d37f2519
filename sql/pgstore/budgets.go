package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

func (r reader) Budget(ctx context.Context, id string) (ledger.Budget, error) {
	row, err := r.q.BudgetGetByID(ctx, id)
	if err != nil {
		return ledger.Budget{}, notFound(err, "budget", id)
	}
	return toBudget(row), nil
}

// BudgetNamesTenant reports whether any budget names tenant
// (delegate.OrchestratorStore).
func (r reader) BudgetNamesTenant(ctx context.Context, tenant string) (bool, error) {
	return r.q.BudgetNamesTenant(ctx, tenant)
}

// Budget reads a budget, without the transaction's movements kept for
// its commit (its callers read whom it names, not its amounts): sending
// them here would lock budgets mid-flush, in arrival order, where a
// flush locks them only at its end, in id order, after every other lock
// (coalesce.go, checkFunds).
func (t *tx) Budget(ctx context.Context, id string) (ledger.Budget, error) {
	return t.reader.Budget(ctx, id)
}

func (t *tx) BudgetForUpdate(ctx context.Context, id string) (ledger.Budget, error) {
	if err := t.queueMoves(); err != nil {
		return ledger.Budget{}, err
	}
	row, err := t.q.BudgetGetByIDForUpdate(ctx, id)
	if err != nil {
		return ledger.Budget{}, notFound(err, "budget", id)
	}
	return toBudget(row), nil
}

func (t *tx) InsertBudget(ctx context.Context, b ledger.Budget) error {
	if err := t.q.BudgetInsert(ctx, dbsqlc.BudgetInsertParams{ID: b.ID, Currency: b.Currency, CreatedAt: b.CreatedAt}); err != nil {
		return fmt.Errorf("insert budget %s: %w", b.ID, err)
	}
	return nil
}

func (t *tx) SetBudgetTenants(ctx context.Context, id string, tenants []string, at time.Time) error {
	if tenants == nil {
		tenants = []string{}
	}
	n, err := t.q.BudgetSetTenants(ctx, dbsqlc.BudgetSetTenantsParams{ID: id, Tenants: tenants, UpdatedAt: at})
	if err != nil {
		return fmt.Errorf("set tenants of budget %s: %w", id, err)
	}
	if n != 1 {
		return fmt.Errorf("set tenants of budget %s: %w", id, ledger.ErrNotFound)
	}
	return nil
}

// MoveBudget keeps the movement until the transaction's end (or a read of
// a budget): the budget row is shared by many delegations, so its lock is
// taken last and held for the shortest time, and two transactions lock
// budgets in one order. A flush sends its operations' movements in one
// statement once it has played them against the budgets, locked
// (checkFunds); a transaction alone sends each in a statement of its own
// (tx.queueMoves). Its refusal fails the transaction there
// (ledger/DESIGN.md §5, "The write path").
func (t *tx) MoveBudget(ctx context.Context, m ledger.BudgetMove) error {
	if !m.Kind.Valid() {
		return fmt.Errorf("unknown budget movement %q", m.Kind)
	}
	t.conn.wrote = true
	t.moves = append(t.moves, pendingMove{move: m, owner: t.conn.owner})
	return nil
}

func toBudget(r dbsqlc.Budget) ledger.Budget {
	return ledger.Budget{
		ID: r.ID, Currency: r.Currency, Funded: r.FundedMinor, Available: r.AvailableMinor, Held: r.HeldMinor,
		Spent: r.SpentMinor, WrittenOff: r.WrittenOffMinor, Tenants: r.Tenants, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}
