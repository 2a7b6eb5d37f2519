package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/internal/text"
	"github.com/quittance/quittance/ledger"
)

// compensationPending reports whether the obligation is still waiting for
// compensation evidence that an A2A request can bring.
func compensationPending(s ledger.ObligationState) bool {
	return s == ledger.ObligationRevocationPendingCompensation || s == ledger.ObligationCompensationUnconfirmed
}

// compensate asks the org's agent to compensate a delegation's task
// (ledger/DESIGN.md §4) and follows the task it answers with to its
// compensation-receipt artifact. It reports what happened and decides
// nothing about the obligation: an accepted receipt goes to
// compensation.Service.ApplyEvidence with the round it answers; a pending
// receipt is observed again; anything else is a failed attempt for
// compensation.Service.RequestFailed. Never a release.
func (w *Worker) compensate(ctx context.Context, j Job) error {
	d, err := w.store.Delegation(ctx, j.DelegationID)
	if err != nil {
		return err
	}
	if d.ObligationState == ledger.ObligationSettled {
		// The tracked task completed; its extra tasks may need
		// compensation of their own (extracompensate.go).
		return w.compensateExtraTasks(ctx, j, d)
	}
	if !compensationPending(d.ObligationState) || d.Remote.TaskID == "" {
		return w.finish(ctx, j, "not_pending", nil)
	}
	org, err := w.store.Org(ctx, d.OrgID)
	if err != nil {
		return err
	}
	if org.IdentityRevoked() {
		return w.finish(ctx, j, "org_identity_revoked", nil)
	}
	tr, err := w.store.Tracking(ctx, d.ID)
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return err
	}
	run := &compensationRun{j: j, d: d, org: org, round: max(tr.CompensationRound, 1)}
	run.msgID = compensation.RequestMessageID(d.ID, run.round)
	_, client, iface, err := w.agent(ctx, org)
	run.binding = iface.Binding
	if err != nil {
		return w.compensationFailed(ctx, j, run.round, compensationFailure{problem: "agent unavailable: " + errorText(err),
			outcome: outcomeError, counted: true, taskID: tr.CompensationTaskID})
	}
	var handled bool
	if tr.CompensationTaskID != "" {
		handled, err = w.fetchCompensationTask(ctx, client, run, tr.CompensationTaskID)
	} else {
		handled, err = w.sendCompensationRequest(ctx, client, run)
	}
	if handled || err != nil {
		return err
	}
	return w.takeCompensationAnswer(ctx, run)
}

// compensationRun is one run of a compensation request job: the round it
// works on, and what it sent and got back.
type compensationRun struct {
	j     Job
	d     ledger.Delegation
	org   ledger.Org
	round int
	msgID string
	// named are the extra tasks the request names.
	named []string
	// binding is the protocol binding the run calls the agent over.
	binding string
	remoteAnswer
}

// remoteAnswer is what one compensation attempt sent and got back: sent
// says it sent a request (rather than fetching the task answering an
// earlier one); task and reply are the remote's answer, a task or a
// message.
type remoteAnswer struct {
	sent  bool
	task  *a2a.Task
	reply *a2a.Message
}

// taskID is the id of the task answering the request, "" for a message.
func (a remoteAnswer) taskID() string {
	if a.task == nil {
		return ""
	}
	return a.task.ID
}

// failure is a failed attempt of this run on a definitive answer: the next
// attempt starts a new round.
func (r *compensationRun) failure(problem, outcome string) compensationFailure {
	return compensationFailure{problem: problem, outcome: outcome, counted: r.sent, newRound: true, taskID: r.taskID()}
}

// fetchCompensationTask fetches the task answering the round's request,
// asking every extra task not terminal yet to cancel again first: its end
// may be what the obligation waits for. handled says the job was finished
// or rescheduled already.
func (w *Worker) fetchCompensationTask(ctx context.Context, client *a2a.Client, run *compensationRun, taskID string) (handled bool, err error) {
	if _, err := w.accountExtraTasks(ctx, client, run.d); err != nil {
		return false, err
	}
	t, err := client.GetTask(ctx, taskID)
	switch {
	case err != nil && a2a.Retryable(err):
		return true, w.retryAt(ctx, run.j, w.now().Add(w.compensationPollDelay(run.d)), errorText(err), nil)
	case err != nil:
		return true, w.compensationFailed(ctx, run.j, run.round, compensationFailure{problem: "fetch compensation task: " + errorText(err),
			outcome: outcomeError, newRound: true})
	}
	run.task = &t
	return false, nil
}

