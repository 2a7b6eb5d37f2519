package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// txConn is the connection of one ledger transaction, which it sends to
// PostgreSQL in as few round trips as the statements allow: every
// operation is a handful of statements, and the service is bound by round
// trips to PostgreSQL (cmd/quittance-bench/BENCHMARK.md).
//
//   - BEGIN is not a round trip of its own: it is sent with the first
//     statement, in one batch.
//   - A write whose only result is whether it matched (an UPDATE of a
//     locked row, a budget movement, an INSERT of a row no read in the
//     transaction depends on) is queued (queue), not sent: it rides in the
//     batch of the transaction's next statement, or of its COMMIT. Its
//     check runs when its result arrives; a failed check fails that
//     statement and every later one, the COMMIT included, so the
//     transaction can only roll back. Statements run in the order they were
//     issued, queued or not, so every read sees the writes before it.
//   - COMMIT rides in the batch of the writes still queued when each of
//     them is refused by an error (refusedByError): PostgreSQL skips what
//     follows a failed statement in a batch, so a refusal rolls back. A
//     write refused by matching no row (refusedByRowCount) is judged
//     before COMMIT is sent, in a round trip of its own.
//
// It implements dbsqlc.DBTX; it is not safe for concurrent use, like the
// transaction it stands for. BEGIN, COMMIT and ROLLBACK are its own: the
// pool connection is released after either, and one left inside a
// transaction (a failure mid-way) is destroyed by the pool, not reused.
type txConn struct {
	pool   *pgxpool.Pool
	conn   *pgxpool.Conn // nil until the first statement is sent
	queued []queuedStatement
	// failed is the first failure of a queued statement or of a batch:
	// once set, nothing more is sent but the ROLLBACK.
	failed error
	// culprit is the owner of the queued statement that failed, when the
	// failure is that statement's refusal (PostgreSQL refused it, or its
	// check did), not the connection's: 0 otherwise (owners count from 1). A flush of
	// coalesced operations answers that operation alone (coalesce.go).
	culprit int
	closed  bool // committed or rolled back
	// events are the appends not sent yet (eventbatch.go); deliveries says
	// that the ones sent queued webhook deliveries.
	events     eventBatch
	deliveries bool
	// updates are the updates of delegations not sent yet (updatebatch.go),
	// evidence the compensation evidence (evidencebatch.go).
	updates  updateBatch
	evidence evidenceBatch
	// inserts are the inserts of new delegations not sent yet, tokens the
	// used token ids, and fresh what the transaction proved no row
	// records yet, so that their inserts may be buffered (insertbatch.go).
	inserts insertBatch
	tokens  tokenBatch
	fresh   freshKeys
}

// refusal says how a queued write is refused.
type refusal int

const (
	// refusedByError: a write that must not happen fails its statement
	// (a constraint, a foreign key), so COMMIT may be sent with it.
	refusedByError refusal = iota
	// refusedByRowCount: a write that must not happen matches no row and
	// succeeds; only its check tells, so COMMIT waits for it.
	refusedByRowCount
)

// queuedStatement is a write sent with the transaction's next statement.
type queuedStatement struct {
	sql     string
	args    []any
	refusal refusal
	// owner is the coalesced operation that queued it (coalesce.go).
	owner int
	// check judges the statement's result: its command tag, or the error
	// it failed with; it returns the error the transaction fails with.
	check func(pgconn.CommandTag, error) error
	// read, when set, reads the statement's result (one, from the batch)
	// instead of Exec, and check is given its error alone: a queued read
	// whose rows are kept (a flush's pre-read, prereader.go).
	read func(pgx.BatchResults) error
	// blame, when set, names the operation whose refusal a failed check
	// is, instead of owner: a statement carrying several operations'
	// writes (updatebatch.go).
	blame func() int
}

// queue queues the one statement that send issues through q (an :exec or
// :execrows query, or a :one query whose row nobody reads), to be sent
// with the next statement; check judges its result then. send's own
// result is meaningless: it runs against a recorder.
func (b *txConn) queue(owner int, send func(q *dbsqlc.Queries) error, r refusal, check func(pgconn.CommandTag, error) error) error {
	if b.closed {
		return errors.New("transaction already closed")
	}
	rec := &recorder{}
	if err := send(newQueries(rec)); err != nil {
		return err
	}
	if len(rec.statements) != 1 {
		return fmt.Errorf("a queued write must issue exactly one statement, not %d", len(rec.statements))
	}
	s := rec.statements[0]
	s.refusal, s.check, s.owner = r, check, owner
	if b.inserts.mustPrecede(s.sql, s.args) {
		b.queueInserts()
	}
	if b.tokens.mustPrecede(s.sql, s.args) {
		b.queueTokens()
	}
	if b.updates.mustPrecede(s.sql, s.args) {
		b.queueUpdates(context.Background())
	}
	if b.evidence.mustPrecede(s.sql, s.args) {
		b.queueEvidence(context.Background())
	}
	b.queued = append(b.queued, s)
	return nil
}

