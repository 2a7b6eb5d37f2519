package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/failpoint"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// Coalescing configures the write coalescer: concurrent writes share one
// transaction, so one commit carries many operations (ledger/DESIGN.md §5,
// "The write path").
type Coalescing struct {
	// MaxBatch is the most operations one flush (one transaction)
	// carries; 1 turns coalescing off.
	MaxBatch int
	// MaxQueue is the most operations waiting for a flush; past it a
	// write is answered ledger.ErrUnavailable.
	MaxQueue int
	// Flushers is how many flushes run at once.
	Flushers int
	// StallAfter is how long an operation waits, beside a running flush
	// carrying more operations than are queued, before a flusher takes
	// it anyway (coalescer.mayTake).
	StallAfter time.Duration
	// FlushTimeout bounds a flush: its statements run on a context of its
	// own, never on one caller's, so that a caller that leaves cannot
	// break its neighbours' transaction.
	FlushTimeout time.Duration
	// ObserveBatch, when set, is told the size of each flush; Refused,
	// when set, of each write refused because the queue was full.
	ObserveBatch func(size int)
	Refused      func()
}

// DefaultCoalescing is the coalescer's configuration unless WithCoalescing
// gives another.
var DefaultCoalescing = Coalescing{MaxBatch: 64, MaxQueue: 4096, Flushers: 2, StallAfter: 10 * time.Millisecond, FlushTimeout: 30 * time.Second}

// WithCoalescing configures the write coalescer; a zero field keeps
// DefaultCoalescing's.
func WithCoalescing(c Coalescing) Option {
	return func(s *Store) {
		d := DefaultCoalescing
		if c.MaxBatch > 0 {
			d.MaxBatch = c.MaxBatch
		}
		if c.MaxQueue > 0 {
			d.MaxQueue = c.MaxQueue
		}
		if c.Flushers > 0 {
			d.Flushers = c.Flushers
		}
		if c.StallAfter > 0 {
			d.StallAfter = c.StallAfter
		}
		if c.FlushTimeout > 0 {
			d.FlushTimeout = c.FlushTimeout
		}
		d.ObserveBatch, d.Refused = c.ObserveBatch, c.Refused
		s.writes.cfg = d
	}
}

// coalescer queues the operations of concurrent callers of inTx and runs
// them in flushes: up to MaxBatch operations, side by side as if one after
// the other (pipeline.go), in one transaction. A flusher takes what is
// queued as soon as its previous flush returns (no timer: an idle service
// answers at once), beside another flush once as many operations are
// queued as that one carries (mayTake), and exits when it finds nothing
// it may take.
//
// The queue is partitioned by the keys the operations name (their write
// keys, partitionKeys): a flusher takes, in queue order, only operations
// whose keys no flush running in another flusher holds, and holds their
// keys until its flush is done; an operation on a key held, or named by
// an operation queued before it that was left, is left for later. So a
// delegation, a business operation id or a remote task belongs to one
// flush at a time in this process, and the operations on it run in the
// order they were queued; two flushes of this process never wait for each
// other's locks on rows they named (ledger/DESIGN.md §5, "The write
// path"). An operation that names no keys is never left: it takes its
// locks as it goes, beside the other flush, as it did before the
// partition and as a flush of another replica does. The partition only
// spares waits; what keeps writes right is PostgreSQL's locks (the
// pre-read's, in one order, and those taken as they go, a deadlock
// replaying the flush one operation at a time). Holding the whole
// replica for such an operation would make one that waits for a lock
// (another replica's flush, a transaction alone) stall every write of the
// replica, and two callers' transactions could no longer both be open.
type coalescer struct {
	s   *Store
	cfg Coalescing

	mu     sync.Mutex
	queue  []*writeOp
	active int // flushers running
	// running has the operations each running flush carries, by its
	// number (flushes numbers them); owners has, for each key a running
	// flush holds, that flush's number.
	running map[uint64]int
	owners  map[string]uint64
	flushes uint64
	// stall, when set, is to start a flusher once the queue's oldest
	// operation has waited StallAfter (mayTake).
	stall *time.Timer
}

