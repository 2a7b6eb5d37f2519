package pgstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

var _ ledger.CheckpointStore = (*Store)(nil)

// checkpointLock is the advisory lock every replica's checkpoint takes, so
// two replicas never sign two checkpoints with the same id, or two over
// the same span.
const checkpointLock = "quittance:checkpoints"

// AddCheckpoint implements ledger.CheckpointStore. The span is read after
// the lock is taken, in the same transaction, so it starts where the
// previous checkpoint's ended; its events are final, so none can later
// appear inside it.
func (s *Store) AddCheckpoint(ctx context.Context, maxEvents int, build func(*ledger.Checkpoint, ledger.CheckpointSpan) (*ledger.Checkpoint, error)) (ledger.Checkpoint, bool, error) {
	var (
		added ledger.Checkpoint
		ok    bool
	)
	err := s.inTx(ctx, func(t *tx) error {
		ok = false
		if err := t.q.AdvisoryXactLock(ctx, checkpointLock); err != nil {
			return fmt.Errorf("lock checkpoints: %w", err)
		}
		var (
			latest  *ledger.Checkpoint
			through dbsqlc.CheckpointInsertParams // the span's end, as stored
		)
		switch row, err := t.q.CheckpointLatest(ctx); {
		case err == nil:
			c := checkpointFromRow(row)
			latest = &c
			through.ThroughPos, through.ThroughOrderXid, through.ThroughTxPos = row.ThroughPos, row.ThroughOrderXid, row.ThroughTxPos
		case errors.Is(err, pgx.ErrNoRows):
		default:
			return fmt.Errorf("read latest checkpoint: %w", err)
		}
		rows, err := t.q.CheckpointSpanHeads(ctx, dbsqlc.CheckpointSpanHeadsParams{AfterPos: through.ThroughPos.Int64, MaxEvents: int32(maxEvents)})
		if err != nil {
			return fmt.Errorf("read the span to checkpoint: %w", err)
		}
		span := ledger.CheckpointSpan{Through: through.ThroughPos.Int64, Heads: make([]ledger.StreamHead, len(rows))}
		for i, r := range rows {
			span.Heads[i] = ledger.StreamHead{Stream: r.Stream, Seq: r.StreamSeq, Hash: hex.EncodeToString(r.Hash)}
		}
		if span.Signed, err = signedHeadsOf(ctx, t.q, span.Heads); err != nil {
			return err
		}
		if len(rows) > 0 {
			r := rows[0]
			span.Through, span.Full = r.ThroughPos, int(r.SpanEvents) >= maxEvents
			through.ThroughPos = pgtype.Int8{Int64: r.ThroughPos, Valid: true}
			through.ThroughOrderXid = r.ThroughOrderXid
			through.ThroughTxPos = pgtype.Int8{Int64: r.ThroughTxPos, Valid: true}
		}
		c, err := build(latest, span)
		if err != nil || c == nil {
			return err
		}
		if err := t.q.CheckpointInsert(ctx, dbsqlc.CheckpointInsertParams{
			ID: c.ID, CreatedAt: c.At, CreatedBy: c.CreatedBy, Kid: c.KeyID, Streams: int32(c.Streams),
			HeadsSha256: c.HeadsSHA256, Payload: string(c.Payload), Jws: c.JWS,
			ThroughPos: through.ThroughPos, ThroughOrderXid: through.ThroughOrderXid, ThroughTxPos: through.ThroughTxPos,
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

// signedHeadsOf reads the head each of the streams of heads was last
// signed at, so that the checkpoint signing heads can refuse to move one
// back.
func signedHeadsOf(ctx context.Context, q *dbsqlc.Queries, heads []ledger.StreamHead) (map[string]ledger.SignedHead, error) {
	names := make([]string, len(heads))
	for i, h := range heads {
		names[i] = h.Stream
	}
	rows, err := q.CheckpointHeadsSigned(ctx, names)
	if err != nil {
		return nil, fmt.Errorf("read the heads signed before: %w", err)
	}
	signed := make(map[string]ledger.SignedHead, len(rows))
	for _, r := range rows {
		signed[r.Stream] = ledger.SignedHead{StreamHead: ledger.StreamHead{Stream: r.Stream, Seq: r.StreamSeq, Hash: r.Hash}, Checkpoint: r.CheckpointID, Full: r.Full}
	}
	return signed, nil
}

// FeedHorizon implements ledger.CheckpointStore.
func (s *Store) FeedHorizon(ctx context.Context) (cut, horizon uint64, err error) {
	row, err := s.q.CheckpointFeedHorizon(ctx)
	if err != nil {
		return 0, 0, interpretError(err)
	}
	return row.Cut.Uint64, row.Horizon.Uint64, nil
}

// CheckpointSigning implements ledger.CheckpointStore.
func (s *Store) CheckpointSigning(ctx context.Context, stream string) (ledger.Checkpoint, error) {
	row, err := s.q.CheckpointsSigningStream(ctx, stream)
	if err != nil {
		return ledger.Checkpoint{}, interpretError(err)
	}
	return checkpointFromRow(row), nil
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
		ID: r.ID, At: r.CreatedAt, CreatedBy: r.CreatedBy, KeyID: r.Kid, Streams: int(r.Streams), Through: r.ThroughPos.Int64,
		HeadsSHA256: r.HeadsSha256, Payload: []byte(r.Payload), JWS: r.Jws,
	}
}
