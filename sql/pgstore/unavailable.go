package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// This file is the one rule for "the database cannot take this now"
// (ledger.ErrUnavailable, answered 503 with Retry-After): a database that
// is restarting, failing over to its standby or out of reach. Such an
// error is marked unavailable only when nothing of the request can have
// been applied, so that sending it again, with the same idempotency key,
// is safe (ledger/DESIGN.md §7, Availability):
//
//   - a statement of a transaction whose COMMIT was not sent: whatever
//     happened to the connection, PostgreSQL rolls the transaction back;
//   - a statement outside a transaction (a read, or an autocommit write)
//     that nothing reached, or that the server refused with an error;
//   - a COMMIT only when nothing of it was sent (pgconn.SafeToRetry).
//
// A COMMIT whose answer was lost (the connection broke after it was sent,
// or the primary died while a synchronous standby had yet to confirm it)
// may have committed: its error says ledger.ErrOutcomeUnknown instead, a
// 500 that says so, and the client's retry with the same idempotency key
// finds what was committed.

// unavailableDB is the DBTX under every statement of the store
// (newQueries): it marks the errors of db's statements unavailable by the
// rule above. inTx says db is a transaction whose COMMIT is sent
// elsewhere (txConn, an operation's opConn in a coalesced flush, pgx.Tx).
type unavailableDB struct {
	db   dbsqlc.DBTX
	inTx bool
}

// withUnavailable wraps db in unavailableDB.
func withUnavailable(db dbsqlc.DBTX) dbsqlc.DBTX {
	switch db.(type) {
	case *txConn, *opConn, pgx.Tx:
		// An operation's statements in a coalesced flush (opConn) run in
		// its txConn's transaction too.
		return unavailableDB{db: db, inTx: true}
	case *recorder:
		return db // records statements, sends none
	}
	return unavailableDB{db: db}
}

func (u unavailableDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := u.db.Exec(ctx, sql, args...)
	return tag, u.mark(err)
}

func (u unavailableDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := u.db.Query(ctx, sql, args...)
	if err != nil {
		return rows, u.mark(err)
	}
	return unavailableRows{Rows: rows, u: u}, nil
}

func (u unavailableDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return unavailableRow{row: u.db.QueryRow(ctx, sql, args...), u: u}
}

// mark marks err unavailable when the rule allows it.
func (u unavailableDB) mark(err error) error {
	switch {
	case err == nil, !cannotTakeNow(err):
		return err
	case u.inTx, nothingSent(err), refusedByServer(err):
		return markUnavailable(err)
	}
	return err
}

type unavailableRows struct {
	pgx.Rows
	u unavailableDB
}

func (r unavailableRows) Err() error { return r.u.mark(r.Rows.Err()) }

type unavailableRow struct {
	row pgx.Row
	u   unavailableDB
}

func (r unavailableRow) Scan(dest ...any) error { return r.u.mark(r.row.Scan(dest...)) }

// readOnlyError is the error of a read-only transaction's statement, its
// BEGIN included: such a transaction applies nothing, so it is marked as
// any statement before COMMIT is.
func readOnlyError(err error) error { return unavailableDB{inTx: true}.mark(err) }

// commitError is the error of a failed COMMIT: unavailable when nothing
// of it was sent or PostgreSQL answered a statement before it with the
// error (commitSkipped), of unknown outcome when the database could not answer
// it (see above), and otherwise PostgreSQL's refusal as it is.
func commitError(err error) error {
	err = fmt.Errorf("commit: %w", err)
	switch {
	case !cannotTakeNow(err):
		return err
	case nothingSent(err), isCommitSkipped(err):
		return markUnavailable(err)
	}
	return fmt.Errorf("%w: %w", ledger.ErrOutcomeUnknown, err)
}

// markUnavailable wraps err so that errors.Is(err, ledger.ErrUnavailable).
func markUnavailable(err error) error {
	if errors.Is(err, ledger.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ledger.ErrUnavailable, err)
}

// cannotTakeNow reports whether err says the database cannot take a
// statement now: it cannot be reached, it is shutting down or starting up
// (SQLSTATE class 57P), it is a standby that only reads (25006, a standby
// answering before it is promoted), the connection failed (class 08) or
// broke. A request whose own context ended is not among them: that is the
// client's doing, answered as such.
func cannotTakeNow(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return serverRefusal(pgErr.Code)
	}
	var netErr net.Error
	return errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		nothingSent(err)
}

// serverRefusal reports whether a SQLSTATE says the server cannot take a
// statement now: operator intervention by shutdown or start-up (57P01
// admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now),
// read_only_sql_transaction (25006) or a connection exception (class 08).
func serverRefusal(code string) bool {
	return strings.HasPrefix(code, "57P") || code == "25006" || strings.HasPrefix(code, "08")
}

// refusedByServer reports whether the server answered the statement with
// one of serverRefusal's errors: it refused the statement rather than
// completing it.
func refusedByServer(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && serverRefusal(pgErr.Code)
}

// nothingSent reports whether err occurred before anything reached the
// server: a connection that could not be made, or pgconn's word that
// nothing was sent.
func nothingSent(err error) bool {
	var connectErr *pgconn.ConnectError
	return errors.As(err, &connectErr) || pgconn.SafeToRetry(err)
}
