package delegate

import (
	"context"
	"errors"
	"fmt"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/internal/text"
	"github.com/quittance/quittance/ledger"
)

// compensateExtraTasks is the compensation job of a settled delegation: its
// tracked task completed, and compensation found extra remote tasks of it
// that may have committed effects of their own (ledger/DESIGN.md §2.2;
// compensation/extratasks.go). Each run cancels the extra tasks not
// terminal yet, then asks the org's agent, in one request per task, to
// compensate each whose compensation is open, with the task's own
// idempotency key (compensation.ExtraTaskKey) and a messageId stable per
// round, and follows the task it answers with to its receipt — the same
// wire as the delegation's own compensation request (§4). It reports the
// facts: a receipt that JudgeReceipt accepts goes to
// compensation.ApplyExtraTaskReceipt, which resolves the task; a failed
// attempt is retried with backoff (the same messageId unless the remote
// answered definitively) until CompensationMaxAttempts, or at once for a
// not_supported receipt, when compensation.ExtraTaskRequestsExhausted
// records that no more requests are sent. The obligation and the hold never
// move.
func (w *Worker) compensateExtraTasks(ctx context.Context, j Job, d ledger.Delegation) error {
	org, err := w.store.Org(ctx, d.OrgID)
	if err != nil {
		return err
	}
	if org.IdentityRevoked() {
		return w.finish(ctx, j, "org_identity_revoked", nil)
	}
	extras, err := w.store.RemoteTasks(ctx, d.ID)
	if err != nil {
		return err
	}
	var open []RemoteTask
	for _, rt := range extras {
		if rt.Compensation.Open() && rt.Compensation.Attempts < w.cfg.CompensationMaxAttempts {
			open = append(open, rt)
		}
	}
	if len(open) == 0 {
		return w.finish(ctx, j, "not_pending", nil)
	}
	_, client, _, err := w.agent(ctx, org)
	if err != nil {
		return w.retryAt(ctx, j, w.now().Add(w.backoff.Wait(j.Attempt)), "agent unavailable: "+errorText(err), nil)
	}
	// An extra task still running may yet commit more: ask it to stop.
	if _, err := w.accountExtraTasks(ctx, client, d); err != nil {
		return err
	}
	again := false
	for _, rt := range open {
		more, err := w.compensateExtraTask(ctx, client, d, org, rt)
		if err != nil {
			return err
		}
		again = again || more
	}
	if !again {
		return w.finish(ctx, j, "extra_tasks_done", nil)
	}
	return w.retryAt(ctx, j, w.now().Add(w.cfg.CompensationPollInterval), "", nil)
}

