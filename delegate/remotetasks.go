package delegate

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/internal/text"
	"github.com/quittance/quittance/ledger"
)

// Every remote task accounted for. A dispatch carries a context of
// Quittance's own choosing (DispatchContextID), so every task an agent
// created for a delegation can be found again: by ListTasks on that context
// where the agent lists tasks, and by any push or stream event that names
// the context. A task found that is not the one the delegation tracks (a
// second task an agent created on a resend with the same messageId, for the
// dispatch or for a compensation request) is an extra task: recorded on the
// delegation (remote_task_found), canceled, and named in the compensation
// request. Until each is accounted for — terminal, and named in a
// compensation request — the obligation does not close. That rule is
// compensation.Service.ApplyEvidence's, for every channel: a terminal
// status of the delegation's own task calls for compensation, and
// compensation evidence is held as received until then. The workers only
// report the facts (a task found, its status, a cancel sent, a request
// naming it) and trigger compensation.Service.ApplyHeldEvidence when they
// change.

// RemoteTask is an extra remote task of a delegation; the rule that each
// is accounted for before compensation evidence discharges the obligation
// is compensation's (compensation.RemoteTask.Accounted, ApplyEvidence).
type RemoteTask = compensation.RemoteTask

// RemoteTaskPurpose says which message created an extra remote task.
type RemoteTaskPurpose = compensation.RemoteTaskPurpose

// The purposes of extra remote tasks.
const (
	PurposeDispatch     = compensation.PurposeDispatch
	PurposeCompensation = compensation.PurposeCompensation
)

// DispatchContextID is the A2A contextId Quittance sets on the dispatch of
// delegation id (unless the delegation continues another's context). It is
// derived from the id alone, so every attempt carries it and every task
// created for the delegation can be looked up by it.
func DispatchContextID(id uuid.UUID) string { return "quittance-context-" + id.String() }

// maxListPages bounds the ListTasks pages read in one lookup.
const maxListPages = 10

// lookupTasks lists, with ListTasks, the tasks of contextID that d's
// messages created. supported is false when the agent does not list tasks
// (method not found, unsupported operation): nothing is learnt then. A task
// counts as d's when its history names d's dispatch or compensation
// messageId or, in d's own context before any compensation request was
// sent, whatever its history says.
func lookupTasks(ctx context.Context, client *a2a.Client, d ledger.Delegation, contextID string, tr Tracking) (tasks []a2a.Task, supported bool, err error) {
	anyInContext := contextID == DispatchContextID(d.ID) && tr.CompensationRound == 0 && tr.CompensationTaskID == ""
	token := ""
	for range maxListPages {
		page, err := client.ListTasks(ctx, a2a.ListTasksRequest{ContextID: contextID, PageSize: 100, PageToken: token, HistoryLength: 10})
		if a2a.Unsupported(err) {
			return nil, false, nil
		}
		if err != nil {
			return nil, true, err
		}
		for _, t := range page.Tasks {
			if _, ok := taskPurpose(d, t, anyInContext); ok {
				tasks = append(tasks, t)
			}
		}
		if page.NextPageToken == "" || page.NextPageToken == token {
			break
		}
		token = page.NextPageToken
	}
	return tasks, true, nil
}

// taskPurpose says which of d's messages created t, if any. An agent that
// returns no history is taken at its context: a task in d's own context is
// d's dispatch task when anyInContext.
func taskPurpose(d ledger.Delegation, t a2a.Task, anyInContext bool) (RemoteTaskPurpose, bool) {
	compPrefix := strings.TrimSuffix(compensation.RequestMessageID(d.ID, 0), "0")
	for _, m := range t.HistoryMessageIDs {
		switch {
		case m == DispatchMessageID(d.ID):
			return PurposeDispatch, true
		case strings.HasPrefix(m, compPrefix), compensation.IsExtraRequestMessageID(m):
			return PurposeCompensation, true
		}
	}
	if anyInContext && t.ContextID == DispatchContextID(d.ID) {
		// Only Quittance sends in d's own context, and before any
		// compensation request only the dispatch: the safe side is to
		// count the task as d's.
		return PurposeDispatch, true
	}
	return "", false
}

// recordExtraTasks records, in tx with d locked, each task of tasks that is
// neither d's own task nor the compensation task followed: a
// remote_task_found event for a new one, its status for every one. A new
// one of a settled delegation is asked about at once
// (compensation.RequireLateExtraTaskCompensation). It returns how many
// were new.
func (w *Worker) recordExtraTasks(ctx context.Context, tx Tx, d ledger.Delegation, tasks []a2a.Task, foundBy string, now time.Time) (int, error) {
	tr, err := tx.Tracking(ctx, d.ID)
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return 0, err
	}
	known, err := tx.ExtraTasks().RemoteTasks(ctx, d.ID)
	if err != nil {
		return 0, err
	}
	var added []RemoteTask
	for _, t := range tasks {
		if t.ID == "" || t.ID == d.Remote.TaskID || t.ID == tr.CompensationTaskID {
			continue
		}
		purpose, _ := taskPurpose(d, t, true)
		status := taskStatus(t.Status.State)
		i := slices.IndexFunc(known, func(k RemoteTask) bool { return k.TaskID == t.ID })
		if i >= 0 {
			if err := w.noteExtraStatus(ctx, tx, d, known[i], extraStatus{status: status, source: foundBy}, now); err != nil {
				return 0, err
			}
			continue
		}
		rt := RemoteTask{TaskID: text.Truncate(t.ID, 1024), Purpose: purpose, ContextID: text.Truncate(t.ContextID, 1024), FoundBy: foundBy, Status: status}
		inserted, err := tx.ExtraTasks().RecordRemoteTask(ctx, d.ID, rt, now)
		if err != nil {
			return 0, err
		}
		if !inserted {
			continue
		}
		added = append(added, rt)
		known = append(known, rt)
		if err := record(ctx, tx, d, ledger.EventTypeRemoteTaskFound, now, ledger.RemoteTaskFoundData{
			TaskID: rt.TaskID, ContextID: rt.ContextID, Purpose: string(purpose), FoundBy: foundBy,
			State: string(status), TrackedTaskID: d.Remote.TaskID, MessageID: DispatchMessageID(d.ID),
		}); err != nil {
			return 0, err
		}
	}
	// Found after the delegation settled: asked about as if found before.
	if err := compensation.RequireLateExtraTaskCompensation(ctx, tx.Receipts(), d, added, workerActor, now); err != nil {
		return 0, err
	}
	return len(added), nil
}