// writeOp is one caller's operation, answered on done once the transaction
// that carries it has committed (or it is refused).
type writeOp struct {
	ctx context.Context
	// keys are the rows the operation said it will lock, for the flush's
	// pre-read (prereader.go); part are the names the queue is
	// partitioned by (partitionKeys), none when it named nothing.
	keys   ledger.WriteKeys
	part   []string
	fn     func(*tx) error
	done   chan error
	queued time.Time
	taken  bool // by a flush (under coalescer.mu)
}

// partitionKeys are the names of what k says an operation will lock, by
// which the queue is partitioned: the pre-read's advisory locks (business
// operation ids, remote tasks) and the delegations. They are names, not
// rows: evidence naming a remote task and a task status naming the
// delegation recording it have no key in common, and may run in two
// flushes at once; their pre-reads lock the delegation in one order, so
// one waits for the other, and neither deadlocks. Budgets are no keys:
// a flush locks those it moves only at its end (checkFunds), and holding
// a hot budget for a whole flush would run its flushes one after the
// other, as locking it in the pre-read did.
func partitionKeys(k ledger.WriteKeys) []string {
	m := merge(k)
	part := m.locks
	for _, id := range m.delegations {
		part = append(part, delegationKey(id))
	}
	return part
}

// delegationKey is a delegation's partition key.
func delegationKey(id uuid.UUID) string { return "quittance/delegation:" + id.String() }

// do runs fn in a flush and returns its answer.
func (c *coalescer) do(ctx context.Context, fn func(*tx) error) error {
	if c.cfg.MaxBatch <= 1 {
		return c.s.inTxAlone(ctx, fn)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	keys, _ := ledger.WriteKeysOf(ctx)
	o := &writeOp{ctx: ctx, keys: keys, part: partitionKeys(keys), fn: guarded(fn), done: make(chan error, 1), queued: time.Now()}
	c.mu.Lock()
	if len(c.queue) >= c.cfg.MaxQueue {
		c.mu.Unlock()
		if c.cfg.Refused != nil {
			c.cfg.Refused()
		}
		return fmt.Errorf("write queue full (%d operations wait for a commit): %w", c.cfg.MaxQueue, ledger.ErrUnavailable)
	}
	c.queue = append(c.queue, o)
	// A flusher is started only where it may find something to take: an
	// operation a running flush keeps waiting is taken once that flush is
	// done, by its flusher, which looks at the queue again, or by one the
	// stall timer starts (awaitStall).
	if c.active < c.cfg.Flushers && (len(c.running) == 0 || c.free(o)) {
		c.startFlusher()
	}
	c.mu.Unlock()
	select {
	case err := <-o.done:
		return repanic(err)
	case <-ctx.Done():
	}
	// Gone before a flush took it: it is withdrawn, never run. Once taken,
	// its answer says what happened.
	c.mu.Lock()
	if !o.taken {
		for i, q := range c.queue {
			if q == o {
				c.queue = append(c.queue[:i], c.queue[i+1:]...)
				break
			}
		}
		c.mu.Unlock()
		return ctx.Err()
	}
	c.mu.Unlock()
	return repanic(<-o.done)
}

// opPanic is the answer of an operation that panicked: the flusher
// recovers it, so that one operation cannot take the flush (or the
// process) down, and the caller panics with its value, as it would have
// running the operation itself.
type opPanic struct{ value any }

func (p *opPanic) Error() string { return fmt.Sprintf("operation panicked: %v", p.value) }

// guarded is fn with a panic returned as an *opPanic.
func guarded(fn func(*tx) error) func(*tx) error {
	return func(t *tx) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = &opPanic{value: v}
			}
		}()
		return fn(t)
	}
}

// repanic returns err, or panics with the value of an operation that
// panicked.
func repanic(err error) error {
	var p *opPanic
	if errors.As(err, &p) {
		panic(p.value)
	}
	return err
}

