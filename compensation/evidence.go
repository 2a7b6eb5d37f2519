package compensation

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// CodeEvidenceConflict is the refusal code of verified evidence that carries
// the delegation's compensation idempotency key with another payload than
// the evidence already accepted for that key: another receipt id, or the
// other kind (an ack after a declaration).
const CodeEvidenceConflict = "evidence_conflict"

// SourceReport is the observation source (and so the evidence channel) of
// an orchestrator's report of the remote task (ReportTaskStatus).
const SourceReport = "api"

// SourceReportedPoll is the source of Quittance's own observation of the
// remote task that an orchestrator's report on a dispatched delegation
// asks for (an observe job of the A2A workers).
const SourceReportedPoll = "task_status_reported"

// Evidence is one piece of evidence as a channel received it, already
// verified by that channel (Verify for a posted token, JudgeReceipt for an
// A2A receipt, ObserveTaskStatus for a terminal status).
type Evidence struct {
	// Kind is what the evidence proves: ledger.EventCompensationAck or
	// ledger.EventDeclarationVerified for compensation evidence; for a
	// terminal status (TaskEnd), what the status calls for as handed over
	// (TaskEnd.Kind): ledger.EventTaskCompleted, a settlement,
	// ledger.EventTaskRejected, ledger.EventTaskEndedUngated or
	// ledger.EventTaskEndedGated. ApplyEvidence decides the obligation
	// event again with the delegation's extra remote tasks, read under
	// the lock (applyTaskEnd).
	Kind ledger.ObligationEvent
	// Channel is how it arrived: a compensation channel, or a status's
	// source (TaskEnd.Channel).
	Channel ledger.EvidenceChannel
	// TaskEnd is the terminal status of a held obligation, set on d, that
	// this evidence is; nil for compensation evidence.
	TaskEnd *TaskEnd
	// Claims are the verified claims of its signed token (a posted token,
	// or a receipt's jws); nil for a channel-authenticated receipt.
	Claims *Claims
	// Receipt is the A2A receipt it came in; nil for a posted token.
	Receipt *RemoteReceipt
	// Token is the signed token verbatim; empty when there is none.
	Token []byte
	// VerifiedAt is when the channel verified Token: the time whose keys
	// in force and expiry it was judged by, recorded as its acceptance
	// (ledger.TokenAcceptedAtKey). Zero: when it is applied.
	VerifiedAt time.Time
	// Actor is who the evidence is recorded as coming from.
	Actor string
	// ReversedAmountMinor is how much of the hold an ack says was
	// reversed (the token's reversed_amount_minor claim, or the receipt's
	// reversedAmountMinor as JudgeReceipt settled it); nil: the whole hold.
	ReversedAmountMinor *int64
	// Round is the compensation request round a receipt answers (the A2A
	// worker's own request); 0 for evidence that answers no particular
	// request: a posted token, an atomic receipt. It says which
	// extra remote tasks the evidence can cover (RemoteTask.Accounted).
	Round int
}

// ApplyEvidence is the one evidence path (ledger/DESIGN.md §3): every
// channel hands its verified evidence to it, inside the transaction that
// locked d, and every release, compensation and settlement is decided and
// written here. Refusals come before any write, so a caller may go on with
// its transaction. A terminal status (ev.TaskEnd) goes to applyTaskEnd.
func (s *Service) ApplyEvidence(ctx context.Context, tx ReceiptTx, d ledger.Delegation, ev Evidence, now time.Time) (EvidenceResult, error) {
	if ev.TaskEnd != nil {
		return applyTaskEnd(ctx, tx, d, ev, now)
	}
	if err := checkEvidence(d, ev); err != nil {
		return EvidenceResult{}, err
	}
	sum, duplicate, err := tokenSum(ctx, tx, d, ev)
	if err != nil {
		return EvidenceResult{}, err
	}
	if duplicate {
		return EvidenceResult{Delegation: d, Outcome: OutcomeDuplicate}, nil
	}
	a := evidenceArrival{ev: ev, sum: sum, payload: payloadSum(ev), now: now}
	facts, err := tx.EvidenceFacts(ctx, d.ID)
	if err != nil {
		return EvidenceResult{}, err
	}
	stored, found := facts.Stored, facts.Found
	if found && !bytes.Equal(stored.PayloadSHA256, a.payload) {
		return EvidenceResult{}, Refuse(CodeEvidenceConflict, fmt.Sprintf(
			"evidence with this compensation idempotency key was already accepted (%s, %s) and says something else",
			stored.Kind, stored.Status))
	}
	_, _, transErr := ledger.NextObligation(d.ObligationState, ev.Kind)
	a.early = d.ObligationState == ledger.ObligationHeld
	if !found && transErr != nil && !a.early && !d.ObligationState.Terminal() {
		return EvidenceResult{}, Refuse(CodeEvidenceNotExpected, fmt.Sprintf("the obligation is %s and not waiting for compensation evidence", d.ObligationState))
	}
	if compensationPending(d.ObligationState) {
		a.open, a.unnamed = openTasks(facts.RemoteTasks, ev.Round)
		if !found && ev.Round > 0 && len(a.unnamed) > 0 {
			// The request this receipt answers never named those tasks:
			// the receipt cannot speak for their effects.
			return EvidenceResult{Delegation: d, Outcome: OutcomeUncovered, OpenTasks: a.open, Unnamed: a.unnamed}, nil
		}
	}
	if err := useToken(ctx, tx, d, ev, sum, now); err != nil {
		return EvidenceResult{}, err
	}
	if found {
		return s.answerStored(ctx, tx, d, stored, a)
	}
	if transErr != nil && !a.early {
		return recordLate(ctx, tx, d, a)
	}
	return s.storeEvidence(ctx, tx, d, a)
}

