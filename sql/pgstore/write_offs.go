package pgstore

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// WriteOff returns a write-off.
func (c compensationStore) WriteOff(ctx context.Context, id uuid.UUID) (compensation.WriteOff, error) {
	row, err := c.q.WriteOffGetByID(ctx, id)
	if err != nil {
		return compensation.WriteOff{}, notFound(err, "write-off", id)
	}
	return toWriteOff(row), nil
}

func (t *tx) InsertWriteOff(ctx context.Context, w compensation.WriteOff) error {
	err := t.q.WriteOffInsert(ctx, dbsqlc.WriteOffInsertParams{
		ID: w.ID, DelegationID: w.DelegationID, AmountMinor: w.Amount.AmountMinor, Currency: w.Amount.Currency,
		Reason: w.Reason, Reference: w.Reference, Status: string(w.Status),
		RequestedBy: w.RequestedBy, RequestedByID: w.RequestedByID,
		ApprovedBy: optional(w.ApprovedBy), ApprovedByID: nullUUID(w.ApprovedByID),
		CreatedAt: w.CreatedAt, ExecutedAt: optionalTime(w.ExecutedAt),
	})
	if err != nil {
		return fmt.Errorf("insert write-off %s: %w", w.ID, err)
	}
	return nil
}

func (t *tx) WriteOffForUpdate(ctx context.Context, id uuid.UUID) (compensation.WriteOff, error) {
	row, err := t.q.WriteOffGetByIDForUpdate(ctx, id)
	if err != nil {
		return compensation.WriteOff{}, notFound(err, "write-off", id)
	}
	return toWriteOff(row), nil
}

func (t *tx) UpdateWriteOff(ctx context.Context, w compensation.WriteOff) error {
	n, err := t.q.WriteOffUpdate(ctx, dbsqlc.WriteOffUpdateParams{
		ID: w.ID, Status: string(w.Status), ApprovedBy: optional(w.ApprovedBy), ApprovedByID: nullUUID(w.ApprovedByID),
		ExecutedAt: optionalTime(w.ExecutedAt),
	})
	if err != nil {
		return fmt.Errorf("update write-off %s: %w", w.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("write-off %s: %w", w.ID, ledger.ErrNotFound)
	}
	return nil
}

func toWriteOff(r dbsqlc.WriteOff) compensation.WriteOff {
	return compensation.WriteOff{
		ID: r.ID, DelegationID: r.DelegationID, Amount: ledger.Money{AmountMinor: r.AmountMinor, Currency: r.Currency},
		Reason: r.Reason, Reference: r.Reference, Status: compensation.WriteOffStatus(r.Status),
		RequestedBy: r.RequestedBy, RequestedByID: r.RequestedByID, ApprovedBy: deref(r.ApprovedBy),
		ApprovedByID: r.ApprovedByID.UUID, CreatedAt: r.CreatedAt, ExecutedAt: derefTime(r.ExecutedAt),
		RejectedBy: deref(r.RejectedBy), RejectedByID: r.RejectedByID.UUID, RejectionReason: deref(r.RejectionReason),
		RejectedAt: derefTime(r.RejectedAt),
	}
}