// flusher flushes what is queued until it finds nothing it may take. It
// exits only when the queue is empty, or what is queued waits for a flush
// running in another flusher (take takes the queue's head when no other
// flush runs), or mayTake says to wait for more beside that flush; that
// flusher looks at the queue again when its flush is done, and the stall
// timer starts one in the meantime, so no operation is left queued with
// no flusher to take it.
func (c *coalescer) flusher() {
	c.mu.Lock()
	for {
		if !c.mayTake(time.Now()) {
			c.active--
			c.awaitStall()
			c.mu.Unlock()
			return
		}
		ops, id := c.take()
		if len(ops) == 0 {
			c.active--
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		if c.cfg.ObserveBatch != nil {
			c.cfg.ObserveBatch(len(ops))
		}
		c.flush(ops)
		c.mu.Lock()
		c.release(ops, id)
	}
}

// take takes (under c.mu), in queue order, up to MaxBatch operations that
// may run beside the flushes running, and holds their keys under a new
// flush number. An operation whose key a running flush holds is left,
// and its keys with it, so that no later operation on one of them is
// taken before it; an operation naming no keys is always taken. It looks
// at the queue up to the batch's end, past it only over the operations it
// leaves.
func (c *coalescer) take() ([]*writeOp, uint64) {
	if len(c.queue) == 0 {
		return nil, 0
	}
	c.flushes++
	id := c.flushes
	var ops []*writeOp
	var left map[string]bool // the keys of the operations left
	kept := c.queue[:0]      // the operations left, in order
	i := 0
	for ; i < len(c.queue) && len(ops) < c.cfg.MaxBatch; i++ {
		o := c.queue[i]
		if len(c.running) > 0 && c.blocked(o, id, left) {
			if left == nil {
				left = map[string]bool{}
			}
			for _, k := range o.part {
				left[k] = true
			}
			kept = append(kept, o)
			continue
		}
		o.taken = true
		ops = append(ops, o)
		if c.owners == nil {
			c.owners = map[string]uint64{}
		}
		for _, k := range o.part {
			c.owners[k] = id
		}
	}
	c.queue = append(kept, c.queue[i:]...)
	if len(ops) > 0 {
		if c.running == nil {
			c.running = map[uint64]int{}
		}
		c.running[id] = len(ops)
	}
	return ops, id
}

// mayTake: a flusher may take from the queue now (under c.mu). With no
// flush running, at once, so an idle replica answers at once. Beside a
// running flush, once as many operations are queued as the smallest
// running flush carries, so that flushes stay as large as the load makes
// them: two flushers taking each operation as it came ran half their
// flushes with one, at half again the CPU an operation
// (cmd/quittance-bench/BENCHMARK.md). Or once the queue's oldest
// operation has waited StallAfter, so that a flush that waits for a lock
// (another replica's, or one a caller holds open) holds up the
// replica's other writes no longer than that.
func (c *coalescer) mayTake(now time.Time) bool {
	if len(c.queue) == 0 {
		return false
	}
	if len(c.running) == 0 || now.Sub(c.queue[0].queued) >= c.cfg.StallAfter {
		return true
	}
	for _, n := range c.running {
		if len(c.queue) >= n {
			return true
		}
	}
	return false
}

// startFlusher (under c.mu), where fewer than Flushers run and one could
// take an operation queued, starts a flusher if mayTake allows it, and
// otherwise once the queue's oldest operation has waited StallAfter.
func (c *coalescer) startFlusher() {
	if !c.mayTake(time.Now()) {
		c.awaitStall()
		return
	}
	c.active++
	go c.flusher()
}

// awaitStall (under c.mu) arms the stall timer, when operations are
// queued, a flusher could be started for them, and none is armed. A
// flusher it starts that finds nothing it may take (every operation
// queued waits for a key a running flush holds) exits without arming it
// again: that flush's flusher takes them when it is done.
func (c *coalescer) awaitStall() {
	if c.stall != nil || len(c.queue) == 0 || c.active >= c.cfg.Flushers {
		return
	}
	c.stall = time.AfterFunc(c.cfg.StallAfter-time.Since(c.queue[0].queued), func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.stall = nil
		if c.active < c.cfg.Flushers {
			c.startFlusher()
		}
	})
}

