package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgtest"
)

// TestPipelinedRefusedReadIsItsOperations: three operations naming no
// common row wait for statements sent in one round trip, and PostgreSQL
// refuses the middle one's. That operation is answered with what it
// returned, as it would have been alone (its own words around
// PostgreSQL's error), not with the error of the round trip its
// neighbours shared; its neighbours run again without it and are applied.
func TestPipelinedRefusedReadIsItsOperations(t *testing.T) {
	t.Parallel()
	s := New(pgtest.Pool(t), WithCoalescing(Coalescing{MaxBatch: 16, Flushers: 1}))
	ctx := context.Background()
	read := func(name, sql string) func(*tx) error {
		return func(t *tx) error {
			var n int
			if err := t.conn.QueryRow(ctx, sql, 0).Scan(&n); err != nil {
				return fmt.Errorf("operation %s: %w", name, err)
			}
			return insertBudget(name)(t)
		}
	}
	keys := make([]ledger.WriteKeys, 3)
	for i := range keys {
		keys[i] = ledger.WriteKeys{Operations: []ledger.OperationKey{{Tenant: "t", ID: fmt.Sprintf("op-%d", i)}}}
	}
	errs := flushTogetherKeyed(t, s, keys,
		read("a", `SELECT $1::int`),
		read("b", `SELECT 1 / $1::int`),
		read("c", `SELECT $1::int`),
	)
	var pgErr *pgconn.PgError
	if !errors.As(errs[1], &pgErr) || pgErr.Code != "22012" || !strings.HasPrefix(errs[1].Error(), "operation b: ") {
		t.Errorf("the refused operation was answered %v, want its own error around PostgreSQL's division by zero", errs[1])
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil {
			t.Errorf("neighbour %d: %v", i, errs[i])
		}
	}
	if n := budgetsExist(t, s, "a", "b", "c"); n != 2 {
		t.Errorf("%d budgets exist, want the neighbours' 2", n)
	}
}

// TestPipelinedRowsReadAsPgxRows: a statement's rows, kept from the round
// trip an operation waited for, read as pgx's own rows of the same
// statement do: Values and Scan, NULL included, and no row for QueryRow
// as pgx.ErrNoRows.
func TestPipelinedRowsReadAsPgxRows(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := New(pool, WithCoalescing(Coalescing{MaxBatch: 16, Flushers: 1}))
	ctx := context.Background()
	const sql = `SELECT 7::int AS n, 'x'::text AS s, NULL::int AS none, '2026-03-02T09:00:00Z'::timestamptz AS at FROM generate_series(1, 2)`
	values := func(rows pgx.Rows) ([][]any, error) {
		defer rows.Close()
		var all [][]any
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				return nil, err
			}
			all = append(all, v)
		}
		return all, rows.Err()
	}
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		t.Fatal(err)
	}
	want, err := values(rows)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]any
	var scanned struct {
		n    int
		none *int
	}
	var noRow error
	// A flush of one operation runs it as a transaction alone: a second
	// makes it a step of a pipelined flush.
	errs := flushTogether(t, s, insertBudget("beside"), func(t *tx) error {
		rows, err := t.conn.Query(ctx, sql)
		if err != nil {
			return err
		}
		if got, err = values(rows); err != nil {
			return err
		}
		if err := t.conn.QueryRow(ctx, sql).Scan(&scanned.n, nil, &scanned.none, nil); err != nil {
			return err
		}
		noRow = t.conn.QueryRow(ctx, `SELECT 1 WHERE false`).Scan(new(int))
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(got) != 2 {
		t.Errorf("kept rows' values %v, pgx's %v", got, want)
	}
	if scanned.n != 7 || scanned.none != nil {
		t.Errorf("scanned %d and %v, want 7 and NULL", scanned.n, scanned.none)
	}
	if !errors.Is(noRow, pgx.ErrNoRows) {
		t.Errorf("a row of no rows scanned: %v, want pgx.ErrNoRows", noRow)
	}
}
