package compensation

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// Extra remote tasks of a completed delegation (ledger/DESIGN.md §2.2,
// "Every remote task accounted for"). Settling spends the hold once, for
// the tracked task; an extra task that may have done the work again is
// tracked beside the settled obligation: asked for compensation of its own
// and listed as an anomaly until a receipt or on-call resolves it. No hold
// moves on any of it.

// ExtraTaskResolution says how the compensation of an extra task of a
// settled delegation was resolved.
type ExtraTaskResolution string

// The resolutions.
const (
	// ExtraTaskCompensated: a receipt proved its effects reversed.
	ExtraTaskCompensated ExtraTaskResolution = "compensated"
	// ExtraTaskNoEffects: a receipt with a verified declaration proved it
	// committed none.
	ExtraTaskNoEffects ExtraTaskResolution = "no_effects"
	// ExtraTaskWrittenOff: on-call accepted that its effects may stand.
	ExtraTaskWrittenOff ExtraTaskResolution = "written_off"
)

// ExtraTaskCompensation is where the compensation of one extra remote task
// of a settled delegation stands.
type ExtraTaskCompensation struct {
	// RequiredAt is when the delegation's completion made it needed; zero
	// when the task needs none.
	RequiredAt time.Time
	// Round is the request round (a new one after a definitive answer, as
	// for the delegation's own compensation); Attempts counts requests.
	Round, Attempts int
	// TaskID is the remote's task answering the current round, followed
	// until it yields a receipt; "" until one answered.
	TaskID string
	// LastError is why the last attempt brought no receipt.
	LastError string
	// ResolvedAt and Resolution say how it ended; zero while it is open.
	ResolvedAt time.Time
	Resolution ExtraTaskResolution
}

// Open reports whether the task needs compensation that is not resolved.
func (c ExtraTaskCompensation) Open() bool { return !c.RequiredAt.IsZero() && c.ResolvedAt.IsZero() }

// ExtraTaskReason is the reason a compensation request about an extra task
// of a settled delegation gives.
const ExtraTaskReason = "extra_task_of_completed_delegation"

// ExtraTaskKey is the compensation idempotency key of extra remote task
// taskID of delegation d: like the delegation's own (ledger.CompensationKey)
// derived from ids alone, so it is the same on every retry, replica and
// restart, and distinct per task, so that a remote deduplicating on the key
// never answers one task's request with another's receipt.
func ExtraTaskKey(d ledger.Delegation, taskID string) string {
	sum := sha256.Sum256([]byte("quittance/compensation/v1:" + d.ID.String() + ":extra-task:" + taskID))
	return "qc_" + hex.EncodeToString(sum[:16])
}

// ExtraRequestMessageID is the A2A messageId of the round-th compensation
// request about extra task taskID of delegation id: stable across
// retries, so the remote can deduplicate a resend.
func ExtraRequestMessageID(id uuid.UUID, taskID string, round int) string {
	sum := sha256.Sum256([]byte("quittance/compensation-request/v1:" + id.String() + ":extra-task:" + taskID))
	return fmt.Sprintf("%s%s-%d", extraRequestPrefix, hex.EncodeToString(sum[:12]), round)
}

// extraRequestPrefix begins every ExtraRequestMessageID.
const extraRequestPrefix = "qcx-"

// IsExtraRequestMessageID says whether messageID is an
// ExtraRequestMessageID: a task in a delegation's own context that a
// message of that form created is the answer to a compensation request
// about one of its extra tasks.
func IsExtraRequestMessageID(messageID string) bool {
	return strings.HasPrefix(messageID, extraRequestPrefix)
}

// ExtraTaskRequest is the compensation request about extra task taskID of
// settled delegation d.
func ExtraTaskRequest(d ledger.Delegation, taskID string) CompensationRequest {
	return CompensationRequest{TaskID: taskID, IdempotencyKey: ExtraTaskKey(d, taskID), Reason: ExtraTaskReason}
}

