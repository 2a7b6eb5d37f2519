package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// ClaimJobs claims due jobs in one statement (FOR UPDATE SKIP LOCKED), so
// concurrent claimers on any replica never get the same job.
func (a a2aStore) ClaimJobs(ctx context.Context, now, leaseUntil time.Time, leaseToken string, limit int) ([]delegate.Job, error) {
	rows, err := a.q.OutboxJobClaim(ctx, dbsqlc.OutboxJobClaimParams{
		LeaseUntil: &leaseUntil, LeaseToken: &leaseToken, Now: now, MaxJobs: int32(limit),
	})
	if err != nil {
		return nil, fmt.Errorf("claim a2a jobs: %w", err)
	}
	out := make([]delegate.Job, len(rows))
	for i, r := range rows {
		out[i] = delegate.Job{
			ID: r.ID, DelegationID: r.DelegationID, Kind: ledger.OutboundKind(r.Kind), Payload: r.Payload,
			Attempt: int(r.Attempts), LeaseToken: leaseToken, CreatedAt: r.CreatedAt,
		}
	}
	return out, nil
}

func (t *tx) EnqueueOutbound(ctx context.Context, j ledger.OutboundJob) error {
	payload := j.Payload
	if len(payload) == 0 {
		payload = []byte("{}")
	}
	if j.Kind == ledger.OutboundDispatch {
		err := t.q.A2ATrackingEnsure(ctx, dbsqlc.A2ATrackingEnsureParams{DelegationID: j.DelegationID, Dispatched: true, Now: j.At})
		if err != nil {
			return fmt.Errorf("track dispatched delegation %s: %w", j.DelegationID, err)
		}
	}
	err := t.q.OutboxJobEnqueue(ctx, dbsqlc.OutboxJobEnqueueParams{
		DelegationID: j.DelegationID, Kind: string(j.Kind), Payload: payload, RunAfter: j.RunAfter, Now: j.At,
	})
	if err != nil {
		return fmt.Errorf("enqueue %s for delegation %s: %w", j.Kind, j.DelegationID, err)
	}
	return nil
}

func (t *tx) FinishJob(ctx context.Context, j delegate.Job, outcome string, now time.Time) error {
	n, err := t.q.OutboxJobFinish(ctx, dbsqlc.OutboxJobFinishParams{Now: now, Outcome: &outcome, ID: j.ID, LeaseToken: &j.LeaseToken})
	if err != nil {
		return fmt.Errorf("finish a2a job %d: %w", j.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("finish a2a job %d: %w", j.ID, delegate.ErrLeaseLost)
	}
	return nil
}

func (t *tx) RetryJob(ctx context.Context, j delegate.Job, runAfter time.Time, lastError string, now time.Time) error {
	n, err := t.q.OutboxJobRetry(ctx, dbsqlc.OutboxJobRetryParams{
		RunAfter: runAfter, LastError: optional(lastError), Now: now, ID: j.ID, LeaseToken: &j.LeaseToken,
	})
	if err != nil {
		return fmt.Errorf("reschedule a2a job %d: %w", j.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("reschedule a2a job %d: %w", j.ID, delegate.ErrLeaseLost)
	}
	return nil
}

// OutboundJobOpen reports whether a job of kind is open (not done) for the
// delegation: the reads outside a transaction (a page's preview) and inside
// one (the decision on the locked delegation) ask the same statement.
func (r reader) OutboundJobOpen(ctx context.Context, delegationID uuid.UUID, kind ledger.OutboundKind) (bool, error) {
	open, err := r.q.OutboxJobOpen(ctx, dbsqlc.OutboxJobOpenParams{DelegationID: delegationID, Kind: string(kind)})
	if err != nil {
		return false, fmt.Errorf("look for an open %s job of delegation %s: %w", kind, delegationID, err)
	}
	return open, nil
}
