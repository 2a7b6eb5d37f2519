package pgstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// eventBatch is the events a transaction appended and has not sent yet:
// they are written in one statement (EventInsertBatch), in the order they
// were appended, at the transaction's end or before the first statement
// that may read them (ledger/DESIGN.md §5, "The write path"). Their hash
// chain is computed as they are appended (AppendEvent), each stream's
// extended from the head the transaction holds.
type eventBatch struct {
	p dbsqlc.EventInsertBatchParams
	// owners are the operations that appended them, one per event.
	owners
	// streams counts the events of each stream.
	streams map[string]int
}

// add appends e, appended by operation owner: its text and data as
// PostgreSQL stores them (ledger.StorableEvent), its hash computed.
func (e *eventBatch) add(owner int, ev ledger.Event) {
	if e.streams == nil {
		e.streams = map[string]int{}
	}
	e.streams[ev.Stream]++
	e.owners = append(e.owners, owner)
	b := &e.p
	b.Streams = append(b.Streams, ev.Stream)
	b.StreamSeqs = append(b.StreamSeqs, ev.StreamSeq)
	id := ""
	if ev.DelegationID != uuid.Nil {
		id = ev.DelegationID.String()
	}
	b.DelegationIds = append(b.DelegationIds, id)
	b.Types = append(b.Types, string(ev.Type))
	b.Ats = append(b.Ats, ev.At)
	b.Actors = append(b.Actors, ev.Actor)
	b.ObligationFroms = append(b.ObligationFroms, string(ev.ObligationFrom))
	b.ObligationTos = append(b.ObligationTos, string(ev.ObligationTo))
	b.HashedDatas = append(b.HashedDatas, string(ev.Data))
	b.Evidences = append(b.Evidences, ev.Evidence)
	b.PrevHashes = append(b.PrevHashes, ev.PrevHash)
	b.Hashes = append(b.Hashes, ev.Hash)
}

// bufferEvent buffers an event appended by operation owner, to be sent
// with the transaction's other appends (queueEvents).
func (b *txConn) bufferEvent(owner int, e ledger.Event) error {
	if b.closed {
		return fmt.Errorf("transaction already closed")
	}
	b.events.add(owner, e)
	return nil
}

// buffered says whether events of stream wait in the buffer.
func (b *txConn) buffered(stream string) bool { return b.events.streams[stream] > 0 }

// queueEvents queues the buffered events' one statement (EventInsertBatch)
// as a write, so that it runs before the next statement sent. It is
// refused by an error (a stream position taken, a constraint), so the
// COMMIT may ride with it; its result says whether it queued webhook
// deliveries (txConn.deliveries).
func (b *txConn) queueEvents(ctx context.Context) {
	if len(b.events.owners) == 0 {
		return
	}
	n := len(b.events.owners)
	p := b.events.p
	b.queueBuffered(b.events.owners, func(q *dbsqlc.Queries) { _, _ = q.EventInsertBatch(ctx, p) }, queuedStatement{
		refusal: refusedByError,
		read: func(br pgx.BatchResults) error {
			var appended, deliveries int32
			if err := br.QueryRow().Scan(&appended, &deliveries); err != nil {
				return err
			}
			if int(appended) != n {
				return fmt.Errorf("appended %d events of %d", appended, n)
			}
			b.deliveries = b.deliveries || deliveries > 0
			return nil
		},
		check: func(_ pgconn.CommandTag, err error) error {
			if err != nil {
				return fmt.Errorf("insert %d events: %w", n, err)
			}
			return nil
		},
	})
	b.events = eventBatch{}
}

// mustPrecede says whether the buffered events must be written before the
// statement sql runs with args: whether it may read them (readsEvents).
// EvidenceFactsGet reads only the dispatch_resolved events of the
// delegation its first argument names, so it waits for the buffer only
// when that holds one of those. It runs once in every task status and
// every piece of evidence, and writing the buffer before each had split a
// flush's events into one statement for each of its operations.
func (e *eventBatch) mustPrecede(sql string, args []any) bool {
	if len(e.owners) == 0 {
		return false
	}
	if statementName(sql) == "EvidenceFactsGet" {
		r, ok := rowsRead(sql, args)
		return !ok || e.holds(r.id.String(), ledger.EventTypeDispatchResolved)
	}
	return readsEvents(sql)
}

// holds says whether the buffer holds an event of type typ of the
// delegation id.
func (e *eventBatch) holds(id string, typ ledger.EventType) bool {
	for i, d := range e.p.DelegationIds {
		if d == id && e.p.Types[i] == string(typ) {
			return true
		}
	}
	return false
}

// readsEvents: the statement sql may read the events table, directly or
// through a view, a function or a trigger, so the buffered events must be
// written before it runs. Conservative: any mention of events, webhook
// deliveries (the appends queue them), the reporting views or the schema's
// own functions counts. A stream's head (EventStreamHead) is the append's
// own read: it writes the buffer first only when the buffer holds events
// of that stream (AppendEvent).
func readsEvents(sql string) bool { return eventReads.of(sql) }

var eventReads = perStatement[bool]{classify: func(sql string) bool {
	l := strings.ToLower(sql)
	return !strings.HasPrefix(l, "-- name: eventstreamhead :one") &&
		(strings.Contains(l, "event") || strings.Contains(l, "webhook") ||
			strings.Contains(l, "reporting.") || strings.Contains(l, "quittance_"))
}}
