package ledger

import (
	"fmt"
	"time"
)

// ObligationState is Quittance's own lifecycle of a delegation: what is still
// owed after the remote task record is closed.
type ObligationState string

// The obligation states. The last four are terminal.
const (
	ObligationHeld                          ObligationState = "held"
	ObligationRevocationPendingCompensation ObligationState = "revocation_pending_compensation"
	ObligationCompensationUnconfirmed       ObligationState = "compensation_unconfirmed"
	ObligationEscalated                     ObligationState = "escalated"
	ObligationSettled                       ObligationState = "settled"
	ObligationReleased                      ObligationState = "released"
	ObligationCompensated                   ObligationState = "compensated"
	ObligationWrittenOff                    ObligationState = "written_off"
)

// ObligationStates lists every obligation state, open ones first.
var ObligationStates = []ObligationState{
	ObligationHeld, ObligationRevocationPendingCompensation, ObligationCompensationUnconfirmed,
	ObligationEscalated, ObligationSettled, ObligationReleased, ObligationCompensated, ObligationWrittenOff,
}

// ParseObligationState accepts exactly the stored names of the states.
func ParseObligationState(raw string) (ObligationState, error) {
	for _, s := range ObligationStates {
		if raw == string(s) {
			return s, nil
		}
	}
	return "", fmt.Errorf("unknown obligation state %q", raw)
}

// HoldState says where a delegation's held amount is.
type HoldState string

// The hold states: the money is held, spent on completed work, returned to
// the budget, or lost to a write-off.
const (
	HoldActive   HoldState = "active"
	HoldConsumed HoldState = "consumed"
	HoldReturned HoldState = "returned"
	HoldLost     HoldState = "lost"
)

// Hold reports where the hold is while the obligation is in state s.
func (s ObligationState) Hold() HoldState {
	switch s {
	case ObligationHeld, ObligationRevocationPendingCompensation, ObligationCompensationUnconfirmed, ObligationEscalated:
		return HoldActive
	case ObligationSettled:
		return HoldConsumed
	case ObligationReleased, ObligationCompensated:
		return HoldReturned
	case ObligationWrittenOff:
		return HoldLost
	}
	return HoldActive
}

// Terminal reports whether the obligation is over: its hold has left
// "active" for good.
func (s ObligationState) Terminal() bool { return s.Hold() != HoldActive }

// ObligationEvent is something that may move an obligation. Each names one
// kind of evidence; nothing else moves an obligation.
type ObligationEvent string

// The obligation events.
const (
	// EventTaskCompleted: the remote task reached completed.
	EventTaskCompleted ObligationEvent = "task_completed"
	// EventTaskRejected: the remote task was rejected before any work.
	EventTaskRejected ObligationEvent = "task_rejected"
	// EventTaskEndedUngated: canceled or failed, and the gate does not apply.
	EventTaskEndedUngated ObligationEvent = "task_ended_ungated"
	// EventTaskEndedCompensated: canceled or failed, the gate applies, and an
	// atomic cancel-and-compensate receipt came with the task (in the cancel
	// reply, or on the task as fetched).
	EventTaskEndedCompensated ObligationEvent = "task_ended_compensated"
	// EventTaskEndedGated: canceled or failed, and the gate applies.
	EventTaskEndedGated ObligationEvent = "task_ended_gated"
	// EventTaskEndedAcked: canceled or failed, the gate applies, and a
	// compensation ack was received before the status (early evidence).
	EventTaskEndedAcked ObligationEvent = "task_ended_acked"
	// EventTaskEndedDeclared: canceled or failed, the gate applies, and a
	// verified declaration was received before the status (early evidence,
	// or a declaration that came with the task).
	EventTaskEndedDeclared ObligationEvent = "task_ended_declared"
	// EventCompensationAck: the remote org acknowledged compensation.
	EventCompensationAck ObligationEvent = "compensation_ack"
	// EventDeclarationVerified: a signed no_compensation_required declaration verified.
	EventDeclarationVerified ObligationEvent = "declaration_verified"
	// EventCompensationUnconfirmed: the deadline passed, retries were
	// exhausted, or the remote org was unreachable.
	EventCompensationUnconfirmed ObligationEvent = "compensation_unconfirmed"
	// EventIdentityRevoked: the remote org's agent identity was revoked.
	EventIdentityRevoked ObligationEvent = "identity_revoked"
	// EventWriteOffApproved: an on-call human's write-off was executed.
	EventWriteOffApproved ObligationEvent = "write_off_approved"
)

// ObligationEvents lists every obligation event.
var ObligationEvents = []ObligationEvent{
	EventTaskCompleted, EventTaskRejected, EventTaskEndedUngated, EventTaskEndedCompensated,
	EventTaskEndedGated, EventTaskEndedAcked, EventTaskEndedDeclared, EventCompensationAck, EventDeclarationVerified, EventCompensationUnconfirmed,
	EventIdentityRevoked, EventWriteOffApproved,
}

