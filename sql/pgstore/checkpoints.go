package pgstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

var _ ledger.CheckpointStore = (*Store)(nil)

// checkpointLock is the advisory lock every replica's checkpoint takes, so
// two replicas never sign two checkpoints with the same id, or one over
// heads older than the other's.
const checkpointLock = "quittance:checkpoints"

// AddCheckpoint implements ledger.CheckpointStore. The heads are read
// after the lock is taken, in the same transaction, so they include every
// event committed before the previous checkpoint's transaction released it.
func (s *Store) AddCheckpoint(ctx context.Context, build func(*ledger.Checkpoint, []ledger.StreamHead) (*ledger.Checkpoint, error)) (ledger.Checkpoint, bool, error) {
	var (
		added ledger.Checkpoint
		ok    bool
	)
	err := s.inTx(ctx, func(t *tx) error {
		ok = false
		if err := t.q.AdvisoryXactLock(ctx, checkpointLock); err != nil {
			return fmt.Errorf("lock checkpoints: %w", err)
		}
		var latest *ledger.Checkpoint
		switch row, err := t.q.CheckpointLatest(ctx); {
		case err == nil:
			c := checkpointFromRow(row)
			latest = &c
		case errors.Is(err, pgx.ErrNoRows):
		default:
			return fmt.Errorf("read latest checkpoint: %w", err)
		}
		rows, err := t.q.EventStreamHeads(ctx)
		if err != nil {
			return fmt.Errorf("read stream heads: %w", err)
		}
		heads := make([]ledger.StreamHead, len(rows))
		for i, r := range rows {
			heads[i] = ledger.StreamHead{Stream: r.Stream, Seq: r.StreamSeq, Hash: hex.EncodeToString(r.Hash)}
		}
		c, err := build(latest, heads)
		if err != nil || c == nil {
			return err
		}
		if err := t.q.CheckpointInsert(ctx, dbsqlc.CheckpointInsertParams{
			ID: c.ID, CreatedAt: c.At, CreatedBy: c.CreatedBy, Kid: c.KeyID, Streams: int32(c.Streams),
			HeadsSha256: c.HeadsSHA256, Payload: string(c.Payload), Jws: c.JWS,
		}); err != nil {
			return fmt.Errorf("store checkpoint %d: %w", c.ID, err)
		}
		added, ok = *c, true
		return nil
	})
	if err != nil {
		return ledger.Checkpoint{}, false, interpretError(err)
	}
	return added, ok, nil
}

// LatestCheckpoint implements ledger.CheckpointStore.
func (s *Store) LatestCheckpoint(ctx context.Context) (ledger.Checkpoint, error) {
	row, err := s.q.CheckpointLatest(ctx)
	if err != nil {
		return ledger.Checkpoint{}, interpretError(err)
	}
	return checkpointFromRow(row), nil
}

// Checkpoints implements ledger.CheckpointStore.
func (s *Store) Checkpoints(ctx context.Context, afterID int64, limit int) ([]ledger.Checkpoint, error) {
	rows, err := s.q.CheckpointList(ctx, dbsqlc.CheckpointListParams{AfterID: afterID, MaxRows: int32(limit)})
	if err != nil {
		return nil, interpretError(err)
	}
	out := make([]ledger.Checkpoint, len(rows))
	for i, r := range rows {
		out[i] = checkpointFromRow(r)
	}
	return out, nil
}

func checkpointFromRow(r dbsqlc.Checkpoint) ledger.Checkpoint {
	return ledger.Checkpoint{
		ID: r.ID, At: r.CreatedAt, CreatedBy: r.CreatedBy, KeyID: r.Kid, Streams: int(r.Streams),
		HeadsSHA256: r.HeadsSha256, Payload: []byte(r.Payload), JWS: r.Jws,
	}
}
