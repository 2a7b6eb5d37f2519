package delegate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/internal/text"
	"github.com/quittance/quittance/ledger"
)

// compensateExtraTasks is the compensation job of a settled delegation
// whose extra remote tasks may have committed effects of their own
// (ledger/DESIGN.md §2.2). Each run cancels those not terminal yet, then
// asks for the compensation of each whose compensation is open, one
// request per task with its own idempotency key, on the wire of §4. It
// reports the facts to compensation; the obligation and the hold never
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
	run := &extraRun{d: d, org: org, taskID: rt.TaskID, c: rt.Compensation}
	run.c.Round = max(run.c.Round, 1)
	run.msgID = compensation.ExtraRequestMessageID(d.ID, rt.TaskID, run.c.Round)
	var handled bool
	if run.c.TaskID != "" {
		more, handled, err = w.fetchExtraCompensationTask(ctx, client, run)
	} else {
		more, handled, err = w.sendExtraCompensationRequest(ctx, client, run)
	}
	if handled || err != nil {
		return more, err
	}
	if run.answer.sent {
		run.c.Attempts++
	}
	return w.takeExtraCompensationAnswer(ctx, run)
}

// extraRun is one compensation attempt about an extra task of a settled
// delegation: where its compensation stands, and what the attempt sent and
// got back.
type extraRun struct {
	d      ledger.Delegation
	org    ledger.Org
	taskID string
	c      compensation.ExtraTaskCompensation
	msgID  string
	answer remoteAnswer
}

// failure is a failed attempt on a definitive answer (counted already when
// sent): the next attempt starts a new round.
func (r *extraRun) failure(problem, outcome string) compensationFailure {
	return compensationFailure{problem: problem, outcome: outcome, newRound: true, taskID: r.answer.taskID()}
}

// fetchExtraCompensationTask fetches the task answering the round's
// request. handled says the attempt ended there, more whether the job
// should run again for the task.
func (w *Worker) fetchExtraCompensationTask(ctx context.Context, client *a2a.Client, run *extraRun) (more, handled bool, err error) {
	t, err := client.GetTask(ctx, run.c.TaskID)
	switch {
	case err != nil && a2a.Retryable(err):
		return true, true, nil
	case err != nil:
		more, err := w.extraFailed(ctx, run, compensationFailure{problem: "fetch compensation task: " + errorText(err), outcome: outcomeError, newRound: true})
		return more, true, err
	}
	run.answer.task = &t
	return false, false, nil
}

// sendExtraCompensationRequest sends the round's request about the extra
// task, with the task's own idempotency key. handled says the attempt
// ended there, more whether the job should run again for the task.
func (w *Worker) sendExtraCompensationRequest(ctx context.Context, client *a2a.Client, run *extraRun) (more, handled bool, err error) {
	d := run.d
	req := compensation.ExtraTaskRequest(d, run.taskID)
	send, err := CompensationRequestSend(d, req, run.msgID, []string{run.taskID}, w.cfg.Identity, w.now())
	if err != nil {
		return false, true, err
	}
	res, err := client.SendMessage(ctx, send)
	if err != nil {
		more, err := w.extraFailed(ctx, run, compensationFailure{problem: "send compensation request: " + errorText(err), outcome: outcomeError,
			counted: true, newRound: remoteAnswered(err)})
		return more, true, err
	}
	run.answer.sent = true
	run.answer.task, run.answer.reply = res.Task, res.Message
	return false, false, nil
}