// owners are the operations that buffered the rows of a write buffer
// (eventbatch.go, updatebatch.go, evidencebatch.go), one per row.
type owners []int

// sole is the one operation that buffered every row, or 0 when several
// did: a refusal of the buffer's statement is then no one operation's, and
// the flush replays its operations one at a time to find whose it is.
func (o owners) sole() int {
	for _, x := range o {
		if x != o[0] {
			return 0
		}
	}
	return o[0]
}

// queueBuffered queues the one statement that send issues for a write
// buffer whose rows the operations o buffered, as st says it is read,
// judged and refused (st's statement and owner are filled in): it runs
// before the next statement sent, and a refusal is attributed to o's sole
// operation unless st.blame names another. The buffered new delegations
// and used token ids are queued first (insertbatch.go): the other
// buffers' rows may refer to them. send's results are meaningless: it
// runs against a recorder.
func (b *txConn) queueBuffered(o owners, send func(q *dbsqlc.Queries), st queuedStatement) {
	b.queueInserts()
	b.queueTokens()
	b.queueOwned(o, send, st)
}

// queueOwned is queueBuffered without the other buffers queued first: for
// the new delegations, which refer to no buffered row, and the used token
// ids, which refer only to delegations.
func (b *txConn) queueOwned(o owners, send func(q *dbsqlc.Queries), st queuedStatement) {
	rec := &planRecorder{}
	send(newQueries(rec))
	st.sql, st.args, st.owner = rec.statements[0].sql, rec.statements[0].args, o.sole()
	b.queued = append(b.queued, st)
}

// send sends BEGIN (on the first statement), the queued writes and then
// sql (if any) in one batch, and reads every result but sql's: the caller
// reads it from the returned batch, and closes it.
func (b *txConn) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	if sql == "" {
		return b.sendAll(ctx, nil)
	}
	return b.sendAll(ctx, []queuedStatement{{sql: sql, args: args}})
}

// unusable is why nothing more can be sent in the transaction (it failed,
// or it is closed), or nil.
func (b *txConn) unusable() error {
	if b.failed != nil {
		return b.failed
	}
	if b.closed {
		return errors.New("transaction already closed")
	}
	return nil
}

// sendAll is send with any number of statements after the queued writes,
// whose results the caller reads, in order, from the returned batch.
func (b *txConn) sendAll(ctx context.Context, stmts []queuedStatement) (pgx.BatchResults, error) {
	if err := b.unusable(); err != nil {
		return nil, err
	}
	b.precede(ctx, stmts)
	var batch pgx.Batch
	begin := b.conn == nil
	if begin {
		conn, err := b.pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		b.conn = conn
		batch.Queue("BEGIN")
	}
	queued := b.queued
	b.queued = nil
	for _, q := range queued {
		batch.Queue(q.sql, q.args...)
	}
	for _, st := range stmts {
		batch.Queue(st.sql, st.args...)
	}
	br := b.conn.SendBatch(ctx, &batch)
	if begin {
		if _, err := br.Exec(); err != nil {
			return nil, b.fail(br, err)
		}
	}
	for _, q := range queued {
		var (
			tag pgconn.CommandTag
			err error
		)
		if q.read != nil {
			err = q.read(br)
		} else {
			tag, err = br.Exec()
		}
		if cerr := q.check(tag, err); cerr != nil {
			b.culprit = 0
			if statementRefused(err) {
				b.culprit = q.owner
				if q.blame != nil {
					b.culprit = q.blame()
				}
			}
			return nil, b.fail(br, cerr)
		}
	}
	return br, nil
}

// precede queues the buffers whose rows one of stmts may read or conflict
// with (each buffer's mustPrecede), so that they run before it.
func (b *txConn) precede(ctx context.Context, stmts []queuedStatement) {
	if slices.ContainsFunc(stmts, func(st queuedStatement) bool { return b.inserts.mustPrecede(st.sql, st.args) }) {
		b.queueInserts()
	}
	if slices.ContainsFunc(stmts, func(st queuedStatement) bool { return b.tokens.mustPrecede(st.sql, st.args) }) {
		b.queueTokens()
	}
	if slices.ContainsFunc(stmts, func(st queuedStatement) bool { return b.updates.mustPrecede(st.sql, st.args) }) {
		b.queueUpdates(ctx)
	}
	if slices.ContainsFunc(stmts, func(st queuedStatement) bool { return b.evidence.mustPrecede(st.sql, st.args) }) {
		b.queueEvidence(ctx)
	}
	if slices.ContainsFunc(stmts, func(st queuedStatement) bool { return b.events.mustPrecede(st.sql, st.args) }) {
		b.queueEvents(ctx)
	}
}

