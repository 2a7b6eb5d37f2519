package pgstore

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// updateBatch is the updates of delegations a transaction buffered and has
// not sent yet: they are written in one statement (DelegationUpdateBatch),
// at the transaction's end or before the first statement that may read
// the rows they change (ledger/DESIGN.md §5, "The write path"). Only an
// update that leaves its delegation's remote task as the transaction last
// read it is buffered (tx.UpdateDelegation), so the rows' org, remote task,
// tenant and business operation id are what the transaction reads of them
// without the buffer; each delegation is in it at most once.
type updateBatch struct {
	p dbsqlc.DelegationUpdateBatchParams
	// owners are the operations that buffered them, one per update.
	owners
	// The buffered delegations' keys: an update leaves their business
	// operations and remote tasks as they are.
	delegationKeys
}

// remoteTaskKey is one org's remote task id.
type remoteTaskKey struct{ org, task string }

// add buffers the update of d, by operation owner.
func (u *updateBatch) add(owner int, d ledger.Delegation) {
	u.delegationKeys.add(d)
	u.owners = append(u.owners, owner)
	p := &u.p
	p.Ids = append(p.Ids, d.ID)
	p.PreviousVersions = append(p.PreviousVersions, d.Version-1)
	p.AmountMinors = append(p.AmountMinors, d.Hold.AmountMinor)
	settled := amountIn(d, ledger.ObligationSettled, d.SettledAmountMinor)
	p.SettledSet = append(p.SettledSet, settled.Valid)
	p.SettledAmountMinors = append(p.SettledAmountMinors, settled.Int64)
	reversed := amountIn(d, ledger.ObligationCompensated, d.ReversedAmountMinor)
	p.ReversedSet = append(p.ReversedSet, reversed.Valid)
	p.ReversedAmountMinors = append(p.ReversedAmountMinors, reversed.Int64)
	p.TaskStatuses = append(p.TaskStatuses, string(d.TaskStatus))
	p.TaskStatusAts = append(p.TaskStatusAts, orZero(d.TaskStatusAt))
	p.TaskStatusUndated = append(p.TaskStatusUndated, d.TaskStatusUndated)
	p.TaskStatusMessages = append(p.TaskStatusMessages, d.TaskStatusMessage)
	p.ObligationStates = append(p.ObligationStates, string(d.ObligationState))
	p.ObligationReasons = append(p.ObligationReasons, d.ObligationReason)
	p.CancelRequestedAts = append(p.CancelRequestedAts, orZero(d.CancelRequestedAt))
	p.CompensationKeys = append(p.CompensationKeys, d.Compensation.IdempotencyKey)
	p.CompensationDeadlines = append(p.CompensationDeadlines, orZero(d.Compensation.Deadline))
	p.CompensationAttempts = append(p.CompensationAttempts, int32(d.Compensation.Attempts))
	p.CompensationLastErrors = append(p.CompensationLastErrors, d.Compensation.LastError)
	p.CompensationReceipts = append(p.CompensationReceipts, storableJSONText(d.Compensation.Receipt))
	writeOff := ""
	if d.PendingWriteOffID != uuid.Nil {
		writeOff = d.PendingWriteOffID.String()
	}
	p.PendingWriteOffIds = append(p.PendingWriteOffIds, writeOff)
	p.ObservedAts = append(p.ObservedAts, orZero(d.LastObservedAt))
	p.UpdatedAts = append(p.UpdatedAts, d.UpdatedAt)
}

// orZero is t, or the zero time (DelegationUpdateBatch's NULL) for any
// time IsZero holds of, as optionalTime stores those.
func orZero(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t
}

// bufferUpdate buffers the update of d by operation owner; a buffered
// update of the same delegation is queued first (one statement updates a
// row once).
func (b *txConn) bufferUpdate(ctx context.Context, owner int, d ledger.Delegation) error {
	if b.closed {
		return fmt.Errorf("transaction already closed")
	}
	if b.updates.ids[d.ID] {
		b.queueUpdates(ctx)
	}
	b.updates.add(owner, d)
	return nil
}

// queueUpdates queues the buffered updates' one statement
// (DelegationUpdateBatch) as a write, so that it runs before the next
// statement sent. A version that moved matches no row: that update's
// operation is the culprit, whoever's statement carried it. A statement
// PostgreSQL refuses (a constraint) is its operation's when the updates are
// all one operation's, else no one's: the flush then replays its
// operations one at a time.
func (b *txConn) queueUpdates(ctx context.Context) {
	if len(b.updates.owners) == 0 {
		return
	}
	u := b.updates
	missing := -1
	b.queueBuffered(u.owners, func(q *dbsqlc.Queries) { _, _ = q.DelegationUpdateBatch(ctx, u.p) }, queuedStatement{
		refusal: refusedByRowCount,
		read: func(br pgx.BatchResults) (err error) {
			missing, err = firstNotReturned(br, u.p.Ids)
			return err
		},
		check: func(_ pgconn.CommandTag, err error) error {
			switch {
			case err != nil:
				return fmt.Errorf("update %d delegations: %w", len(u.owners), err)
			case missing >= 0:
				return fmt.Errorf("delegation %s version %d: %w", u.p.Ids[missing], u.p.PreviousVersions[missing], ledger.ErrConcurrentUpdate)
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
	b.updates = updateBatch{}
}

// mustPrecede: the statement sql, sent with args, may read or write what
// the buffered updates change, so they must be written before it runs.
// Conservative: any statement naming the delegations table, the counts
// its triggers keep, the reporting views or the schema's own functions
// counts, but a keyed read (keyedreads.go) only when a buffered update is
// of a delegation it names, and an insert of a delegation never (it reads
// the others only by the business operation id and remote task a
// buffered update leaves as they are).
func (u *updateBatch) mustPrecede(sql string, args []any) bool {
	if len(u.owners) == 0 {
		return false
	}
	return mustPrecedeRead(sql, args, delegationReads.of, u.holds)
}

// namesDelegations matches what a statement reading the delegations names.
var namesDelegations = regexp.MustCompile(`(?i)\bdelegations\b|obligation_count|reporting\.|quittance_`)

// delegationReads classifies statements: whether they concern the
// buffered updates.
var delegationReads = perStatement[bool]{classify: func(sql string) bool {
	return statementName(sql) != "DelegationInsert" && namesDelegations.MatchString(sql)
}}

// firstNotReturned reads the ids a batched statement returned (the rows
// it wrote) and gives the index in want of the first it did not return,
// or -1 when it returned them all.
func firstNotReturned(br pgx.BatchResults, want []uuid.UUID) (int, error) {
	rows, err := br.Query()
	if err != nil {
		return -1, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return -1, err
	}
	returned := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		returned[id] = true
	}
	for i, id := range want {
		if !returned[id] {
			return i, nil
		}
	}
	return -1, nil
}
