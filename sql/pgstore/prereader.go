package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// flushKeys are the rows the operations of one flush said they will lock
// (ledger.WriteKeys), merged.
type flushKeys struct {
	locks       []string // advisory locks: business operation ids, remote tasks
	delegations []uuid.UUID
	orgIDs      []string // remote tasks: orgIDs[i]'s taskIDs[i]
	taskIDs     []string
	// operations and recorded are the business operation ids and remote
	// tasks creations record; flush says the keys are a flush's, whose
	// pre-read reads which of them are recorded already (insertbatch.go).
	operations []ledger.OperationKey
	recorded   []ledger.RemoteTaskKey
	flush      bool
	// references and tokens are what a flush's pre-read reads for its
	// operations (served.go): creations' orgs and budgets, evidence's
	// token ids.
	references []ledger.ReferenceKey
	tokens     []ledger.UsedTokenKey
}

// operationLock is the name of the transaction lock a flush takes on a
// tenant's business operation id before a creation records it, so that
// two flushes creating with the same id wait for each other in the
// pre-read rather than on the unique index, in arrival order.
func operationLock(tenant, id string) string {
	return "quittance/operation:" + tenant + "/" + id
}

// mergeKeys merges the write keys of a flush's operations.
func mergeKeys(ops []*writeOp) flushKeys {
	keys := make([]ledger.WriteKeys, len(ops))
	for i, o := range ops {
		keys[i] = o.keys
	}
	k := merge(keys...)
	k.flush = true
	return k
}

// merge merges write keys.
func merge(keys ...ledger.WriteKeys) flushKeys {
	var k flushKeys
	for _, w := range keys {
		for _, op := range w.Operations {
			k.locks = append(k.locks, operationLock(op.Tenant, op.ID))
		}
		k.operations = append(k.operations, w.Operations...)
		for _, rt := range w.RecordedTasks {
			k.locks = append(k.locks, remoteTaskLock(rt.OrgID, rt.TaskID))
		}
		k.recorded = append(k.recorded, w.RecordedTasks...)
		for _, rt := range w.RemoteTasks {
			k.locks = append(k.locks, remoteTaskLock(rt.OrgID, rt.TaskID))
			k.orgIDs = append(k.orgIDs, rt.OrgID)
			k.taskIDs = append(k.taskIDs, rt.TaskID)
		}
		k.delegations = append(k.delegations, w.Delegations...)
		k.references = append(k.references, w.References...)
		k.tokens = append(k.tokens, w.UsedTokens...)
	}
	return k
}

func (k flushKeys) empty() bool {
	return len(k.locks) == 0 && len(k.delegations) == 0 && len(k.orgIDs) == 0
}

