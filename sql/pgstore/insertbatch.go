package pgstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// The inserts of a flush whose answer, whether the row was inserted, the
// flush knows without asking (ledger/DESIGN.md §5, "The write path"): a
// new delegation whose business operation id and remote task the flush's
// pre-read found recorded by no delegation, under the locks every creation
// takes on them, and a used token id the transaction read as unused. Each
// is answered "inserted" at once, buffered, and written with the flush's
// others in one statement (DelegationInsertBatch, UsedTokenInsertBatch)
// that returns the rows it inserted. A row it did not insert is a conflict
// the proof missed (a writer that took no lock, a token id reused with
// another remote task): that operation is refused with errInsertTaken and
// runs again alone, after the flush, where it reads what is recorded; it
// is never answered on a wrong "inserted". A transaction alone, or an
// insert not proven so, sends its statement at once, as before.

// errInsertTaken refuses an operation whose buffered insert found its row
// taken: it runs again alone (coalescer.answerHeld).
var errInsertTaken = errors.New("a buffered insert found its row recorded already")

// freshKeys are what the transaction proved no row records yet: business
// operation ids and remote tasks of delegations (the pre-read, under their
// locks) and used token ids (the transaction's own read). A key is claimed
// by the first insert that names it, buffered or not: after it, the proof
// no longer holds.
type freshKeys struct {
	operations map[ledger.OperationKey]bool
	tasks      map[remoteTaskKey]bool
	tokens     map[tokenKey]bool
}

// tokenKey is one org's token id.
type tokenKey struct{ org, jti string }

// operationKey, taskKey and usedTokenKey are the keys as stored (and as
// the statements' cleaned arguments name them).
func operationKey(tenant, id string) ledger.OperationKey {
	return ledger.OperationKey{Tenant: storable(tenant), ID: storable(id)}
}

func taskKey(org, task string) remoteTaskKey {
	return remoteTaskKey{org: storable(org), task: storable(task)}
}

func usedTokenKey(org, jti string) tokenKey { return tokenKey{org: storable(org), jti: storable(jti)} }

func storable(s string) string {
	c, _ := ledger.StorableText(s)
	return c
}

// claimDelegation claims d's keys and says whether they were all proven
// fresh, so that d's insert may be buffered.
func (f *freshKeys) claimDelegation(d ledger.Delegation) bool {
	op := operationKey(d.Tenant, d.BusinessOperationID)
	ok := f.operations[op]
	delete(f.operations, op)
	if d.Remote.TaskID != "" {
		rt := taskKey(d.OrgID, d.Remote.TaskID)
		ok = ok && f.tasks[rt]
		delete(f.tasks, rt)
	}
	return ok
}

// claimTask claims a remote task an update records: a creation of the
// same task after it must ask.
func (f *freshKeys) claimTask(org, task string) {
	if task != "" {
		delete(f.tasks, taskKey(org, task))
	}
}

// claimToken claims a used token id and says whether it was proven fresh.
func (f *freshKeys) claimToken(k tokenKey) bool {
	ok := f.tokens[k]
	delete(f.tokens, k)
	return ok
}

// freshToken notes that the transaction read k as unused.
func (f *freshKeys) freshToken(k tokenKey) {
	if f.tokens == nil {
		f.tokens = map[tokenKey]bool{}
	}
	f.tokens[k] = true
}

// queueKeysTaken adds to a flush's pre-read the read of which of its
// creations' business operation ids and remote tasks a delegation records
// already, and returns its index among rec's statements (-1: none). It
// must follow the statement taking their locks: its snapshot is then taken
// once they are held, so what it does not return no committed delegation
// records, and no creation (which takes the same locks, in a flush or
// alone) can record before this flush commits.
func queueKeysTaken(ctx context.Context, q *dbsqlc.Queries, rec *planRecorder, k flushKeys) (int, error) {
	if !k.flush || len(k.operations)+len(k.recorded) == 0 {
		return -1, nil
	}
	p := dbsqlc.DelegationKeysTakenParams{Tenants: []string{}, OperationIds: []string{}, OrgIds: []string{}, TaskIds: []string{}}
	for _, op := range k.operations {
		p.Tenants, p.OperationIds = append(p.Tenants, op.Tenant), append(p.OperationIds, op.ID)
	}
	for _, rt := range k.recorded {
		p.OrgIds, p.TaskIds = append(p.OrgIds, rt.OrgID), append(p.TaskIds, rt.TaskID)
	}
	i := len(rec.statements)
	_, err := q.DelegationKeysTaken(ctx, p)
	return i, err
}

