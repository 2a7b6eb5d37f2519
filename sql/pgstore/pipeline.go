package pgstore

import (
	"bytes"
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// A flush runs its operations side by side (ledger/DESIGN.md §5, "The
// write path"): each runs until it needs the result of a statement; the
// statements of every operation then waiting are sent together, in one
// round trip, after the writes queued before them; and each goes on with
// its result. A flush so costs about as many round trips as its longest
// operation, not the sum of its operations' (run one after the other, a
// flush of sixteen made some fifty; cmd/quittance-bench/BENCHMARK.md).
//
// One operation runs at a time: the operations and the flush hand a baton
// back and forth, so the transaction's connection and buffers are used by
// one goroutine at a time, as when the operations ran one after the other,
// and what an operation queues runs in the order it was queued.
//
// Operations that name a common row run one after the other, in arrival
// order: an operation runs only while no operation before it that is not
// done names a row it names (conflict). The rows are the partition's keys
// (partitionKeys), with each remote task standing also for the
// delegations recording it, which the pre-read reads (txShared.recording);
// until its answer is in, an operation runs only once every operation
// before it is done. An operation that names no rows runs alone, once
// every operation before it is done and before any after it starts.
// Operations naming no common row touch no common row but budgets, whose
// movements are played at the flush's end in arrival order (checkFunds),
// and used token ids, whose buffered inserts find a use that raced them
// (insertbatch.go).
type pipeline struct {
	conn   *txConn
	shared *txShared
	flush  context.Context
	steps  []*pipeStep
	// baton is handed back to the flush by the operation running: it waits
	// for a statement's result, or is done.
	baton chan struct{}
	// mapped: the pre-read's answers are in, so remote tasks stand for
	// their delegations (keys).
	mapped bool
}

// pipeStep is one operation of a pipelined flush.
type pipeStep struct {
	p     *pipeline
	op    *opConn // the operation's connection: its owner, whether it wrote
	run   func() error
	part  []string // the operation's partition keys (writeOp.part)
	state stepState
	wake  chan struct{}
	// waiting is the result of the statement it waits for, or waited for
	// last.
	waiting *keptResult
	// keys are what it names once remote tasks are mapped (pipeline.keys).
	keys []string
	err  error // run's, once done
}

type stepState int

const (
	stepIdle     stepState = iota // not started
	stepWaiting                   // its statement is queued, not answered
	stepAnswered                  // its statement is answered
	stepDone
)

// runPipelined runs each operation's run as a step of one pipelined flush
// on conn, and returns each one's error.
func runPipelined(ctx context.Context, conn *txConn, shared *txShared, steps []*pipeStep) []error {
	p := &pipeline{conn: conn, shared: shared, flush: ctx, steps: steps, baton: make(chan struct{})}
	for _, s := range steps {
		s.p, s.wake = p, make(chan struct{})
	}
	for {
		ran := false
		for i, s := range steps {
			if (s.state == stepIdle || s.state == stepAnswered) && p.mayRun(i) {
				p.resume(s)
				ran = true
			}
		}
		if ran {
			continue
		}
		// The first operation not done is waiting (it is never kept from
		// running): answering the waiting makes progress.
		if !slices.ContainsFunc(steps, func(s *pipeStep) bool { return s.state != stepDone }) {
			break
		}
		p.sendWaiting()
	}
	errs := make([]error, len(steps))
	for i, s := range steps {
		errs[i] = s.err
	}
	return errs
}

// resume hands the baton to s until it hands it back.
func (p *pipeline) resume(s *pipeStep) {
	if s.state == stepIdle {
		go func() {
			s.err = s.run()
			s.state = stepDone
			p.baton <- struct{}{}
		}()
	} else {
		s.wake <- struct{}{}
	}
	<-p.baton
}

// mayRun: no step before step i that is not done conflicts with it.
func (p *pipeline) mayRun(i int) bool {
	for _, before := range p.steps[:i] {
		if before.state != stepDone && (!p.mapped || p.conflict(before, p.steps[i])) {
			return false
		}
	}
	return true
}

// conflict: a and b name a common row, or one of them names none.
func (p *pipeline) conflict(a, b *pipeStep) bool {
	ka, kb := p.keys(a), p.keys(b)
	if len(ka) == 0 || len(kb) == 0 {
		return true
	}
	return slices.ContainsFunc(ka, func(k string) bool { return slices.Contains(kb, k) })
}

// keys are what s names: its partition keys, and the delegations recording
// the remote tasks among them.
func (p *pipeline) keys(s *pipeStep) []string {
	if s.keys == nil {
		s.keys = slices.Clone(s.part)
		for _, k := range s.part {
			s.keys = append(s.keys, p.shared.recording[k]...)
		}
	}
	return s.keys
}

// sendWaiting sends what is queued, the statements the steps wait for
// among it, in one round trip, and answers each waiting step: with its
// statement's result, or the transaction's failure.
func (p *pipeline) sendWaiting() {
	br, err := p.conn.sendAll(p.flush, nil)
	if err == nil {
		if err = br.Close(); err != nil && p.conn.failed == nil {
			p.conn.failed = err
		}
	}
	p.mapped = true
	var typeMap *pgtype.Map
	if p.conn.conn != nil {
		typeMap = p.conn.conn.Conn().TypeMap()
	}
	for _, s := range p.steps {
		if s.state != stepWaiting {
			continue
		}
		s.state = stepAnswered
		s.waiting.typeMap = typeMap
		if !s.waiting.answered {
			s.waiting.answered = true
			s.waiting.err = errors.Join(err, p.conn.failed)
			if s.waiting.err == nil && !s.waiting.awaited {
				s.waiting.err = errors.New("a pipelined statement was not answered")
			}
		}
	}
}

// wait queues sql, whose result step s needs, and hands the baton back
// until it is answered; it runs in s's goroutine. A read the pre-read
// answers is not sent (served).
func (s *pipeStep) wait(sql string, args []any) *keptResult {
	c := s.p.conn
	if err := c.unusable(); err != nil {
		return &keptResult{answered: true, err: err}
	}
	if res, ok := s.served(sql, args); ok {
		return res
	}
	res := &keptResult{}
	c.queueRead(s.p.flush, s.op.owner, sql, args, res)
	s.handOver(res)
	return res
}

// handOver hands the baton back until res is answered.
func (s *pipeStep) handOver(res *keptResult) {
	s.waiting, s.state = res, stepWaiting
	s.p.baton <- struct{}{}
	<-s.wake
}

// served is the pre-read's answer to sql (served.go), when it has one s
// may be given: first waiting for the pre-read's round trip, which
// carries nothing of s's own, if its result is not in yet.
func (s *pipeStep) served(sql string, args []any) (*keptResult, bool) {
	r := s.p.shared.served[statementName(sql)]
	if r == nil || s.op.wrote {
		return nil, false
	}
	if !r.ready() {
		res := &keptResult{awaited: true}
		s.handOver(res)
		if res.err != nil {
			return res, true
		}
	}
	res, keys, ok := r.answer(sql, args)
	if !ok || !s.p.mayServe(s, keys) {
		return nil, false
	}
	return res, true
}

// mayServe: s names every one of keys, and every step before it names
// rows, none of keys (served.go).
func (p *pipeline) mayServe(s *pipeStep, keys []string) bool {
	mine := p.keys(s)
	if slices.ContainsFunc(keys, func(k string) bool { return !slices.Contains(mine, k) }) {
		return false
	}
	for _, before := range p.steps {
		if before == s {
			return true
		}
		theirs := p.keys(before)
		if len(theirs) == 0 || slices.ContainsFunc(theirs, func(k string) bool { return slices.Contains(keys, k) }) {
			return false
		}
	}
	return false
}

func (s *pipeStep) exec(sql string, args []any) (pgconn.CommandTag, error) {
	res := s.wait(sql, args)
	return res.tag, res.err
}

func (s *pipeStep) query(sql string, args []any) (pgx.Rows, error) {
	res := s.wait(sql, args)
	if res.err != nil {
		return nil, res.err
	}
	return &keptRows{res: res}, nil
}

func (s *pipeStep) queryRow(sql string, args []any) pgx.Row {
	res := s.wait(sql, args)
	if res.err != nil {
		return errRow{res.err}
	}
	return keptRow{rows: &keptRows{res: res}}
}

// queueRead queues sql, a statement a step of a pipelined flush waits for,
// after the buffers it must follow: its result is kept in res. PostgreSQL's
// refusal of it is its operation's (readRefused).
func (b *txConn) queueRead(ctx context.Context, owner int, sql string, args []any, res *keptResult) {
	st := queuedStatement{sql: sql, args: args, owner: owner, read: res.read}
	b.precede(ctx, []queuedStatement{st})
	st.check = func(_ pgconn.CommandTag, err error) error {
		if err != nil {
			return &readRefused{err}
		}
		return nil
	}
	b.queued = append(b.queued, st)
}

// readRefused is the transaction's failure when a statement an operation
// of a pipelined flush waited for failed: the operation was told the
// statement's own error, and what it answered is its refusal (run).
type readRefused struct{ err error }

func (e *readRefused) Error() string { return e.err.Error() }
func (e *readRefused) Unwrap() error { return e.err }

// keptResult is the result of a statement a step waited for, read whole
// from its batch: its rows' raw values, copied, as their field
// descriptions say they are encoded.
type keptResult struct {
	answered bool
	// awaited: no statement of its own, only the round trip that carries
	// the pre-read (pipeStep.served).
	awaited bool
	err     error
	tag     pgconn.CommandTag
	fields  []pgconn.FieldDescription
	rows    [][][]byte
	typeMap *pgtype.Map
}

// read reads the result from br.
func (r *keptResult) read(br pgx.BatchResults) error {
	rows, err := br.Query()
	if err == nil {
		r.fields = slices.Clone(rows.FieldDescriptions())
		for rows.Next() {
			raw := rows.RawValues()
			values := make([][]byte, len(raw))
			for i, v := range raw {
				values[i] = bytes.Clone(v) // nil (NULL) stays nil
			}
			r.rows = append(r.rows, values)
		}
		rows.Close()
		err = rows.Err()
		r.tag = rows.CommandTag()
	}
	r.answered, r.err = true, err
	return err
}

// keptRows are a keptResult's rows, as pgx.Rows.
type keptRows struct {
	res    *keptResult
	next   int // the row Next moved to is rows[next-1]
	err    error
	closed bool
}

var _ pgx.Rows = (*keptRows)(nil)

func (k *keptRows) Close()                                       { k.closed = true }
func (k *keptRows) Err() error                                   { return k.err }
func (k *keptRows) CommandTag() pgconn.CommandTag                { return k.res.tag }
func (k *keptRows) FieldDescriptions() []pgconn.FieldDescription { return k.res.fields }
func (k *keptRows) Conn() *pgx.Conn                              { return nil }
func (k *keptRows) TypeMap() *pgtype.Map                         { return k.res.typeMap }
func (k *keptRows) RawValues() [][]byte                          { return k.res.rows[k.next-1] }

func (k *keptRows) Next() bool {
	if k.closed || k.next >= len(k.res.rows) {
		k.closed = true
		return false
	}
	k.next++
	return true
}

// Scan scans the current row as pgx's rows do; an error ends the rows.
func (k *keptRows) Scan(dest ...any) error {
	if err := pgx.ScanRow(k.res.typeMap, k.res.fields, k.RawValues(), dest...); err != nil {
		k.err, k.closed = err, true
		return err
	}
	return nil
}

// Values decodes the current row as pgx's rows do.
func (k *keptRows) Values() ([]any, error) {
	values := make([]any, len(k.res.fields))
	for i, fd := range k.res.fields {
		buf := k.RawValues()[i]
		if buf == nil {
			continue
		}
		t, ok := k.res.typeMap.TypeForOID(fd.DataTypeOID)
		if !ok {
			if fd.Format == pgx.TextFormatCode {
				values[i] = string(buf)
			} else {
				values[i] = bytes.Clone(buf)
			}
			continue
		}
		v, err := t.Codec.DecodeValue(k.res.typeMap, fd.DataTypeOID, fd.Format, buf)
		if err != nil {
			k.err, k.closed = err, true
			return nil, err
		}
		values[i] = v
	}
	return values, nil
}

// keptRow is a keptResult's first row, as pgx.Row.
type keptRow struct{ rows *keptRows }

func (r keptRow) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		return pgx.ErrNoRows
	}
	return r.rows.Scan(dest...)
}