// needsCompensation reports whether extra task t of a delegation of class
// and org, whose tracked task completed, may have committed effects that
// call for compensation: never for a task that answered a compensation
// request (its effect is the reversal), nor when it ended rejected
// (refused before any work) or where the gate cannot apply (a class that
// commits no effects, an org with a shared coordinator); when it ended canceled or failed, as the
// gate says for that status; and otherwise — completed, or not ended yet —
// always. canceled alone is not enough: it speaks of the task record, not
// of its effects (ledger/DESIGN.md §1).
func needsCompensation(t RemoteTask, class ledger.TaskClass, org ledger.Org) bool {
	if t.Purpose == PurposeCompensation {
		// A task that answers a compensation request is the reversal,
		// not an effect to reverse.
		return false
	}
	switch t.Status {
	case ledger.StatusRejected:
		return false
	case ledger.StatusCanceled, ledger.StatusFailed:
		return ledger.GateApplies(class, org, t.Status)
	}
	return class.EffectCapable && !org.SharedCoordinator
}

// RequireLateExtraTaskCompensation is requireExtraCompensation for extra
// tasks of d found after it settled (a push or a stream naming another
// task in the delegation's context, after no lookup runs any more): inside
// tx with d locked, each of tasks that needs compensation becomes an
// extra_task_compensation anomaly and the org's agent is asked, as if the
// task had been known at the settlement. Tasks of a delegation that has
// not settled are left alone: a settlement to come, or the delegation's
// own compensation request, accounts for them.
func RequireLateExtraTaskCompensation(ctx context.Context, tx ReceiptTx, d ledger.Delegation, tasks []RemoteTask, actor string, now time.Time) error {
	if d.ObligationState != ledger.ObligationSettled || len(tasks) == 0 {
		return nil
	}
	facts, err := tx.GatePolicy(ctx, d)
	if err != nil {
		return err
	}
	return requireExtraCompensation(ctx, tx, d, tasks, settlement{Org: facts.Org, Class: facts.GateClass(d), Actor: actor, At: now})
}

// settlement is what decides which extra tasks of a settled delegation
// need compensation (its org and task class), and who records it when.
type settlement struct {
	Org   ledger.Org
	Class ledger.TaskClass
	Actor string
	At    time.Time
}

// requireExtraCompensation marks, inside tx, every extra task of settled
// delegation d that needs compensation, records an
// extra_task_compensation_required event for each — the anomaly — and
// queues the compensation request job when the org has an agent Quittance
// can reach. An org without one is asked by no one: the anomaly stays
// until on-call writes the task off.
func requireExtraCompensation(ctx context.Context, tx ReceiptTx, d ledger.Delegation, tasks []RemoteTask, s settlement) error {
	class, org, actor, now := s.Class, s.Org, s.Actor, s.At
	queued := false
	for _, t := range tasks {
		if !needsCompensation(t, class, org) {
			continue
		}
		if err := tx.RequireExtraTaskCompensation(ctx, d.ID, t.TaskID, now); err != nil {
			return err
		}
		if _, err := ledger.Record(ctx, tx, d, ledger.Change{
			Type: ledger.EventTypeExtraTaskCompensationRequired, Actor: actor, At: now,
			Data: ledger.ExtraTaskCompensationRequiredData{
				TaskID: t.TaskID, Purpose: string(t.Purpose), State: string(t.Status),
				TrackedTaskID: d.Remote.TaskID, IdempotencyKey: ExtraTaskKey(d, t.TaskID),
				Requested: org.AgentCardURL != "",
			},
		}); err != nil {
			return err
		}
		if org.AgentCardURL != "" && !queued {
			if err := tx.EnqueueOutbound(ctx, ledger.OutboundJob{
				DelegationID: d.ID, Kind: ledger.OutboundCompensationRequest, RunAfter: now, At: now,
			}); err != nil {
				return err
			}
			queued = true
		}
	}
	return nil
}