// blocked: one of o's keys is held by a flush other than id, or is one of
// left's.
func (c *coalescer) blocked(o *writeOp, id uint64, left map[string]bool) bool {
	for _, k := range o.part {
		if owner, ok := c.owners[k]; (ok && owner != id) || left[k] {
			return true
		}
	}
	return false
}

// free: a flusher started now could take o, had nothing been queued
// before it (under c.mu).
func (c *coalescer) free(o *writeOp) bool {
	return !c.blocked(o, 0, nil)
}

// release (under c.mu) lets go of the keys flush id held.
func (c *coalescer) release(ops []*writeOp, id uint64) {
	for _, o := range ops {
		for _, k := range o.part {
			if c.owners[k] == id {
				delete(c.owners, k)
			}
		}
	}
	delete(c.running, id)
}

// flushOutcome is how one transaction of a flush ended.
type flushOutcome int

const (
	// committed: every operation is answered (accepted, or refused
	// without having written).
	committed flushOutcome = iota
	// refused: some operations (refusals) are refused and the transaction
	// rolled back; the others run again without them.
	refused
	// unknown: the commit was sent and its outcome is not known; every
	// operation is answered the error.
	unknown
	// replay: the transaction failed for a reason no one operation
	// caused; each operation runs again alone.
	replay
)

// flushResult is the result of one transaction of a flush.
type flushResult struct {
	outcome  flushOutcome
	refusals map[int]error // refused: the answers of the refused, by index
	err      error         // unknown: everyone's answer
	answers  []error       // committed: each operation's
	txs      []*tx
	// deliveries: the committed appends queued webhook deliveries.
	deliveries bool
}

// flush runs ops and answers each (ledger/DESIGN.md §5, "The write path").
// A refusal may rest on what the operations before it in its transaction
// wrote (the funds they held, a state they moved), so it is answered only
// once those have committed (answerHeld).
func (c *coalescer) flush(ops []*writeOp) {
	var held []heldRefusal
	accepted := map[*writeOp]bool{}
	c.flushRounds(ops, &held, accepted)
	c.answerHeld(held, accepted)
}

// heldRefusal is an operation refused in a transaction of a flush that
// was rolled back, with the operations before it there that it may rest
// on (those not refused with it).
type heldRefusal struct {
	op   *writeOp
	err  error
	deps []*writeOp
}

// answerHeld answers each held refusal once its flush is done: with its
// refusal when every operation it rested on committed, else (one was
// refused later, or its commit failed) by running it again alone, after
// them, so that it is never refused on writes that were not committed. A
// buffered insert that found its row taken (errInsertTaken,
// insertbatch.go) is always run again alone, to read what is recorded. A
// refusal for funds is always run again alone: it rested on the budget as
// the refusing round read it, and the budget is locked only at a round's
// end, so another flush may have moved it (funded it, returned a hold)
// before the round that committed the operations it rested on.
func (c *coalescer) answerHeld(held []heldRefusal, accepted map[*writeOp]bool) {
	for _, h := range held {
		if !errors.Is(h.err, ledger.ErrInsufficientFunds) && !errors.Is(h.err, errInsertTaken) && !slices.ContainsFunc(h.deps, func(o *writeOp) bool { return !accepted[o] }) {
			h.op.done <- h.err
			continue
		}
		h.op.done <- c.s.inTxAlone(h.op.ctx, h.op.fn)
	}
}

