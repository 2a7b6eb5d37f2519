package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
)

// tx is one pgx transaction. It has every statement a transaction may
// run, so it implements the Tx of each domain that writes through it; each
// domain's Tx declares only the part that domain uses.
type tx struct {
	reader
	// conn is this operation's view of the transaction: it queues the
	// writes whose only result is whether they matched (txConn.queue), and
	// notes whether the operation wrote (coalesce.go).
	conn     *opConn
	appended []ledger.Event
	// observed are the times the operation's updates of delegations
	// marked them observed at (UpdateDelegation), by delegation.
	observed map[uuid.UUID]time.Time
	// txShared is what every operation of one transaction shares: a flush
	// of coalesced operations runs them one after the other in it.
	*txShared
}

// txShared is the state of one PostgreSQL transaction that outlives each
// operation run in it. A transaction that is rolled back takes it along:
// the operations run again start from a new one.
type txShared struct {
	// heads are the last events of the streams this transaction holds the
	// lock of (event_stream_head), as it left them (its own appends
	// included, written or still buffered), so that appending to one
	// again, or to one whose head a batch or the pre-read read
	// (lockStreamHeads, preRead), needs no read first.
	heads map[string]streamHead
	// moves are the budget movements not yet queued (MoveBudget): they are
	// queued just before the commit, sorted by budget, or before a read of
	// a budget.
	moves []pendingMove
	// remotes are the remote tasks of the delegations this transaction
	// locked, as it last read or updated them (seen, UpdateDelegation): an
	// update that leaves one as it was may be buffered (updatebatch.go).
	remotes map[uuid.UUID]ledger.RemoteTask
	// recording are the delegations recording the remote tasks a flush's
	// operations name, as partition keys by the task's (partitionKeys),
	// from the pre-read: a pipelined flush runs an operation naming one
	// after one naming the other (pipeline.go).
	recording map[string][]string
	// served are what answers, by statement name, the reads a flush's
	// pre-read answers (served.go); none in a transaction alone.
	served map[string]servedSource
}

// seen notes the remote tasks of delegations the transaction locked and
// read, and returns them.
func (s *txShared) seen(ds ...ledger.Delegation) []ledger.Delegation {
	if s.remotes == nil {
		s.remotes = make(map[uuid.UUID]ledger.RemoteTask, len(ds))
	}
	for _, d := range ds {
		s.remotes[d.ID] = d.Remote
	}
	return ds
}

// newTx returns the tx of one operation run on conn.
func newTx(conn *opConn, shared *txShared) *tx {
	return &tx{reader: reader{q: newQueries(conn)}, conn: conn, txShared: shared}
}

// streamHead is the last event of a stream: its position and hash.
type streamHead struct {
	seq  int32
	hash []byte
}

// lockStreamHeads takes the locks of streams, in one statement, and keeps
// their heads, so that the appends of a batch to them read no head each.
func (t *tx) lockStreamHeads(ctx context.Context, streams []string) error {
	rows, err := t.q.EventStreamHeadsLocked(ctx, streams)
	if err != nil {
		return fmt.Errorf("read the heads of %d streams: %w", len(streams), err)
	}
	if t.heads == nil {
		t.heads = make(map[string]streamHead, len(rows))
	}
	for _, r := range rows {
		t.heads[r.Stream] = streamHead{seq: r.StreamSeq, hash: r.Hash}
	}
	return nil
}

// Ledger returns t itself: one transaction serves the access store and
// the ledger alike.
func (t *tx) Ledger() ledger.Tx { return t }

// Principals returns the store as the access store: principals,
// credentials, pending changes and OpenID Connect identities.
func (s *Store) Principals() access.Store { return principalStore{s} }

type principalStore struct{ *Store }

var (
	_ access.Store             = principalStore{}
	_ access.Tx                = (*tx)(nil)
	_ access.CredentialWatcher = principalStore{}
)

// InTx runs fn in a transaction of its own (inTxAlone): a change of
// principals takes the registry's lock (PrincipalLockRegistry), which
// serializes them all and must not be held through a flush of other
// operations; they are rare.
func (p principalStore) InTx(ctx context.Context, fn func(access.Tx) error) error {
	return p.inTxAlone(ctx, func(t *tx) error { return fn(t) })
}

// Admin returns t itself: one transaction serves the ledger and its
// administration alike.
func (t *tx) Admin() ledger.AdminTx { return t }

// Revocation returns t itself: one transaction serves compensation and
// its identity revocations alike.
func (t *tx) Revocation() compensation.RevocationTx { return t }

// Receipts returns t itself: one transaction serves the A2A workers and
// the compensation service they write receipts through alike.
func (t *tx) Receipts() compensation.ReceiptTx { return t }

// Outbox returns t itself, as the A2A workers' outbox.
func (t *tx) Outbox() delegate.OutboxTx { return t }

// ExtraTasks returns t itself, as the record of extra remote tasks.
func (t *tx) ExtraTasks() delegate.ExtraTaskTx { return t }

var (
	_ ledger.Tx       = (*tx)(nil)
	_ compensation.Tx = (*tx)(nil)
	_ delegate.Tx     = (*tx)(nil)

	_ delegate.OrchestratorTx = (*tx)(nil)
)
