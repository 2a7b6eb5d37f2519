package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
	"github.com/quittance/quittance/sql/pgstore"
)

// TestUnavailableWhenTheDatabaseCannotTakeIt: the store's errors say
// ledger.ErrUnavailable (503 with Retry-After in the API) when the
// database cannot take a transaction now and applied none of it — its
// connection terminated by an administrator mid-transaction (57P01), a
// server that only reads (25006, a standby before its promotion), a server
// that cannot be reached — and only then: a refused write, a canceled
// request and a missing row keep their own meaning.
func TestUnavailableWhenTheDatabaseCannotTakeIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	event := func(stream string) ledger.Event {
		return ledger.Event{Stream: stream, StreamSeq: 1, Type: "test", At: epoch, Actor: "test", Data: []byte(`{}`)}
	}

	// The transaction's connection is terminated once it has begun (the
	// first append reads its stream's head) and has appended.
	err := b.store.InTx(ctx, func(tx ledger.Tx) error {
		first := event("test:terminated-1")
		first.StreamSeq = 0
		if _, err := tx.AppendEvent(ctx, first); err != nil {
			return err
		}
		if _, err := b.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'idle in transaction'`); err != nil {
			return fmt.Errorf("terminate: %w", err)
		}
		_, err := tx.AppendEvent(ctx, event("test:terminated-2"))
		return err
	})
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("transaction whose connection was terminated: %v, want ErrUnavailable", err)
	}
	for _, s := range []string{"test:terminated-1", "test:terminated-2"} {
		if events, err := b.store.StreamEvents(ctx, s); err != nil || len(events) != 0 {
			t.Errorf("stream %s after the refused transaction: %d events (%v), want none", s, len(events), err)
		}
	}

	// A server that only reads.
	cfg := b.pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	readOnly := pgstore.New(openPool(t, cfg))
	err = readOnly.InTx(ctx, func(tx ledger.Tx) error {
		_, err := tx.AppendEvent(ctx, event("test:read-only"))
		return err
	})
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("write on a read-only server: %v, want ErrUnavailable", err)
	}

	// A server that cannot be reached: transactions and reads alike.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg = b.pool.Config().Copy()
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(ln.Addr().(*net.TCPAddr).Port)
	cfg.ConnConfig.Fallbacks = nil
	ln.Close()
	gone := pgstore.New(openPool(t, cfg))
	err = gone.InTx(ctx, func(tx ledger.Tx) error {
		_, err := tx.AppendEvent(ctx, event("test:gone"))
		return err
	})
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("transaction on an unreachable server: %v, want ErrUnavailable", err)
	}
	if _, err := gone.StreamEvents(ctx, "test:gone"); !errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("read on an unreachable server: %v, want ErrUnavailable", err)
	}
	err = gone.Reports().Obligations(ctx, report.ObligationQuery{}, epoch, func(report.ObligationRow) error { return nil })
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("report on an unreachable server: %v, want ErrUnavailable", err)
	}

	// Errors that are not the database's unavailability.
	err = b.store.InTx(ctx, func(tx ledger.Tx) error {
		_, err := tx.AppendEvent(ctx, ledger.Event{Stream: "test:bad", StreamSeq: 1, Type: "test", At: epoch, Actor: "test"})
		return err
	})
	if err == nil || errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("refused write: %v, want an error other than ErrUnavailable", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.store.StreamEvents(canceled, "test:canceled"); err == nil || errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("canceled read: %v, want an error other than ErrUnavailable", err)
	}
	if _, err := gone.StreamEvents(canceled, "test:canceled"); errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("canceled read on an unreachable server: %v, want an error other than ErrUnavailable", err)
	}
}

// openPool opens a pool with cfg, closed when the test ends.
func openPool(t *testing.T, cfg *pgxpool.Config) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
