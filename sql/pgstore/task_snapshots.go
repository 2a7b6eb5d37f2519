package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

func (r reader) TaskSnapshot(ctx context.Context, id uuid.UUID) (delegate.TaskSnapshot, error) {
	row, err := r.q.TaskSnapshotGet(ctx, id)
	if err != nil {
		return delegate.TaskSnapshot{}, notFound(err, "task snapshot of delegation", id)
	}
	return decodeSnapshot(row.Snapshot)
}

func (t *tx) TaskSnapshotForUpdate(ctx context.Context, id uuid.UUID) (delegate.TaskSnapshot, error) {
	row, err := t.q.TaskSnapshotGetForUpdate(ctx, id)
	if err != nil {
		return delegate.TaskSnapshot{}, notFound(err, "task snapshot of delegation", id)
	}
	return decodeSnapshot(row.Snapshot)
}

func (t *tx) PutTaskSnapshot(ctx context.Context, id uuid.UUID, s delegate.TaskSnapshot, now time.Time) error {
	raw, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode task snapshot: %w", err)
	}
	if err := t.q.TaskSnapshotPut(ctx, dbsqlc.TaskSnapshotPutParams{DelegationID: id, Snapshot: raw, Now: now}); err != nil {
		return fmt.Errorf("store task snapshot of delegation %s: %w", id, err)
	}
	return nil
}

func decodeSnapshot(raw []byte) (delegate.TaskSnapshot, error) {
	var s delegate.TaskSnapshot
	if err := json.Unmarshal(raw, &s); err != nil {
		return delegate.TaskSnapshot{}, fmt.Errorf("decode task snapshot: %w", err)
	}
	return s, nil
}
