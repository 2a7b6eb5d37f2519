package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
)

// TestTransactionBeginsWithItsFirstStatement: BEGIN travels with a
// transaction's first statement, and that statement is inside the
// transaction: rolled back with it, whether it is a write, a read of many
// rows or a failed statement, and the connection is fit for the next
// transaction afterwards.
func TestTransactionBeginsWithItsFirstStatement(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	errAbandon := errors.New("abandon the transaction")
	first := ledger.Event{Stream: "test:first", StreamSeq: 1, Type: "test", At: epoch, Actor: "test", Data: []byte(`{}`)}

	// A first statement that writes is rolled back with the transaction.
	err := b.store.InTx(ctx, func(tx ledger.Tx) error {
		if _, err := tx.AppendEvent(ctx, first); err != nil {
			return err
		}
		return errAbandon
	})
	if !errors.Is(err, errAbandon) {
		t.Fatalf("abandoned transaction: %v", err)
	}
	if events, err := b.store.StreamEvents(ctx, first.Stream); err != nil || len(events) != 0 {
		t.Fatalf("after rollback: %d events (%v), want none", len(events), err)
	}

	// A first statement that fails fails the transaction, and the pool's
	// connections serve the transactions after it (more than the pool holds).
	for range 2 * int(b.pool.Config().MaxConns) {
		err := b.store.InTx(ctx, func(tx ledger.Tx) error {
			_, err := tx.AppendEvent(ctx, ledger.Event{Stream: "test:bad", StreamSeq: 1, Type: "test", At: epoch, Actor: "test"})
			return err
		})
		if err == nil {
			t.Fatal("an event without data was appended")
		}
	}

	// A first statement that reads many rows, then a write, commit together.
	err = b.store.Compensation().InTx(ctx, func(tx compensation.Tx) error {
		if _, err := tx.ClaimPastDeadline(ctx, epoch, 10); err != nil {
			return err
		}
		_, err := tx.AppendEvent(ctx, first)
		return err
	})
	if err != nil {
		t.Fatalf("read then write: %v", err)
	}
	if events, err := b.store.StreamEvents(ctx, first.Stream); err != nil || len(events) != 1 {
		t.Fatalf("after commit: %d events (%v), want 1", len(events), err)
	}

	// A transaction that sends no statement commits nothing, without error.
	if err := b.store.InTx(ctx, func(ledger.Tx) error { return nil }); err != nil {
		t.Fatalf("empty transaction: %v", err)
	}
}
