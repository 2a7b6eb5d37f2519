package delegate

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/internal/text"
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
	err := o.store.InTx(ctx, func(tx OrchestratorTx) error {
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
		d, err = resolveDispatchTx(ctx, tx, d, in.TaskID, in.ContextID, p.Actor(), map[string]any{"reason": in.Reason, "found_by": "oncall"}, now)
		if err != nil {
			return err
		}
		out = d
		return nil
	})
	if err == nil && o.wake != nil {
		o.wake()
	}
	return out, err
}

// resolveDispatchTx records, in tx with d locked, taskID as the remote task
// of d, a delegation in the dispatch_unknown condition: the condition
// ends, a dispatch_resolved event (by actor, with data) records it, the
// task is observed at once and canceled if the orchestrator asked for that
// meanwhile. On-call's ResolveDispatch and the dispatch job's lookup both
// end the condition so. Nothing moves the hold or the obligation.
func resolveDispatchTx(ctx context.Context, tx OrchestratorTx, d ledger.Delegation, taskID, contextID, actor string, data map[string]any, now time.Time) (ledger.Delegation, error) {
	cleared, err := tx.ClearDispatchUnknown(ctx, d.ID)
	if err != nil {
		return ledger.Delegation{}, err
	}
	if !cleared {
		return ledger.Delegation{}, ledger.Conflict("dispatch_not_unknown", "the delegation is not in the dispatch_unknown condition: its dispatch may still be under way")
	}
	d.Remote.TaskID, d.Remote.ContextID = taskID, contextID
	data["task_id"], data["context_id"], data["message_id"] = taskID, contextID, DispatchMessageID(d.ID)
	d, _, err = ledger.Apply(ctx, tx, d, ledger.Change{Type: ledger.EventTypeDispatchResolved, Actor: actor, At: now, Data: data})
	if err != nil {
		return ledger.Delegation{}, err
	}
	if err := enqueueObserve(ctx, tx, d.ID, "dispatch_resolved", now); err != nil {
		return ledger.Delegation{}, err
	}
	if !d.CancelRequestedAt.IsZero() {
		if err := tx.EnqueueOutbound(ctx, ledger.OutboundJob{DelegationID: d.ID, Kind: ledger.OutboundCancel, RunAfter: now, At: now}); err != nil {
			return ledger.Delegation{}, err
		}
	}
	return d, nil
}

// lookupDispatch looks up, with ListTasks on contextID, the tasks the
// earlier attempts of d's dispatch created, and says how the lookup went
// (found, no_task_found, not_supported, failed) for the dispatch_unknown
// event. No task found proves nothing: an agent may purge tasks or list
// only some.
func (w *Worker) lookupDispatch(ctx context.Context, client *a2a.Client, d ledger.Delegation, contextID string) ([]a2a.Task, string) {
	tasks, supported, err := lookupTasks(ctx, client, d, contextID, Tracking{})
	switch {
	case err != nil:
		w.log.WarnContext(ctx, "ListTasks lookup of a dispatch_unknown delegation failed", "delegation_id", d.ID.String(), "error", err)
		return nil, "failed"
	case !supported:
		return nil, "not_supported"
	case len(tasks) == 0:
		return nil, "no_task_found"
	}
	return tasks, "found"
}

// resolveFound ends, in tx with d locked, the dispatch_unknown condition
// of d with the tasks a lookup found: the oldest (ListTasks lists the
// newest first) becomes the delegation's task, as if the dispatch had
// answered with it (dispatch_resolved, found_by list_tasks); every other is
// an extra task, recorded to be canceled and compensated. A task recorded
// on another delegation resolves nothing: it is recorded as a conflict and
// the condition stays for on-call.
func (w *Worker) resolveFound(ctx context.Context, tx Tx, d ledger.Delegation, found []a2a.Task, iface a2a.AgentInterface, now time.Time) error {
	primary := found[len(found)-1]
	if other, err := tx.DelegationByRemoteTask(ctx, d.Tenant, d.OrgID, primary.ID); err == nil && other.ID != d.ID {
		return record(ctx, tx, d, ledger.EventTypeRemoteTaskConflict, now, map[string]any{
			"reported_task_id": text.Truncate(primary.ID, 256), "other_delegation_id": other.ID.String(), "source": "list_tasks",
		})
	} else if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return err
	}
	d.Remote.ProtocolVersion = iface.ProtocolVersion
	d, err := resolveDispatchTx(ctx, tx, d, primary.ID, primary.ContextID, workerActor, map[string]any{
		"found_by": "list_tasks", "reason": "found by ListTasks on the delegation's context", "tasks_found": len(found),
	}, now)
	if err != nil {
		return err
	}
	if err := tx.MarkObserved(ctx, d.ID, now); err != nil {
		return err
	}
	_, err = w.recordExtraTasks(ctx, tx, d, found[:len(found)-1], "list_tasks", now)
	return err
}
