package compensation

import (
	"context"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// RedriveInput is what on-call gives to redrive compensation.
type RedriveInput struct {
	// Reason says why compensation is asked for again.
	Reason string
}

// CanRedrive says whether compensation can be redriven for d: only from
// compensation_unconfirmed, and only with a remote task to ask about; a
// *ledger.ConflictError (redrive_not_allowed) says why not. Redrive decides
// by it on the locked row; the console previews with it.
func CanRedrive(d ledger.Delegation) error {
	if d.ObligationState != ledger.ObligationCompensationUnconfirmed {
		return ledger.Conflict(CodeRedriveNotAllowed, "compensation can be redriven only from compensation_unconfirmed, not %s", d.ObligationState)
	}
	if d.Remote.TaskID == "" {
		return ledger.Conflict(CodeRedriveNotAllowed, "the delegation has no remote task to ask compensation for")
	}
	return nil
}

// Redrive asks the org's agent for compensation again, on behalf of an
// on-call principal, for an obligation in compensation_unconfirmed (any
// other state is a conflict, redrive_not_allowed). In one transaction the
// attempt count is reset, a compensation_redriven event records who asked
// and why, and a compensation request job is queued: a new series of
// requests with the same compensation idempotency key. The requests keep
// the messageId of the last round unless a reply proved the remote saw
// it, exactly as the worker's own retries do. The obligation stays
// compensation_unconfirmed, hold active, until evidence arrives; the
// redriven requests may exhaust again, which is recorded again.
func (s *Service) Redrive(ctx context.Context, p ledger.Principal, delegationID uuid.UUID, in RedriveInput) (ledger.Delegation, error) {
	if err := requireOncall(p); err != nil {
		return ledger.Delegation{}, err
	}
	if err := checkReason(in.Reason); err != nil {
		return ledger.Delegation{}, err
	}
	var out ledger.Delegation
	err := s.store.InTx(ctx, func(tx Tx) error {
		now := s.now()
		d, err := tx.DelegationForUpdate(ctx, delegationID)
		if err != nil {
			return err
		}
		if err := CanRedrive(d); err != nil {
			return err
		}
		previous := d.Compensation.Attempts
		d.Compensation.Attempts = 0
		d, _, err = ledger.Apply(ctx, tx, d, ledger.Change{
			Type: ledger.EventTypeCompensationRedriven, Actor: p.Actor(), At: now,
			Data: ledger.CompensationRedrivenData{
				Reason: in.Reason, PreviousAttempts: previous,
				IdempotencyKey: ledger.CompensationKey(d), TaskID: d.Remote.TaskID,
			},
		})
		if err != nil {
			return err
		}
		if err := tx.EnqueueOutbound(ctx, ledger.OutboundJob{
			DelegationID: d.ID, Kind: ledger.OutboundCompensationRequest, RunAfter: now, At: now,
		}); err != nil {
			return err
		}
		out = d
		return nil
	})
	return out, err
}
