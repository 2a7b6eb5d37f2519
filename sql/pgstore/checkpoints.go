package pgstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/quittance/quittance/ledger/audit"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

var _ audit.CheckpointStore = (*Store)(nil)

// checkpointLock is the advisory lock every replica's checkpoint takes, so
// two replicas never sign two checkpoints with the same id, or two over
// the same span.
const checkpointLock = "quittance:checkpoints"

// AddCheckpoint implements audit.CheckpointStore. The span is read after
// the lock is taken, in the same transaction, so it starts where the
// previous checkpoint's ended; its events are final, so none can later
// appear inside it.
func (s *Store) AddCheckpoint(ctx context.Context, maxEvents int, build func(*audit.Checkpoint, audit.CheckpointSpan) (*audit.Checkpoint, error)) (audit.Checkpoint, bool, error) {
	var (
		added audit.Checkpoint
		ok    bool
	)
	// A transaction of its own (inTxAlone): the span it reads must end
	// where committed events end, which another operation's uncommitted
	// events in the same transaction would not.
	err := s.inTxAlone(ctx, func(t *tx) error {
		ok = false
		if err := t.q.AdvisoryXactLock(ctx, checkpointLock); err != nil {
			return fmt.Errorf("lock checkpoints: %w", err)
		}
		var (
			latest  *audit.Checkpoint
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
		span := audit.CheckpointSpan{Through: through.ThroughPos.Int64, Heads: make([]audit.StreamHead, len(rows))}
		for i, r := range rows {
			span.Heads[i] = audit.StreamHead{Stream: r.Stream, Seq: r.StreamSeq, Hash: hex.EncodeToString(r.Hash)}
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
		return audit.Checkpoint{}, false, interpretError(err)
	}
	return added, ok, nil
}

// signedHeadsOf reads the head each of the streams of heads was last
// signed at, so that the checkpoint signing heads can refuse to move one
// back.
func signedHeadsOf(ctx context.Context, q *dbsqlc.Queries, heads []audit.StreamHead) (map[string]audit.SignedHead, error) {
	names := make([]string, len(heads))
	for i, h := range heads {
		names[i] = h.Stream
	}
	rows, err := q.CheckpointHeadsSigned(ctx, names)
	if err != nil {
		return nil, fmt.Errorf("read the heads signed before: %w", err)
	}
	signed := make(map[string]audit.SignedHead, len(rows))
	for _, r := range rows {
		signed[r.Stream] = audit.SignedHead{StreamHead: audit.StreamHead{Stream: r.Stream, Seq: r.StreamSeq, Hash: r.Hash}, Checkpoint: r.CheckpointID, Full: r.Full}
	}
	return signed, nil
}

// FeedHorizon implements audit.CheckpointStore.
func (s *Store) FeedHorizon(ctx context.Context) (cut, horizon uint64, err error) {
	row, err := s.q.CheckpointFeedHorizon(ctx)
	if err != nil {
		return 0, 0, interpretError(err)
	}
	return row.Cut.Uint64, row.Horizon.Uint64, nil
}

// CheckpointSigning implements audit.CheckpointStore.
func (s *Store) CheckpointSigning(ctx context.Context, stream string) (audit.Checkpoint, error) {
	row, err := s.q.CheckpointsSigningStream(ctx, stream)
	if err != nil {
		return audit.Checkpoint{}, interpretError(err)
	}
	return checkpointFromRow(row), nil
}

// LatestCheckpoint implements audit.CheckpointStore.
func (s *Store) LatestCheckpoint(ctx context.Context) (audit.Checkpoint, error) {
	row, err := s.q.CheckpointLatest(ctx)
	if err != nil {
		return audit.Checkpoint{}, interpretError(err)
	}
	return checkpointFromRow(row), nil
}

// Checkpoints implements audit.CheckpointStore.
func (s *Store) Checkpoints(ctx context.Context, afterID int64, limit int) ([]audit.Checkpoint, error) {
	rows, err := s.q.CheckpointList(ctx, dbsqlc.CheckpointListParams{AfterID: afterID, MaxRows: int32(limit)})
	if err != nil {
		return nil, interpretError(err)
	}
	out := make([]audit.Checkpoint, len(rows))
	for i, r := range rows {
		out[i] = checkpointFromRow(r)
	}
	return out, nil
}

func checkpointFromRow(r dbsqlc.Checkpoint) audit.Checkpoint {
	return audit.Checkpoint{
		ID: r.ID, At: r.CreatedAt, CreatedBy: r.CreatedBy, KeyID: r.Kid, Streams: int(r.Streams), Through: r.ThroughPos.Int64,
		HeadsSHA256: r.HeadsSha256, Payload: []byte(r.Payload), JWS: r.Jws,
	}
}