// evidenceArrival is evidence on its way into the ledger with what
// ApplyEvidence learned of it: the token and payload hashes, whether it
// came before the task ended (early), and the extra remote tasks it cannot
// answer for yet (open; unnamed when its request round did not name them).
type evidenceArrival struct {
	ev            Evidence
	sum, payload  []byte
	early         bool
	open, unnamed []string
	now           time.Time
}

// checkEvidence refuses evidence that proves nothing, does not correlate
// with d, or acknowledges a reversal d cannot have had.
func checkEvidence(d ledger.Delegation, ev Evidence) error {
	if ev.Kind != ledger.EventCompensationAck && ev.Kind != ledger.EventDeclarationVerified {
		return fmt.Errorf("apply evidence: %q proves nothing", ev.Kind)
	}
	if err := correlate(d, ev); err != nil {
		return err
	}
	if ev.Kind == ledger.EventCompensationAck {
		return CheckReversedAmount(d, ev.ReversedAmountMinor)
	}
	return nil
}

// tokenSum hashes ev's signed token, if any, and checks its jti against
// the ones the org used: the same token for d again is a duplicate, any
// other use of the jti a replay.
func tokenSum(ctx context.Context, tx ReceiptTx, d ledger.Delegation, ev Evidence) (sum []byte, duplicate bool, err error) {
	if ev.Claims == nil {
		return nil, false, nil
	}
	s := sha256.Sum256(ev.Token)
	sum = s[:]
	used, err := tx.UsedToken(ctx, d.OrgID, ev.Claims.JTI)
	switch {
	case err == nil && used.DelegationID == d.ID && bytes.Equal(used.TokenSHA256, sum):
		return sum, true, nil
	case err == nil:
		return nil, false, Refuse(CodeTokenReplayed, "this jti was already used by the issuing org")
	case !errors.Is(err, ledger.ErrNotFound):
		return nil, false, err
	}
	return sum, false, nil
}

// useToken records ev's jti as used by the org, refusing a replay that
// raced this one.
func useToken(ctx context.Context, tx ReceiptTx, d ledger.Delegation, ev Evidence, sum []byte, now time.Time) error {
	if ev.Claims == nil {
		return nil
	}
	inserted, err := tx.InsertUsedToken(ctx, UsedToken{OrgID: d.OrgID, JTI: ev.Claims.JTI, DelegationID: d.ID, TokenSHA256: sum, UsedAt: now})
	if err != nil {
		return err
	}
	if !inserted {
		return Refuse(CodeTokenReplayed, "this jti was already used by the issuing org")
	}
	return nil
}

// answerStored answers evidence identical to the evidence d already
// stores: held for extra remote tasks, it is applied once none is open;
// otherwise it is a duplicate.
func (s *Service) answerStored(ctx context.Context, tx ReceiptTx, d ledger.Delegation, stored ledger.StoredEvidence, a evidenceArrival) (EvidenceResult, error) {
	if stored.Status != ledger.EvidenceReceived || !compensationPending(d.ObligationState) {
		return EvidenceResult{Delegation: d, Outcome: OutcomeDuplicate}, nil
	}
	if len(a.open) > 0 {
		return EvidenceResult{Delegation: d, Outcome: OutcomeReceived, OpenTasks: a.open, Unnamed: a.unnamed}, nil
	}
	d, err := s.applyHeld(ctx, tx, d, stored, a.ev.Actor, a.now)
	if err != nil {
		return EvidenceResult{}, err
	}
	return EvidenceResult{Delegation: d, Outcome: OutcomeApplied}, nil
}

