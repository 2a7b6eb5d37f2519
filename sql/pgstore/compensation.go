package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// Compensation returns the store as the compensation service's Store: the
// same pool and transactions, with the compensation statements added.
func (s *Store) Compensation() compensation.Store { return compensationStore{s} }

// compensationStore adapts Store to compensation.Store.
type compensationStore struct{ *Store }

// InTx runs fn in a transaction of the underlying Store, so retries, commit
// and after-commit hooks are the ledger's.
func (c compensationStore) InTx(ctx context.Context, fn func(compensation.Tx) error) error {
	return c.Store.InTx(ctx, func(t ledger.Tx) error { return fn(t.(*tx)) })
}

// WriteOff returns a write-off.
func (c compensationStore) WriteOff(ctx context.Context, id uuid.UUID) (compensation.WriteOff, error) {
	row, err := c.q.WriteOffGetByID(ctx, id)
	if err != nil {
		return compensation.WriteOff{}, notFound(err, "write-off", id)
	}
	return toWriteOff(row), nil
}

var _ compensation.Tx = (*tx)(nil)

func (t *tx) DelegationByRemoteTaskForUpdate(ctx context.Context, orgID, taskID string) (ledger.Delegation, error) {
	row, err := t.q.DelegationGetByRemoteTaskForUpdate(ctx, dbsqlc.DelegationGetByRemoteTaskForUpdateParams{OrgID: orgID, RemoteTaskID: &taskID})
	if err != nil {
		return ledger.Delegation{}, notFound(err, "delegation for remote task", taskID)
	}
	return toDelegation(row), nil
}

func (t *tx) OrgForUpdate(ctx context.Context, id string) (ledger.Org, error) {
	row, err := t.q.OrgGetByIDForUpdate(ctx, id)
	if err != nil {
		return ledger.Org{}, notFound(err, "org", id)
	}
	return toOrg(row), nil
}

func (t *tx) OpenDelegationsOfOrgForUpdate(ctx context.Context, orgID string) ([]ledger.Delegation, error) {
	rows, err := t.q.DelegationListEscalatableByOrgForUpdate(ctx, orgID)
	if err != nil {
		return nil, fmt.Errorf("lock open delegations of org %s: %w", orgID, err)
	}
	return toDelegations(rows), nil
}

func (t *tx) ClaimPastDeadline(ctx context.Context, now time.Time, limit int) ([]ledger.Delegation, error) {
	rows, err := t.q.DelegationClaimPastDeadline(ctx, dbsqlc.DelegationClaimPastDeadlineParams{Now: &now, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("claim delegations past their compensation deadline: %w", err)
	}
	return toDelegations(rows), nil
}

func (t *tx) UsedToken(ctx context.Context, orgID, jti string) (compensation.UsedToken, error) {
	row, err := t.q.UsedTokenGet(ctx, dbsqlc.UsedTokenGetParams{OrgID: orgID, Jti: jti})
	if err != nil {
		return compensation.UsedToken{}, notFound(err, "used token id of org "+orgID, "(jti)")
	}
	return compensation.UsedToken{
		OrgID: row.OrgID, JTI: row.Jti, DelegationID: row.DelegationID, TokenSHA256: row.TokenSha256, UsedAt: row.UsedAt,
	}, nil
}

func (t *tx) InsertUsedToken(ctx context.Context, u compensation.UsedToken) (bool, error) {
	n, err := t.q.UsedTokenInsert(ctx, dbsqlc.UsedTokenInsertParams{
		OrgID: u.OrgID, Jti: u.JTI, DelegationID: u.DelegationID, TokenSha256: u.TokenSHA256, UsedAt: u.UsedAt,
	})
	if err != nil {
		return false, fmt.Errorf("record used token id of org %s: %w", u.OrgID, err)
	}
	return n == 1, nil
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

func toDelegations(rows []dbsqlc.Delegation) []ledger.Delegation {
	out := make([]ledger.Delegation, len(rows))
	for i, row := range rows {
		out[i] = toDelegation(row)
	}
	return out
}

// nullUUID maps the nil UUID to NULL.
func nullUUID(id uuid.UUID) uuid.NullUUID {
	return uuid.NullUUID{UUID: id, Valid: id != uuid.Nil}
}
