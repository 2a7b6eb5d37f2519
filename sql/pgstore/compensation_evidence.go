package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
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

// PutCompensationEvidence implements ledger.EvidenceTx: it buffers the
// row, written with the transaction's other evidence in one statement
// (evidencebatch.go).
func (t *tx) PutCompensationEvidence(ctx context.Context, e ledger.StoredEvidence) error {
	t.conn.wrote = true
	return t.conn.conn.bufferEvidence(ctx, t.conn.owner, e)
}

// EvidenceFacts implements compensation.ReceiptTx, in one round trip.
func (t *tx) EvidenceFacts(ctx context.Context, delegationID uuid.UUID) (compensation.EvidenceFacts, error) {
	row, err := t.q.EvidenceFactsGet(ctx, delegationID)
	if err != nil {
		return compensation.EvidenceFacts{}, notFound(err, "delegation", delegationID)
	}
	f := compensation.EvidenceFacts{
		Found: row.HasEvidence, ResolvedByPerson: row.ResolvedByPerson,
	}
	if row.HasEvidence {
		f.Stored = ledger.StoredEvidence{
			DelegationID: delegationID, IdempotencyKey: row.IdempotencyKey, Kind: ledger.ObligationEvent(row.Kind),
			Channel: ledger.EvidenceChannel(row.Channel), PayloadSHA256: row.PayloadSha256, Status: ledger.EvidenceStatus(row.Status),
			Receipt: row.Receipt, Data: row.Data, Token: row.Token, ReceivedAt: derefTime(row.EvidenceReceivedAt).UTC(),
		}
		if row.EvidenceDecidedAt != nil {
			f.Stored.DecidedAt = row.EvidenceDecidedAt.UTC()
		}
	}
	var tasks []struct {
		TaskID       string     `json:"task_id"`
		Purpose      string     `json:"purpose"`
		ContextID    string     `json:"context_id"`
		FoundBy      string     `json:"found_by"`
		Status       string     `json:"status"`
		FoundAt      time.Time  `json:"found_at"`
		CancelSentAt *time.Time `json:"cancel_sent_at"`
		NamedRound   int        `json:"named_round"`
		RequiredAt   *time.Time `json:"compensation_required_at"`
		Attempts     int        `json:"compensation_attempts"`
		ResolvedAt   *time.Time `json:"compensation_resolved_at"`
		Resolution   *string    `json:"compensation_resolution"`
	}
	if err := json.Unmarshal(row.RemoteTasks, &tasks); err != nil {
		return compensation.EvidenceFacts{}, fmt.Errorf("read remote tasks of delegation %s: %w", delegationID, err)
	}
	for _, rt := range tasks {
		f.RemoteTasks = append(f.RemoteTasks, compensation.RemoteTask{
			TaskID: rt.TaskID, Purpose: compensation.RemoteTaskPurpose(rt.Purpose), ContextID: rt.ContextID, FoundBy: rt.FoundBy,
			Status: ledger.TaskStatus(rt.Status), FoundAt: rt.FoundAt.UTC(), CancelSentAt: derefTime(rt.CancelSentAt), NamedRound: rt.NamedRound,
			Compensation: compensation.ExtraTaskCompensation{
				RequiredAt: derefTime(rt.RequiredAt), Attempts: rt.Attempts, ResolvedAt: derefTime(rt.ResolvedAt),
				Resolution: compensation.ExtraTaskResolution(deref(rt.Resolution)),
			},
		})
	}
	return f, nil
}