// recordLate records evidence that came after the obligation ended as
// late_evidence: surfaced, never applied.
func recordLate(ctx context.Context, tx ReceiptTx, d ledger.Delegation, a evidenceArrival) (EvidenceResult, error) {
	data := evidenceDataOf(a.ev, a.sum, a.now)
	data.ObligationState = string(d.ObligationState)
	contradicts := d.ObligationState == ledger.ObligationWrittenOff
	data.ContradictsWriteOff = &contradicts
	if _, err := ledger.Record(ctx, tx, d, ledger.Change{
		Type: ledger.EventTypeLateEvidence, Actor: a.ev.Actor, At: a.now, Data: ledger.LateEvidenceData{EvidenceRecord: data}, Evidence: string(a.ev.Token),
	}); err != nil {
		return EvidenceResult{}, err
	}
	return EvidenceResult{Delegation: d, Outcome: OutcomeLateEvidence, ContradictsWriteOff: contradicts}, nil
}

// storeEvidence stores new evidence for d: as received while the task has
// not ended or an extra remote task is open, else applied (discharging
// the obligation and voiding a pending write-off).
func (s *Service) storeEvidence(ctx context.Context, tx ReceiptTx, d ledger.Delegation, a evidenceArrival) (EvidenceResult, error) {
	ev, now := a.ev, a.now
	data := evidenceDataOf(ev, a.sum, now)
	receipt, err := receiptJSON(ev, a.sum, now)
	if err != nil {
		return EvidenceResult{}, err
	}
	dataJSON, err := ledger.PayloadJSON(data)
	if err != nil {
		return EvidenceResult{}, err
	}
	row := ledger.StoredEvidence{
		DelegationID: d.ID, IdempotencyKey: ledger.CompensationKey(d), Kind: ev.Kind, Channel: ev.Channel,
		PayloadSHA256: a.payload, Status: ledger.EvidenceApplied, Receipt: receipt, Data: dataJSON,
		Token: string(ev.Token), ReceivedAt: now, DecidedAt: now,
	}
	if a.early || len(a.open) > 0 {
		return holdEvidence(ctx, tx, d, a, row, data)
	}
	if err := tx.PutCompensationEvidence(ctx, row); err != nil {
		return EvidenceResult{}, err
	}
	d.Compensation.Receipt = receipt
	typ := ledger.EventTypeCompensationAcked
	if ev.Kind == ledger.EventDeclarationVerified {
		typ = ledger.EventTypeNoCompensationDeclared
	}
	d, err = s.dischargeWithPending(ctx, tx, d, ledger.Change{
		Type: typ, Actor: ev.Actor, At: now, Obligation: ev.Kind, Data: ledger.EvidenceDischarged(ev.Kind, data), Evidence: string(ev.Token),
		ReversedAmountMinor: ev.ReversedAmountMinor,
	})
	if err != nil {
		return EvidenceResult{}, err
	}
	return EvidenceResult{Delegation: d, Outcome: OutcomeApplied}, nil
}

// holdEvidence stores evidence as received (evidence_received): before the
// task ended, or while another remote task of d may have committed effects
// this evidence does not yet answer for.
func holdEvidence(ctx context.Context, tx ReceiptTx, d ledger.Delegation, a evidenceArrival, row ledger.StoredEvidence, data ledger.EvidenceRecord) (EvidenceResult, error) {
	if len(a.open) > 0 {
		data.HeldFor, data.OpenRemoteTasks = heldForExtraTasks, a.open
		dataJSON, err := ledger.PayloadJSON(data)
		if err != nil {
			return EvidenceResult{}, err
		}
		row.Data = dataJSON
	}
	row.Status, row.DecidedAt = ledger.EvidenceReceived, time.Time{}
	if err := tx.PutCompensationEvidence(ctx, row); err != nil {
		return EvidenceResult{}, err
	}
	if _, err := ledger.Record(ctx, tx, d, ledger.Change{
		Type: ledger.EventTypeEvidenceReceived, Actor: a.ev.Actor, At: a.now, Data: ledger.EvidenceReceivedData{EvidenceRecord: data}, Evidence: string(a.ev.Token),
	}); err != nil {
		return EvidenceResult{}, err
	}
	return EvidenceResult{Delegation: d, Outcome: OutcomeReceived, OpenTasks: a.open, Unnamed: a.unnamed}, nil
}