// sendCompensationRequest sends the round's request, naming every task the
// agent created for the delegation: the context is looked up for extra
// tasks, and those not terminal are canceled first. handled says the job
// was finished or rescheduled already.
func (w *Worker) sendCompensationRequest(ctx context.Context, client *a2a.Client, run *compensationRun) (handled bool, err error) {
	d := run.d
	if err := w.findExtraTasks(ctx, client, d); err != nil {
		return false, err
	}
	extras, err := w.accountExtraTasks(ctx, client, d)
	if err != nil {
		return false, err
	}
	req := compensation.RequestFor(d)
	req.ExtraTaskIDs = extraTaskIDs(extras)
	run.named = req.ExtraTaskIDs
	send, err := CompensationRequestSend(d, req, run.msgID, append([]string{d.Remote.TaskID}, req.ExtraTaskIDs...), w.cfg.Identity, w.now())
	if err != nil {
		return false, err
	}
	res, err := client.SendMessage(ctx, send)
	if err != nil {
		// Only a JSON-RPC error answering this request proves the
		// remote saw it and starts a new round. Anything else — a
		// timeout, a malformed or mismatched reply, a body over the
		// cap, an HTTP 4xx — resends the same messageId.
		return true, w.compensationFailed(ctx, run.j, run.round, compensationFailure{problem: "send compensation request: " + errorText(err),
			outcome: outcomeError, counted: true, newRound: remoteAnswered(err)})
	}
	run.sent = true
	run.task, run.reply = res.Task, res.Message
	return false, nil
}

// takeCompensationAnswer reads the compensation receipt in the remote's
// answer and judges it: no receipt yet on a task still working, or a
// pending receipt, is looked at again later; a receipt JudgeReceipt
// accepts is applied; anything else is a failed attempt.
func (w *Worker) takeCompensationAnswer(ctx context.Context, run *compensationRun) error {
	receipt, found := answerReceipt(run.task, run.reply)
	if !found {
		if run.task != nil && !run.task.Status.State.Terminal() {
			return w.awaitCompensation(ctx, run)
		}
		state := "a message"
		if run.task != nil {
			state = string(run.task.Status.State)
		}
		return w.compensationFailed(ctx, run.j, run.round, run.failure(fmt.Sprintf("the remote answered %s without a compensation receipt", state), outcomeError))
	}
	r, err := compensation.ParseRemoteReceipt(receipt)
	if err != nil {
		return w.compensationFailed(ctx, run.j, run.round, run.failure(text.Truncate(err.Error(), 500), outcomeError))
	}
	if r.Outcome == compensation.ReceiptPending && (run.reply != nil || !run.task.Status.State.Terminal()) {
		// The remote is working on the reversal: not evidence and not a
		// failure. The compensation task is observed until it yields a
		// final receipt (a pending answer in a message is asked again with
		// the same messageId); no new round starts.
		return w.awaitCompensation(ctx, run)
	}
	verdict, _, err := w.judgeReceipt(ctx, compensation.ReceiptInput{
		Delegation: run.d, Org: run.org, Receipt: r, LedgerID: w.cfg.LedgerID, Now: w.now(),
	})
	if err != nil {
		return err
	}
	if verdict.Event == "" {
		problem := "receipt " + string(r.Outcome) + ": " + verdict.Problem
		if r.Reason != "" {
			problem += " (reason: " + text.Truncate(r.Reason, 500) + ")"
		}
		return w.compensationFailed(ctx, run.j, run.round, run.failure(problem, string(r.Outcome)))
	}
	return w.applyCompensationReceipt(ctx, run, r, verdict)
}

// awaitCompensation records the request this run sent, if any, and looks
// at the compensation task again later.
func (w *Worker) awaitCompensation(ctx context.Context, run *compensationRun) error {
	return w.retryAt(ctx, run.j, w.now().Add(w.compensationPollDelay(run.d)), "", func(tx Tx) error {
		if !run.sent {
			return nil
		}
		_, err := w.recordRequested(ctx, tx, run)
		return err
	})
}