// ApplyExtraTaskReceipt records, inside tx with d locked, a receipt that
// JudgeReceipt (with the task and ExtraTaskKey) found to prove v.Event
// about extra task taskID of settled delegation d: its compensation is
// resolved (compensated, or no_effects for a verified declaration) and an
// extra_task_compensated event keeps the receipt, its jws as the evidence.
// The obligation and the hold do not move. A signed receipt's jti is
// claimed as any token's (token_replayed for another token reusing it).
// resolved is false, and nothing is written, when the task's compensation
// was not open (resolved before, or never needed).
func (s *Service) ApplyExtraTaskReceipt(ctx context.Context, tx ReceiptTx, d ledger.Delegation, taskID string, j JudgedReceipt, st Stamp) (resolved bool, err error) {
	r, v, actor, now := j.Receipt, j.Verdict, st.Actor, st.At
	resolution := ExtraTaskCompensated
	switch v.Event {
	case ledger.EventCompensationAck:
	case ledger.EventDeclarationVerified:
		resolution = ExtraTaskNoEffects
	default:
		return false, fmt.Errorf("apply extra task receipt: verdict proves nothing (%s)", v.Problem)
	}
	if c := v.Claims; c != nil {
		sum := sha256.Sum256([]byte(r.JWS))
		used, err := tx.UsedToken(ctx, d.OrgID, c.JTI)
		switch {
		case err == nil && (used.DelegationID != d.ID || !bytes.Equal(used.TokenSHA256, sum[:])):
			return false, Refuse(CodeTokenReplayed, "this jti was already used by the issuing org")
		case err != nil && !errors.Is(err, ledger.ErrNotFound):
			return false, err
		case err != nil:
			if _, err := tx.InsertUsedToken(ctx, UsedToken{OrgID: d.OrgID, JTI: c.JTI, DelegationID: d.ID, TokenSHA256: sum[:], UsedAt: now}); err != nil {
				return false, err
			}
		}
	}
	ok, err := tx.ResolveExtraTaskCompensation(ctx, d.ID, taskID, resolution, now)
	if err != nil || !ok {
		return false, err
	}
	data := ledger.ExtraTaskCompensatedData{
		TaskID: taskID, Resolution: string(resolution), Outcome: string(r.Outcome),
		ReceiptID: r.ReceiptID, IdempotencyKey: r.IdempotencyKey, Receipt: r.Raw,
	}
	if c := v.Claims; c != nil && r.JWS != "" {
		sum := sha256.Sum256([]byte(r.JWS))
		data.TokenRecord, data.TokenAcceptance = tokenData(*c, sum[:], acceptedAt(v.VerifiedAt, now))
	}
	_, err = ledger.Record(ctx, tx, d, ledger.Change{
		Type: ledger.EventTypeExtraTaskCompensated, Actor: actor, At: now, Evidence: r.JWS, Data: data,
	})
	return err == nil, err
}

// ExtraTaskRequestsExhausted records, inside tx, that the compensation
// requests for extra task taskID of settled delegation d brought no
// receipt after every attempt the worker may make: an
// extra_task_compensation_exhausted event. The anomaly stays open; only
// on-call ends it now (WriteOffExtraTask), or a receipt a redrive brings.
func ExtraTaskRequestsExhausted(ctx context.Context, tx ReceiptTx, d ledger.Delegation, taskID string, f RequestFailure, st Stamp) error {
	_, err := ledger.Record(ctx, tx, d, ledger.Change{
		Type: ledger.EventTypeExtraTaskCompensationExhausted, Actor: st.Actor, At: st.At,
		Data: ledger.ExtraTaskCompensationExhaustedData{TaskID: taskID, CompensationAttempt: ledger.CompensationAttempt{
			Attempt: f.Attempt, MaxAttempts: f.MaxAttempts, Round: f.Round,
			MessageID: f.MessageID, Outcome: f.Outcome, Error: f.Problem,
		}},
	})
	return err
}

// maxExtraWriteOffReason bounds the reason of an extra task write-off.
const maxExtraWriteOffReason = 2000

