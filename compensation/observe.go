package compensation

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// Observing a remote task. Every way of observing one (an orchestrator's
// report; a dispatch, message or cancel reply, a poll, a push or a stream of
// the A2A workers) goes through Service.ObserveTaskStatus, and a newly
// terminal status of a held obligation goes on from there, as evidence, to
// ApplyEvidence: the status-report path runs down through this package into
// ledger.Apply and never back up (ledger/DESIGN.md §3).

// MaxReportSkew is how far after Quittance's clock an orchestrator's
// report may be dated. A report dated later is taken as dated now (the
// date it claimed stays on its event as reported_timestamp), so no report
// can date itself past Quittance's own later observations.
const MaxReportSkew = time.Minute

// Observation is a report of the remote task's status.
type Observation struct {
	Status ledger.TaskStatus
	// Timestamp is when the remote reports the status took effect; zero
	// means "now". Older than the last applied observation means stale.
	Timestamp time.Time
	Message   string
	// SettledAmountMinor, on a completed status that settles a held
	// obligation, is how much of the hold the work cost (0 to the hold): it
	// is spent and the rest returned. Nil spends the whole hold.
	SettledAmountMinor *int64
	// ReportedTimestamp is the date a report claimed when ClampReport
	// dated it now instead (later than now + MaxReportSkew); zero
	// otherwise. It is kept on the event as reported_timestamp.
	ReportedTimestamp time.Time
	// Source names where the observation came from: api for an
	// orchestrator's report, or what the A2A workers saw (dispatch,
	// message, cancel, poll, push, stream, …).
	Source string
	// ExtraRemoteTasks names the other remote tasks the org's agent
	// created for the delegation. Their effects are unknown, so an end that
	// would release or compensate the obligation at once calls for
	// compensation instead (task_ended_gated). Observers leave it empty:
	// ApplyEvidence reads them under the delegation's lock (applyTaskEnd).
	ExtraRemoteTasks []string
	// Binding is the A2A protocol binding of the call that read the
	// status, kept on the event; "" for a push or a report.
	Binding string
}

// CheckReport checks an orchestrator's report of the remote task before
// anything is read: its message fits, and a settled amount is
// non-negative and comes only with the completed state.
func (obs Observation) CheckReport() error {
	if len(obs.Message) > ledger.MaxTextLen {
		return ledger.Invalid("message", "is at most %d characters", ledger.MaxTextLen)
	}
	if n := obs.SettledAmountMinor; n != nil && (*n < 0 || obs.Status != ledger.StatusCompleted) {
		return ledger.Invalid("settled_amount_minor", "is a non-negative integer, given only with the completed state")
	}
	return nil
}

// ClampReport returns the report obs as Quittance takes it at now: dated
// no later than now + MaxReportSkew, else dated now, with the date it
// claimed kept as ReportedTimestamp.
func (obs Observation) ClampReport(now time.Time) Observation {
	if obs.Timestamp.After(now.Add(MaxReportSkew)) {
		obs.ReportedTimestamp, obs.Timestamp = obs.Timestamp, now
	}
	return obs
}

// TaskEnd is a terminal status observed while the obligation is held: the
// evidence that settles (completed), releases (rejected, or canceled or
// failed where the gate does not apply) or gates (canceled or failed where
// it applies) the obligation. ObserveTaskStatus prepares it and hands it to
// ApplyEvidence (StatusEvidence).
type TaskEnd struct {
	// Observation is the status as observed, with the settled amount of a
	// report that settles.
	Observation Observation
	// Change is the status's task_status_changed event: type, actor, time
	// and data, without an obligation event yet.
	Change ledger.Change
	// Org and Class are what decided the gate; Class is
	// ledger.UnknownTaskClass when the class is not registered.
	Org   ledger.Org
	Class ledger.TaskClass
	// Gated says whether the gate applies to this status (ledger.GateApplies).
	Gated bool
}

// Kind is the obligation event the status calls for with no evidence in
// hand: task_completed (a settlement), task_rejected, task_ended_ungated or
// task_ended_gated. Evidence received early turns task_ended_gated into
// task_ended_acked, task_ended_declared or task_ended_compensated.
func (e TaskEnd) Kind() ledger.ObligationEvent {
	return e.Event(ledger.HeldEvidenceNone)
}