// flushRounds runs ops in transactions until each is answered or held
// (refused, its answer waiting for answerHeld); accepted notes those
// that committed.
func (c *coalescer) flushRounds(ops []*writeOp, held *[]heldRefusal, accepted map[*writeOp]bool) {
	alone := func(o *writeOp) {
		err := c.s.inTxAlone(o.ctx, o.fn)
		accepted[o] = err == nil
		o.done <- err
	}
	for len(ops) > 1 {
		r := c.run(ops)
		switch r.outcome {
		case committed:
			for i, o := range ops {
				accepted[o] = r.answers[i] == nil
			}
			c.committed(ops, r)
			return
		case refused:
			rest := make([]*writeOp, 0, len(ops)-len(r.refusals))
			for i, o := range ops {
				if err, ok := r.refusals[i]; ok {
					*held = append(*held, heldRefusal{op: o, err: err, deps: slices.Clone(rest)})
				} else {
					rest = append(rest, o)
				}
			}
			ops = rest
		case unknown:
			for _, o := range ops {
				o.done <- r.err
			}
			return
		case replay:
			for _, o := range ops {
				alone(o)
			}
			return
		}
	}
	// One operation is a transaction of its own, as without coalescing.
	for _, o := range ops {
		alone(o)
	}
}

// committed runs the after-commit hooks of a committed flush, once for
// all its events, and answers its operations.
func (c *coalescer) committed(ops []*writeOp, r flushResult) {
	var events []ledger.Event
	for i, t := range r.txs {
		if r.answers[i] == nil && t != nil {
			events = append(events, t.appended...)
		}
	}
	c.s.afterCommitted(events, r.deliveries)
	for i, o := range ops {
		o.done <- r.answers[i]
	}
}

// run runs ops side by side (runPipelined) in one transaction and commits
// it.
func (c *coalescer) run(ops []*writeOp) flushResult {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.FlushTimeout)
	defer cancel()
	conn := &txConn{pool: c.s.pool}
	defer conn.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	shared := &txShared{}
	r := flushResult{answers: make([]error, len(ops)), txs: make([]*tx, len(ops))}
	if err := preRead(ctx, conn, shared, mergeKeys(ops)); err != nil {
		return judge(conn, -1, nil)
	}
	steps := make([]*pipeStep, len(ops))
	for i, o := range ops {
		oc := &opConn{conn: conn, owner: i + 1, flush: ctx}
		t := newTx(oc, shared)
		r.txs[i] = t
		oc.step = &pipeStep{op: oc, part: o.part, run: func() error { return o.fn(t) }}
		steps[i] = oc.step
	}
	errs := runPipelined(ctx, conn, shared, steps)
	if conn.failed != nil || aborted(conn) {
		return judgeFailedRun(conn, errs)
	}
	for i, err := range errs {
		if err != nil && r.txs[i].conn.wrote {
			return judge(conn, i, err)
		}
		// Accepted, or refused without a write: the transaction goes on,
		// and the answer waits for its commit.
		r.answers[i] = interpretError(err)
	}
	// The flush's updates of delegations, its evidence and its events, one
	// statement each, ride with the budgets' locks or the COMMIT.
	conn.queueUpdates(ctx)
	conn.queueEvidence(ctx)
	conn.queueEvents(ctx)
	if rr, ok := checkFunds(ctx, conn, shared); !ok {
		return rr
	}
	if len(ops) > 1 {
		failpoint.Inject("batch-before-commit") // crash tests: a batch written, its COMMIT not sent
	}
	if err := conn.Commit(ctx); err != nil {
		return judgeCommit(conn, err)
	}
	if len(ops) > 1 {
		failpoint.Inject("batch-after-commit") // crash tests: a batch committed, no one answered
	}
	r.deliveries = conn.deliveries
	return r
}

// judge says what a transaction becomes when operation i failed (err) or
// left it failed (err nil): the operation whose statement PostgreSQL or
// its check refused is refused alone, the others run again; a failure of
// the connection, or a serialization failure or deadlock, is no one
// operation's, so each runs again alone.
func judge(conn *txConn, i int, err error) flushResult {
	switch {
	case conn.failed != nil && conn.culprit > 0:
		return refusedOne(conn.culprit-1, conn.failed)
	case conn.failed != nil || err == nil || retryable(err) || broken(conn):
		return flushResult{outcome: replay}
	}
	return refusedOne(i, err)
}

