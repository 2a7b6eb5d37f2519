package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/internal/text"
	"github.com/quittance/quittance/ledger"
)

// cancelWaitAttempts bounds how long a cancel waits for its delegation's
// dispatch to produce a task id.
const cancelWaitAttempts = 20

// cancel sends CancelTask for a delegation whose orchestrator asked to
// revoke it. The reply is an observation like any other: a terminal
// canceled status runs the gate (with an atomic receipt when the agent
// declares one). A TaskNotCancelableError keeps the hold and is recorded
// as cancel_refused; a TaskNotFoundError keeps the hold and is recorded as
// remote_task_not_found; timeouts and 5xx are retried with backoff. Nothing
// here ever releases a hold by itself.
func (w *Worker) cancel(ctx context.Context, j Job) error {
	d, err := w.store.Delegation(ctx, j.DelegationID)
	if err != nil {
		return err
	}
	if d.TaskStatus.Terminal() || d.ObligationState != ledger.ObligationHeld {
		return w.finish(ctx, j, "task_already_ended", nil)
	}
	if d.Remote.TaskID == "" {
		// The dispatch has not produced a task yet; wait for it.
		if j.Attempt < cancelWaitAttempts {
			return w.retryAt(ctx, j, w.now().Add(w.backoff.Wait(j.Attempt)), "waiting for the dispatch to create the remote task", nil)
		}
		return w.finish(ctx, j, "no_remote_task", func(tx Tx) error {
			return record(ctx, tx, d, ledger.EventTypeCancelFailed, w.now(), ledger.CancelFailedData{Reason: "no_remote_task", Attempt: j.Attempt})
		})
	}
	org, err := w.store.Org(ctx, d.OrgID)
	if err != nil {
		return err
	}
	card, client, iface, err := w.agent(ctx, org)
	var task a2a.Task
	if err == nil {
		exts, meta, merr := w.cancelExtensions(d, card)
		if merr != nil {
			return merr
		}
		task, err = client.CancelTaskWithMetadata(ctx, d.Remote.TaskID, exts, meta)
	}
	return w.takeCancelAnswer(ctx, j, d, taskAnswer{org: org, card: card, task: task, source: "cancel", binding: iface.Binding}, err)
}

// cancelExtensions is CancelExtensions with the worker's identity and clock.
func (w *Worker) cancelExtensions(d ledger.Delegation, card a2a.AgentCard) ([]string, json.RawMessage, error) {
	return CancelExtensions(d, card, w.cfg.Identity, w.now())
}

// CancelExtensions are the extensions and metadata of d's cancel to the
// agent of card: the compensation extension when the card declares it,
// and, for an agent that compensates with the cancel (atomicCancel), the
// compensation request (reason cancel_requested), signed by id when not
// nil (compensation/extension/v1/README.md, "Atomic cancel").
func CancelExtensions(d ledger.Delegation, card a2a.AgentCard, id *jose.Identity, now time.Time) ([]string, json.RawMessage, error) {
	var (
		exts []string
		meta json.RawMessage
	)
	declared, atomic := compensationExtension(card)
	if declared {
		exts = []string{compensation.ExtensionURI}
	}
	if atomic {
		req := compensation.CompensationRequest{TaskID: d.Remote.TaskID, IdempotencyKey: ledger.CompensationKey(d), Reason: "cancel_requested"}
		var err error
		if meta, err = RequestMetadata(d, req, "", id, now); err != nil {
			return nil, nil, err
		}
	}
	return exts, meta, nil
}

// takeCancelAnswer records what the agent answered d's cancel with: the
// task it returned (err nil), or the error.
func (w *Worker) takeCancelAnswer(ctx context.Context, j Job, d ledger.Delegation, answer taskAnswer, err error) error {
	task := answer.task
	switch {
	case err == nil && task.ID != d.Remote.TaskID:
		return w.finish(ctx, j, "task_mismatch", func(tx Tx) error {
			return record(ctx, tx, d, ledger.EventTypeRemoteTaskConflict, w.now(), ledger.RemoteTaskConflictData{
				RecordedTaskID: d.Remote.TaskID, ReportedTaskID: text.Truncate(task.ID, 256), Source: "cancel",
			})
		})
	case err == nil:
		// Before the transaction: a receipt in the reply may make the
		// org's JWKS URL be fetched.
		if answer.org, err = w.orgForAtomicReceipt(ctx, d, answer.org, answer.card, task); err != nil {
			return err
		}
		return w.finish(ctx, j, "cancel_answered", func(tx Tx) error {
			cur, err := tx.DelegationForUpdate(ctx, d.ID)
			if err != nil {
				return err
			}
			return w.recordTaskAndReceipt(ctx, tx, cur, answer, w.now())
		})
	case errors.Is(err, a2a.ErrTaskNotCancelable):
		// The remote refuses: the task goes on and the hold stays. Fetch
		// the task too, in case it has meanwhile ended.
		return w.finish(ctx, j, "not_cancelable", func(tx Tx) error {
			now := w.now()
			if err := record(ctx, tx, d, ledger.EventTypeCancelRefused, now, ledger.CancelRefusedData{
				TaskID: d.Remote.TaskID, Error: errorText(err), Binding: answer.binding,
			}); err != nil {
				return err
			}
			return enqueueObserve(ctx, tx, d.ID, "cancel_refused", now)
		})
	case errors.Is(err, a2a.ErrTaskNotFound):
		// The agent does not know a task it created (it may have purged
		// it): recorded on every cancel, never read as canceled or
		// rejected; the hold stays.
		return w.finish(ctx, j, "task_not_found", func(tx Tx) error {
			return taskNotFound(ctx, tx, d, notFoundAnswer{source: "cancel", cause: err, attempt: j.Attempt, always: true, binding: answer.binding}, w.now())
		})
	case a2a.Retryable(err):
		return w.retryAt(ctx, j, w.now().Add(w.backoff.Wait(j.Attempt)), errorText(err), nil)
	}
	return w.finish(ctx, j, "cancel_failed", func(tx Tx) error {
		return record(ctx, tx, d, ledger.EventTypeCancelFailed, w.now(), ledger.CancelFailedData{
			TaskID: d.Remote.TaskID, Error: errorText(err), Attempt: j.Attempt, Binding: answer.binding,
		})
	})
}