// statementRefused: err is no error (the statement ran, and its check
// refused its result) or PostgreSQL's refusal of the statement itself —
// not a lost connection; not a serialization failure or deadlock, which are
// the transaction's; and not the server's refusal of every statement now
// (serverRefusal: a shutdown's FATAL 57P01 reaches whichever queued
// statement is read first, whoever's it is).
func statementRefused(err error) bool {
	var pgErr *pgconn.PgError
	return err == nil || errors.As(err, &pgErr) && !retryable(err) && !serverRefusal(pgErr.Code)
}

// fail records err as the transaction's failure and closes br.
func (b *txConn) fail(br pgx.BatchResults, err error) error {
	_ = br.Close()
	b.failed = err
	return err
}

func (b *txConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br, err := b.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (b *txConn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, err := b.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return rows, err
	}
	return &batchRows{Rows: rows, batch: br}, nil
}

func (b *txConn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	br, err := b.send(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return batchRow{batch: br}
}

// Commit sends the buffered inserts, updates, evidence and events
// (queueInserts, queueTokens, queueUpdates, queueEvidence, queueEvents),
// the queued writes and
// COMMIT, in one batch unless one of them is refusedByRowCount. With no
// statement sent or queued, there is no transaction and nothing to send.
// A failure PostgreSQL answered before the COMMIT's own answer is a
// commitSkipped: nothing committed.
func (b *txConn) Commit(ctx context.Context) error {
	b.queueInserts()
	b.queueTokens()
	b.queueUpdates(ctx)
	b.queueEvidence(ctx)
	b.queueEvents(ctx)
	if b.conn == nil && len(b.queued) == 0 {
		b.closed = true
		return nil
	}
	if slices.ContainsFunc(b.queued, func(q queuedStatement) bool { return q.refusal == refusedByRowCount }) {
		br, err := b.send(ctx, "", nil) // the queued writes alone
		if err != nil {
			return skippedCommit(err)
		}
		if err := br.Close(); err != nil {
			b.failed = err
			return skippedCommit(err)
		}
	}
	br, err := b.send(ctx, "COMMIT", nil)
	if err != nil {
		return skippedCommit(err)
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && tag.String() != "COMMIT" {
		err = pgx.ErrTxCommitRollback // PostgreSQL rolled the transaction back instead
	}
	if err != nil {
		b.failed = err
		return err
	}
	b.closed = true
	b.conn.Release()
	return nil
}

// Rollback rolls the transaction back, if one was begun and is still open,
// and releases the connection; a no-op after Commit.
func (b *txConn) Rollback(ctx context.Context) error {
	if b.closed || b.conn == nil {
		b.closed = true
		return nil
	}
	b.closed = true
	_, err := b.conn.Exec(ctx, "ROLLBACK")
	// A connection still inside a transaction (the ROLLBACK failed) is
	// destroyed by the pool on release, never handed out again.
	b.conn.Release()
	return err
}

// recorder is the DBTX a queued write is issued against: it records the
// statement instead of sending it.
type recorder struct{ statements []queuedStatement }

func (r *recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.statements = append(r.statements, queuedStatement{sql: sql, args: args})
	return pgconn.CommandTag{}, nil
}

func (r *recorder) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("a query whose rows are read cannot be queued")
}

// QueryRow records a :one query whose row nobody reads (its check sees the
// number of rows it returned); Scan leaves its destinations as they are.
func (r *recorder) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.statements = append(r.statements, queuedStatement{sql: sql, args: args})
	return errRow{}
}

// errRow is a row that only returns err (nil: a row left unread).
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// batchRow is the row of a statement sent in a batch: scanning it
// finishes the batch, so the connection is free for the next statement.
type batchRow struct{ batch pgx.BatchResults }

func (r batchRow) Scan(dest ...any) error {
	err := r.batch.QueryRow().Scan(dest...)
	if cerr := r.batch.Close(); err == nil {
		err = cerr
	}
	return err
}

// batchRows are the rows of a statement sent in a batch: closing them
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

// commitSkipped is the failure of a statement sent before COMMIT in its
// batch (a queued write, the buffered events) that PostgreSQL answered
// with an error: it skips what follows a failed statement in a batch, so
// the COMMIT was never run and nothing of the transaction committed.
type commitSkipped struct{ err error }

func (e *commitSkipped) Error() string { return e.err.Error() }
func (e *commitSkipped) Unwrap() error { return e.err }

// skippedCommit marks err a commitSkipped when PostgreSQL answered it.
func skippedCommit(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return &commitSkipped{err}
	}
	return err
}

// isCommitSkipped: err says the COMMIT was never run (commitSkipped).
func isCommitSkipped(err error) bool {
	var s *commitSkipped
	return errors.As(err, &s)
}