// WriteOffExtraTask is on-call's resolution of an extra task of a settled
// delegation whose compensation no receipt resolved: the principal accepts,
// with a reason, that its effects may stand. It ends the
// extra_task_compensation anomaly with an extra_task_written_off event and
// moves no money (the settled obligation's hold paid for the tracked task
// alone, so there is nothing to book). It is refused with
// ledger.ErrForbidden for a principal ActionWriteOffExtraTask does not
// permit (any role but oncall), ledger.ErrNotFound for an
// unknown delegation or a task that is not one of its extra tasks, and a
// conflict (extra_task_not_open) when the task's compensation is not open.
func (s *Service) WriteOffExtraTask(ctx context.Context, p ledger.Principal, id uuid.UUID, taskID, reason string) (ledger.Delegation, error) {
	if err := ledger.Authorize(p, ledger.ActionWriteOffExtraTask); err != nil {
		return ledger.Delegation{}, err
	}
	reason = strings.TrimSpace(reason)
	if reason == "" || len(reason) > maxExtraWriteOffReason {
		return ledger.Delegation{}, ledger.Invalid("reason", "is required, at most %d characters", maxExtraWriteOffReason)
	}
	var out ledger.Delegation
	err := s.store.InTx(ctx, func(tx Tx) error {
		d, err := tx.DelegationForUpdate(ctx, id)
		if err != nil {
			return err
		}
		task, err := remoteTask(ctx, tx, d.ID, taskID)
		if err != nil {
			return err
		}
		if !task.Compensation.Open() {
			return ledger.Conflict(CodeExtraTaskNotOpen, "the compensation of remote task %q is not open (it was not needed, or is resolved)", taskID)
		}
		now := s.now()
		ok, err := tx.ResolveExtraTaskCompensation(ctx, d.ID, taskID, ExtraTaskWrittenOff, now)
		if err != nil {
			return err
		}
		if !ok {
			return ledger.Conflict(CodeExtraTaskNotOpen, "the compensation of remote task %q is not open", taskID)
		}
		if _, err := ledger.Record(ctx, tx, d, ledger.Change{
			Type: ledger.EventTypeExtraTaskWrittenOff, Actor: p.Actor(), At: now,
			Data: ledger.ExtraTaskWrittenOffData{TaskID: taskID, Reason: reason, Attempts: task.Compensation.Attempts},
		}); err != nil {
			return err
		}
		out = d
		return nil
	})
	return out, err
}

// CodeExtraTaskNotOpen is the conflict code of a write-off of an extra
// task whose compensation is not open.
const CodeExtraTaskNotOpen = "extra_task_not_open"

// CanRedriveExtraTask says whether the compensation of extra remote task t
// of a settled delegation of org can be redriven: only when it is required
// and not resolved, and its requests are exhausted — at least one request
// about it was sent (compensation_attempts > 0) and no series of requests
// is still running (requestJobOpen: no compensation_request job of the
// delegation is open, the job that asks about its extra tasks; it ends
// only once no open task has attempts left, the org's identity is revoked,
// or every request was answered). An org without an agent card, or whose
// identity is revoked, cannot be asked. A *ledger.ConflictError
// (redrive_not_allowed) says why not. RedriveExtraTask decides by it on the
// locked delegation; the console previews with it.
func CanRedriveExtraTask(org ledger.Org, t RemoteTask, requestJobOpen bool) error {
	c := t.Compensation
	switch {
	case c.RequiredAt.IsZero():
		return ledger.Conflict(CodeRedriveNotAllowed, "remote task %q needs no compensation", t.TaskID)
	case !c.ResolvedAt.IsZero():
		return ledger.Conflict(CodeRedriveNotAllowed, "the compensation of remote task %q is resolved (%s)", t.TaskID, c.Resolution)
	case requestJobOpen:
		return ledger.Conflict(CodeRedriveNotAllowed, "compensation requests of this delegation are still being sent: redrive once they are exhausted")
	case c.Attempts == 0:
		return ledger.Conflict(CodeRedriveNotAllowed, "no compensation request about remote task %q was sent: there is nothing to redrive", t.TaskID)
	case org.AgentCardURL == "":
		return ledger.Conflict(CodeRedriveNotAllowed, "the org has no agent card: nobody can be asked")
	case org.IdentityRevoked():
		return ledger.Conflict(CodeRedriveNotAllowed, "the org's identity is revoked: its receipts cannot be trusted")
	}
	return nil
}

// CodeRedriveNotAllowed is the conflict code of a redrive refused for the
// state of what it would redrive (CanRedrive, CanRedriveExtraTask).
const CodeRedriveNotAllowed = "redrive_not_allowed"