// applyCompensationReceipt applies an accepted receipt as evidence of the
// round (compensation.Service.ApplyEvidence). Evidence held back while
// extra remote tasks are not accounted for keeps the job waiting, with a
// new round when this one did not name one of them; a refused receipt is a
// failed attempt.
func (w *Worker) applyCompensationReceipt(ctx context.Context, run *compensationRun, r compensation.RemoteReceipt, verdict compensation.ReceiptVerdict) error {
	d, j, round := run.d, run.j, run.round
	outcome := "compensated"
	if verdict.Event == ledger.EventDeclarationVerified {
		outcome = "no_effects_declared"
	}
	ev := compensation.ReceiptEvidence(r, verdict, ledger.ChannelA2AReceipt, workerActor)
	ev.Round = round
	err := w.store.InTx(ctx, func(tx Tx) error {
		// recordRequested locks the delegation itself.
		var cur ledger.Delegation
		var err error
		if run.sent {
			cur, err = w.recordRequested(ctx, tx, run)
		} else {
			cur, err = tx.DelegationForUpdate(ctx, d.ID)
		}
		if err != nil {
			return err
		}
		res, err := w.cfg.Compensation.ApplyEvidence(ctx, tx.Receipts(), cur, ev, w.now())
		if err != nil {
			return err
		}
		switch res.Outcome {
		case compensation.OutcomeReceived, compensation.OutcomeUncovered:
			// compensation holds the receipt back: extra remote tasks of
			// the delegation are not all accounted for. The worker keeps
			// canceling them and, when this round did not name one, sends
			// a new round that does.
			if len(res.Unnamed) > 0 {
				if err := tx.SetCompensationTask(ctx, d.ID, "", round+1, w.now()); err != nil {
					return err
				}
			}
			return tx.Outbox().RetryJob(ctx, j, w.now().Add(w.compensationPollDelay(d)), "waiting for extra remote tasks to be accounted for", w.now())
		}
		return tx.Outbox().FinishJob(ctx, j, outcome, w.now())
	})
	var ref *compensation.RefusalError
	if errors.As(err, &ref) {
		if ref.Code == compensation.CodeEvidenceConflict {
			// Kept on the chain: the org said something else before.
			ev := compensation.ReceiptEvidence(r, verdict, ledger.ChannelA2AReceipt, workerActor)
			if rerr := w.store.InTx(ctx, func(tx Tx) error {
				return compensation.RecordRefusedEvidence(ctx, tx, d, ev, ref, w.now())
			}); rerr != nil {
				return rerr
			}
		}
		return w.compensationFailed(ctx, j, round, run.failure("receipt refused: "+ref.Code, outcomeError))
	}
	return err
}

// judgeReceipt is compensation.JudgeReceipt, but for a key the org may
// have just rotated in: when the receipt's jws is refused because no key of
// the org in force has its kid (verdict.UnknownKid) and the org serves its
// keys at a JWKS URL, the URL is fetched at once (Config.RefreshOrgKeysForKid,
// at most once per org per QUITTANCE_ORG_JWKS_UNKNOWN_KID_INTERVAL) and,
// when the kid came into force, the org is read again and the receipt
// judged once more. It returns the verdict and the org it was judged
// against. It may make a network call: never call it with a transaction
// open.
func (w *Worker) judgeReceipt(ctx context.Context, in compensation.ReceiptInput) (compensation.ReceiptVerdict, ledger.Org, error) {
	v := compensation.JudgeReceipt(in)
	if v.UnknownKid == "" || in.Org.JWKSURL == "" || w.cfg.RefreshOrgKeysForKid == nil ||
		!w.cfg.RefreshOrgKeysForKid(ctx, in.Org.ID, v.UnknownKid) {
		return v, in.Org, nil
	}
	org, err := w.store.Org(ctx, in.Org.ID)
	if err != nil {
		return compensation.ReceiptVerdict{}, ledger.Org{}, fmt.Errorf("load org %s: %w", in.Org.ID, err)
	}
	in.Org = org
	return compensation.JudgeReceipt(in), org, nil
}