// Reasons recorded with a transition into a terminal or waiting state.
const (
	ReasonCompleted              = "completed"
	ReasonRejectedBeforeWork     = "rejected_before_work"
	ReasonGateNotRequired        = "gate_not_required"
	ReasonAtomicCompensation     = "atomic_compensation_receipt"
	ReasonCompensationRequired   = "compensation_required"
	ReasonCompensationAcked      = "compensation_acknowledged"
	ReasonNoCompensationDeclared = "no_compensation_declared"
	ReasonCompensationUnconfirm  = "compensation_unconfirmed"
	ReasonIdentityRevoked        = "identity_revoked"
	ReasonWrittenOff             = "written_off"
)

// TransitionError reports an obligation event that is not allowed from the
// obligation's current state.
type TransitionError struct {
	From  ObligationState
	Event ObligationEvent
}

// Error implements error.
func (e *TransitionError) Error() string {
	return fmt.Sprintf("obligation in state %s cannot take event %s", e.From, e.Event)
}

// NextObligation is the obligation state machine: the state that event ev
// moves an obligation in state from to, and the reason recorded with it.
// It is the whole transition table: every pair it does not list is refused
// with a *TransitionError.
func NextObligation(from ObligationState, ev ObligationEvent) (ObligationState, string, error) {
	refuse := func() (ObligationState, string, error) { return "", "", &TransitionError{From: from, Event: ev} }
	switch from {
	case ObligationHeld:
		switch ev {
		case EventTaskCompleted:
			return ObligationSettled, ReasonCompleted, nil
		case EventTaskRejected:
			return ObligationReleased, ReasonRejectedBeforeWork, nil
		case EventTaskEndedUngated:
			return ObligationReleased, ReasonGateNotRequired, nil
		case EventTaskEndedCompensated:
			return ObligationCompensated, ReasonAtomicCompensation, nil
		case EventTaskEndedGated:
			return ObligationRevocationPendingCompensation, ReasonCompensationRequired, nil
		case EventTaskEndedAcked:
			return ObligationCompensated, ReasonCompensationAcked, nil
		case EventTaskEndedDeclared:
			return ObligationReleased, ReasonNoCompensationDeclared, nil
		case EventIdentityRevoked:
			return ObligationEscalated, ReasonIdentityRevoked, nil
		}
	case ObligationRevocationPendingCompensation:
		switch ev {
		case EventCompensationAck:
			return ObligationCompensated, ReasonCompensationAcked, nil
		case EventDeclarationVerified:
			return ObligationReleased, ReasonNoCompensationDeclared, nil
		case EventCompensationUnconfirmed:
			return ObligationCompensationUnconfirmed, ReasonCompensationUnconfirm, nil
		case EventIdentityRevoked:
			return ObligationEscalated, ReasonIdentityRevoked, nil
		case EventWriteOffApproved:
			return ObligationWrittenOff, ReasonWrittenOff, nil
		}
	case ObligationCompensationUnconfirmed:
		switch ev {
		case EventCompensationAck:
			return ObligationCompensated, ReasonCompensationAcked, nil
		case EventDeclarationVerified:
			return ObligationReleased, ReasonNoCompensationDeclared, nil
		case EventIdentityRevoked:
			return ObligationEscalated, ReasonIdentityRevoked, nil
		case EventWriteOffApproved:
			return ObligationWrittenOff, ReasonWrittenOff, nil
		}
	case ObligationEscalated:
		if ev == EventWriteOffApproved {
			return ObligationWrittenOff, ReasonWrittenOff, nil
		}
	case ObligationSettled, ObligationReleased, ObligationCompensated, ObligationWrittenOff:
		// Terminal: nothing moves a finished obligation.
	}
	return refuse()
}

// HeldEvidence is the compensation evidence already in hand when a
// terminal status reaches a held obligation.
type HeldEvidence string

// The kinds of evidence in hand at a terminal status.
const (
	// HeldEvidenceNone: no evidence arrived before the status.
	HeldEvidenceNone HeldEvidence = ""
	// HeldEvidenceAtomicAck: a compensated receipt that came with the task
	// (atomic cancel-and-compensate).
	HeldEvidenceAtomicAck HeldEvidence = "atomic_ack"
	// HeldEvidenceAck: a compensation ack received early.
	HeldEvidenceAck HeldEvidence = "ack"
	// HeldEvidenceDeclaration: a verified declaration received early.
	HeldEvidenceDeclaration HeldEvidence = "declaration"
)

// HeldEvidences lists every kind of evidence in hand, none first.
var HeldEvidences = []HeldEvidence{HeldEvidenceNone, HeldEvidenceAtomicAck, HeldEvidenceAck, HeldEvidenceDeclaration}

// TerminalStatusEvent is the obligation event a terminal task status raises,
// given whether the gate applies and what compensation evidence was already
// in hand. Evidence matters only where compensation is due (canceled or
// failed, gated); elsewhere it goes unused. A non-terminal status raises
// none (ok is false).
func TerminalStatusEvent(status TaskStatus, gated bool, held HeldEvidence) (ev ObligationEvent, ok bool) {
	switch status {
	case StatusCompleted:
		return EventTaskCompleted, true
	case StatusRejected:
		return EventTaskRejected, true
	case StatusCanceled, StatusFailed:
		if !gated {
			return EventTaskEndedUngated, true
		}
		switch held {
		case HeldEvidenceAtomicAck:
			return EventTaskEndedCompensated, true
		case HeldEvidenceAck:
			return EventTaskEndedAcked, true
		case HeldEvidenceDeclaration:
			return EventTaskEndedDeclared, true
		case HeldEvidenceNone:
		}
		return EventTaskEndedGated, true
	case StatusUnknown, StatusSubmitted, StatusWorking, StatusInputRequired, StatusAuthRequired:
	}
	return "", false
}