// Event is the obligation event the status calls for with the evidence
// received early (held). Extra remote tasks have unknown effects, so an end
// that would release or close the obligation at once calls for
// compensation instead (task_ended_gated); a completion still settles.
func (e TaskEnd) Event(held ledger.HeldEvidence) ledger.ObligationEvent {
	ev, _ := ledger.TerminalStatusEvent(e.Observation.Status, e.Gated, held)
	if len(e.Observation.ExtraRemoteTasks) > 0 && ev != ledger.EventTaskCompleted {
		return ledger.EventTaskEndedGated
	}
	return ev
}

// Channel is how the status came: the observation's source (api for an
// orchestrator's report; for what the A2A workers saw, dispatch, message,
// cancel, poll, push or stream, or dispatch_message_reply and
// dispatch_refused for a dispatch that ended without a task).
func (e TaskEnd) Channel() ledger.EvidenceChannel {
	return ledger.EvidenceChannel(e.Observation.Source)
}

// ObservationTx is what ObserveTaskStatus writes through: ledger.Apply's,
// plus what a terminal status needs to decide the gate, apply early
// evidence and queue a compensation request. Error contract: as
// ledger.Store.
type ObservationTx interface {
	ledger.ChangeTx
	// EvidenceTx finds evidence received before a terminal status, to
	// apply it with the status (or find it unused).
	ledger.EvidenceTx
	// GatePolicy loads what decides whether a terminal task status gates
	// d's hold (ledger.GateFacts), in one round trip; the org missing is
	// ledger.ErrNotFound.
	GatePolicy(ctx context.Context, d ledger.Delegation) (ledger.GateFacts, error)
	// DelegationDispatchForUpdate loads a delegation and locks its row
	// until the transaction ends, with what Quittance knows of its own
	// dispatch of it, in one round trip.
	DelegationDispatchForUpdate(ctx context.Context, id uuid.UUID) (ledger.Delegation, ledger.DispatchState, error)
	// EnqueueOutbound queues an outbound A2A call for the delegation, in the
	// transaction of the change that calls for it (ledger.Tx.EnqueueOutbound).
	EnqueueOutbound(ctx context.Context, j ledger.OutboundJob) error
	// MarkDelegationObserved records that the delegation's remote task was
	// observed at at: its LastObservedAt moves forward to at (never back),
	// and nothing else of the row changes, not even its version.
	MarkDelegationObserved(ctx context.Context, id uuid.UUID, at time.Time) error
}

// ObserveTaskStatus applies an observation of d's remote task inside tx,
// with d locked, by the status rules of ledger/DESIGN.md §2.1: it moves
// d's LastObservedAt to now; a repeat changes nothing else; a stale or
// contradicting status is recorded, not applied; any other is applied with
// its event. A newly terminal status of a held obligation is evidence,
// handed to ApplyEvidence as a TaskEnd, so at most once.
func (s *Service) ObserveTaskStatus(ctx context.Context, tx ReceiptTx, d ledger.Delegation, obs Observation, actor string, now time.Time) (ledger.Delegation, error) {
	at := ledger.StoredTime(obs.Timestamp)
	if obs.Timestamp.IsZero() {
		at = now
	}
	message, _ := ledger.StorableText(obs.Message)
	data := observationData(d, obs, at)
	record := func(typ ledger.EventType, data ledger.EventPayload) (ledger.Delegation, error) {
		if _, err := ledger.Record(ctx, tx, d, ledger.Change{Type: typ, Actor: actor, At: now, Data: data}); err != nil {
			return ledger.Delegation{}, err
		}
		return markObserved(ctx, tx, d, now)
	}
	if err := checkSettlement(d, obs); err != nil {
		return ledger.Delegation{}, err
	}
	switch {
	case d.TaskStatus.Terminal() && obs.Status == d.TaskStatus:
		// A terminal status is immutable, its message included: hearing
		// it again says nothing new.
		return markObserved(ctx, tx, d, now)
	case d.TaskStatus.Terminal():
		return record(ledger.EventTypeStatusConflict, ledger.StatusConflictData(data))
	case obs.Status == d.TaskStatus && message == d.TaskStatusMessage:
		// A repeat whatever its timestamp: an observation that had none
		// took Quittance's clock, and every later poll carrying the
		// agent's own, earlier, status time is still the same status.
		return markObserved(ctx, tx, d, now)
	case !d.TaskStatusAt.IsZero() && !d.TaskStatusUndated && at.Before(d.TaskStatusAt):
		// Only the agent's own dates order statuses: an undated status
		// took Quittance's clock at receipt, later than the date the
		// agent gives its next status when that came a moment after.
		return record(ledger.EventTypeTaskStatusStale, ledger.TaskStatusStaleData{
			TaskObservation: data, LastAppliedAt: d.TaskStatusAt.UTC().Format(time.RFC3339Nano),
		})
	}
	d.TaskStatus, d.TaskStatusAt, d.TaskStatusUndated, d.TaskStatusMessage = obs.Status, at, obs.Timestamp.IsZero(), message
	// The update that records the status marks the row observed too, so
	// markObserved below writes nothing more when it did.
	if now.After(d.LastObservedAt) {
		d.LastObservedAt = now
	}
	changed := &ledger.TaskStatusChangedData{TaskObservation: data}
	change := ledger.Change{Type: ledger.EventTypeTaskStatusChanged, Actor: actor, At: now, Data: changed}
	var err error
	if obs.Status.Terminal() && d.ObligationState == ledger.ObligationHeld {
		var end TaskEnd
		if end, err = taskEnd(ctx, tx, d, obs, changed, change); err == nil {
			var res EvidenceResult
			res, err = s.ApplyEvidence(ctx, tx, d, StatusEvidence(end), now)
			d = res.Delegation
		}
	} else {
		d, _, err = ledger.Apply(ctx, tx, d, change)
	}
	if err != nil {
		return ledger.Delegation{}, err
	}
	return markObserved(ctx, tx, d, now)
}