// heldForExtraTasks: extra remote tasks of the delegation were not all
// accounted for (RemoteTask.Accounted).
const heldForExtraTasks = "extra_tasks_open"

// ApplyHeldEvidence applies, inside tx with d locked, the compensation
// evidence held as received for d while its extra remote tasks were not
// all accounted for, once they are: the obligation is compensated or
// released as if the evidence had just arrived. The A2A workers call it
// whenever they record a fact that may account for an extra task (its
// terminal status, a request naming it); it changes nothing while one is
// still open, or when d is not waiting for compensation or holds no such
// evidence. applied says whether it moved d.
func (s *Service) ApplyHeldEvidence(ctx context.Context, tx ReceiptTx, d ledger.Delegation, actor string, now time.Time) (out ledger.Delegation, applied bool, err error) {
	if !compensationPending(d.ObligationState) {
		return d, false, nil
	}
	facts, err := tx.EvidenceFacts(ctx, d.ID)
	if err != nil {
		return ledger.Delegation{}, false, err
	}
	if !facts.Found || facts.Stored.Status != ledger.EvidenceReceived {
		return d, false, nil
	}
	if open, _ := openTasks(facts.RemoteTasks, 0); len(open) > 0 {
		return d, false, nil
	}
	d, err = s.applyHeld(ctx, tx, d, facts.Stored, actor, now)
	return d, err == nil, err
}

// applyHeld applies stored, evidence held as received, to d waiting for
// compensation: compensation_acked or no_compensation_declared through
// ledger.Apply (voiding a pending write-off), with the stored token, and
// the evidence marked applied.
func (s *Service) applyHeld(ctx context.Context, tx ReceiptTx, d ledger.Delegation, stored ledger.StoredEvidence, actor string, now time.Time) (ledger.Delegation, error) {
	if len(stored.Data) > 0 && !json.Valid(stored.Data) {
		return ledger.Delegation{}, fmt.Errorf("stored evidence of delegation %s: its data is not JSON", d.ID)
	}
	data := ledger.EvidenceRecord{
		Held: stored.Data, ReceivedAt: stored.ReceivedAt.UTC().Format(time.RFC3339Nano), EvidenceChannel: string(stored.Channel),
		TokenAcceptance: storedTokenAcceptance(stored),
	}
	c := ledger.Change{
		Type: ledger.EventTypeCompensationAcked, Actor: actor, At: now, Obligation: stored.Kind, Data: ledger.EvidenceDischarged(stored.Kind, data), Evidence: stored.Token,
	}
	if stored.Kind == ledger.EventDeclarationVerified {
		c.Type = ledger.EventTypeNoCompensationDeclared
	} else {
		n, err := stored.ReversedAmountMinor(d.Hold.AmountMinor)
		if err != nil {
			return ledger.Delegation{}, err
		}
		c.ReversedAmountMinor = n
	}
	stored.Status, stored.DecidedAt = ledger.EvidenceApplied, now
	if err := tx.PutCompensationEvidence(ctx, stored); err != nil {
		return ledger.Delegation{}, err
	}
	d.Compensation.Receipt = stored.Receipt
	return s.dischargeWithPending(ctx, tx, d, c)
}

// applyTaskEnd is ApplyEvidence for a terminal status of a held obligation
// (TaskEnd), whose correlation, idempotency and lateness ObserveTaskStatus
// already applied: it settles, releases or gates the obligation, using or
// marking unused the evidence received early (ledger/DESIGN.md §3). The
// extra remote tasks, read under the lock, gate every end but completed; a
// task an on-call person named never releases on its first end
// (gatePersonResolved).
func applyTaskEnd(ctx context.Context, tx ReceiptTx, d ledger.Delegation, ev Evidence, now time.Time) (EvidenceResult, error) {
	p, err := planTaskEnd(ctx, tx, d, ev)
	if err != nil {
		return EvidenceResult{}, err
	}
	unused, err := p.settleEarlyEvidence(ctx, tx, &d, now)
	if err != nil {
		return EvidenceResult{}, err
	}
	if p.event == ledger.EventTaskEndedGated && p.end.Org.AgentCardURL != "" && d.Remote.TaskID != "" {
		// Compensation is requested over A2A from an org whose agent
		// Quittance can reach, queued with the transition itself.
		if err := tx.EnqueueOutbound(ctx, ledger.OutboundJob{
			DelegationID: d.ID, Kind: ledger.OutboundCompensationRequest, RunAfter: now, At: now,
		}); err != nil {
			return EvidenceResult{}, err
		}
	}
	d, _, err = ledger.Apply(ctx, tx, d, p.change)
	if err != nil {
		return EvidenceResult{}, err
	}
	if p.event == ledger.EventTaskCompleted && len(p.facts.RemoteTasks) > 0 {
		// Settled: the extra tasks' effects are sought on their own,
		// beside the obligation (extratasks.go).
		if err := requireExtraCompensation(ctx, tx, d, p.facts.RemoteTasks, settlement{
			Org: p.end.Org, Class: p.end.Class, Actor: p.end.Change.Actor, At: now,
		}); err != nil {
			return EvidenceResult{}, err
		}
	}
	if unused != nil {
		if err := p.recordUnused(ctx, tx, d, *unused, now); err != nil {
			return EvidenceResult{}, err
		}
	}
	return EvidenceResult{Delegation: d, Outcome: OutcomeApplied}, nil
}

