package delegate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
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
	// ContextID is that task's context, if the org gave it: it must be the
	// one the org's agent shows.
	ContextID string
	// Reason says how the task was found: who at the org confirmed it.
	Reason string
}

// maxResolveText bounds the task id, context id and reason on-call gives.
const maxResolveText = 4096

// foundByOncall is the found_by of the dispatch_resolved event of an
// on-call resolution; the store reads it back as
// compensation.EvidenceFacts.ResolvedByPerson (sql/queries
// compensation_evidence.sql), so the task's first end cannot release.
const foundByOncall = "oncall"

// ErrRemoteAgentUnavailable: the org's agent could not be asked about a
// task, or gave no usable answer; nothing is recorded.
var ErrRemoteAgentUnavailable = errors.New("delegate: the remote agent could not be asked about the task")

// ResolveDispatch records, on behalf of an on-call principal, the remote
// task of a delegation in the dispatch_unknown condition (any other
// delegation is a conflict, dispatch_not_unknown). A person's word names
// the task but does not prove it: before anything is recorded the org's
// agent is asked for the task (GetTask, with its history), and it is
// taken only when the agent shows it is the delegation's
// (dispatchTaskProof: in the delegation's own context, or with the
// dispatch's messageId in its history). A task the agent shows to be
// another's is refused (remote_task_conflict) and recorded as a
// remote_task_conflict event; a task the agent does not know is refused
// (remote_task_unknown); an agent that cannot be asked is
// ErrRemoteAgentUnavailable; a task another delegation at the org records,
// of any tenant, is refused (remote_task_taken). Otherwise, in one
// transaction, the condition ends, the task id and the context the agent
// showed are set, a dispatch_resolved event records who, why and the
// proof, and the task is observed at once, and canceled if the
// orchestrator asked for that meanwhile. Nothing here moves the hold or
// the obligation, and the task's first end cannot release the hold
// (compensation's ResolvedByPerson fact): no single person releases money
// by resolving.
func (o *Orchestrator) ResolveDispatch(ctx context.Context, p ledger.Principal, id uuid.UUID, in ResolveDispatchInput) (ledger.Delegation, error) {
	if err := ledger.Authorize(p, ledger.ActionResolveDispatch); err != nil {
		return ledger.Delegation{}, err
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
	d, err := o.store.Delegation(ctx, id)
	if err != nil {
		return ledger.Delegation{}, err
	}
	if err := dispatchIsUnknown(d); err != nil {
		return ledger.Delegation{}, err
	}
	org, err := o.store.Org(ctx, d.OrgID)
	if err != nil {
		return ledger.Delegation{}, err
	}
	if o.fetchTask == nil {
		return ledger.Delegation{}, fmt.Errorf("%w: no A2A client is configured", ErrRemoteAgentUnavailable)
	}
	task, iface, err := o.fetchTask(ctx, org, in.TaskID)
	switch {
	case errors.Is(err, a2a.ErrTaskNotFound):
		return ledger.Delegation{}, ledger.Conflict("remote_task_unknown",
			"org %s's agent does not know task %q (TaskNotFoundError); nothing was recorded", d.OrgID, in.TaskID)
	case err != nil:
		return ledger.Delegation{}, fmt.Errorf("%w: %w", ErrRemoteAgentUnavailable, err)
	}
	proof := dispatchTaskProof(d, task)
	if task.ID != in.TaskID || proof == "" {
		return ledger.Delegation{}, o.refuseNotDelegations(ctx, p, d, in.TaskID, task)
	}
	if in.ContextID != "" && in.ContextID != task.ContextID {
		return ledger.Delegation{}, ledger.Invalid("context_id", "org %s's agent shows task %q in context %q", d.OrgID, task.ID, text.Truncate(task.ContextID, 256))
	}
	var out ledger.Delegation
	err = o.store.InTx(ctx, func(tx OrchestratorTx) error {
		now := o.now()
		d, err := tx.DelegationForUpdate(ctx, id)
		if err != nil {
			return err
		}
		if err := dispatchIsUnknown(d); err != nil {
			return err
		}
		if taken, err := remoteTaskTaken(ctx, tx, d, task.ID, "oncall"); err != nil {
			return err
		} else if taken != nil {
			if taken.OtherDelegationID != "" {
				return ledger.Conflict("remote_task_taken", "org %s's task %q is recorded on another delegation of this tenant", d.OrgID, task.ID)
			}
			return ledger.Conflict("remote_task_taken", "org %s's task %q is recorded on a delegation of another tenant", d.OrgID, task.ID)
		}
		d.Remote.ProtocolVersion = iface.ProtocolVersion
		d, err = resolveDispatchTx(ctx, tx, d, task, ledger.DispatchResolvedData{
			Reason: in.Reason, FoundBy: foundByOncall, ProvenBy: proof,
		}, compensation.Stamp{Actor: p.Actor(), At: now})
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

// dispatchIsUnknown refuses (dispatch_not_unknown) a delegation that is
// not waiting for its remote task to be named: it has one, or its
// obligation is no longer held.
func dispatchIsUnknown(d ledger.Delegation) error {
	if d.Remote.TaskID != "" || d.ObligationState != ledger.ObligationHeld {
		return ledger.Conflict("dispatch_not_unknown", "the delegation's dispatch is not unknown (task %q, obligation %s)", d.Remote.TaskID, d.ObligationState)
	}
	return nil
}

// refuseNotDelegations records, on d, that on-call named taskID and the
// org's agent answered with task, which is not d's (another context, no
// dispatch messageId in its history, or another task altogether): a
// remote_task_conflict event by the on-call principal. It returns the
// conflict (remote_task_conflict) ResolveDispatch answers with.
func (o *Orchestrator) refuseNotDelegations(ctx context.Context, p ledger.Principal, d ledger.Delegation, taskID string, task a2a.Task) error {
	err := o.store.InTx(ctx, func(tx OrchestratorTx) error {
		cur, err := tx.DelegationForUpdate(ctx, d.ID)
		if err != nil {
			return err
		}
		_, err = ledger.Record(ctx, tx, cur, ledger.Change{Type: ledger.EventTypeRemoteTaskConflict, Actor: p.Actor(), At: o.now(), Data: ledger.RemoteTaskConflictData{
			Source: "oncall", Reason: "not_the_delegations", ReportedTaskID: text.Truncate(taskID, 256),
			AnsweredTaskID: ptr(text.Truncate(task.ID, 256)), AnsweredContextID: ptr(text.Truncate(task.ContextID, 256)),
			MessageID: DispatchMessageID(d.ID),
		}})
		return err
	})
	if err != nil {
		return err
	}
	return ledger.Conflict("remote_task_conflict",
		"org %s's agent shows task %q in context %q without the dispatch's messageId %s in its history: it is not this delegation's task; recorded as a remote_task_conflict, nothing else changed",
		d.OrgID, taskID, text.Truncate(task.ContextID, 256), DispatchMessageID(d.ID))
}

// dispatchTaskProof says how the org's agent shows that t, as it answered
// GetTask or ListTasks, is the task d's dispatch created: "message_id" when
// its history holds d's dispatch messageId, "context" when it is in d's own
// context (DispatchContextID: only Quittance sends there, and before a task
// is recorded only the dispatch), "" when it shows neither. A context d
// continues from another delegation proves nothing: that delegation's
// tasks are in it too. Every way of ending the dispatch_unknown condition
// (on-call, a lookup, a push) takes a task only with a proof.
func dispatchTaskProof(d ledger.Delegation, t a2a.Task) string {
	if purpose, ours := taskPurpose(d, t, true); !ours || purpose != PurposeDispatch {
		return ""
	}
	if slices.Contains(t.HistoryMessageIDs, DispatchMessageID(d.ID)) {
		return "message_id"
	}
	return "context"
}

// remoteTaskTaken checks, in tx with d locked, whether another delegation at
// d's org records taskID — of d's tenant, or of any other: a task id
// recorded by another tenant is never taken to resolve a dispatch, since
// which delegation the task is for is then not known. It returns nil when
// the task is free, else the data of the remote_task_conflict event that
// says so (other_delegation_id only for d's own tenant: another tenant's
// delegation is none of d's tenant's business), with source.
func remoteTaskTaken(ctx context.Context, tx OrchestratorTx, d ledger.Delegation, taskID, source string) (*ledger.RemoteTaskConflictData, error) {
	other, err := tx.RemoteTaskHolder(ctx, d, taskID)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	data := &ledger.RemoteTaskConflictData{ReportedTaskID: text.Truncate(taskID, 256), Source: source}
	if other.Tenant == d.Tenant {
		data.OtherDelegationID = other.ID.String()
	} else {
		data.RecordedBy = "another_tenant"
	}
	return data, nil
}

// resolveDispatchTx records, in tx with d locked, task as the remote task
// of d, a delegation in the dispatch_unknown condition: the condition
// ends, a dispatch_resolved event (with data, stamped by st) records it,
// the task is observed at once and canceled if the orchestrator asked for
// that meanwhile. On-call's ResolveDispatch, a confirmed push and the
// dispatch job's lookup all end the condition so. Nothing moves the hold
// or the obligation.
func resolveDispatchTx(ctx context.Context, tx OrchestratorTx, d ledger.Delegation, task a2a.Task, data ledger.DispatchResolvedData, st compensation.Stamp) (ledger.Delegation, error) {
	taskID, contextID, actor, now := task.ID, task.ContextID, st.Actor, st.At
	cleared, err := tx.ClearDispatchUnknown(ctx, d.ID)
	if err != nil {
		return ledger.Delegation{}, err
	}
	if !cleared {
		return ledger.Delegation{}, ledger.Conflict("dispatch_not_unknown", "the delegation is not in the dispatch_unknown condition: its dispatch may still be under way")
	}
	d.Remote.TaskID, d.Remote.ContextID = taskID, contextID
	data.TaskID, data.ContextID, data.MessageID = taskID, contextID, DispatchMessageID(d.ID)
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
// of d with the tasks a lookup found: of those the agent shows are d's
// dispatch tasks (dispatchTaskProof), the oldest (ListTasks lists the
// newest first) becomes the delegation's task, as if the dispatch had
// answered with it (dispatch_resolved, found_by list_tasks); every other
// task found is an extra task, recorded to be canceled and compensated. A
// task recorded on another delegation at the org, of any tenant, resolves
// nothing: it is recorded as a conflict and the condition stays for
// on-call.
func (w *Worker) resolveFound(ctx context.Context, tx Tx, d ledger.Delegation, found []a2a.Task, iface a2a.AgentInterface, now time.Time) error {
	i := len(found) - 1
	for i >= 0 && dispatchTaskProof(d, found[i]) == "" {
		i--
	}
	if i < 0 {
		return nil
	}
	primary := found[i]
	if taken, err := remoteTaskTaken(ctx, tx, d, primary.ID, "list_tasks"); err != nil {
		return err
	} else if taken != nil {
		return record(ctx, tx, d, ledger.EventTypeRemoteTaskConflict, now, *taken)
	}
	d.Remote.ProtocolVersion = iface.ProtocolVersion
	d, err := resolveDispatchTx(ctx, tx, d, primary, ledger.DispatchResolvedData{
		FoundBy: "list_tasks", Reason: "found by ListTasks on the delegation's context", TasksFound: len(found),
		ProvenBy: dispatchTaskProof(d, primary),
	}, compensation.Stamp{Actor: workerActor, At: now})
	if err != nil {
		return err
	}
	if err := tx.MarkObserved(ctx, d.ID, now); err != nil {
		return err
	}
	_, err = w.recordExtraTasks(ctx, tx, d, slices.Delete(slices.Clone(found), i, i+1), "list_tasks", now)
	return err
}