// compensateExtraTask makes one compensation attempt about extra task rt of
// settled delegation d, or looks again at the task answering an earlier
// one. more says the job should run again for it.
func (w *Worker) compensateExtraTask(ctx context.Context, client *a2a.Client, d ledger.Delegation, org ledger.Org, rt RemoteTask) (more bool, err error) {
	c := rt.Compensation
	c.Round = max(c.Round, 1)
	msgID := compensation.ExtraRequestMessageID(d.ID, rt.TaskID, c.Round)
	var (
		task  *a2a.Task
		reply *a2a.Message
		sent  bool
	)
	if c.TaskID != "" {
		t, err := client.GetTask(ctx, c.TaskID)
		switch {
		case err != nil && a2a.Retryable(err):
			return true, nil
		case err != nil:
			return w.extraFailed(ctx, d, rt.TaskID, c, "fetch compensation task: "+errorText(err), outcomeError, false, true, "")
		}
		task = &t
	} else {
		req := compensation.ExtraTaskRequest(d, rt.TaskID)
		meta, err := w.requestMetadata(d, req, msgID)
		if err != nil {
			return false, err
		}
		res, err := client.SendMessage(ctx, a2a.SendRequest{
			Message: a2a.Message{
				MessageID: msgID, ContextID: d.Remote.ContextID, Role: a2a.RoleUser,
				Parts:            []a2a.Part{{Data: req.Data(), MediaType: "application/json"}},
				Metadata:         meta,
				Extensions:       []string{compensation.ExtensionURI},
				ReferenceTaskIDs: []string{rt.TaskID},
			},
			ReturnImmediately: true,
			Extensions:        []string{compensation.ExtensionURI},
		})
		if err != nil {
			return w.extraFailed(ctx, d, rt.TaskID, c, "send compensation request: "+errorText(err), outcomeError, true, remoteAnswered(err), "")
		}
		sent = true
		task, reply = res.Task, res.Message
	}
	taskID := ""
	if task != nil {
		taskID = task.ID
	}
	if sent {
		c.Attempts++
	}
	keep := func() (bool, error) {
		// Still working on it: remember the task and look again later.
		c.TaskID, c.LastError = taskID, ""
		err := w.store.InTx(ctx, func(tx Tx) error {
			if _, err := tx.DelegationForUpdate(ctx, d.ID); err != nil {
				return err
			}
			return tx.ExtraTasks().SetExtraTaskCompensation(ctx, d.ID, rt.TaskID, c, w.now())
		})
		return true, err
	}
	raw, found := answerReceipt(task, reply)
	if !found {
		if task != nil && !task.Status.State.Terminal() {
			return keep()
		}
		state := "a message"
		if task != nil {
			state = string(task.Status.State)
		}
		return w.extraFailed(ctx, d, rt.TaskID, c, fmt.Sprintf("the remote answered %s without a compensation receipt", state), outcomeError, false, true, taskID)
	}
	r, err := compensation.ParseRemoteReceipt(raw)
	if err != nil {
		return w.extraFailed(ctx, d, rt.TaskID, c, text.Truncate(err.Error(), 500), outcomeError, false, true, taskID)
	}
	if r.Outcome == compensation.ReceiptPending && (reply != nil || !task.Status.State.Terminal()) {
		return keep()
	}
	now := w.now()
	verdict, _, err := w.judgeReceipt(ctx, compensation.ReceiptInput{
		Delegation: d, Org: org, Receipt: r, LedgerID: w.cfg.LedgerID, Now: now,
		TaskID: rt.TaskID, IdempotencyKey: compensation.ExtraTaskKey(d, rt.TaskID),
	})
	if err != nil {
		return false, err
	}
	if verdict.Event == "" {
		problem := "receipt " + string(r.Outcome) + ": " + verdict.Problem
		if r.Reason != "" {
			problem += " (reason: " + text.Truncate(r.Reason, 500) + ")"
		}
		return w.extraFailed(ctx, d, rt.TaskID, c, problem, string(r.Outcome), false, true, taskID)
	}
	c.TaskID, c.LastError = taskID, ""
	err = w.store.InTx(ctx, func(tx Tx) error {
		cur, err := tx.DelegationForUpdate(ctx, d.ID)
		if err != nil {
			return err
		}
		if err := tx.ExtraTasks().SetExtraTaskCompensation(ctx, d.ID, rt.TaskID, c, now); err != nil {
			return err
		}
		_, err = w.cfg.Compensation.ApplyExtraTaskReceipt(ctx, tx.Receipts(), cur, rt.TaskID,
			compensation.JudgedReceipt{Receipt: r, Verdict: verdict}, compensation.Stamp{Actor: workerActor, At: now})
		return err
	})
	var ref *compensation.RefusalError
	if errors.As(err, &ref) {
		return w.extraFailed(ctx, d, rt.TaskID, c, "receipt refused: "+ref.Code, outcomeError, false, true, taskID)
	}
	return false, err
}

// extraFailed records a compensation attempt about extra task taskID that
// brought no receipt: the error, one more attempt when counted (a request
// that did not get through to a reply; an attempt that got one is counted
// already), the next round when newRound (the remote answered definitively,
// so a new messageId), and — once CompensationMaxAttempts are made, or at
// once for a not_supported receipt — an extra_task_compensation_exhausted
// event, after which no more requests are sent. more says whether the job
// should run again for the task.
func (w *Worker) extraFailed(ctx context.Context, d ledger.Delegation, taskID string, c compensation.ExtraTaskCompensation, problem, outcome string, counted, newRound bool, answerTask string) (more bool, err error) {
	problem = text.Truncate(problem, 1000)
	round := c.Round
	if counted {
		c.Attempts++
	}
	c.LastError, c.TaskID = problem, answerTask
	if newRound {
		c.Round, c.TaskID = round+1, ""
	}
	stop := c.Attempts >= w.cfg.CompensationMaxAttempts || outcome == string(compensation.ReceiptNotSupported)
	if stop {
		// No more requests: the task stays an open anomaly for on-call.
		c.Attempts = max(c.Attempts, w.cfg.CompensationMaxAttempts)
	}
	err = w.store.InTx(ctx, func(tx Tx) error {
		cur, err := tx.DelegationForUpdate(ctx, d.ID)
		if err != nil {
			return err
		}
		now := w.now()
		if err := tx.ExtraTasks().SetExtraTaskCompensation(ctx, d.ID, taskID, c, now); err != nil {
			return err
		}
		if !stop {
			return nil
		}
		return compensation.ExtraTaskRequestsExhausted(ctx, tx.Receipts(), cur, taskID, compensation.RequestFailure{
			Attempt: c.Attempts, MaxAttempts: w.cfg.CompensationMaxAttempts, Round: round,
			MessageID: compensation.ExtraRequestMessageID(d.ID, taskID, round), Outcome: outcome, Problem: problem,
		}, compensation.Stamp{Actor: workerActor, At: now})
	})
	if err == nil {
		w.log.WarnContext(ctx, "compensation request about an extra remote task failed", "delegation_id", d.ID.String(),
			"task_id", taskID, "stopped", stop, "problem", problem)
	}
	return !stop, err
}
