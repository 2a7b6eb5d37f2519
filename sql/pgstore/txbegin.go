package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// beginWithFirst is the connection of one ledger transaction. The
// transaction begins with its first statement, sent together with BEGIN in
// one round trip (pgx's Batch.BeginTx), instead of spending a round trip on
// BEGIN alone: every operation is a handful of statements, and the service
// is bound by round trips to PostgreSQL. It implements dbsqlc.DBTX; it is
// not safe for concurrent use, like the transaction it stands for.
type beginWithFirst struct {
	pool *pgxpool.Pool
	tx   pgx.Tx // nil until the first statement is sent
}

// start sends BEGIN and the first statement, and reads BEGIN's result. The
// caller reads the statement's result from the returned batch and closes it.
func (b *beginWithFirst) start(ctx context.Context, sql string, args []any) pgx.BatchResults {
	var batch pgx.Batch
	batch.BeginTx(pgx.TxOptions{})
	batch.Queue(sql, args...)
	br := b.pool.SendBatch(ctx, &batch)
	b.tx = br.Tx()
	// An error here is also every later result's error; it surfaces there.
	_, _ = br.Exec()
	return br
}

func (b *beginWithFirst) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if b.tx != nil {
		return b.tx.Exec(ctx, sql, args...)
	}
	br := b.start(ctx, sql, args)
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (b *beginWithFirst) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if b.tx != nil {
		return b.tx.Query(ctx, sql, args...)
	}
	br := b.start(ctx, sql, args)
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return rows, err
	}
	return &batchRows{Rows: rows, batch: br}, nil
}

func (b *beginWithFirst) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if b.tx != nil {
		return b.tx.QueryRow(ctx, sql, args...)
	}
	return batchRow{batch: b.start(ctx, sql, args)}
}

// Commit commits the transaction; with no statement sent, there is none.
func (b *beginWithFirst) Commit(ctx context.Context) error {
	if b.tx == nil {
		return nil
	}
	return b.tx.Commit(ctx)
}

// Rollback rolls the transaction back, if one was begun and is still open.
func (b *beginWithFirst) Rollback(ctx context.Context) error {
	if b.tx == nil {
		return nil
	}
	return b.tx.Rollback(ctx)
}

// batchRow is the row of a transaction's first statement: scanning it
// finishes the batch, so the connection is free for the next statement.
type batchRow struct{ batch pgx.BatchResults }

func (r batchRow) Scan(dest ...any) error {
	err := r.batch.QueryRow().Scan(dest...)
	if cerr := r.batch.Close(); err == nil {
		err = cerr
	}
	return err
}

// batchRows are the rows of a transaction's first statement: closing them
// finishes the batch. An error finishing it leaves the connection broken,
// so the transaction's next statement or its commit fails.
type batchRows struct {
	pgx.Rows
	batch pgx.BatchResults
}

func (r *batchRows) Close() {
	r.Rows.Close()
	_ = r.batch.Close()
}