// answerReceipt finds the compensation receipt in the remote's answer to
// a compensation request: the task's compensation-receipt artifact, or a
// data part of a message reply that parses as a receipt.
func answerReceipt(task *a2a.Task, reply *a2a.Message) ([]byte, bool) {
	switch {
	case task != nil:
		return findReceipt(task.Artifacts)
	case reply != nil:
		for _, p := range reply.Parts {
			if p.Data != nil {
				if _, err := compensation.ParseRemoteReceipt(p.Data); err == nil {
					return p.Data, true
				}
			}
		}
	}
	return nil, false
}

// remoteAnswered reports whether a failed compensation request was answered
// by the remote with a JSON-RPC error: proof that it saw the request, so
// the next attempt may be a new round with a new messageId.
func remoteAnswered(err error) bool {
	var rpcErr *a2a.RPCError
	return errors.As(err, &rpcErr)
}

// compensationPollDelay is the wait before a running compensation task is
// fetched again: CompensationPollInterval while the obligation is pending,
// BackoffMax once it is unconfirmed.
func (w *Worker) compensationPollDelay(d ledger.Delegation) time.Duration {
	if d.ObligationState == ledger.ObligationCompensationUnconfirmed {
		return w.cfg.BackoffMax
	}
	return w.cfg.CompensationPollInterval
}

// recordRequested records, inside tx, the compensation request run sent
// and the task answering it, if any: one more attempt on the delegation,
// the extra tasks it names, and a compensation_requested event.
func (w *Worker) recordRequested(ctx context.Context, tx Tx, run *compensationRun) (ledger.Delegation, error) {
	id, round, taskID, named := run.d.ID, run.round, run.taskID(), run.named
	d, err := tx.DelegationForUpdate(ctx, id)
	if err != nil {
		return ledger.Delegation{}, err
	}
	now := w.now()
	if err := tx.SetCompensationTask(ctx, id, taskID, round, now); err != nil {
		return ledger.Delegation{}, err
	}
	if err := tx.ExtraTasks().MarkRemoteTasksNamed(ctx, id, named, round, now); err != nil {
		return ledger.Delegation{}, err
	}
	d.Compensation.Attempts++
	d.Compensation.LastError = ""
	d, _, err = ledger.Apply(ctx, tx, d, ledger.Change{
		Type: ledger.EventTypeCompensationRequested, Actor: workerActor, At: now,
		Data: ledger.CompensationRequestedData{
			MessageID: run.msgID, Round: round, Attempt: d.Compensation.Attempts,
			CompensationTaskID: taskID, TaskID: d.Remote.TaskID, IdempotencyKey: ledger.CompensationKey(d),
			ExtraTaskIDs: named, Binding: run.binding,
		},
	})
	if err != nil || len(named) == 0 {
		return d, err
	}
	// Naming the extra tasks may account for the last of them: evidence
	// held back for them is applied now.
	d, _, err = w.cfg.Compensation.ApplyHeldEvidence(ctx, tx.Receipts(), d, workerActor, now)
	return d, err
}

// outcomeError is the outcome of a compensation attempt that got no
// receipt: the request failed, or the receipt could not be read or was refused.
const outcomeError = "error"

// compensationFailure is a compensation attempt that brought no usable
// receipt.
type compensationFailure struct {
	// problem is what went wrong; outcome is the receipt's outcome, or
	// outcomeError when there was no usable receipt.
	problem, outcome string
	// counted says the run made an attempt (sent a request, or could
	// not); newRound that the remote definitively answered this request,
	// so the next attempt sends a new one with a new messageId.
	counted, newRound bool
	// taskID is the compensation task to look at next, when no new round
	// starts.
	taskID string
}

