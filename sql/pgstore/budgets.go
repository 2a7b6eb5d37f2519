package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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

func (t *tx) BudgetForUpdate(ctx context.Context, id string) (ledger.Budget, error) {
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

func (t *tx) MoveBudget(ctx context.Context, m ledger.BudgetMove) (ledger.Budget, error) {
	if !m.Kind.Valid() {
		return ledger.Budget{}, fmt.Errorf("unknown budget movement %q", m.Kind)
	}
	p := dbsqlc.BudgetMoveParams{ID: m.BudgetID, Kind: string(m.Kind), Amount: m.AmountMinor, At: m.At}
	if m.DelegationID != uuid.Nil {
		p.DelegationID = uuid.NullUUID{UUID: m.DelegationID, Valid: true}
	}
	row, err := t.q.BudgetMove(ctx, p)
	if errors.Is(err, pgx.ErrNoRows) {
		if m.Kind == ledger.MoveHold {
			return ledger.Budget{}, fmt.Errorf("hold %d on budget %s: %w", m.AmountMinor, m.BudgetID, ledger.ErrInsufficientFunds)
		}
		return ledger.Budget{}, fmt.Errorf("%s %d on budget %s: budget missing or amount not held", m.Kind, m.AmountMinor, m.BudgetID)
	}
	if err != nil {
		return ledger.Budget{}, fmt.Errorf("%s %d on budget %s: %w", m.Kind, m.AmountMinor, m.BudgetID, err)
	}
	return toBudget(dbsqlc.Budget(row)), nil
}

func toBudget(r dbsqlc.Budget) ledger.Budget {
	return ledger.Budget{
		ID: r.ID, Currency: r.Currency, Funded: r.FundedMinor, Available: r.AvailableMinor, Held: r.HeldMinor,
		Spent: r.SpentMinor, WrittenOff: r.WrittenOffMinor, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}
