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

// StoredWriteOffThreshold returns the threshold the last approved change
// set; found is false before any.
func (r reader) StoredWriteOffThreshold(ctx context.Context) (ledger.WriteOffThreshold, bool, error) {
	row, err := r.q.WriteOffThresholdGet(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.WriteOffThreshold{}, false, nil
	} else if err != nil {
		return ledger.WriteOffThreshold{}, false, fmt.Errorf("load write-off threshold: %w", interpretError(err))
	}
	return ledger.WriteOffThreshold{
		Minor: row.ThresholdMinor, UpdatedAt: row.UpdatedAt.UTC(), UpdatedBy: row.UpdatedBy, PendingChangeID: row.PendingChange.UUID,
	}, true, nil
}

func (t *tx) PutWriteOffThreshold(ctx context.Context, w ledger.WriteOffThreshold) error {
	err := t.q.WriteOffThresholdPut(ctx, dbsqlc.WriteOffThresholdPutParams{
		ThresholdMinor: w.Minor, UpdatedAt: w.UpdatedAt, UpdatedBy: w.UpdatedBy,
		PendingChange: uuid.NullUUID{UUID: w.PendingChangeID, Valid: w.PendingChangeID != uuid.Nil},
	})
	if err != nil {
		return fmt.Errorf("store write-off threshold: %w", interpretError(err))
	}
	return nil
}

// StoredCurrencyWriteOffThresholds returns the thresholds approved changes
// set for single currencies, by currency.
func (r reader) StoredCurrencyWriteOffThresholds(ctx context.Context) ([]ledger.WriteOffThreshold, error) {
	rows, err := r.q.WriteOffCurrencyThresholdList(ctx)
	if err != nil {
		return nil, fmt.Errorf("load write-off thresholds: %w", interpretError(err))
	}
	out := make([]ledger.WriteOffThreshold, len(rows))
	for i, row := range rows {
		out[i] = ledger.WriteOffThreshold{
			Currency: row.Currency, Minor: row.ThresholdMinor, UpdatedAt: row.UpdatedAt.UTC(), UpdatedBy: row.UpdatedBy, PendingChangeID: row.PendingChange.UUID,
		}
	}
	return out, nil
}

func (t *tx) PutCurrencyWriteOffThreshold(ctx context.Context, w ledger.WriteOffThreshold) error {
	err := t.q.WriteOffCurrencyThresholdPut(ctx, dbsqlc.WriteOffCurrencyThresholdPutParams{
		Currency: w.Currency, ThresholdMinor: w.Minor, UpdatedAt: w.UpdatedAt, UpdatedBy: w.UpdatedBy,
		PendingChange: uuid.NullUUID{UUID: w.PendingChangeID, Valid: w.PendingChangeID != uuid.Nil},
	})
	if err != nil {
		return fmt.Errorf("store write-off threshold for %s: %w", w.Currency, interpretError(err))
	}
	return nil
}