// readKeysTaken reads queueKeysTaken's result: the keys it asked about and
// did not find are fresh.
func readKeysTaken(br pgx.BatchResults, conn *txConn, k flushKeys) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	taken, err := pgx.CollectRows(rows, pgx.RowToStructByPos[dbsqlc.DelegationKeysTakenRow])
	if err != nil {
		return err
	}
	f := &conn.fresh
	f.operations, f.tasks = map[ledger.OperationKey]bool{}, map[remoteTaskKey]bool{}
	for _, op := range k.operations {
		f.operations[operationKey(op.Tenant, op.ID)] = true
	}
	for _, rt := range k.recorded {
		f.tasks[taskKey(rt.OrgID, rt.TaskID)] = true
	}
	for _, r := range taken {
		if r.Kind == "operation" {
			delete(f.operations, ledger.OperationKey{Tenant: r.K1, ID: r.K2})
		} else {
			delete(f.tasks, remoteTaskKey{org: r.K1, task: r.K2})
		}
	}
	return nil
}

// insertBatch is the inserts of new delegations a flush buffered and has
// not sent yet.
type insertBatch struct {
	p dbsqlc.DelegationInsertBatchParams
	// owners are the operations that buffered them, one per insert.
	owners
	delegationKeys
}

// add buffers the insert of d, by operation owner.
func (u *insertBatch) add(owner int, d ledger.Delegation) {
	u.delegationKeys.add(d)
	u.owners = append(u.owners, owner)
	p := &u.p
	p.Ids = append(p.Ids, d.ID)
	p.Tenants = append(p.Tenants, d.Tenant)
	p.BusinessOperationIds = append(p.BusinessOperationIds, d.BusinessOperationID)
	p.RequestHashes = append(p.RequestHashes, d.RequestHash)
	p.OrgIds = append(p.OrgIds, d.OrgID)
	p.TaskClasses = append(p.TaskClasses, d.TaskClass)
	p.BudgetIds = append(p.BudgetIds, d.BudgetID)
	p.AmountMinors = append(p.AmountMinors, d.Hold.AmountMinor)
	p.Currencies = append(p.Currencies, d.Hold.Currency)
	p.RemoteTaskIds = append(p.RemoteTaskIds, d.Remote.TaskID)
	p.RemoteContextIds = append(p.RemoteContextIds, d.Remote.ContextID)
	p.ProtocolVersions = append(p.ProtocolVersions, d.Remote.ProtocolVersion)
	p.TaskStatuses = append(p.TaskStatuses, string(d.TaskStatus))
	p.ObligationStates = append(p.ObligationStates, string(d.ObligationState))
	p.Versions = append(p.Versions, d.Version)
	p.CreatedAts = append(p.CreatedAts, d.CreatedAt)
	p.UpdatedAts = append(p.UpdatedAts, d.UpdatedAt)
}

// dependsOnDelegations matches what a statement that may see a new
// delegation names: the table, every table with a foreign key to it (an
// insert of a row referring to a buffered delegation must find it), the
// tables its triggers write, the reporting views and the schema's
// functions.
var dependsOnDelegations = regexp.MustCompile(`(?i)\b(delegations|a2a_delegations|a2a_outbox|budget_entries|compensation_evidence|` +
	`delegation_cases|delegation_links|delegation_messages|delegation_remote_tasks|events|gateway_push_configs|` +
	`revoked_identity_releases|task_snapshots|used_token_ids|write_offs|shared_remote_tasks|obligation_count\w*)\b|` +
	`reporting\.|quittance_|event_stream_head`)

// mustPrecede: the statement sql, sent with args, may see or conflict
// with the buffered inserts, so they must be written before it runs:
// every write, and every statement naming what dependsOnDelegations
// matches, but a keyed read (keyedreads.go) only when a buffered insert is
// of a row it names.
func (u *insertBatch) mustPrecede(sql string, args []any) bool {
	if len(u.owners) == 0 {
		return false
	}
	// A used token id names a new delegation only once the tokens are
	// written, after the inserts (queueTokens): delegationKeys.holds.
	return mustPrecedeRead(sql, args, concernsInserts, u.holds)
}

func concernsInserts(sql string) bool { return mayWrite(sql) || namesDependents(sql) }

// namesDependents: sql names what dependsOnDelegations matches, once per
// statement (they are the queries' constants, a few hundred).
func namesDependents(sql string) bool { return dependents.of(sql) }

var dependents = perStatement[bool]{classify: dependsOnDelegations.MatchString}

// statementName is the sqlc name of sql ("" for none).
func statementName(sql string) string {
	rest, ok := strings.CutPrefix(sql, "-- name: ")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, " ")
	return name
}

// bufferInsert buffers the insert of d by operation owner.
func (b *txConn) bufferInsert(owner int, d ledger.Delegation) error {
	if b.closed {
		return fmt.Errorf("transaction already closed")
	}
	b.inserts.add(owner, d)
	return nil
}