// taskEndPlan is what applyTaskEnd decided before writing: the task end
// with the extra remote tasks read under the lock, the evidence facts, the
// evidence received early (zero when none), and the change to apply with
// its obligation event and task_status_changed data.
type taskEndPlan struct {
	end    TaskEnd
	facts  EvidenceFacts
	early  ledger.StoredEvidence
	change ledger.Change
	data   *ledger.TaskStatusChangedData
	event  ledger.ObligationEvent
}

// planTaskEnd checks that ev is the newly terminal status of a held
// obligation and derives its obligation event (ledger/DESIGN.md
// § Obligation).
func planTaskEnd(ctx context.Context, tx ReceiptTx, d ledger.Delegation, ev Evidence) (taskEndPlan, error) {
	end := *ev.TaskEnd
	obs := end.Observation
	if d.ObligationState != ledger.ObligationHeld || !obs.Status.Terminal() || d.TaskStatus != obs.Status || ev.Kind != end.Kind() {
		return taskEndPlan{}, fmt.Errorf("apply %s evidence to delegation %s: the status %s is not the newly terminal status of a held obligation (%s, %s)",
			ev.Kind, d.ID, obs.Status, d.TaskStatus, d.ObligationState)
	}
	facts, err := tx.EvidenceFacts(ctx, d.ID)
	if err != nil {
		return taskEndPlan{}, fmt.Errorf("load early evidence of delegation %s: %w", d.ID, err)
	}
	early := facts.Stored // the zero value, none, when !facts.Found
	// The extra remote tasks are read here, under the lock, whatever the
	// channel said: an orchestrator's report knows nothing of them, and
	// the A2A workers leave them to this one read. The obligation event
	// is derived with them (end.Event), not from ev.Kind, which the
	// caller took from the status alone.
	end.Observation.ExtraRemoteTasks = taskIDs(facts.RemoteTasks)
	obs = end.Observation
	change := end.Change
	data, ok := change.Data.(*ledger.TaskStatusChangedData)
	if !ok {
		return taskEndPlan{}, fmt.Errorf("end of the task of delegation %s without its task_status_changed data", d.ID)
	}
	event := end.Event(early.Held())
	event = gatePersonResolved(facts, event, early.Held(), data)
	if len(obs.ExtraRemoteTasks) > 0 && event == ledger.EventTaskEndedGated {
		// Another task of the delegation may have committed effects:
		// nothing closes until compensation covers it. Early evidence
		// stays received (it answered no request naming that task).
		gated := true
		data.GateApplies, data.ExtraRemoteTasks = &gated, obs.ExtraRemoteTasks
	}
	change.Obligation = event
	change.CompensationTimeout = end.Class.CompensationTimeout
	if event == ledger.EventTaskCompleted {
		change.SettledAmountMinor = obs.SettledAmountMinor
	}
	return taskEndPlan{end: end, facts: facts, early: early, change: change, data: data, event: event}, nil
}