// judgeFailedRun says what a transaction becomes when it failed while its
// operations ran (errs, each one's answer). Every statement an operation
// sent or queued is tagged with it, so the statement that failed names
// its culprit: when that was a statement the operation waited for
// (readRefused), its refusal is what the operation answered, as when it
// ran alone; otherwise judge decides by the failed statement alone, and
// with no culprit each operation runs again alone.
func judgeFailedRun(conn *txConn, errs []error) flushResult {
	var read *readRefused
	if k := conn.culprit - 1; k >= 0 && errors.As(conn.failed, &read) && errs[k] != nil {
		return refusedOne(k, errs[k])
	}
	return judge(conn, -1, nil)
}

// refusedOne is the result of a transaction rolled back for operation i's
// refusal err.
func refusedOne(i int, err error) flushResult {
	return flushResult{outcome: refused, refusals: map[int]error{i: interpretError(err)}}
}

// judgeCommit says what a transaction becomes when its commit failed.
// COMMIT is sent with the writes still queued, so a refusal of one of them
// is its operation's alone. Otherwise the flush runs again one operation
// at a time only where nothing can have been committed: nothing was sent,
// or PostgreSQL refused the COMMIT itself or a statement sent before it
// (the batch's events, whose refusal has no one operation), so that it
// never ran. A lost connection, or a
// shutdown's FATAL error (which may come after a local commit that waited
// for a synchronous standby), leaves the outcome unknown (commitError): it
// is answered as such, never run again blindly, and a caller that retries
// with its idempotency key gets what was recorded.
func judgeCommit(conn *txConn, err error) flushResult {
	var pgErr *pgconn.PgError
	switch {
	case conn.culprit > 0:
		return refusedOne(conn.culprit-1, conn.failed)
	case errors.Is(err, pgx.ErrTxCommitRollback), nothingSent(err), isCommitSkipped(err),
		errors.As(err, &pgErr) && !cannotTakeNow(err):
		return flushResult{outcome: replay}
	}
	return flushResult{outcome: unknown, err: interpretError(commitError(err))}
}

// aborted: PostgreSQL has aborted the transaction (a statement failed), so
// nothing more of it can commit.
func aborted(conn *txConn) bool {
	return conn.conn != nil && conn.conn.Conn().PgConn().TxStatus() == 'E'
}

// broken: the transaction's connection is closed.
func broken(conn *txConn) bool {
	return conn.conn != nil && conn.conn.Conn().PgConn().IsClosed()
}

// checkFunds locks the budgets the flush moves, in id order, and plays the
// movements in arrival order (each operation's in the order it made them;
// side by side, the operations made them interleaved): an operation with a
// movement the budget cannot cover would fail the commit, and be refused
// alone; with many on a hot budget, one at a time would run the flush again
// for each. Every operation refused here is answered, and the others run
// again without them (ok false). Otherwise the movements, played and
// found covered, are queued in one statement (queueMoveBatch) that updates
// each budget once, by their net, with the budgets locked to the commit.
func checkFunds(ctx context.Context, conn *txConn, shared *txShared) (flushResult, bool) {
	if len(shared.moves) == 0 {
		return flushResult{}, true
	}
	slices.SortStableFunc(shared.moves, func(a, b pendingMove) int { return a.owner - b.owner })
	var ids []string
	seen := map[string]bool{}
	for _, m := range shared.moves {
		if !seen[m.move.BudgetID] {
			seen[m.move.BudgetID] = true
			ids = append(ids, m.move.BudgetID)
		}
	}
	oc := &opConn{conn: conn, flush: ctx}
	rows, err := newQueries(oc).BudgetsForUpdate(ctx, ids)
	if err != nil {
		return judge(conn, -1, nil), false
	}
	balances := make(map[string]*fundsBalance, len(rows))
	for _, b := range rows {
		balances[b.ID] = &fundsBalance{
			funded: b.FundedMinor, available: b.AvailableMinor, held: b.HeldMinor, spent: b.SpentMinor, writtenOff: b.WrittenOffMinor,
		}
	}
	if refusals := playMoves(shared.moves, balances); len(refusals) > 0 {
		return flushResult{outcome: refused, refusals: refusals}, false
	}
	conn.queueMoveBatch(shared.moves, balances)
	shared.moves = nil
	return flushResult{}, true
}