// takeExtraCompensationAnswer reads the receipt in the remote's answer
// about the extra task and judges it against the task's own idempotency
// key: no receipt yet on a task still working, or a pending receipt, is
// looked at again later; an accepted receipt is applied; anything else is
// a failed attempt.
func (w *Worker) takeExtraCompensationAnswer(ctx context.Context, run *extraRun) (more bool, err error) {
	raw, found := answerReceipt(run.answer.task, run.answer.reply)
	if !found {
		if run.answer.task != nil && !run.answer.task.Status.State.Terminal() {
			return w.keepExtraCompensation(ctx, run)
		}
		state := "a message"
		if run.answer.task != nil {
			state = string(run.answer.task.Status.State)
		}
		return w.extraFailed(ctx, run, run.failure(fmt.Sprintf("the remote answered %s without a compensation receipt", state), outcomeError))
	}
	r, err := compensation.ParseRemoteReceipt(raw)
	if err != nil {
		return w.extraFailed(ctx, run, run.failure(text.Truncate(err.Error(), 500), outcomeError))
	}
	if r.Outcome == compensation.ReceiptPending && (run.answer.reply != nil || !run.answer.task.Status.State.Terminal()) {
		return w.keepExtraCompensation(ctx, run)
	}
	now := w.now()
	verdict, _, err := w.judgeReceipt(ctx, compensation.ReceiptInput{
		Delegation: run.d, Org: run.org, Receipt: r, LedgerID: w.cfg.LedgerID, Now: now,
		TaskID: run.taskID, IdempotencyKey: compensation.ExtraTaskKey(run.d, run.taskID),
	})
	if err != nil {
		return false, err
	}
	if verdict.Event == "" {
		problem := "receipt " + string(r.Outcome) + ": " + verdict.Problem
		if r.Reason != "" {
			problem += " (reason: " + text.Truncate(r.Reason, 500) + ")"
		}
		return w.extraFailed(ctx, run, run.failure(problem, string(r.Outcome)))
	}
	return w.applyExtraReceipt(ctx, run, compensation.JudgedReceipt{Receipt: r, Verdict: verdict}, now)
}

// keepExtraCompensation remembers the task answering the request, which is
// still working on it, so the job looks at it again later.
func (w *Worker) keepExtraCompensation(ctx context.Context, run *extraRun) (more bool, err error) {
	run.c.TaskID, run.c.LastError = run.answer.taskID(), ""
	err = w.store.InTx(ctx, func(tx Tx) error {
		if _, err := tx.DelegationForUpdate(ctx, run.d.ID); err != nil {
			return err
		}
		return tx.ExtraTasks().SetExtraTaskCompensation(ctx, run.d.ID, run.taskID, run.c, w.now())
	})
	return true, err
}

// applyExtraReceipt hands an accepted receipt about the extra task to
// compensation.Service.ApplyExtraTaskReceipt, which resolves the task; a
// refused receipt is a failed attempt.
func (w *Worker) applyExtraReceipt(ctx context.Context, run *extraRun, jr compensation.JudgedReceipt, now time.Time) (more bool, err error) {
	run.c.TaskID, run.c.LastError = run.answer.taskID(), ""
	err = w.store.InTx(ctx, func(tx Tx) error {
		cur, err := tx.DelegationForUpdate(ctx, run.d.ID)
		if err != nil {
			return err
		}
		if err := tx.ExtraTasks().SetExtraTaskCompensation(ctx, run.d.ID, run.taskID, run.c, now); err != nil {
			return err
		}
		_, err = w.cfg.Compensation.ApplyExtraTaskReceipt(ctx, tx.Receipts(), cur, run.taskID, jr, compensation.Stamp{Actor: workerActor, At: now})
		return err
	})
	var ref *compensation.RefusalError
	if errors.As(err, &ref) {
		return w.extraFailed(ctx, run, run.failure("receipt refused: "+ref.Code, outcomeError))
	}
	return false, err
}

// extraFailed records a compensation attempt about an extra task that
// brought no receipt: the error, one more attempt when f.counted (an
// attempt that got a reply is counted already), the next round when
// f.newRound, and — once CompensationMaxAttempts are made, or at once for
// a not_supported receipt — compensation.ExtraTaskRequestsExhausted, after
// which no more requests are sent. more says whether the job should run
// again for the task.
func (w *Worker) extraFailed(ctx context.Context, run *extraRun, f compensationFailure) (more bool, err error) {
	d, taskID, c := run.d, run.taskID, run.c
	problem := text.Truncate(f.problem, 1000)
	round := c.Round
	if f.counted {
		c.Attempts++
	}
	c.LastError, c.TaskID = problem, f.taskID
	if f.newRound {
		c.Round, c.TaskID = round+1, ""
	}
	stop := c.Attempts >= w.cfg.CompensationMaxAttempts || f.outcome == string(compensation.ReceiptNotSupported)
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
			MessageID: compensation.ExtraRequestMessageID(d.ID, taskID, round), Outcome: f.outcome, Problem: problem,
		}, compensation.Stamp{Actor: workerActor, At: now})
	})
	if err == nil {
		w.log.WarnContext(ctx, "compensation request about an extra remote task failed", "delegation_id", d.ID.String(),
			"task_id", taskID, "stopped", stop, "problem", problem)
	}
	return !stop, err
}
