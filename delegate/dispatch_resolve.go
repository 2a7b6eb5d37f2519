package delegate

import (
	"context"
	"errors"
	"strings"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// ResolveDispatchInput is what on-call gives to end a dispatch_unknown
// condition.
type ResolveDispatchInput struct {
	// TaskID is the remote task the remote org says its agent created for
	// the dispatch (found by the dispatch's messageId).
	TaskID string
	// ContextID is that task's context, if the org gave it.
	ContextID string
	// Reason says how the task was found: who at the org confirmed it.
	Reason string
}

// maxResolveText bounds the task id, context id and reason on-call gives.
const maxResolveText = 4096

// ResolveDispatch records, on behalf of an on-call principal, the remote
// task of a delegation in the dispatch_unknown condition (any other
// delegation is a conflict, dispatch_not_unknown): in one transaction the
// condition ends, the task id is set, a dispatch_resolved event records who
// and why, and the task is observed at once, and canceled if the
// orchestrator asked for that meanwhile. From then on the task is tracked
// as if the dispatch had answered: its terminal status decides the
// obligation through the usual gate. Nothing here moves the hold or the
// obligation, so no single person releases money by resolving.
func (o *Orchestrator) ResolveDispatch(ctx context.Context, p ledger.Principal, id uuid.UUID, in ResolveDispatchInput) (ledger.Delegation, error) {
	if p.Role != ledger.RoleOncall {
		return ledger.Delegation{}, ledger.ErrForbidden
	}
	for _, f := range []struct {
		name, value string
		required    bool
	}{{"task_id", in.TaskID, true}, {"context_id", in.ContextID, false}, {"reason", in.Reason, true}} {
		if f.required && strings.TrimSpace(f.value) == "" {
			return ledger.Delegation{}, ledger.Invalid(f.name, "%s is required", f.name)
		}
		if _, replaced := ledger.StorableText(f.value); len(f.value) > maxResolveText || replaced {
			return ledger.Delegation{}, ledger.Invalid(f.name, "%s must be at most %d bytes of valid text without NUL", f.name, maxResolveText)
		}
	}
	var out ledger.Delegation
	err := o.store.InTx(ctx, func(tx Tx) error {
		now := o.now()
		d, err := tx.DelegationForUpdate(ctx, id)
		if err != nil {
			return err
		}
		if d.Remote.TaskID != "" || d.ObligationState != ledger.ObligationHeld {
			return ledger.Conflict("dispatch_not_unknown", "the delegation's dispatch is not unknown (task %q, obligation %s)", d.Remote.TaskID, d.ObligationState)
		}
		if other, err := tx.DelegationByRemoteTask(ctx, d.Tenant, d.OrgID, in.TaskID); err == nil && other.ID != d.ID {
			return ledger.Conflict("remote_task_taken", "org %s's task %q is recorded on another delegation of this tenant", d.OrgID, in.TaskID)
		} else if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return err
		}
		cleared, err := tx.ClearDispatchUnknown(ctx, d.ID)
		if err != nil {
			return err
		}
		if !cleared {
			return ledger.Conflict("dispatch_not_unknown", "the delegation is not in the dispatch_unknown condition: its dispatch may still be under way")
		}
		d.Remote.TaskID, d.Remote.ContextID = in.TaskID, in.ContextID
		d, _, err = ledger.Apply(ctx, tx, d, ledger.Change{Type: ledger.EventTypeDispatchResolved, Actor: p.Actor(), At: now, Data: map[string]any{
			"task_id": in.TaskID, "context_id": in.ContextID, "reason": in.Reason, "message_id": DispatchMessageID(d.ID),
		}})
		if err != nil {
			return err
		}
		if err := enqueueObserve(ctx, tx, d.ID, "dispatch_resolved", now); err != nil {
			return err
		}
		if !d.CancelRequestedAt.IsZero() {
			if err := tx.EnqueueOutbound(ctx, ledger.OutboundJob{DelegationID: d.ID, Kind: ledger.OutboundCancel, RunAfter: now, At: now}); err != nil {
				return err
			}
		}
		out = d
		return nil
	})
	if err == nil && o.wake != nil {
		o.wake()
	}
	return out, err
}