// queueInserts queues the buffered inserts' one statement
// (DelegationInsertBatch), so that it runs before the next statement
// sent. An id it did not insert refuses exactly its operation, whoever's
// statement carried it, which then runs again alone (errInsertTaken); a
// refusal PostgreSQL gives the statement itself is its operation's when
// the inserts are all one operation's, else no one's, and the flush
// replays its operations one at a time.
func (b *txConn) queueInserts() {
	if len(b.inserts.owners) == 0 {
		return
	}
	u := b.inserts
	b.inserts = insertBatch{}
	missing := -1
	b.queueOwned(u.owners, func(q *dbsqlc.Queries) { _, _ = q.DelegationInsertBatch(context.Background(), u.p) }, queuedStatement{
		refusal: refusedByRowCount,
		read: func(br pgx.BatchResults) (err error) {
			missing, err = firstNotReturned(br, u.p.Ids)
			return err
		},
		check: func(_ pgconn.CommandTag, err error) error {
			switch {
			case err != nil:
				return fmt.Errorf("insert %d delegations: %w", len(u.owners), err)
			case missing >= 0:
				return fmt.Errorf("delegation %s for business operation %s: %w", u.p.Ids[missing], u.p.BusinessOperationIds[missing], errInsertTaken)
			}
			return nil
		},
		blame: func() int {
			if missing >= 0 {
				return u.owners[missing]
			}
			return u.owners.sole()
		},
	})
}

// tokenBatch is the used token ids a flush buffered and has not sent yet.
type tokenBatch struct {
	p dbsqlc.UsedTokenInsertBatchParams
	// owners are the operations that buffered them, one per token id.
	owners
	keys map[tokenKey]bool
}

// add buffers u, by operation owner.
func (t *tokenBatch) add(owner int, u compensation.UsedToken) {
	if t.keys == nil {
		t.keys = map[tokenKey]bool{}
	}
	t.keys[usedTokenKey(u.OrgID, u.JTI)] = true
	t.owners = append(t.owners, owner)
	p := &t.p
	p.OrgIds = append(p.OrgIds, u.OrgID)
	p.Jtis = append(p.Jtis, u.JTI)
	p.DelegationIds = append(p.DelegationIds, u.DelegationID)
	p.TokenSha256s = append(p.TokenSha256s, u.TokenSHA256)
	p.UsedAts = append(p.UsedAts, u.UsedAt)
}

// namesUsedTokens matches what a statement that may read or conflict with
// a used token id names.
var namesUsedTokens = regexp.MustCompile(`(?i)\bused_token_ids\b|reporting\.|quittance_`)

// mustPrecede: the statement sql, sent with args, may read or conflict
// with the buffered token ids: any statement naming their table, the
// reporting views or the schema's functions, but a read of one token id
// (UsedTokenGet) only when it is buffered.
func (t *tokenBatch) mustPrecede(sql string, args []any) bool {
	if len(t.owners) == 0 {
		return false
	}
	return mustPrecedeRead(sql, args, tokenReads.of, t.holds)
}

// holds: r is of a buffered token id, or of other rows.
func (t *tokenBatch) holds(r readRows) bool { return r.kind != byUsedToken || t.keys[r.token()] }

var tokenReads = perStatement[bool]{classify: namesUsedTokens.MatchString}

// bufferToken buffers u, by operation owner.
func (b *txConn) bufferToken(owner int, u compensation.UsedToken) error {
	if b.closed {
		return fmt.Errorf("transaction already closed")
	}
	b.tokens.add(owner, u)
	return nil
}

// queueTokens queues the buffered token ids' one statement
// (UsedTokenInsertBatch), judged as queueInserts judges the delegations'.
func (b *txConn) queueTokens() {
	if len(b.tokens.owners) == 0 {
		return
	}
	t := b.tokens
	b.tokens = tokenBatch{}
	missing := -1
	b.queueInserts() // a token may name a delegation created in the flush
	b.queueOwned(t.owners, func(q *dbsqlc.Queries) { _, _ = q.UsedTokenInsertBatch(context.Background(), t.p) }, queuedStatement{
		refusal: refusedByRowCount,
		read: func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			used, err := pgx.CollectRows(rows, pgx.RowToStructByPos[dbsqlc.UsedTokenInsertBatchRow])
			if err != nil {
				return err
			}
			inserted := make(map[tokenKey]bool, len(used))
			for _, r := range used {
				inserted[tokenKey{org: r.OrgID, jti: r.Jti}] = true
			}
			for i := range t.p.Jtis {
				if !inserted[usedTokenKey(t.p.OrgIds[i], t.p.Jtis[i])] {
					missing = i
					break
				}
			}
			return nil
		},
		check: func(_ pgconn.CommandTag, err error) error {
			switch {
			case err != nil:
				return fmt.Errorf("record %d used token ids: %w", len(t.owners), err)
			case missing >= 0:
				return fmt.Errorf("used token id of org %s: %w", t.p.OrgIds[missing], errInsertTaken)
			}
			return nil
		},
		blame: func() int {
			if missing >= 0 {
				return t.owners[missing]
			}
			return t.owners.sole()
		},
	})
}