// settleEarlyEvidence decides the evidence received before the task
// ended: applied with the end when the event uses it, else unused (and
// returned, to be surfaced) when no extra remote task may still need it.
func (p *taskEndPlan) settleEarlyEvidence(ctx context.Context, tx ReceiptTx, d *ledger.Delegation, now time.Time) (unused *ledger.StoredEvidence, err error) {
	early := p.early
	switch {
	case ledger.UsesHeldEvidence(p.event):
		if p.event == ledger.EventTaskEndedCompensated || p.event == ledger.EventTaskEndedAcked {
			// An ack received early returns what it says it reversed, as
			// one received after the status does (at most the hold, which
			// may have been cut since).
			if p.change.ReversedAmountMinor, err = early.ReversedAmountMinor(d.Hold.AmountMinor); err != nil {
				return nil, err
			}
		}
		d.Compensation.Receipt = early.Receipt
		p.data.AppliedEvidence = &ledger.AppliedEvidence{Receipt: early.Receipt, EvidenceData: early.Data, EvidenceChannel: string(early.Channel)}
		p.change.Evidence = early.Token
		p.data.TokenAcceptance = storedTokenAcceptance(early)
		early.Status, early.DecidedAt = ledger.EvidenceApplied, now
		if err := tx.PutCompensationEvidence(ctx, early); err != nil {
			return nil, err
		}
	case early.Status == ledger.EvidenceReceived && len(p.end.Observation.ExtraRemoteTasks) == 0:
		early.Status, early.DecidedAt = ledger.EvidenceUnused, now
		if err := tx.PutCompensationEvidence(ctx, early); err != nil {
			return nil, err
		}
		unused = &early
	}
	return unused, nil
}

// recordUnused surfaces early evidence the task end did not use, for
// reconciliation: the remote org sent compensation evidence for a task
// that did not end in a way that needs it.
func (p *taskEndPlan) recordUnused(ctx context.Context, tx ReceiptTx, d ledger.Delegation, unused ledger.StoredEvidence, now time.Time) error {
	unusedData := ledger.EarlyEvidenceUnusedData{
		State: string(p.end.Observation.Status), ObligationState: string(d.ObligationState),
		EvidenceData: unused.Data, EvidenceChannel: string(unused.Channel), TokenAcceptance: storedTokenAcceptance(unused),
		ReceivedAt: unused.ReceivedAt.UTC().Format(time.RFC3339Nano),
	}
	_, err := ledger.Record(ctx, tx, d, ledger.Change{
		Type: ledger.EventTypeEarlyEvidenceUnused, Actor: p.change.Actor, At: now, Evidence: unused.Token, Data: unusedData,
	})
	return err
}

// gatePersonResolved is the rule for the first terminal status of a
// delegation whose remote task one on-call person named while its dispatch
// was unknown (facts.ResolvedByPerson; delegate.Orchestrator.ResolveDispatch):
// a rejection or an ungated end does not release the hold on what that
// resolution set in motion, and is taken as a gated end instead —
// compensation evidence received early answers it, else compensation is
// sought from the org. completed and gated ends are left as they are. It
// returns the obligation event to apply, noting the rule in data.
func gatePersonResolved(facts EvidenceFacts, event ledger.ObligationEvent, earlyHeld ledger.HeldEvidence, data *ledger.TaskStatusChangedData) ledger.ObligationEvent {
	if !facts.ResolvedByPerson || (event != ledger.EventTaskRejected && event != ledger.EventTaskEndedUngated) {
		return event
	}
	gated, _ := ledger.TerminalStatusEvent(ledger.StatusCanceled, true, earlyHeld)
	applies := true
	data.GateApplies, data.ResolvedByPerson = &applies, true
	return gated
}

// StatusEvidence is the evidence a terminal status of a held obligation is,
// for ApplyEvidence: kind what the status calls for, channel its source.
func StatusEvidence(end TaskEnd) Evidence {
	return Evidence{Kind: end.Kind(), Channel: end.Channel(), TaskEnd: &end, Actor: end.Change.Actor}
}

// ReportTaskStatus takes an orchestrator's report of the remote task
// (POST /v1/delegations/{id}/task-status), in one transaction with the
// delegation locked, its date clamped (Observation.ClampReport). On a
// delegation Quittance dispatched it is recorded as the orchestrator's word
// and asks for an observation; in record mode it goes through
// ObserveTaskStatus (ledger/DESIGN.md §2.4).
func (s *Service) ReportTaskStatus(ctx context.Context, p ledger.Principal, id uuid.UUID, obs Observation) (ledger.Delegation, error) {
	if err := ledger.Authorize(p, ledger.ActionDelegate); err != nil {
		return ledger.Delegation{}, err
	}
	if err := obs.CheckReport(); err != nil {
		return ledger.Delegation{}, err
	}
	obs.Source = SourceReport
	var out ledger.Delegation
	err := s.store.InTx(ledger.WithWriteKeys(ctx, ledger.WriteKeys{Delegations: []uuid.UUID{id}}), func(tx Tx) error {
		d, st, err := ledger.LockVisibleDispatch(ctx, tx, p, id)
		if err != nil {
			return err
		}
		now := s.now()
		obs := obs.ClampReport(now)
		if st.Dispatched {
			out, err = recordReport(ctx, tx, d, obs, p.Actor(), now)
			return err
		}
		out, err = s.ObserveTaskStatus(ctx, tx, d, obs, p.Actor(), now)
		return err
	})
	return out, err
}