// compensationFailed records a failed compensation attempt: the error on
// the delegation (compensation.last_error) and what
// compensation.Service.RequestFailed makes of it — a retry after backoff,
// or, once CompensationMaxAttempts attempts have been made (or on
// not_supported), compensation_unconfirmed with the hold kept.
func (w *Worker) compensationFailed(ctx context.Context, j Job, round int, f compensationFailure) error {
	problem := text.Truncate(f.problem, 1000)
	stopped := false
	err := w.store.InTx(ctx, func(tx Tx) error {
		d, err := tx.DelegationForUpdate(ctx, j.DelegationID)
		if err != nil {
			return err
		}
		now := w.now()
		if !compensationPending(d.ObligationState) {
			return tx.Outbox().FinishJob(ctx, j, "not_pending", now)
		}
		nextRound, nextTask := round, f.taskID
		if f.newRound {
			nextRound, nextTask = round+1, ""
		}
		if err := tx.SetCompensationTask(ctx, d.ID, nextTask, nextRound, now); err != nil {
			return err
		}
		if f.counted {
			d.Compensation.Attempts++
		}
		d.Compensation.LastError = problem
		// The worker reports the facts; compensation decides what they
		// mean for the obligation.
		d, stopped, err = w.cfg.Compensation.RequestFailed(ctx, tx.Receipts(), d, compensation.RequestFailure{
			Attempt: d.Compensation.Attempts, MaxAttempts: w.cfg.CompensationMaxAttempts, Round: round,
			MessageID: compensation.RequestMessageID(d.ID, round), Outcome: f.outcome, Problem: problem,
		}, workerActor, now)
		if err != nil {
			return err
		}
		if stopped {
			if f.outcome == string(compensation.ReceiptNotSupported) {
				return tx.Outbox().FinishJob(ctx, j, "not_supported", now)
			}
			return tx.Outbox().FinishJob(ctx, j, "retries_exhausted", now)
		}
		return tx.Outbox().RetryJob(ctx, j, now.Add(w.backoff.Wait(d.Compensation.Attempts)), problem, now)
	})
	if err == nil {
		w.log.WarnContext(ctx, "compensation request attempt failed", "delegation_id", j.DelegationID.String(),
			"stopped", stopped, "problem", problem)
	}
	return err
}

// CompensationRequestSend is the SendMessage of compensation request req
// for d, with messageId msgID, naming refs in referenceTaskIds and signed
// by id (when not nil) at now: the one shape of every compensation request
// (delegate/A2A.md, "Compensation over A2A";
// compensation/extension/v1/README.md).
func CompensationRequestSend(d ledger.Delegation, req compensation.CompensationRequest, msgID string, refs []string, id *jose.Identity, now time.Time) (a2a.SendRequest, error) {
	meta, err := RequestMetadata(d, req, msgID, id, now)
	if err != nil {
		return a2a.SendRequest{}, err
	}
	return a2a.SendRequest{
		Message: a2a.Message{
			MessageID: msgID, ContextID: d.Remote.ContextID, Role: a2a.RoleUser,
			Parts:            []a2a.Part{{Data: req.Data(), MediaType: "application/json"}},
			Metadata:         meta,
			Extensions:       []string{compensation.ExtensionURI},
			ReferenceTaskIDs: refs,
		},
		ReturnImmediately: true,
		Extensions:        []string{compensation.ExtensionURI},
	}, nil
}

// RequestMetadata is a compensation request's metadata under the extension
// URI: the request itself and, when the ledger has a signing identity id,
// requestJws — a compact JWS (typ compensation-request+jwt) of the request
// made at now, so the remote org can verify who asked against the ledger's
// published JWKS. msgID is the messageId it travels in ("" in a cancel).
func RequestMetadata(d ledger.Delegation, req compensation.CompensationRequest, msgID string, id *jose.Identity, now time.Time) (json.RawMessage, error) {
	ext := map[string]any{"taskId": req.TaskID, "idempotencyKey": req.IdempotencyKey, "reason": req.Reason}
	if len(req.ExtraTaskIDs) > 0 {
		ext["extraTaskIds"] = req.ExtraTaskIDs
	}
	if id != nil {
		jws, err := compensation.SignCompensationRequest(id, compensation.RequestClaims{
			OrgID: d.OrgID, TaskID: req.TaskID, IdempotencyKey: req.IdempotencyKey, MessageID: msgID, Now: now,
		})
		if err != nil {
			return nil, err
		}
		ext["requestJws"] = jws
	}
	return json.Marshal(map[string]any{compensation.ExtensionURI: ext})
}
