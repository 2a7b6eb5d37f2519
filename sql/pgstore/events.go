package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"

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

// AppendEvent chains e to its stream's head and buffers it: the
// transaction's events are written in one statement, at its end or before
// a statement that may read them (eventbatch.go), so e's Seq is left 0.
func (t *tx) AppendEvent(ctx context.Context, e ledger.Event) (ledger.Event, error) {
	stream := e.Stream
	locked := false // this transaction holds the stream's lock
	if e.StreamSeq == 1 {
		// A new stream: the unique (stream, stream_seq) constraint refuses
		// the insert if it is not.
		e.PrevHash = ledger.GenesisHash
	} else if head, ok := t.heads[e.Stream]; ok {
		e.StreamSeq, e.PrevHash, locked = head.seq+1, head.hash, true
	} else {
		if t.conn.conn.buffered(e.Stream) {
			// Its first event, buffered: the head is read once it is written.
			t.conn.conn.queueEvents(ctx)
		}
		head, err := t.q.EventStreamHead(ctx, e.Stream)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			e.StreamSeq, e.PrevHash = 1, ledger.GenesisHash
		case err != nil:
			return ledger.Event{}, fmt.Errorf("read head of stream %s: %w", e.Stream, err)
		default:
			e.StreamSeq, e.PrevHash = head.StreamSeq+1, head.Hash
		}
		locked = true
	}
	// What is hashed is what is stored: the event's text and data as
	// PostgreSQL can store them, the data in canonical form, kept byte for
	// byte in hashed_data (jsonb's copy may read back differently).
	e, err := ledger.HashedEvent(e)
	if err != nil {
		return ledger.Event{}, fmt.Errorf("event for %s: %w", stream, err)
	}
	t.conn.wrote = true
	if err := t.conn.conn.bufferEvent(t.conn.owner, e); err != nil {
		return ledger.Event{}, err
	}
	if locked {
		if t.heads == nil {
			t.heads = map[string]streamHead{}
		}
		t.heads[e.Stream] = streamHead{seq: e.StreamSeq, hash: e.Hash}
	}
	t.appended = append(t.appended, e)
	return e, nil
}

// toEvent maps an event row to the domain's Event. Its Data is the data
// the hash was computed over: hashed_data (for an event stored before it
// was kept, see hashedOrJSONB).
// An event whose jsonb data no longer equals its hashed_data (a row edited
// around the append-only trigger) is returned with its jsonb data, so its
// hash no longer matches and VerifyChain reports the edit wherever the
// event is read.
func toEvent(r dbsqlc.Event) ledger.Event {
	return ledger.Event{
		Seq: r.Seq, Stream: r.Stream, StreamSeq: r.StreamSeq, DelegationID: r.DelegationID.UUID, Type: ledger.EventType(r.Type),
		At: r.At, Actor: r.Actor, ObligationFrom: ledger.ObligationState(deref(r.ObligationFrom)),
		ObligationTo: ledger.ObligationState(deref(r.ObligationTo)), Data: hashedOrJSONB(r), Evidence: deref(r.Evidence),
		PrevHash: r.PrevHash, Hash: r.Hash,
	}
}

// jsonbEqual reports whether two JSON texts are equal as jsonb values:
// numbers by value (1e2 equals 100), objects by their keys (the last of
// duplicates), arrays and strings exactly.
func jsonbEqual(a, b []byte) bool {
	decode := func(raw []byte) (any, bool) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		return v, dec.Decode(&v) == nil
	}
	va, ok1 := decode(a)
	vb, ok2 := decode(b)
	return ok1 && ok2 && jsonValueEqual(va, vb)
}

func jsonValueEqual(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		rx, okx := new(big.Rat).SetString(string(x))
		ry, oky := new(big.Rat).SetString(string(y))
		return okx && oky && rx.Cmp(ry) == 0
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonValueEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonValueEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}
