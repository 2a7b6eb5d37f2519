package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/delegate"
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