// recordReport records, in tx, an orchestrator's report on d, a
// delegation Quittance dispatched, as what it is: a task_status_reported
// event with what was said. While d's task is recorded, open and its
// obligation held, Quittance is asked to observe the task itself now.
func recordReport(ctx context.Context, tx Tx, d ledger.Delegation, obs Observation, actor string, now time.Time) (ledger.Delegation, error) {
	data := ledger.TaskStatusReportedData{
		State: string(obs.Status), Source: obs.Source,
		TaskStatus: string(d.TaskStatus), ObligationState: string(d.ObligationState),
		Message: obs.Message, SettledAmountMinor: obs.SettledAmountMinor,
	}
	if !obs.Timestamp.IsZero() {
		data.Timestamp = obs.Timestamp.UTC().Format(time.RFC3339Nano)
	}
	if !obs.ReportedTimestamp.IsZero() {
		data.ReportedTimestamp = obs.ReportedTimestamp.UTC().Format(time.RFC3339Nano)
	}
	observe := d.Remote.TaskID != "" && !d.TaskStatus.Terminal() && d.ObligationState == ledger.ObligationHeld
	data.ObserveRequested = observe
	if observe {
		payload, err := json.Marshal(map[string]string{"source": SourceReportedPoll})
		if err != nil {
			return ledger.Delegation{}, err
		}
		if err := tx.EnqueueOutbound(ctx, ledger.OutboundJob{
			DelegationID: d.ID, Kind: ledger.OutboundObserve, Payload: payload, RunAfter: now, At: now,
		}); err != nil {
			return ledger.Delegation{}, err
		}
	}
	_, err := ledger.Record(ctx, tx, d, ledger.Change{Type: ledger.EventTypeTaskStatusReported, Actor: actor, At: now, Data: data})
	return d, err
}

// correlate checks that ev is about d: its task, its org and, where the
// evidence answers Quittance's request, its compensation idempotency key.
func correlate(d ledger.Delegation, ev Evidence) error {
	key := ledger.CompensationKey(d)
	if c := ev.Claims; c != nil {
		if c.Subject != d.Remote.TaskID || c.Issuer != d.OrgID {
			return Refuse(CodeTokenDelegationUnknown, "no delegation matches the token's iss and sub")
		}
		if ev.Channel != ledger.ChannelAtomicCancel && (c.Kind == KindAck || c.IdempotencyKey != "") && c.IdempotencyKey != key {
			return Refuse(CodeTokenIdempotencyKeyMismatch, "claim idempotency_key is not this delegation's compensation idempotency key")
		}
	}
	if r := ev.Receipt; r != nil {
		if r.TaskID != d.Remote.TaskID {
			return Refuse(CodeTokenDelegationUnknown, "the receipt is about another task")
		}
		if ev.Channel != ledger.ChannelAtomicCancel && r.IdempotencyKey != key {
			return Refuse(CodeTokenIdempotencyKeyMismatch, "the receipt does not carry the delegation's compensation idempotency key")
		}
	}
	if ev.Claims == nil && ev.Receipt == nil {
		return Refuse(CodeTokenMalformed, "evidence carries neither a signed token nor a receipt")
	}
	return nil
}

// receiptID is the receipt id the evidence asserts: the signed claim's,
// else the A2A receipt's.
func receiptID(ev Evidence) string {
	if ev.Claims != nil && ev.Claims.ReceiptID != "" {
		return ev.Claims.ReceiptID
	}
	if ev.Receipt != nil {
		return ev.Receipt.ReceiptID
	}
	return ""
}

// payloadSum is the sha256 of what ev asserts — its kind and receipt id —
// so the same assertion re-signed with a new jti, or sent again on another
// channel, has the same payload.
func payloadSum(ev Evidence) []byte {
	asserted := map[string]string{"kind": string(ev.Kind), "receipt_id": receiptID(ev)}
	if n := ev.ReversedAmountMinor; n != nil {
		asserted["reversed_amount_minor"] = strconv.FormatInt(*n, 10)
	}
	b, err := json.Marshal(asserted)
	if err != nil {
		panic(fmt.Sprintf("encode evidence payload: %v", err))
	}
	sum := sha256.Sum256(b)
	return sum[:]
}