// observationData is the data of the event an observation records, its
// message as received: the event's data is cleaned when it is stored,
// keeping the raw bytes (ledger.StorableEvent).
func observationData(d ledger.Delegation, obs Observation, at time.Time) ledger.TaskObservation {
	data := ledger.TaskObservation{
		State: string(obs.Status), Timestamp: at.Format(time.RFC3339Nano), Previous: string(d.TaskStatus),
		Message: obs.Message, Source: obs.Source, Binding: obs.Binding,
	}
	if !obs.ReportedTimestamp.IsZero() {
		data.ReportedTimestamp = obs.ReportedTimestamp.UTC().Format(time.RFC3339Nano)
	}
	return data
}

// checkSettlement refuses a settled amount on anything but the report that
// settles a held obligation; a repeat of it with the same amount is a
// repeat.
func checkSettlement(d ledger.Delegation, obs Observation) error {
	n := obs.SettledAmountMinor
	if n == nil || d.ObligationState == ledger.ObligationHeld ||
		(d.ObligationState == ledger.ObligationSettled && d.SettledAmountMinor == *n) {
		return nil
	}
	return ledger.Conflict("settlement_not_applicable",
		"the obligation is %s; a settled amount applies only to the report that settles a held obligation", d.ObligationState)
}

// taskEnd decides the gate of a newly terminal status of d's held
// obligation and notes it on the status's event (changed, the data of
// change): the evidence the status is.
func taskEnd(ctx context.Context, tx ObservationTx, d ledger.Delegation, obs Observation, changed *ledger.TaskStatusChangedData, change ledger.Change) (TaskEnd, error) {
	facts, err := tx.GatePolicy(ctx, d)
	if err != nil {
		return TaskEnd{}, err
	}
	org, class := facts.Org, facts.GateClass(d)
	gated := ledger.GateApplies(class, org, obs.Status)
	changed.GateApplies = &gated
	return TaskEnd{Observation: obs, Change: change, Org: org, Class: class, Gated: gated}, nil
}

// markObserved records that d's remote task was observed at now.
func markObserved(ctx context.Context, tx ObservationTx, d ledger.Delegation, now time.Time) (ledger.Delegation, error) {
	if err := tx.MarkDelegationObserved(ctx, d.ID, now); err != nil {
		return ledger.Delegation{}, fmt.Errorf("mark delegation %s observed: %w", d.ID, err)
	}
	if now.After(d.LastObservedAt) {
		d.LastObservedAt = now
	}
	return d, nil
}
