package pgstore

import (
	"context"
	"fmt"
	"regexp"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// evidenceBatch is the compensation evidence a transaction stored
// (PutCompensationEvidence) and has not sent yet: it is written in one
// statement (CompensationEvidencePutBatch), in the order it was stored, at
// the transaction's end or before the first statement that may read it
// (ledger/DESIGN.md §5, "The write path"); each delegation's at most once.
type evidenceBatch struct {
	p dbsqlc.CompensationEvidencePutBatchParams
	// owners are the operations that stored it, one per row.
	owners
	ids map[uuid.UUID]bool
}

// add buffers e, stored by operation owner.
func (v *evidenceBatch) add(owner int, e ledger.StoredEvidence) {
	if v.ids == nil {
		v.ids = map[uuid.UUID]bool{}
	}
	v.ids[e.DelegationID] = true
	v.owners = append(v.owners, owner)
	p := &v.p
	p.DelegationIds = append(p.DelegationIds, e.DelegationID)
	p.IdempotencyKeys = append(p.IdempotencyKeys, e.IdempotencyKey)
	p.Kinds = append(p.Kinds, string(e.Kind))
	p.Channels = append(p.Channels, string(e.Channel))
	p.PayloadSha256s = append(p.PayloadSha256s, e.PayloadSHA256)
	p.Statuses = append(p.Statuses, string(e.Status))
	p.Receipts = append(p.Receipts, storableJSONText(e.Receipt))
	p.Datas = append(p.Datas, storableJSONText(e.Data))
	p.Tokens = append(p.Tokens, e.Token)
	p.ReceivedAts = append(p.ReceivedAts, e.ReceivedAt)
	p.DecidedAts = append(p.DecidedAts, orZero(e.DecidedAt))
}

// bufferEvidence buffers e, stored by operation owner; a buffered row of
// the same delegation is queued first (an INSERT … ON CONFLICT DO UPDATE
// changes a row once).
func (b *txConn) bufferEvidence(ctx context.Context, owner int, e ledger.StoredEvidence) error {
	if b.closed {
		return fmt.Errorf("transaction already closed")
	}
	if b.evidence.ids[e.DelegationID] {
		b.queueEvidence(ctx)
	}
	b.evidence.add(owner, e)
	return nil
}

// queueEvidence queues the buffered evidence's one statement as a write,
// refused by an error (a constraint, a foreign key), so the COMMIT may
// ride with it. A refusal is its operation's when the rows are all one
// operation's, else no one's: the flush then replays its operations one
// at a time (queueBuffered).
func (b *txConn) queueEvidence(ctx context.Context) {
	if len(b.evidence.owners) == 0 {
		return
	}
	n := len(b.evidence.owners)
	p := b.evidence.p
	b.queueBuffered(b.evidence.owners, func(q *dbsqlc.Queries) { _ = q.CompensationEvidencePutBatch(ctx, p) }, queuedStatement{
		refusal: refusedByError,
		check: func(_ pgconn.CommandTag, err error) error {
			if err != nil {
				return fmt.Errorf("store the compensation evidence of %d delegations: %w", n, err)
			}
			return nil
		},
	})
	b.evidence = evidenceBatch{}
}

// mustPrecede: the statement sql, sent with args, may read the buffered
// evidence, so it must be written before it runs. Conservative: any
// statement naming the table, the reporting views or the schema's own
// functions counts, but a keyed read of one delegation's evidence
// (CompensationEvidenceGet, EvidenceFactsGet) waits only for that
// delegation's.
func (v *evidenceBatch) mustPrecede(sql string, args []any) bool {
	if len(v.owners) == 0 {
		return false
	}
	return mustPrecedeRead(sql, args, evidenceReads.of, v.holds)
}

// holds: r is of a delegation whose evidence is buffered, or of other
// rows.
func (v *evidenceBatch) holds(r readRows) bool { return r.kind != byDelegation || v.ids[r.id] }

// namesEvidence matches what a statement reading the evidence names.
var namesEvidence = regexp.MustCompile(`(?i)\bcompensation_evidence\b|reporting\.|quittance_`)

var evidenceReads = perStatement[bool]{classify: namesEvidence.MatchString}