// UsesHeldEvidence reports whether ev is a terminal-status event that
// applies the evidence in hand.
func UsesHeldEvidence(ev ObligationEvent) bool {
	return ev == EventTaskEndedCompensated || ev == EventTaskEndedAcked || ev == EventTaskEndedDeclared
}

// BudgetMoveKind names a movement of money between a budget's columns.
type BudgetMoveKind string

// The budget movements. Each moves an amount out of one column into another,
// so funded never changes except by funding.
const (
	MoveFund     BudgetMoveKind = "fund"      // funded and available change together
	MoveHold     BudgetMoveKind = "hold"      // available → held
	MoveSpend    BudgetMoveKind = "spend"     // held → spent
	MoveReturn   BudgetMoveKind = "return"    // held → available
	MoveWriteOff BudgetMoveKind = "write_off" // held → written_off
)

// Valid reports whether k is one of the budget movements.
func (k BudgetMoveKind) Valid() bool {
	switch k {
	case MoveFund, MoveHold, MoveSpend, MoveReturn, MoveWriteOff:
		return true
	}
	return false
}

// HoldMove is the budget movement that accompanies an obligation moving
// from one state to another; ok is false when the hold does not move.
func HoldMove(from, to ObligationState) (kind BudgetMoveKind, ok bool) {
	if from.Hold() != HoldActive {
		return "", false
	}
	switch to.Hold() {
	case HoldConsumed:
		return MoveSpend, true
	case HoldReturned:
		return MoveReturn, true
	case HoldLost:
		return MoveWriteOff, true
	case HoldActive:
	}
	return "", false
}

// HoldSplit is where a hold goes when the obligation leaves active: each
// part is one budget movement out of held, and the parts add up to the
// hold.
type HoldSplit struct {
	Spent, Returned, WrittenOff int64
}

// Moves returns the split as the budget movements of delegation d's hold
// at at, the spend first, leaving out the parts that are zero.
func (s HoldSplit) Moves(d Delegation, at time.Time) []BudgetMove {
	var out []BudgetMove
	for _, part := range []struct {
		kind   BudgetMoveKind
		amount int64
	}{{MoveSpend, s.Spent}, {MoveReturn, s.Returned}, {MoveWriteOff, s.WrittenOff}} {
		if part.amount > 0 {
			out = append(out, BudgetMove{BudgetID: d.BudgetID, DelegationID: d.ID, Kind: part.kind, AmountMinor: part.amount, At: at})
		}
	}
	return out
}

// SplitHold says where a hold of hold minor units goes when an obligation
// moves from an active state to state to (ledger/DESIGN.md §2.3): settled
// spends settled of it (the whole hold when nil) and returns the rest;
// compensated returns reversed of it (the whole hold when nil) and spends
// the rest, as the cost of the cancellation; released returns it all;
// written_off writes it all off. An amount outside 0..hold, or one given
// for a state that takes none, is a *ValidationError naming the field
// (settled_amount_minor, reversed_amount_minor). ok is false when the hold
// does not leave active.
func SplitHold(to ObligationState, hold int64, settled, reversed *int64) (split HoldSplit, ok bool, err error) {
	part := func(field string, amount *int64) (int64, error) {
		if amount == nil {
			return hold, nil
		}
		if *amount < 0 || *amount > hold {
			return 0, Invalid(field, "must be an integer from 0 to the hold (%d)", hold)
		}
		return *amount, nil
	}
	if settled != nil && to != ObligationSettled {
		return HoldSplit{}, false, Invalid("settled_amount_minor", "applies only when the obligation settles")
	}
	if reversed != nil && to != ObligationCompensated {
		return HoldSplit{}, false, Invalid("reversed_amount_minor", "applies only when the obligation is compensated")
	}
	switch to {
	case ObligationSettled:
		n, err := part("settled_amount_minor", settled)
		if err != nil {
			return HoldSplit{}, false, err
		}
		return HoldSplit{Spent: n, Returned: hold - n}, true, nil
	case ObligationCompensated:
		n, err := part("reversed_amount_minor", reversed)
		if err != nil {
			return HoldSplit{}, false, err
		}
		return HoldSplit{Spent: hold - n, Returned: n}, true, nil
	case ObligationReleased:
		return HoldSplit{Returned: hold}, true, nil
	case ObligationWrittenOff:
		return HoldSplit{WrittenOff: hold}, true, nil
	case ObligationHeld, ObligationRevocationPendingCompensation, ObligationCompensationUnconfirmed, ObligationEscalated:
	}
	return HoldSplit{}, false, nil
}