// preRead is a flush's sorted, locking pre-read (ledger/DESIGN.md §5, "The
// write path"): queued on conn, so that it is sent in one pgx.Batch with
// the BEGIN and the first statement of the flush's first operation (no
// round trip of its own), before any operation's statement runs, it takes
// every lock the operations named, class by
// class and each class in one order: the advisory locks of business
// operation ids and remote tasks (by name), the delegations (by id, with
// those recording the remote tasks), their event streams' locks (by
// name). Budgets are the last class: the flush locks those it moves at its
// end, in id order (checkFunds), and takes no lock after them. That is the
// order in which an operation alone takes them (a delegation, then its
// stream, then at the commit its budget), so two flushes, or a flush and
// a transaction alone, that need the same rows wait for each other rather
// than in a cycle; what the operations then lock again, they hold. The
// streams' heads it read are kept (txShared.heads), so the appends that
// follow read no head. A flush's pre-read then reads which of its
// creations' business operation ids and remote tasks a delegation records
// already (queueKeysTaken): the inserts of the others may be buffered
// (insertbatch.go); and what its operations would read (queueServed). A
// transaction alone (inTxOnce) whose operation
// named its rows takes them the same way, so that it too locks in that
// order (a creation alone would otherwise hold its business operation id's
// index entry before its remote task's lock, a flush the other way round).
func preRead(ctx context.Context, conn *txConn, shared *txShared, k flushKeys) error {
	if k.empty() {
		return nil
	}
	ids := k.sortedDelegations()
	rec := &planRecorder{}
	q := newQueries(rec)
	var err error
	if len(k.locks) > 0 {
		err = errors.Join(err, q.AdvisoryXactLocksSorted(ctx, k.locks))
	}
	locking := -1 // the index of the delegations' and streams' lock
	if k.locksDelegations() {
		locking = len(rec.statements)
		_, e := q.DelegationsAndStreamsLockForFlush(ctx, dbsqlc.DelegationsAndStreamsLockForFlushParams{
			Ids: nonNil(ids), OrgIds: nonNil(k.orgIDs), TaskIds: nonNil(k.taskIDs),
		})
		err = errors.Join(err, e)
	}
	plan := &preReadPlan{q: q, rec: rec, reads: map[int]func(pgx.BatchResults) error{}}
	if k.flush {
		err = errors.Join(err, queueServed(ctx, plan, conn, shared, k))
	}
	fresh, e3 := queueKeysTaken(ctx, q, rec, k)
	if err = errors.Join(err, e3); err != nil {
		return err
	}
	// Queued: they ride in one batch with the BEGIN and the first
	// statement the operations send, so the pre-read costs no round trip
	// of its own. An append before their results arrive reads its
	// stream's head itself (it holds the lock by then).
	for i, st := range rec.statements {
		st.check = func(_ pgconn.CommandTag, err error) error {
			if err != nil {
				return fmt.Errorf("the flush's pre-read: %w", err)
			}
			return nil
		}
		st.read = func(br pgx.BatchResults) error {
			switch i {
			case locking:
				return readLocked(br, shared, k)
			case fresh:
				return readKeysTaken(br, conn, k)
			}
			if read := plan.reads[i]; read != nil {
				return read(br)
			}
			_, err := br.Exec()
			return err
		}
		conn.queued = append(conn.queued, st)
	}
	return nil
}

// readLocked reads what a pre-read's DelegationsAndStreamsLockForFlush
// returns for each delegation it locked: its stream's head, into
// shared.heads, and the remote tasks among k's it records, into
// shared.recording.
func readLocked(br pgx.BatchResults, shared *txShared, k flushKeys) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	locked, err := pgx.CollectRows(rows, pgx.RowToStructByPos[dbsqlc.DelegationsAndStreamsLockForFlushRow])
	if err != nil {
		return err
	}
	if shared.heads == nil {
		shared.heads = map[string]streamHead{}
	}
	for _, d := range locked {
		stream := ledger.DelegationStream(d.ID)
		if _, ok := shared.heads[stream]; !ok && d.StreamSeq > 0 {
			shared.heads[stream] = streamHead{seq: d.StreamSeq, hash: d.Hash}
		}
		for _, ord := range d.RecordedTasks {
			if i := int(ord) - 1; i >= 0 && i < len(k.orgIDs) {
				if shared.recording == nil {
					shared.recording = map[string][]string{}
				}
				task := remoteTaskLock(k.orgIDs[i], k.taskIDs[i])
				shared.recording[task] = append(shared.recording[task], delegationKey(d.ID))
			}
		}
	}
	return nil
}

// preReadPlan is a pre-read's statements as queued, and the readers of
// those whose results answer its operations' reads, by index.
type preReadPlan struct {
	q     *dbsqlc.Queries
	rec   *planRecorder
	reads map[int]func(pgx.BatchResults) error
}

// readLast reads the result of the statement queued last with read.
func (p *preReadPlan) readLast(read func(pgx.BatchResults) error) {
	p.reads[len(p.rec.statements)-1] = read
}

// sortedDelegations are the delegations k names, sorted, once each.
func (k flushKeys) sortedDelegations() []uuid.UUID {
	ids := slices.Clone(k.delegations)
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	return slices.Compact(ids)
}

