package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

func (r reader) FollowUp(ctx context.Context, id uuid.UUID, messageID string) (delegate.FollowUp, error) {
	row, err := r.q.FollowUpGet(ctx, dbsqlc.FollowUpGetParams{DelegationID: id, MessageID: messageID})
	if err != nil {
		return delegate.FollowUp{}, notFound(err, "message", messageID)
	}
	return toFollowUp(row), nil
}

func (r reader) FollowUps(ctx context.Context, id uuid.UUID) ([]delegate.FollowUp, error) {
	rows, err := r.q.FollowUpListByDelegation(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list messages of delegation %s: %w", id, err)
	}
	out := make([]delegate.FollowUp, len(rows))
	for i, row := range rows {
		out[i] = toFollowUp(row)
	}
	return out, nil
}

func (r reader) DispatchMessage(ctx context.Context, id uuid.UUID) (json.RawMessage, time.Time, error) {
	row, err := r.q.OutboxDispatchMessage(ctx, id)
	if err != nil {
		return nil, time.Time{}, notFound(err, "dispatch message of delegation", id)
	}
	return row.Payload, row.CreatedAt, nil
}

func (r reader) QueuedFollowUps(ctx context.Context, id uuid.UUID) ([]delegate.FollowUp, error) {
	rows, err := r.q.FollowUpListQueued(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list queued messages of delegation %s: %w", id, err)
	}
	out := make([]delegate.FollowUp, len(rows))
	for i, row := range rows {
		out[i] = toFollowUp(row)
	}
	return out, nil
}

func (t *tx) InsertFollowUp(ctx context.Context, m delegate.FollowUp) error {
	n, err := t.q.FollowUpInsert(ctx, dbsqlc.FollowUpInsertParams{
		DelegationID: m.DelegationID, MessageID: m.MessageID, A2aMessageID: m.A2AMessageID,
		RequestHash: m.RequestHash, Payload: m.Payload, Now: m.CreatedAt,
	})
	if err != nil {
		return fmt.Errorf("queue message %s: %w", m.MessageID, err)
	}
	if n != 1 {
		return fmt.Errorf("queue message %s: %w", m.MessageID, ledger.ErrConcurrentUpdate)
	}
	return nil
}

func (t *tx) FinishFollowUp(ctx context.Context, m delegate.FollowUp, now time.Time) error {
	err := t.q.FollowUpFinish(ctx, dbsqlc.FollowUpFinishParams{
		Status: m.Status, Error: optional(m.Error), ResultState: optional(string(m.ResultState)), Now: now,
		DelegationID: m.DelegationID, MessageID: m.MessageID,
	})
	if err != nil {
		return fmt.Errorf("finish message %s: %w", m.MessageID, err)
	}
	return nil
}

func (t *tx) AttemptFollowUp(ctx context.Context, m delegate.FollowUp, problem string, now time.Time) error {
	err := t.q.FollowUpAttempt(ctx, dbsqlc.FollowUpAttemptParams{Error: optional(problem), Now: now, DelegationID: m.DelegationID, MessageID: m.MessageID})
	if err != nil {
		return fmt.Errorf("record attempt of message %s: %w", m.MessageID, err)
	}
	return nil
}

func toFollowUp(r dbsqlc.DelegationMessage) delegate.FollowUp {
	return delegate.FollowUp{
		DelegationID: r.DelegationID, MessageID: r.MessageID, A2AMessageID: r.A2aMessageID, RequestHash: r.RequestHash,
		Payload: r.Payload, Status: r.Status, Attempts: int(r.Attempts), Error: deref(r.Error),
		ResultState: ledger.TaskStatus(deref(r.ResultState)), CreatedAt: r.CreatedAt, SentAt: derefTime(r.SentAt),
	}
}
