package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

func (r reader) Delegation(ctx context.Context, id uuid.UUID) (ledger.Delegation, error) {
	row, err := r.q.DelegationGetByID(ctx, id)
	if err != nil {
		return ledger.Delegation{}, notFound(err, "delegation", id)
	}
	return toDelegation(row), nil
}

func (r reader) DelegationByOperation(ctx context.Context, tenant, op string) (ledger.Delegation, error) {
	row, err := r.q.DelegationGetByOperation(ctx, dbsqlc.DelegationGetByOperationParams{Tenant: tenant, BusinessOperationID: op})
	if err != nil {
		return ledger.Delegation{}, notFound(err, "delegation for business operation", op)
	}
	return toDelegation(row), nil
}

func (r reader) DelegationByRemoteTask(ctx context.Context, tenant, orgID, taskID string) (ledger.Delegation, error) {
	row, err := r.q.DelegationGetByRemoteTask(ctx, dbsqlc.DelegationGetByRemoteTaskParams{OrgID: orgID, RemoteTaskID: &taskID, Tenant: tenant})
	if err != nil {
		return ledger.Delegation{}, notFound(err, "delegation for remote task", taskID)
	}
	return toDelegation(row), nil
}

func (r reader) CountDelegations(ctx context.Context, f ledger.DelegationFilter) (int64, error) {
	n, err := r.q.DelegationCount(ctx, dbsqlc.DelegationCountParams{
		Tenant: optional(f.Tenant), ObligationState: optional(string(f.ObligationState)),
		TaskStatus: optional(string(f.TaskStatus)), OrgID: optional(f.OrgID), StatusAfter: optionalTime(f.StatusAfter),
	})
	if err != nil {
		return 0, fmt.Errorf("count delegations: %w", err)
	}
	return n, nil
}

func (r reader) ListDelegations(ctx context.Context, f ledger.DelegationFilter) ([]ledger.Delegation, error) {
	p := dbsqlc.DelegationListParams{
		Tenant:          optional(f.Tenant),
		ObligationState: optional(string(f.ObligationState)),
		TaskStatus:      optional(string(f.TaskStatus)),
		OrgID:           optional(f.OrgID),
		StatusAfter:     optionalTime(f.StatusAfter),
		MaxRows:         int32(f.Limit),
	}
	if f.After != uuid.Nil {
		p.After = uuid.NullUUID{UUID: f.After, Valid: true}
	}
	rows, err := r.q.DelegationList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list delegations: %w", err)
	}
	out := make([]ledger.Delegation, len(rows))
	for i, row := range rows {
		out[i] = toDelegation(row)
	}
	return out, nil
}

func (t *tx) DelegationForUpdate(ctx context.Context, id uuid.UUID) (ledger.Delegation, error) {
	row, err := t.q.DelegationGetByIDForUpdate(ctx, id)
	if err != nil {
		return ledger.Delegation{}, notFound(err, "delegation", id)
	}
	return t.seen(toDelegation(row))[0], nil
}

// remoteTaskLock is the name of the transaction lock on one org's remote
// task id, the one the trigger of migration 00033 takes for every
// delegation that records it.
func remoteTaskLock(orgID, taskID string) string {
	return "quittance/remote-task:" + orgID + "/" + taskID
}

func (t *tx) RemoteTaskHolder(ctx context.Context, d ledger.Delegation, taskID string) (ledger.Delegation, error) {
	// The lock first, in a statement of its own: the query after it has a
	// new snapshot (READ COMMITTED), so it sees a holder that committed
	// while this transaction waited.
	if err := t.q.AdvisoryXactLock(ctx, remoteTaskLock(d.OrgID, taskID)); err != nil {
		return ledger.Delegation{}, fmt.Errorf("lock org %s's remote task: %w", d.OrgID, err)
	}
	row, err := t.q.DelegationGetRemoteTaskHolder(ctx, dbsqlc.DelegationGetRemoteTaskHolderParams{
		OrgID: d.OrgID, RemoteTaskID: &taskID, ID: d.ID, Tenant: d.Tenant,
	})
	if err != nil {
		return ledger.Delegation{}, notFound(err, "delegation for remote task", taskID)
	}
	return toDelegation(row), nil
}

func (t *tx) DelegationsByRemoteTaskForUpdate(ctx context.Context, orgID, taskID string) ([]ledger.Delegation, error) {
	rows, err := t.q.DelegationListByRemoteTaskForUpdate(ctx, dbsqlc.DelegationListByRemoteTaskForUpdateParams{OrgID: orgID, RemoteTaskID: &taskID})
	if err != nil {
		return nil, fmt.Errorf("lock delegations of org %s's remote task: %w", orgID, err)
	}
	return t.seen(toDelegations(rows)...), nil
}

