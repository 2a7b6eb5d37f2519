package pgstore

import (
	"context"
	"fmt"
	"github.com/jackc/pgx/v5/pgconn"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// CompensationEvidence implements ledger.EvidenceTx.
func (t *tx) CompensationEvidence(ctx context.Context, delegationID uuid.UUID) (ledger.StoredEvidence, error) {
	row, err := t.q.CompensationEvidenceGet(ctx, delegationID)
	if err != nil {
		return ledger.StoredEvidence{}, notFound(err, "compensation evidence of delegation", delegationID)
	}
	e := ledger.StoredEvidence{
		DelegationID: row.DelegationID, IdempotencyKey: row.IdempotencyKey, Kind: ledger.ObligationEvent(row.Kind),
		Channel: ledger.EvidenceChannel(row.Channel), PayloadSHA256: row.PayloadSha256, Status: ledger.EvidenceStatus(row.Status),
		Receipt: row.Receipt, Data: row.Data, Token: row.Token, ReceivedAt: row.ReceivedAt.UTC(),
	}
	if row.DecidedAt != nil {
		e.DecidedAt = row.DecidedAt.UTC()
	}
	return e, nil
}

// PutCompensationEvidence implements ledger.EvidenceTx.
// PutCompensationEvidence queues the write (txConn.queue).
func (t *tx) PutCompensationEvidence(ctx context.Context, e ledger.StoredEvidence) error {
	var decided *time.Time
	if !e.DecidedAt.IsZero() {
		decided = &e.DecidedAt
	}
	p := dbsqlc.CompensationEvidencePutParams{
		DelegationID: e.DelegationID, IdempotencyKey: e.IdempotencyKey, Kind: string(e.Kind), Channel: string(e.Channel),
		PayloadSha256: e.PayloadSHA256, Status: string(e.Status), Receipt: e.Receipt, Data: e.Data, Token: e.Token,
		ReceivedAt: e.ReceivedAt, DecidedAt: decided,
	}
	return t.conn.queue(func(q *dbsqlc.Queries) error {
		return q.CompensationEvidencePut(ctx, p)
	}, refusedByError, func(_ pgconn.CommandTag, err error) error {
		if err != nil {
			return fmt.Errorf("store compensation evidence of delegation %s: %w", e.DelegationID, err)
		}
		return nil
	})
}