// locksDelegations: k names delegations, by id or remote task. A
// statement with nothing to lock is not sent: a creation alone locks its
// operation id and its remote task, in one.
func (k flushKeys) locksDelegations() bool { return len(k.delegations) > 0 || len(k.orgIDs) > 0 }

// queueServed adds to a flush's pre-read, after its locks, the reads its
// operations would send (served.go), and registers what answers them:
// those of the delegations it locked (DelegationsServedForFlush), of its
// creations' orgs and budgets (CreationReferencesForFlush, which
// share-locks the orgs as each creation would) and of its evidence's
// token ids (UsedTokensForFlush). A token id the transaction buffered the
// use of is not answered: the read would see the buffer.
func queueServed(ctx context.Context, plan *preReadPlan, conn *txConn, shared *txShared, k flushKeys) error {
	var err error
	q := plan.q
	shared.served = map[string]servedSource{}
	if k.locksDelegations() {
		_, err = q.DelegationsServedForFlush(ctx, dbsqlc.DelegationsServedForFlushParams{
			Ids: nonNil(k.sortedDelegations()), OrgIds: nonNil(k.orgIDs), TaskIds: nonNil(k.taskIDs),
		})
		r := &servedReads{}
		plan.readLast(r.read)
		serve(shared.served, r, servedReadNames...)
	}
	if len(k.references) > 0 {
		var orgs, budgets []string
		for _, r := range k.references {
			orgs, budgets = append(orgs, r.OrgID), append(budgets, r.BudgetID)
		}
		_, e := q.CreationReferencesForFlush(ctx, dbsqlc.CreationReferencesForFlushParams{OrgIds: orgs, BudgetIds: budgets})
		err = errors.Join(err, e)
		a := newPairAnswers(orgs, budgets, nil)
		plan.readLast(a.read)
		serve(shared.served, a, "CreationReferences")
	}
	if len(k.tokens) > 0 {
		var orgs, jtis []string
		for _, t := range k.tokens {
			orgs, jtis = append(orgs, t.OrgID), append(jtis, t.JTI)
		}
		_, e := q.UsedTokensForFlush(ctx, dbsqlc.UsedTokensForFlushParams{OrgIds: orgs, Jtis: jtis})
		err = errors.Join(err, e)
		a := newPairAnswers(orgs, jtis, func(p [2]string) bool { return conn.tokens.keys[tokenKey{org: p[0], jti: p[1]}] })
		plan.readLast(a.read)
		serve(shared.served, a, "UsedTokenGet")
	}
	return err
}

// nonNil is s, or an empty slice for nil: a nil slice is sent as NULL,
// which ANY and unnest take as no array at all.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// planRecorder records the statements a run of queries issues, answering
// each with no rows, so that they can be sent in one batch.
type planRecorder struct{ statements []queuedStatement }

func (r *planRecorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.statements = append(r.statements, queuedStatement{sql: sql, args: args})
	return pgconn.CommandTag{}, nil
}

func (r *planRecorder) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.statements = append(r.statements, queuedStatement{sql: sql, args: args})
	return &noRows{}, nil
}

func (r *planRecorder) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.statements = append(r.statements, queuedStatement{sql: sql, args: args})
	return errRow{}
}

// noRows are the rows of a recorded query: none.
type noRows struct{}

func (*noRows) Close()                                       {}
func (*noRows) Err() error                                   { return nil }
func (*noRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (*noRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (*noRows) Next() bool                                   { return false }
func (*noRows) Scan(...any) error                            { return errors.New("no rows") }
func (*noRows) Values() ([]any, error)                       { return nil, errors.New("no rows") }
func (*noRows) RawValues() [][]byte                          { return nil }
func (*noRows) Conn() *pgx.Conn                              { return nil }
func (*noRows) TypeMap() *pgtype.Map                         { return nil }
