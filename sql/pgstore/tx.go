package pgstore

import (
	"context"
	"fmt"

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
	// conn queues the writes whose only result is whether they matched
	// (txConn.queue).
	conn     *txConn
	appended []ledger.Event
	// deliveriesQueued: an append queued webhook deliveries (or may
	// have), so the commit wakes the webhook workers.
	deliveriesQueued bool
	// heads are the last events of the streams this transaction holds the
	// lock of (event_stream_head), as it left them, so that appending to
	// one again, or to one whose head a batch read (lockStreamHeads), needs
	// no read first.
	heads map[string]streamHead
}

// streamHead is the last event of a stream: its position and hash.
type streamHead struct {
	seq  int32
	hash []byte
	// batch: the head was read for a batch of appends (lockStreamHeads),
	// whose inserts are queued: nothing reads their Seq back.
	batch bool
}

// lockStreamHeads takes the locks of streams, in one statement, and keeps
// their heads, so that the appends of a batch to them are queued writes
// (AppendEvent), sent with the commit, rather than two round trips each.
func (t *tx) lockStreamHeads(ctx context.Context, streams []string) error {
	rows, err := t.q.EventStreamHeadsLocked(ctx, streams)
	if err != nil {
		return fmt.Errorf("read the heads of %d streams: %w", len(streams), err)
	}
	if t.heads == nil {
		t.heads = make(map[string]streamHead, len(rows))
	}
	for _, r := range rows {
		t.heads[r.Stream] = streamHead{seq: r.StreamSeq, hash: r.Hash, batch: true}
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

// InTx runs fn in a transaction of the underlying Store.
func (p principalStore) InTx(ctx context.Context, fn func(access.Tx) error) error {
	return p.Store.InTx(ctx, func(t ledger.Tx) error { return fn(t.(*tx)) })
}

// Admin returns t itself: one transaction serves the ledger and its
// administration alike.
func (t *tx) Admin() ledger.AdminTx { return t }

// Revocation returns t itself: one transaction serves compensation and
// its identity revocations alike.
func (t *tx) Revocation() compensation.RevocationTx { return t }

// Receipts, Outbox and ExtraTasks return t itself: one transaction serves
// the A2A workers' every part (delegate.Tx).
func (t *tx) Receipts() compensation.ReceiptTx { return t }

func (t *tx) Outbox() delegate.OutboxTx { return t }

func (t *tx) ExtraTasks() delegate.ExtraTaskTx { return t }

var (
	_ ledger.Tx       = (*tx)(nil)
	_ compensation.Tx = (*tx)(nil)
	_ delegate.Tx     = (*tx)(nil)

	_ delegate.OrchestratorTx = (*tx)(nil)
)