// evidenceDataOf is the event data of evidence recorded at now: what the
// token claims, with its acceptance (as evidenceData), and for a receipt
// its outcome, id and task.
func evidenceDataOf(ev Evidence, sum []byte, now time.Time) ledger.EvidenceRecord {
	data := ledger.EvidenceRecord{Channel: string(ev.Channel)}
	if r := ev.Receipt; r != nil {
		data.ReceiptFacts = &ledger.ReceiptFacts{Outcome: string(r.Outcome), TaskID: r.TaskID}
		data.ReceiptID = &r.ReceiptID
	}
	if ev.Claims != nil {
		evidenceData(&data, *ev.Claims, sum, acceptedAt(ev.VerifiedAt, now))
	}
	if n := ev.ReversedAmountMinor; n != nil {
		reversed := *n
		data.ReversedAmountMinor = &reversed
	}
	return data
}

// receiptJSON is what the delegation shows as compensation.receipt: an A2A
// receipt as the agent returned it, or a posted token's Receipt.
func receiptJSON(ev Evidence, sum []byte, now time.Time) (json.RawMessage, error) {
	if ev.Receipt != nil {
		return ev.Receipt.Raw, nil
	}
	return json.Marshal(Receipt{
		Kind: string(ev.Claims.Kind), ReceiptID: ev.Claims.ReceiptID, JTI: ev.Claims.JTI,
		TokenSHA256: hex.EncodeToString(sum), ReceivedAt: now,
	})
}

// RecordRefusedEvidence appends, in tx, the event a refusal of verified
// evidence leaves on d's chain: evidence_conflict for a conflict, with the
// verified token, so finance can see what the org said the second time;
// receipt_refused for any other refusal of an A2A receipt. A posted token
// refused for another reason is no event: Submit counts it (see
// report.TokenRefusal). The
// caller runs it after the refused transaction rolled back, or in the same
// one (ApplyEvidence writes nothing before it refuses).
func RecordRefusedEvidence(ctx context.Context, tx ledger.EventAppender, d ledger.Delegation, ev Evidence, ref *RefusalError, now time.Time) error {
	c := ledger.Change{Type: ledger.EventTypeReceiptRefused, Actor: ev.Actor, At: now,
		Data: ledger.ReceiptRefusedData{Code: ref.Code, Detail: ref.Detail, Channel: string(ev.Channel), Kind: string(ev.Kind)}}
	if ref.Code == CodeEvidenceConflict {
		conflict := ledger.EvidenceConflictData{
			Code: ref.Code, Detail: ref.Detail, Channel: string(ev.Channel), Kind: string(ev.Kind), ReceiptID: receiptID(ev),
		}
		if len(ev.Token) > 0 {
			sum := sha256.Sum256(ev.Token)
			conflict.TokenSHA256 = hex.EncodeToString(sum[:])
			if ev.Claims != nil {
				// Stored as what it was verified as, when: the kind
				// member above names the obligation event it asserts.
				conflict.TokenRecord, conflict.TokenAcceptance = tokenData(*ev.Claims, sum[:], acceptedAt(ev.VerifiedAt, now))
			}
		}
		c.Type, c.Evidence, c.Data = ledger.EventTypeEvidenceConflict, string(ev.Token), conflict
	}
	_, err := ledger.Record(ctx, tx, d, c)
	return err
}

// acceptedAt is when the ledger accepted a token its channel verified at
// verifiedAt (zero: not told) and that is recorded at now: the
// verification, never after now.
func acceptedAt(verifiedAt, now time.Time) time.Time {
	if verifiedAt.IsZero() || verifiedAt.After(now) {
		return now
	}
	return ledger.StoredTime(verifiedAt)
}

// storedTokenAcceptance is what the data of an event that stores the
// token of stored (evidence received earlier) says of how the ledger
// accepted it: as its row's data says, or, for evidence stored before rows
// said it, acceptanceBeforeRowsSaidIt. It is empty when stored has no
// token.
func storedTokenAcceptance(stored ledger.StoredEvidence) ledger.TokenAcceptance {
	if stored.Token == "" {
		return ledger.TokenAcceptance{}
	}
	var rec struct {
		Kind       string    `json:"token_kind"`
		AcceptedAt time.Time `json:"token_accepted_at"`
	}
	if json.Unmarshal(stored.Data, &rec) != nil || rec.Kind == "" || rec.AcceptedAt.IsZero() {
		return acceptanceBeforeRowsSaidIt(stored)
	}
	return ledger.NewTokenAcceptance(rec.Kind, rec.AcceptedAt)
}
