package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

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

// MoveBudget keeps the movement until the transaction's commit (or a read
// of a budget), when the movements of every operation of the transaction
// are queued sorted by budget (queueMoves): the budget row is shared by
// many delegations, so its lock is taken last and held for the shortest
// time, and two transactions lock budgets in one order. Its refusal fails
// the transaction there (ledger/DESIGN.md §5, "The write path").
func (t *tx) MoveBudget(ctx context.Context, m ledger.BudgetMove) error {
	if !m.Kind.Valid() {
		return fmt.Errorf("unknown budget movement %q", m.Kind)
	}
	p := dbsqlc.BudgetMoveParams{ID: m.BudgetID, Kind: string(m.Kind), Amount: m.AmountMinor, At: m.At}
	if m.DelegationID != uuid.Nil {
		p.DelegationID = uuid.NullUUID{UUID: m.DelegationID, Valid: true}
	}
	conn := t.conn
	conn.wrote = true
	t.moves = append(t.moves, pendingMove{move: m, owner: conn.owner, queue: func() error {
		return conn.queue(func(q *dbsqlc.Queries) error {
			_, err := q.BudgetMove(ctx, p)
			return err
		}, refusedByError, func(tag pgconn.CommandTag, err error) error {
			var pgErr *pgconn.PgError
			switch {
			case errors.As(err, &pgErr) && (pgErr.ConstraintName == "budgets_available_minor_check" || pgErr.ConstraintName == "budgets_held_minor_check"):
				return moveRefused(m, pgErr.ConstraintName == "budgets_available_minor_check")
			case errors.As(err, &pgErr) && pgErr.ConstraintName == "budget_entries_budget_id_fkey":
				return fmt.Errorf("%s %d on budget %s: no such budget", m.Kind, m.AmountMinor, m.BudgetID)
			case err != nil:
				return fmt.Errorf("%s %d on budget %s: %w", m.Kind, m.AmountMinor, m.BudgetID, err)
			case tag.RowsAffected() != 1:
				// The statement cannot succeed without moving one row (see the
				// query); this is the last guard, should it ever change.
				return fmt.Errorf("%s %d on budget %s: moved %d rows", m.Kind, m.AmountMinor, m.BudgetID, tag.RowsAffected())
			}
			return nil
		})
	}})
	return nil
}

// moveRefused is the refusal of a movement that would take a budget's
// available amount (available) or its held amount below zero.
func moveRefused(m ledger.BudgetMove, available bool) error {
	if available && m.Kind == ledger.MoveHold {
		return fmt.Errorf("hold %d on budget %s: %w", m.AmountMinor, m.BudgetID, ledger.ErrInsufficientFunds)
	}
	return fmt.Errorf("%s %d on budget %s: the amount is not there to move", m.Kind, m.AmountMinor, m.BudgetID)
}

// pendingMove is a budget movement kept by MoveBudget: queue queues it on
// the connection of the operation (owner) that made it.
type pendingMove struct {
	move  ledger.BudgetMove
	owner int
	queue func() error
}

// queueMoves queues the transaction's kept movements, sorted by budget
// (stable: one budget's in the order they were made).
func (s *txShared) queueMoves() error {
	moves := s.moves
	s.moves = nil
	slices.SortStableFunc(moves, func(a, b pendingMove) int { return strings.Compare(a.move.BudgetID, b.move.BudgetID) })
	for _, m := range moves {
		if err := m.queue(); err != nil {
			return err
		}
	}
	return nil
}

func toBudget(r dbsqlc.Budget) ledger.Budget {
	return ledger.Budget{
		ID: r.ID, Currency: r.Currency, Funded: r.FundedMinor, Available: r.AvailableMinor, Held: r.HeldMinor,
		Spent: r.SpentMinor, WrittenOff: r.WrittenOffMinor, Tenants: r.Tenants, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}