// extraStatus is a status of an extra task, as a call (source) saw it.
type extraStatus struct {
	status ledger.TaskStatus
	source string
}

// noteExtraStatus records a newly seen status of extra task rt, with a
// remote_task_ended event when it is terminal. A terminal status is kept.
func (w *Worker) noteExtraStatus(ctx context.Context, tx Tx, d ledger.Delegation, rt RemoteTask, seen extraStatus, now time.Time) error {
	status, source := seen.status, seen.source
	if rt.Status == status || rt.Status.Terminal() {
		return nil
	}
	if err := tx.ExtraTasks().SetRemoteTaskStatus(ctx, d.ID, rt.TaskID, status, now); err != nil {
		return err
	}
	if !status.Terminal() {
		return nil
	}
	return record(ctx, tx, d, ledger.EventTypeRemoteTaskEnded, now, ledger.RemoteTaskEndedData{
		TaskID: rt.TaskID, Purpose: string(rt.Purpose), State: string(status), Source: source,
	})
}

// extraTaskIDs lists the ids of d's extra tasks.
func extraTaskIDs(tasks []RemoteTask) []string {
	ids := make([]string, 0, len(tasks))
	for _, t := range tasks {
		ids = append(ids, t.TaskID)
	}
	return ids
}

// accountExtraTasks cancels each extra task of d that is not terminal yet
// and records what the agent answers (the status of a cancel reply, or of a
// GetTask when the agent refuses the cancel). Failures are logged: the next
// observe or compensation job tries again. It returns the extra tasks as
// recorded afterwards.
func (w *Worker) accountExtraTasks(ctx context.Context, client *a2a.Client, d ledger.Delegation) ([]RemoteTask, error) {
	extras, err := w.store.RemoteTasks(ctx, d.ID)
	if err != nil || len(extras) == 0 {
		return extras, err
	}
	for _, rt := range extras {
		if rt.Status.Terminal() {
			continue
		}
		task, cerr := client.CancelTask(ctx, rt.TaskID, nil)
		if errors.Is(cerr, a2a.ErrTaskNotCancelable) {
			task, cerr = client.GetTask(ctx, rt.TaskID)
		}
		now := w.now()
		err := w.store.InTx(ctx, func(tx Tx) error {
			cur, err := tx.DelegationForUpdate(ctx, d.ID)
			if err != nil {
				return err
			}
			if err := tx.ExtraTasks().MarkRemoteTaskCancelSent(ctx, d.ID, rt.TaskID, now); err != nil {
				return err
			}
			switch {
			case cerr == nil && task.ID == rt.TaskID:
				if err := w.noteExtraStatus(ctx, tx, cur, rt, extraStatus{status: taskStatus(task.Status.State), source: "cancel"}, now); err != nil {
					return err
				}
				// The task's end may account for the last extra task:
				// evidence held back for them is applied now.
				_, _, err := w.cfg.Compensation.ApplyHeldEvidence(ctx, tx.Receipts(), cur, workerActor, now)
				return err
			case errors.Is(cerr, a2a.ErrTaskNotFound):
				// Unknown, never read as canceled: the task stays unaccounted.
				return record(ctx, tx, cur, ledger.EventTypeRemoteTaskNotFound, now, ledger.RemoteTaskNotFoundData{
					TaskID: rt.TaskID, Source: "cancel_extra_task", Error: errorText(cerr),
				})
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if cerr != nil && !errors.Is(cerr, a2a.ErrTaskNotFound) {
			w.log.WarnContext(ctx, "cancel of an extra remote task failed; retried later",
				"delegation_id", d.ID.String(), "task_id", rt.TaskID, "error", cerr)
		}
	}
	return w.store.RemoteTasks(ctx, d.ID)
}

// findExtraTasks looks d's context up with ListTasks and records every
// extra task found, then cancels those not terminal. An agent that does not
// list tasks, or a failed lookup, records nothing.
func (w *Worker) findExtraTasks(ctx context.Context, client *a2a.Client, d ledger.Delegation) error {
	tr, err := w.store.Tracking(ctx, d.ID)
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return err
	}
	contextID := d.Remote.ContextID
	if contextID == "" {
		contextID = DispatchContextID(d.ID)
	}
	tasks, supported, lerr := lookupTasks(ctx, client, d, contextID, tr)
	if lerr != nil || !supported {
		if lerr != nil {
			w.log.WarnContext(ctx, "ListTasks lookup failed", "delegation_id", d.ID.String(), "error", lerr)
		}
		return nil
	}
	if err := w.store.InTx(ctx, func(tx Tx) error {
		cur, err := tx.DelegationForUpdate(ctx, d.ID)
		if err != nil {
			return err
		}
		_, err = w.recordExtraTasks(ctx, tx, cur, tasks, "list_tasks", w.now())
		return err
	}); err != nil {
		return err
	}
	_, err = w.accountExtraTasks(ctx, client, d)
	return err
}
