package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate/a2a"
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
// nothing about the obligation: a receipt that JudgeReceipt accepts goes to
// compensation.ApplyEvidence with the round it answers (compensated, or
// released for a verified declaration — or held back while extra remote
// tasks are not accounted for, when the job cancels them and waits, and
// starts a new round when this one did not name one); a pending receipt means the remote is still reversing, so
// the compensation task is observed again, with no new round; anything else
// — failed or not_supported receipts, refused receipts, errors, a task that
// ends without a receipt — is a failed attempt reported to
// compensation.RequestFailed, which decides when the obligation becomes
// compensation_unconfirmed (at once for not_supported, after
// CompensationMaxAttempts otherwise). Never a release.
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
	round := max(tr.CompensationRound, 1)
	_, client, _, err := w.agent(ctx, org)
	if err != nil {
		return w.compensationFailed(ctx, j, round, "agent unavailable: "+errorText(err), outcomeError, true, false, tr.CompensationTaskID)
	}

	var (
		task    *a2a.Task
		reply   *a2a.Message
		sent    bool
		msgID   = compensation.RequestMessageID(d.ID, round)
		pending = tr.CompensationTaskID
		named   []string // the extra tasks the request sent now names
	)
	if pending != "" {
		// Each run asks every extra task not terminal yet to cancel
		// again: its end may be what the obligation waits for.
		if _, err := w.accountExtraTasks(ctx, client, d); err != nil {
			return err
		}
		t, err := client.GetTask(ctx, pending)
		switch {
		case err != nil && a2a.Retryable(err):
			return w.retryAt(ctx, j, w.now().Add(w.compensationPollDelay(d)), errorText(err), nil)
		case err != nil:
			return w.compensationFailed(ctx, j, round, "fetch compensation task: "+errorText(err), outcomeError, false, true, "")
		}
		task = &t
	} else {
		// Every task the agent created for the delegation is named in
		// the request: look the context up for extra tasks and cancel
		// those not terminal first.
		if err := w.findExtraTasks(ctx, client, d); err != nil {
			return err
		}
		extras, err := w.accountExtraTasks(ctx, client, d)
		if err != nil {
			return err
		}
		req := compensation.RequestFor(d)
		req.ExtraTaskIDs = extraTaskIDs(extras)
		named = req.ExtraTaskIDs
		meta, err := w.requestMetadata(d, req, msgID)
		if err != nil {
			return err
		}
		res, err := client.SendMessage(ctx, a2a.SendRequest{
			Message: a2a.Message{
				MessageID: msgID, ContextID: d.Remote.ContextID, Role: a2a.RoleUser,
				Parts:            []a2a.Part{{Data: req.Data(), MediaType: "application/json"}},
				Metadata:         meta,
				Extensions:       []string{compensation.ExtensionURI},
				ReferenceTaskIDs: append([]string{d.Remote.TaskID}, req.ExtraTaskIDs...),
			},
			ReturnImmediately: true,
			Extensions:        []string{compensation.ExtensionURI},
		})
		if err != nil {
			// Only a JSON-RPC error answering this request proves the
			// remote saw it and starts a new round. Anything else — a
			// timeout, a malformed or mismatched reply, a body over the
			// cap, an HTTP 4xx — resends the same messageId.
			return w.compensationFailed(ctx, j, round, "send compensation request: "+errorText(err), outcomeError, true, remoteAnswered(err), "")
		}
		sent = true
		task, reply = res.Task, res.Message
	}

	taskID := ""
	if task != nil {
		taskID = task.ID
	}
	receipt, found := answerReceipt(task, reply)
	if !found {
		if task != nil && !task.Status.State.Terminal() {
			// Still working on it: record the request and look again later.
			return w.retryAt(ctx, j, w.now().Add(w.compensationPollDelay(d)), "", func(tx Tx) error {
				if sent {
					_, err := w.recordRequested(ctx, tx, d.ID, round, msgID, taskID, named)
					return err
				}
				return nil
			})
		}
		state := "a message"
		if task != nil {
			state = string(task.Status.State)
		}
		return w.compensationFailed(ctx, j, round, fmt.Sprintf("the remote answered %s without a compensation receipt", state), outcomeError, sent, true, taskID)
	}
	r, err := compensation.ParseRemoteReceipt(receipt)
	if err != nil {
		return w.compensationFailed(ctx, j, round, text.Truncate(err.Error(), 500), outcomeError, sent, true, taskID)
	}
	if r.Outcome == compensation.ReceiptPending && (reply != nil || !task.Status.State.Terminal()) {
		// The remote is working on the reversal: not evidence and not a
		// failure. The compensation task is observed until it yields a
		// final receipt (a pending answer in a message is asked again with
		// the same messageId); no new round starts.
		return w.retryAt(ctx, j, w.now().Add(w.compensationPollDelay(d)), "", func(tx Tx) error {
			if sent {
				_, err := w.recordRequested(ctx, tx, d.ID, round, msgID, taskID, named)
				return err
			}
			return nil
		})
	}
	verdict, _, err := w.judgeReceipt(ctx, compensation.ReceiptInput{
		Delegation: d, Org: org, Receipt: r, LedgerID: w.cfg.LedgerID, Now: w.now(),
	})
	if err != nil {
		return err
	}
	if verdict.Event == "" {
		problem := "receipt " + string(r.Outcome) + ": " + verdict.Problem
		if r.Reason != "" {
			problem += " (reason: " + text.Truncate(r.Reason, 500) + ")"
		}
		return w.compensationFailed(ctx, j, round, problem, string(r.Outcome), sent, true, taskID)
	}
	outcome := "compensated"
	if verdict.Event == ledger.EventDeclarationVerified {
		outcome = "no_effects_declared"
	}
	ev := compensation.ReceiptEvidence(r, verdict, ledger.ChannelA2AReceipt, workerActor)
	ev.Round = round
	err = w.store.InTx(ctx, func(tx Tx) error {
		// recordRequested locks the delegation itself.
		var cur ledger.Delegation
		if sent {
			cur, err = w.recordRequested(ctx, tx, d.ID, round, msgID, taskID, named)
		} else {
			cur, err = tx.DelegationForUpdate(ctx, d.ID)
		}
		if err != nil {
			return err
		}
		res, err := w.cfg.Compensation.ApplyEvidence(ctx, tx, cur, ev, w.now())
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
			return tx.RetryJob(ctx, j, w.now().Add(w.compensationPollDelay(d)), "waiting for extra remote tasks to be accounted for", w.now())
		}
		return tx.FinishJob(ctx, j, outcome, w.now())
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
		return w.compensationFailed(ctx, j, round, "receipt refused: "+ref.Code, outcomeError, sent, true, taskID)
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

// recordRequested records, inside tx, a compensation request sent in round
// and answered by the remote task taskID ("" for a message reply), naming
// the extra tasks named: one more attempt on the delegation, and a
// compensation_requested event.
func (w *Worker) recordRequested(ctx context.Context, tx Tx, id uuid.UUID, round int, msgID, taskID string, named []string) (ledger.Delegation, error) {
	d, err := tx.DelegationForUpdate(ctx, id)
	if err != nil {
		return ledger.Delegation{}, err
	}
	now := w.now()
	if err := tx.SetCompensationTask(ctx, id, taskID, round, now); err != nil {
		return ledger.Delegation{}, err
	}
	if err := tx.MarkRemoteTasksNamed(ctx, id, named, round, now); err != nil {
		return ledger.Delegation{}, err
	}
	d.Compensation.Attempts++
	d.Compensation.LastError = ""
	d, _, err = ledger.Apply(ctx, tx, d, ledger.Change{
		Type: ledger.EventTypeCompensationRequested, Actor: workerActor, At: now,
		Data: ledger.CompensationRequestedData{
			MessageID: msgID, Round: round, Attempt: d.Compensation.Attempts,
			CompensationTaskID: taskID, TaskID: d.Remote.TaskID, IdempotencyKey: ledger.CompensationKey(d),
			ExtraTaskIDs: named,
		},
	})
	if err != nil || len(named) == 0 {
		return d, err
	}
	// Naming the extra tasks may account for the last of them: evidence
	// held back for them is applied now.
	d, _, err = w.cfg.Compensation.ApplyHeldEvidence(ctx, tx, d, workerActor, now)
	return d, err
}

// outcomeError is the outcome of a compensation attempt that got no
// receipt: the request failed, or the receipt could not be read or was refused.
const outcomeError = "error"

// compensationFailed records a failed compensation attempt (outcome is the
// receipt's outcome, or outcomeError when there was no usable receipt): the error on the
// delegation (compensation.last_error), a compensation_request_failed event,
// and a retry after backoff — or, once CompensationMaxAttempts attempts have
// been made, compensation_retries_exhausted, which moves a pending obligation
// to compensation_unconfirmed (the hold stays). counted says this run made an
// attempt (sent a request, or could not); newRound that the next attempt
// sends a new request with a new messageId, because the remote definitively
// answered this one.
func (w *Worker) compensationFailed(ctx context.Context, j Job, round int, problem, outcome string, counted, newRound bool, taskID string) error {
	problem = text.Truncate(problem, 1000)
	stopped := false
	err := w.store.InTx(ctx, func(tx Tx) error {
		d, err := tx.DelegationForUpdate(ctx, j.DelegationID)
		if err != nil {
			return err
		}
		now := w.now()
		if !compensationPending(d.ObligationState) {
			return tx.FinishJob(ctx, j, "not_pending", now)
		}
		nextRound, nextTask := round, taskID
		if newRound {
			nextRound, nextTask = round+1, ""
		}
		if err := tx.SetCompensationTask(ctx, d.ID, nextTask, nextRound, now); err != nil {
			return err
		}
		if counted {
			d.Compensation.Attempts++
		}
		d.Compensation.LastError = problem
		// The worker reports the facts; compensation decides what they
		// mean for the obligation.
		d, stopped, err = w.cfg.Compensation.RequestFailed(ctx, tx, d, compensation.RequestFailure{
			Attempt: d.Compensation.Attempts, MaxAttempts: w.cfg.CompensationMaxAttempts, Round: round,
			MessageID: compensation.RequestMessageID(d.ID, round), Outcome: outcome, Problem: problem,
		}, workerActor, now)
		if err != nil {
			return err
		}
		if stopped {
			if outcome == string(compensation.ReceiptNotSupported) {
				return tx.FinishJob(ctx, j, "not_supported", now)
			}
			return tx.FinishJob(ctx, j, "retries_exhausted", now)
		}
		return tx.RetryJob(ctx, j, now.Add(w.backoff.Wait(d.Compensation.Attempts)), problem, now)
	})
	if err == nil {
		w.log.WarnContext(ctx, "compensation request attempt failed", "delegation_id", j.DelegationID.String(),
			"stopped", stopped, "problem", problem)
	}
	return err
}

// requestMetadata is the compensation request's metadata under the
// extension URI: the request itself and, when the ledger has a signing
// identity, requestJws — a compact JWS (typ compensation-request+jwt) of the
// request, so the remote org can verify who asked against the ledger's
// published JWKS.
func (w *Worker) requestMetadata(d ledger.Delegation, req compensation.CompensationRequest, msgID string) (json.RawMessage, error) {
	ext := map[string]any{"taskId": req.TaskID, "idempotencyKey": req.IdempotencyKey, "reason": req.Reason}
	if len(req.ExtraTaskIDs) > 0 {
		ext["extraTaskIds"] = req.ExtraTaskIDs
	}
	if w.cfg.Identity != nil {
		jws, err := compensation.SignCompensationRequest(w.cfg.Identity, compensation.RequestClaims{
			OrgID: d.OrgID, TaskID: req.TaskID, IdempotencyKey: req.IdempotencyKey, MessageID: msgID, Now: w.now(),
		})
		if err != nil {
			return nil, err
		}
		ext["requestJws"] = jws
	}
	return json.Marshal(map[string]any{compensation.ExtensionURI: ext})
}