func (t *tx) OpenDelegationsOfOrgForUpdate(ctx context.Context, orgID string) ([]ledger.Delegation, error) {
	rows, err := t.q.DelegationListEscalatableByOrgForUpdate(ctx, orgID)
	if err != nil {
		return nil, fmt.Errorf("lock open delegations of org %s: %w", orgID, err)
	}
	return t.seen(toDelegations(rows)...), nil
}

func (t *tx) ClaimPastDeadline(ctx context.Context, now time.Time, limit int) ([]ledger.Delegation, error) {
	rows, err := t.q.DelegationClaimPastDeadline(ctx, dbsqlc.DelegationClaimPastDeadlineParams{Now: &now, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("claim delegations past their compensation deadline: %w", err)
	}
	due := t.seen(toDelegations(rows)...)
	if len(due) == 0 {
		return due, nil
	}
	// Each is moved with an event on its stream: their heads, read in one
	// statement, make the batch's writes queued ones, sent with its commit.
	streams := make([]string, len(due))
	for i, d := range due {
		streams[i] = d.Stream()
	}
	return due, t.lockStreamHeads(ctx, streams)
}

// InsertDelegation buffers the insert (insertbatch.go) and answers it
// inserted at once when the transaction is a flush whose pre-read proved,
// under their locks, that no delegation records d's business operation id
// and remote task, and no insert of the flush named them since; it sends
// the insert at once otherwise.
func (t *tx) InsertDelegation(ctx context.Context, d ledger.Delegation) (bool, error) {
	if fresh := t.conn.conn.fresh.claimDelegation(d); fresh && t.conn.flush != nil {
		t.conn.wrote = true
		return true, t.conn.conn.bufferInsert(t.conn.owner, d)
	}
	n, err := t.q.DelegationInsert(ctx, dbsqlc.DelegationInsertParams{
		ID: d.ID, Tenant: d.Tenant, BusinessOperationID: d.BusinessOperationID, RequestHash: d.RequestHash,
		OrgID: d.OrgID, TaskClass: d.TaskClass, BudgetID: d.BudgetID, AmountMinor: d.Hold.AmountMinor,
		Currency: d.Hold.Currency, RemoteTaskID: optional(d.Remote.TaskID), RemoteContextID: optional(d.Remote.ContextID),
		ProtocolVersion: optional(d.Remote.ProtocolVersion), TaskStatus: string(d.TaskStatus),
		ObligationState: string(d.ObligationState), Version: d.Version, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt,
	})
	if err != nil {
		return false, fmt.Errorf("insert delegation %s: %w", d.ID, err)
	}
	return n == 1, nil
}

// UpdateDelegation buffers the update (updatebatch.go) when it leaves the
// delegation's remote task as the transaction last read it, and queues it
// (txConn.queue) otherwise: the row is locked, so it fails only if its
// version moved, which the transaction's next statement or its commit
// then reports.
func (t *tx) UpdateDelegation(ctx context.Context, d ledger.Delegation) error {
	p := dbsqlc.DelegationUpdateParams{
		ID: d.ID, AmountMinor: d.Hold.AmountMinor,
		SettledAmountMinor:  amountIn(d, ledger.ObligationSettled, d.SettledAmountMinor),
		ReversedAmountMinor: amountIn(d, ledger.ObligationCompensated, d.ReversedAmountMinor),
		RemoteTaskID:        optional(d.Remote.TaskID), RemoteContextID: optional(d.Remote.ContextID),
		ProtocolVersion: optional(d.Remote.ProtocolVersion), TaskStatus: string(d.TaskStatus),
		TaskStatusAt: optionalTime(d.TaskStatusAt), TaskStatusUndated: d.TaskStatusUndated, TaskStatusMessage: optional(d.TaskStatusMessage),
		ObligationState: string(d.ObligationState), ObligationReason: optional(d.ObligationReason),
		CancelRequestedAt: optionalTime(d.CancelRequestedAt), CompensationKey: optional(d.Compensation.IdempotencyKey),
		CompensationDeadline: optionalTime(d.Compensation.Deadline), CompensationAttempts: int32(d.Compensation.Attempts),
		CompensationLastError: optional(d.Compensation.LastError), CompensationReceipt: d.Compensation.Receipt,
		PendingWriteOffID: uuid.NullUUID{UUID: d.PendingWriteOffID, Valid: d.PendingWriteOffID != uuid.Nil},
		PreviousVersion:   d.Version - 1, UpdatedAt: d.UpdatedAt,
		ObservedAt: optionalTime(d.LastObservedAt),
	}
	if !d.LastObservedAt.IsZero() {
		// The update marks the row observed at LastObservedAt: a mark of
		// no later time by the same operation need not be written again.
		if t.observed == nil {
			t.observed = map[uuid.UUID]time.Time{}
		}
		t.observed[d.ID] = d.LastObservedAt
	}
	if remote, ok := t.remotes[d.ID]; ok && remote == d.Remote {
		// Its remote task stays as the transaction read it: buffered, to
		// be written with the transaction's other updates in one statement.
		t.conn.wrote = true
		return t.conn.conn.bufferUpdate(ctx, t.conn.owner, d)
	}
	t.seen(d)
	// It may record a remote task: a creation recording it after it in
	// the transaction must ask whether it is taken.
	t.conn.conn.fresh.claimTask(d.OrgID, d.Remote.TaskID)
	return t.conn.queue(func(q *dbsqlc.Queries) error {
		_, err := q.DelegationUpdate(ctx, p)
		return err
	}, refusedByRowCount, func(tag pgconn.CommandTag, err error) error {
		switch {
		case err != nil:
			return fmt.Errorf("update delegation %s: %w", d.ID, err)
		case tag.RowsAffected() != 1:
			return fmt.Errorf("delegation %s version %d: %w", d.ID, d.Version-1, ledger.ErrConcurrentUpdate)
		}
		return nil
	})
}

// MarkDelegationObserved queues the update (txConn.queue), unless the
// operation's own update of the delegation marked it observed at at or
// later (UpdateDelegation, with the delegation's LastObservedAt): one
// update of the row, not two, for an observation that changes it. Were
// that update refused, the operation would fail with it, mark and all.
func (t *tx) MarkDelegationObserved(ctx context.Context, id uuid.UUID, at time.Time) error {
	if marked, ok := t.observed[id]; ok && !marked.Before(at) {
		return nil
	}
	return t.conn.queue(func(q *dbsqlc.Queries) error {
		return q.DelegationMarkObserved(ctx, dbsqlc.DelegationMarkObservedParams{ID: id, ObservedAt: at})
	}, refusedByError, func(_ pgconn.CommandTag, err error) error {
		if err != nil {
			return fmt.Errorf("mark delegation %s observed: %w", id, err)
		}
		return nil
	})
}

func toDelegation(r dbsqlc.Delegation) ledger.Delegation {
	return ledger.Delegation{
		ID: r.ID, Tenant: r.Tenant, BusinessOperationID: r.BusinessOperationID, RequestHash: r.RequestHash,
		OrgID: r.OrgID, TaskClass: r.TaskClass, BudgetID: r.BudgetID,
		Hold:               ledger.Money{AmountMinor: r.AmountMinor, Currency: r.Currency},
		SettledAmountMinor: r.SettledAmountMinor.Int64, ReversedAmountMinor: r.ReversedAmountMinor.Int64,
		Remote: ledger.RemoteTask{
			TaskID: deref(r.RemoteTaskID), ContextID: deref(r.RemoteContextID), ProtocolVersion: deref(r.ProtocolVersion),
		},
		TaskStatus:        ledger.TaskStatus(r.TaskStatus),
		TaskStatusAt:      derefTime(r.TaskStatusAt),
		TaskStatusUndated: r.TaskStatusUndated,
		TaskStatusMessage: deref(r.TaskStatusMessage),
		LastObservedAt:    derefTime(r.LastObservedAt),
		ObligationState:   ledger.ObligationState(r.ObligationState),
		ObligationReason:  deref(r.ObligationReason),
		CancelRequestedAt: derefTime(r.CancelRequestedAt),
		Compensation: ledger.Compensation{
			IdempotencyKey: deref(r.CompensationKey), Deadline: derefTime(r.CompensationDeadline),
			Attempts: int(r.CompensationAttempts), LastError: deref(r.CompensationLastError),
			Receipt: r.CompensationReceipt,
		},
		PendingWriteOffID: r.PendingWriteOffID.UUID,
		Version:           r.Version, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

func toDelegations(rows []dbsqlc.Delegation) []ledger.Delegation {
	out := make([]ledger.Delegation, len(rows))
	for i, row := range rows {
		out[i] = toDelegation(row)
	}
	return out
}

// amountIn is a settled or reversed amount as stored: set exactly while the
// obligation is in the state it belongs to (a CHECK constraint holds the
// rows to it), NULL otherwise.
func amountIn(d ledger.Delegation, state ledger.ObligationState, amount int64) pgtype.Int8 {
	return pgtype.Int8{Int64: amount, Valid: d.ObligationState == state}
}
