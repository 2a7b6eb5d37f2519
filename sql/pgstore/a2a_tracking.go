package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

func (r reader) Tracking(ctx context.Context, id uuid.UUID) (delegate.Tracking, error) {
	row, err := r.q.A2ATrackingGet(ctx, id)
	if err != nil {
		return delegate.Tracking{}, notFound(err, "a2a tracking of delegation", id)
	}
	return delegate.Tracking{
		Dispatched: row.Dispatched, PushTokenHash: row.PushTokenHash, ObservedAt: derefTime(row.ObservedAt),
		CompensationTaskID: deref(row.CompensationTaskID), CompensationRound: int(row.CompensationRound),
	}, nil
}

// DelegationsToPoll lists dispatched tasks due for a poll.
func (a a2aStore) DelegationsToPoll(ctx context.Context, cutoff, now time.Time, limit int) ([]uuid.UUID, error) {
	ids, err := a.q.A2ATrackingListToPoll(ctx, dbsqlc.A2ATrackingListToPollParams{Cutoff: &cutoff, Now: now, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list delegations to poll: %w", err)
	}
	return ids, nil
}

// DelegationsToStream lists dispatched tasks that may be streamed.
func (a a2aStore) DelegationsToStream(ctx context.Context, limit int) ([]uuid.UUID, error) {
	rows, err := a.q.A2ATrackingListToStream(ctx, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("list delegations to stream: %w", err)
	}
	return rows, nil
}

func (t *tx) SetPushTokenHash(ctx context.Context, id uuid.UUID, hash []byte, now time.Time) error {
	if err := t.q.A2ATrackingSetPushToken(ctx, dbsqlc.A2ATrackingSetPushTokenParams{PushTokenHash: hash, Now: now, DelegationID: id}); err != nil {
		return fmt.Errorf("store push token hash of delegation %s: %w", id, err)
	}
	return nil
}

func (t *tx) MarkObserved(ctx context.Context, id uuid.UUID, now time.Time) error {
	if err := t.q.A2ATrackingObserved(ctx, dbsqlc.A2ATrackingObservedParams{Now: now, DelegationID: id}); err != nil {
		return fmt.Errorf("mark delegation %s observed: %w", id, err)
	}
	return nil
}

func (t *tx) SetCompensationTask(ctx context.Context, id uuid.UUID, taskID string, round int, now time.Time) error {
	err := t.q.A2ATrackingSetCompensationTask(ctx, dbsqlc.A2ATrackingSetCompensationTaskParams{
		CompensationTaskID: optional(taskID), CompensationRound: int32(round), Now: now, DelegationID: id,
	})
	if err != nil {
		return fmt.Errorf("store compensation task of delegation %s: %w", id, err)
	}
	return nil
}

func (t *tx) SetDispatchUnknown(ctx context.Context, id uuid.UUID, reason string, now time.Time) error {
	if err := t.q.DelegationSetDispatchUnknown(ctx, dbsqlc.DelegationSetDispatchUnknownParams{ID: id, Reason: reason, Now: now}); err != nil {
		return fmt.Errorf("mark dispatch of delegation %s unknown: %w", id, err)
	}
	return nil
}

func (t *tx) ClearDispatchUnknown(ctx context.Context, id uuid.UUID) (bool, error) {
	n, err := t.q.DelegationClearDispatchUnknown(ctx, id)
	if err != nil {
		return false, fmt.Errorf("clear dispatch_unknown of delegation %s: %w", id, err)
	}
	return n > 0, nil
}

func (t *tx) SetTaskNotFound(ctx context.Context, id uuid.UUID, answer string, now time.Time) (bool, error) {
	n, err := t.q.DelegationSetTaskNotFound(ctx, dbsqlc.DelegationSetTaskNotFoundParams{ID: id, Answer: answer, Now: now})
	if err != nil {
		return false, fmt.Errorf("mark task of delegation %s not found: %w", id, err)
	}
	return n > 0, nil
}

func (t *tx) ClearTaskNotFound(ctx context.Context, id uuid.UUID) error {
	if err := t.q.DelegationClearTaskNotFound(ctx, id); err != nil {
		return fmt.Errorf("clear task_not_found of delegation %s: %w", id, err)
	}
	return nil
}

func (r reader) RemoteTasks(ctx context.Context, id uuid.UUID) ([]delegate.RemoteTask, error) {
	rows, err := r.q.RemoteTaskList(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list remote tasks of delegation %s: %w", id, err)
	}
	out := make([]delegate.RemoteTask, 0, len(rows))
	for _, row := range rows {
		t := delegate.RemoteTask{
			TaskID: row.TaskID, Purpose: delegate.RemoteTaskPurpose(row.Purpose), ContextID: row.ContextID,
			FoundBy: row.FoundBy, Status: ledger.TaskStatus(row.Status), FoundAt: row.FoundAt,
			CancelSentAt: derefTime(row.CancelSentAt),
		}
		if row.NamedRound.Valid {
			t.NamedRound = int(row.NamedRound.Int32)
		}
		t.Compensation = compensation.ExtraTaskCompensation{
			RequiredAt: derefTime(row.CompensationRequiredAt), Round: int(row.CompensationRound), Attempts: int(row.CompensationAttempts),
			TaskID: deref(row.CompensationTaskID), LastError: deref(row.CompensationLastError),
			ResolvedAt: derefTime(row.CompensationResolvedAt), Resolution: compensation.ExtraTaskResolution(deref(row.CompensationResolution)),
		}
		out = append(out, t)
	}
	return out, nil
}

func (t *tx) RecordRemoteTask(ctx context.Context, id uuid.UUID, rt delegate.RemoteTask, now time.Time) (bool, error) {
	n, err := t.q.RemoteTaskInsert(ctx, dbsqlc.RemoteTaskInsertParams{
		DelegationID: id, TaskID: rt.TaskID, Purpose: string(rt.Purpose), ContextID: rt.ContextID,
		FoundBy: rt.FoundBy, Status: string(rt.Status), Now: now,
	})
	if err != nil {
		return false, fmt.Errorf("record remote task %q of delegation %s: %w", rt.TaskID, id, err)
	}
	return n > 0, nil
}

func (t *tx) SetRemoteTaskStatus(ctx context.Context, id uuid.UUID, taskID string, status ledger.TaskStatus, now time.Time) error {
	if err := t.q.RemoteTaskSetStatus(ctx, dbsqlc.RemoteTaskSetStatusParams{Status: string(status), Now: now, DelegationID: id, TaskID: taskID}); err != nil {
		return fmt.Errorf("set status of remote task %q of delegation %s: %w", taskID, id, err)
	}
	return nil
}

func (t *tx) MarkRemoteTaskCancelSent(ctx context.Context, id uuid.UUID, taskID string, now time.Time) error {
	if err := t.q.RemoteTaskCancelSent(ctx, dbsqlc.RemoteTaskCancelSentParams{Now: &now, DelegationID: id, TaskID: taskID}); err != nil {
		return fmt.Errorf("mark cancel of remote task %q of delegation %s: %w", taskID, id, err)
	}
	return nil
}

func (t *tx) MarkRemoteTasksNamed(ctx context.Context, id uuid.UUID, taskIDs []string, round int, now time.Time) error {
	if len(taskIDs) == 0 {
		return nil
	}
	if err := t.q.RemoteTaskNamed(ctx, dbsqlc.RemoteTaskNamedParams{Round: pgtype.Int4{Int32: int32(round), Valid: true}, Now: now, DelegationID: id, TaskIds: taskIDs}); err != nil {
		return fmt.Errorf("mark remote tasks of delegation %s named: %w", id, err)
	}
	return nil
}

func (t *tx) RequireExtraTaskCompensation(ctx context.Context, id uuid.UUID, taskID string, now time.Time) error {
	if err := t.q.RemoteTaskRequireCompensation(ctx, dbsqlc.RemoteTaskRequireCompensationParams{Now: now, DelegationID: id, TaskID: taskID}); err != nil {
		return fmt.Errorf("require compensation of remote task %q of delegation %s: %w", taskID, id, err)
	}
	return nil
}

func (t *tx) ResolveExtraTaskCompensation(ctx context.Context, id uuid.UUID, taskID string, r compensation.ExtraTaskResolution, now time.Time) (bool, error) {
	res := string(r)
	n, err := t.q.RemoteTaskResolveCompensation(ctx, dbsqlc.RemoteTaskResolveCompensationParams{Now: &now, Resolution: &res, DelegationID: id, TaskID: taskID})
	if err != nil {
		return false, fmt.Errorf("resolve compensation of remote task %q of delegation %s: %w", taskID, id, err)
	}
	return n > 0, nil
}

func (t *tx) RedriveExtraTaskCompensation(ctx context.Context, id uuid.UUID, taskID string, now time.Time) (bool, error) {
	n, err := t.q.RemoteTaskRedriveCompensation(ctx, dbsqlc.RemoteTaskRedriveCompensationParams{Now: now, DelegationID: id, TaskID: taskID})
	if err != nil {
		return false, fmt.Errorf("redrive compensation of remote task %q of delegation %s: %w", taskID, id, err)
	}
	return n > 0, nil
}

func (t *tx) SetExtraTaskCompensation(ctx context.Context, id uuid.UUID, taskID string, c compensation.ExtraTaskCompensation, now time.Time) error {
	err := t.q.RemoteTaskSetCompensation(ctx, dbsqlc.RemoteTaskSetCompensationParams{
		Round: int32(c.Round), Attempts: int32(c.Attempts), CompensationTaskID: optional(c.TaskID), LastError: optional(c.LastError),
		Now: now, DelegationID: id, TaskID: taskID,
	})
	if err != nil {
		return fmt.Errorf("record compensation request of remote task %q of delegation %s: %w", taskID, id, err)
	}
	return nil
}

// DelegationsDispatchUnknown lists dispatch_unknown delegations due for a lookup.
func (a a2aStore) DelegationsDispatchUnknown(ctx context.Context, cutoff, now time.Time, limit int) ([]uuid.UUID, error) {
	ids, err := a.q.A2ATrackingListDispatchUnknown(ctx, dbsqlc.A2ATrackingListDispatchUnknownParams{Cutoff: &cutoff, Now: now, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list dispatch_unknown delegations: %w", err)
	}
	return ids, nil
}