// opConn is one operation's connection to a transaction (txConn) it may
// share with others: it notes whether the operation wrote, tags what it
// queues as its own (owner), and, in a flush, sends its statements on the
// flush's context after checking the operation's own, so that a caller
// that leaves ends its operation without breaking its neighbours'.
type opConn struct {
	conn  *txConn
	owner int
	// flush is the flush's context; nil: statements run on their own.
	flush context.Context
	// wrote: the operation sent or queued a statement that may have
	// written (mayWrite).
	wrote bool
	// step, in a pipelined flush, is the operation's place in it: a
	// statement it sends waits for the flush's next round trip
	// (pipeline.go).
	step *pipeStep
}

var _ dbsqlc.DBTX = (*opConn)(nil)

// context returns the context a statement issued on ctx is sent on.
func (o *opConn) context(ctx context.Context, sql string) (context.Context, error) {
	if o.flush != nil {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ctx = o.flush
	}
	o.wrote = o.wrote || mayWrite(sql)
	return ctx, nil
}

func (o *opConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	ctx, err := o.context(ctx, sql)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if o.step != nil {
		return o.step.exec(sql, args)
	}
	return o.conn.Exec(ctx, sql, args...)
}

func (o *opConn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	ctx, err := o.context(ctx, sql)
	if err != nil {
		return nil, err
	}
	if o.step != nil {
		return o.step.query(sql, args)
	}
	return o.conn.Query(ctx, sql, args...)
}

func (o *opConn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	ctx, err := o.context(ctx, sql)
	if err != nil {
		return errRow{err}
	}
	if o.step != nil {
		return o.step.queryRow(sql, args)
	}
	return o.conn.QueryRow(ctx, sql, args...)
}

// queue queues a write (txConn.queue) as this operation's.
func (o *opConn) queue(send func(q *dbsqlc.Queries) error, r refusal, check func(pgconn.CommandTag, error) error) error {
	o.wrote = true
	return o.conn.queue(o.owner, send, r, check)
}

// writeWords are the words of a statement that may change what the
// transaction holds beyond its locks: data, or its settings. Locks
// (FOR UPDATE, advisory locks) are no writes: an operation refused after
// taking them leaves nothing behind but a lock held to the commit.
var writeWords = map[string]bool{
	"INSERT": true, "UPDATE": true, "DELETE": true, "MERGE": true, "TRUNCATE": true, "COPY": true,
	"CALL": true, "DO": true, "SET": true, "SET_CONFIG": true, "PG_NOTIFY": true, "NOTIFY": true,
}

// mayWrite: the statement sql may write. Conservative: a word of
// writeWords anywhere (but UPDATE in FOR [NO KEY] UPDATE), or a call of one
// of the schema's own functions (quittance_*), counts.
func mayWrite(sql string) bool { return writes.of(sql) }

var writes = perStatement[bool]{classify: classify}

// perStatement is a classification of statements, made once for each:
// they are the queries' constants, a few hundred, and the write path asks
// about each statement it sends (a regular expression run on every
// statement of every flush cost a twelfth of the service's CPU at 32
// clients, by its profile).
type perStatement[T any] struct {
	classify func(sql string) T
	known    sync.Map
}

// of is sql's class.
func (p *perStatement[T]) of(sql string) T {
	if v, ok := p.known.Load(sql); ok {
		return v.(T)
	}
	v := p.classify(sql)
	p.known.Store(sql, v)
	return v
}

func classify(sql string) bool {
	var words []string
	for line := range strings.SplitSeq(sql, "\n") {
		line, _, _ = strings.Cut(line, "--")
		words = append(words, strings.FieldsFunc(strings.ToUpper(line), func(r rune) bool {
			return (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '_'
		})...)
	}
	for i, w := range words {
		switch {
		case w == "UPDATE" && i > 0 && (words[i-1] == "FOR" || words[i-1] == "KEY"):
		case writeWords[w], strings.HasPrefix(w, "QUITTANCE_"):
			return true
		}
	}
	return false
}
