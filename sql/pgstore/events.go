package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

func (r reader) StreamEvents(ctx context.Context, stream string) ([]ledger.Event, error) {
	rows, err := r.q.EventListByStream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("list events of %s: %w", stream, err)
	}
	out := make([]ledger.Event, len(rows))
	for i, row := range rows {
		out[i] = toEvent(row)
	}
	return out, nil
}

func (w webhookStore) Event(ctx context.Context, seq int64) (ledger.Event, error) {
	row, err := w.q.EventGetBySeq(ctx, seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Event{}, fmt.Errorf("event %d: %w", seq, ledger.ErrNotFound)
	}
	if err != nil {
		return ledger.Event{}, fmt.Errorf("load event %d: %w", seq, err)
	}
	return toEvent(row), nil
}

func (t *tx) AppendEvent(ctx context.Context, e ledger.Event) (ledger.Event, error) {
	if e.StreamSeq == 1 {
		// A new stream: the unique (stream, stream_seq) constraint refuses
		// the insert if it is not.
		e.PrevHash = ledger.GenesisHash
	} else {
		head, err := t.q.EventStreamHead(ctx, e.Stream)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			e.StreamSeq, e.PrevHash = 1, ledger.GenesisHash
		case err != nil:
			return ledger.Event{}, fmt.Errorf("read head of stream %s: %w", e.Stream, err)
		default:
			e.StreamSeq, e.PrevHash = head.StreamSeq+1, head.Hash
		}
	}
	var err error
	if e.Hash, err = e.ComputeHash(); err != nil {
		return ledger.Event{}, err
	}
	p := dbsqlc.EventInsertParams{
		Stream: e.Stream, StreamSeq: e.StreamSeq, Type: string(e.Type), At: e.At, Actor: e.Actor,
		ObligationFrom: optional(string(e.ObligationFrom)), ObligationTo: optional(string(e.ObligationTo)),
		Data: e.Data, Evidence: optional(e.Evidence), PrevHash: e.PrevHash, Hash: e.Hash,
	}
	if e.DelegationID != uuid.Nil {
		p.DelegationID = uuid.NullUUID{UUID: e.DelegationID, Valid: true}
	}
	if e.Seq, err = t.q.EventInsert(ctx, p); err != nil {
		return ledger.Event{}, fmt.Errorf("insert event into %s: %w", e.Stream, err)
	}
	t.appended = append(t.appended, e)
	return e, nil
}

func toEvent(r dbsqlc.Event) ledger.Event {
	return ledger.Event{
		Seq: r.Seq, Stream: r.Stream, StreamSeq: r.StreamSeq, DelegationID: r.DelegationID.UUID, Type: ledger.EventType(r.Type),
		At: r.At, Actor: r.Actor, ObligationFrom: ledger.ObligationState(deref(r.ObligationFrom)),
		ObligationTo: ledger.ObligationState(deref(r.ObligationTo)), Data: r.Data, Evidence: deref(r.Evidence),
		PrevHash: r.PrevHash, Hash: r.Hash,
	}
}