// ExtraTaskRequestJobOpen reports, for principal p, whether a series of
// compensation requests is running for delegation id (the fact
// CanRedriveExtraTask decides with besides the task and the org), as
// committed now: what the console previews the redrive control with.
func (s *Service) ExtraTaskRequestJobOpen(ctx context.Context, p ledger.Principal, id uuid.UUID) (bool, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return false, err
	}
	return s.store.OutboundJobOpen(ctx, id, ledger.OutboundCompensationRequest)
}

// RedriveExtraTask asks the org's agent again, on behalf of an on-call
// principal with a reason, for the compensation of extra remote task
// taskID of settled delegation id, whose requests are exhausted
// (CanRedriveExtraTask; else a conflict, redrive_not_allowed). In one
// transaction, with the delegation locked, the task's attempt count is
// reset, an extra_task_compensation_redriven event records the task, who
// asked and why, and the compensation request job is queued: a new series
// of requests under the same idempotency key (ExtraTaskKey), keeping the
// messageId of the last round unless a reply proved the remote saw it, as
// the worker's own retries do. The task's compensation stays open until a
// receipt resolves it or on-call writes it off; the redriven requests may
// exhaust again, which is recorded again. No hold moves. It is refused
// with ledger.ErrForbidden for anyone but on-call, a validation error for
// a missing reason, and ledger.ErrNotFound for an unknown delegation or a
// task that is not one of its extra tasks; a refused redrive changes
// nothing.
func (s *Service) RedriveExtraTask(ctx context.Context, p ledger.Principal, id uuid.UUID, taskID string, in RedriveInput) (ledger.Delegation, error) {
	if err := ledger.Authorize(p, ledger.ActionRedriveCompensation); err != nil {
		return ledger.Delegation{}, err
	}
	if err := checkReason(in.Reason); err != nil {
		return ledger.Delegation{}, err
	}
	var out ledger.Delegation
	err := s.store.InTx(ctx, func(tx Tx) error {
		d, err := tx.DelegationForUpdate(ctx, id)
		if err != nil {
			return err
		}
		task, err := remoteTask(ctx, tx, d.ID, taskID)
		if err != nil {
			return err
		}
		org, err := tx.Org(ctx, d.OrgID)
		if err != nil {
			return err
		}
		running, err := tx.OutboundJobOpen(ctx, d.ID, ledger.OutboundCompensationRequest)
		if err != nil {
			return err
		}
		if err := CanRedriveExtraTask(org, task, running); err != nil {
			return err
		}
		now := s.now()
		if ok, err := tx.RedriveExtraTaskCompensation(ctx, d.ID, taskID, now); err != nil {
			return err
		} else if !ok {
			return ledger.Conflict(CodeRedriveNotAllowed, "the compensation of remote task %q is not open", taskID)
		}
		if _, err := ledger.Record(ctx, tx, d, ledger.Change{
			Type: ledger.EventTypeExtraTaskCompensationRedriven, Actor: p.Actor(), At: now,
			Data: ledger.ExtraTaskCompensationRedrivenData{
				TaskID: taskID, Reason: in.Reason, PreviousAttempts: task.Compensation.Attempts,
				Round: max(task.Compensation.Round, 1), IdempotencyKey: ExtraTaskKey(d, taskID),
			},
		}); err != nil {
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

// remoteTask returns the remote task taskID of delegation id, read in tx,
// or ledger.ErrNotFound when the delegation recorded no such task.
func remoteTask(ctx context.Context, tx Tx, id uuid.UUID, taskID string) (RemoteTask, error) {
	facts, err := tx.EvidenceFacts(ctx, id)
	if err != nil {
		return RemoteTask{}, err
	}
	i := slices.IndexFunc(facts.RemoteTasks, func(t RemoteTask) bool { return t.TaskID == taskID })
	if i < 0 {
		return RemoteTask{}, fmt.Errorf("remote task %q of delegation %s: %w", taskID, id, ledger.ErrNotFound)
	}
	return facts.RemoteTasks[i], nil
}
