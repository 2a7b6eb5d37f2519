package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

// Change is one recorded change to a delegation: an event, and optionally
// the obligation transition it carries.
type Change struct {
	// Type is the event type.
	Type  EventType
	Actor string
	At    time.Time
	// Obligation is the obligation event to apply; empty for changes that
	// do not move the obligation (a non-terminal task status, a cancel request).
	Obligation ObligationEvent
	// CompensationTimeout sets the deadline when the obligation enters
	// revocation_pending_compensation.
	CompensationTimeout time.Duration
	// Data is the event's payload, of the payload type of Type; nil is data
	// with no members of its own.
	Data EventPayload
	// Evidence is a verbatim token the change rests on.
	Evidence string
	// NewStream says the event starts d's stream: d was inserted by this
	// transaction, so no other can have appended to its stream, and the
	// event is appended as the first without reading a head.
	NewStream bool
	// SettledAmountMinor, on a change that settles the obligation, is how
	// much of the hold the work cost: it is spent and the rest returned.
	// Nil spends the whole hold.
	SettledAmountMinor *int64
	// ReversedAmountMinor, on a change that compensates the obligation, is
	// how much of the hold the remote reversed: it returns to the budget
	// and the rest is spent, as the cost of the cancellation. Nil returns
	// the whole hold.
	ReversedAmountMinor *int64
	// HoldAmountMinor, when positive, is the new hold of an obligation
	// that stays held: the difference is held from the budget's available
	// amount (ErrInsufficientFunds when it does not cover it) or returned
	// to it.
	HoldAmountMinor int64
}

// Apply is the one writer of delegation changes (ledger/DESIGN.md §2.2).
// Inside tx it applies the obligation event (if any) to d through the
// state machine, moves the hold to match, writes d and appends exactly one
// event, so the state change, its money and its evidence commit together
// or not at all. Callers set any other fields of d (the task status)
// before calling it.
func Apply(ctx context.Context, tx ChangeTx, d Delegation, c Change) (Delegation, Event, error) {
	plan, err := planChange(&d, c)
	if err != nil {
		return Delegation{}, Event{}, err
	}
	d.Version++
	d.UpdatedAt = c.At
	if err := tx.UpdateDelegation(ctx, d); err != nil {
		return Delegation{}, Event{}, fmt.Errorf("update delegation %s: %w", d.ID, err)
	}
	e := Event{
		Stream: d.Stream(), DelegationID: d.ID, Type: c.Type, At: c.At, Actor: c.Actor,
		Evidence: c.Evidence,
	}
	if plan.to != "" {
		e.ObligationFrom, e.ObligationTo = plan.from, plan.to
	}
	e, err = appendEvent(ctx, tx, e, c.Data, plan.data)
	if err != nil {
		return Delegation{}, Event{}, err
	}
	// The budget row is the one many delegations share: it is moved last,
	// so its lock is held for the shortest time before the commit. A split
	// hold is two movements of the same row, journaled one each.
	for _, m := range plan.moves {
		if err := tx.MoveBudget(ctx, m); err != nil {
			return Delegation{}, Event{}, fmt.Errorf("move hold of delegation %s: %w", d.ID, err)
		}
	}
	return d, e, nil
}

// changePlan is what Apply writes for a change besides d: the obligation's
// move (to is empty when it stays), the budget movements, and the
// obligation members of the event's data.
type changePlan struct {
	from, to ObligationState
	moves    []BudgetMove
	data     *obligationData
}

// planChange applies c's hold change or obligation event to d and returns
// what else Apply writes for it.
func planChange(d *Delegation, c Change) (changePlan, error) {
	plan := changePlan{from: d.ObligationState}
	if c.Obligation == "" && (c.SettledAmountMinor != nil || c.ReversedAmountMinor != nil) {
		return plan, fmt.Errorf("change %s of delegation %s: an amount without a transition", c.Type, d.ID)
	}
	if c.HoldAmountMinor > 0 {
		if c.Obligation != "" || plan.from != ObligationHeld {
			return plan, Conflict("hold_not_changeable", "the obligation is %s; only a held obligation's hold can change", plan.from)
		}
		plan.resizeHold(d, c)
	}
	if c.Obligation != "" {
		if err := plan.transition(d, c); err != nil {
			return plan, err
		}
	}
	return plan, nil
}

// resizeHold raises or cuts a held obligation's hold to c.HoldAmountMinor:
// the difference is held from the budget or returned to it.
func (p *changePlan) resizeHold(d *Delegation, c Change) {
	old := d.Hold.AmountMinor
	m := BudgetMove{BudgetID: d.BudgetID, DelegationID: d.ID, Kind: MoveHold, AmountMinor: c.HoldAmountMinor - old, At: c.At}
	if c.HoldAmountMinor < old {
		m.Kind, m.AmountMinor = MoveReturn, old-c.HoldAmountMinor
	}
	if m.AmountMinor > 0 {
		p.moves = append(p.moves, m)
	}
	d.Hold.AmountMinor = c.HoldAmountMinor
	p.data = &obligationData{Hold: holdChange{
		OldAmountMinor: old, NewAmountMinor: c.HoldAmountMinor, Currency: d.Hold.Currency,
		Movement: string(m.Kind), AmountMinor: m.AmountMinor,
	}}
}

// transition moves d's obligation by c.Obligation through the state
// machine, with the hold's release and the compensation it calls for.
func (p *changePlan) transition(d *Delegation, c Change) error {
	next, reason, err := NextObligation(p.from, c.Obligation)
	if err != nil {
		return err
	}
	p.to = next
	d.ObligationState = next
	d.ObligationReason = reason
	p.data = &obligationData{ObligationEvent: &c.Obligation, Reason: &reason}
	if err := p.releaseHold(d, c); err != nil {
		return err
	}
	if next == ObligationRevocationPendingCompensation || UsesHeldEvidence(c.Obligation) {
		// Compensation is sought, or was done with the task's end.
		d.Compensation.IdempotencyKey = CompensationKey(*d)
	}
	if next == ObligationRevocationPendingCompensation {
		d.Compensation.Deadline = c.At.Add(c.CompensationTimeout)
		p.data.Compensation = &compensationDeadline{
			IdempotencyKey: d.Compensation.IdempotencyKey,
			Deadline:       d.Compensation.Deadline.UTC().Format(time.RFC3339Nano),
		}
	}
	return nil
}

// releaseHold splits the hold a transition releases by the change's
// settled or reversed amount (SplitHold); a transition that releases no
// hold only has those amounts checked.
func (p *changePlan) releaseHold(d *Delegation, c Change) error {
	kind, ok := HoldMove(p.from, p.to)
	if !ok {
		if c.SettledAmountMinor != nil || c.ReversedAmountMinor != nil {
			_, _, err := SplitHold(p.to, d.Hold.AmountMinor, c.SettledAmountMinor, c.ReversedAmountMinor)
			return err
		}
		return nil
	}
	split, _, err := SplitHold(p.to, d.Hold.AmountMinor, c.SettledAmountMinor, c.ReversedAmountMinor)
	if err != nil {
		return err
	}
	p.moves = split.Moves(*d, c.At)
	// movement and amount_minor name the whole hold's destination as they
	// always did; the split says what really moved.
	p.data.Hold = holdSplit{
		Movement: string(kind), AmountMinor: d.Hold.AmountMinor, Currency: d.Hold.Currency,
		SpentMinor: split.Spent, ReturnedMinor: split.Returned, WrittenOffMinor: split.WrittenOff,
	}
	switch p.to {
	case ObligationSettled:
		d.SettledAmountMinor = split.Spent
		p.data.SettledAmountMinor = &split.Spent
	case ObligationCompensated:
		d.ReversedAmountMinor = split.Returned
		p.data.ReversedAmountMinor = &split.Returned
	case ObligationHeld, ObligationRevocationPendingCompensation, ObligationCompensationUnconfirmed,
		ObligationEscalated, ObligationReleased, ObligationWrittenOff:
	}
	return nil
}

// Record appends an event to d's stream without changing d: the first
// event of a delegation just inserted (NewStream), and everything that is
// recorded and surfaced but never applied — late evidence, duplicates,
// stale reports, conflicts and refusals.
func Record(ctx context.Context, tx EventAppender, d Delegation, c Change) (Event, error) {
	e := Event{Stream: d.Stream(), DelegationID: d.ID, Type: c.Type, At: c.At, Actor: c.Actor, Evidence: c.Evidence}
	if c.NewStream {
		e.StreamSeq = 1
	}
	return Append(ctx, tx, e, c.Data)
}

// Append appends e to its stream with data, the payload of e's type (nil:
// none), as its JSON data: every event of the ledger, a delegation's or
// another stream's (budget, org, task class, token), is written through it.
func Append(ctx context.Context, tx EventAppender, e Event, data EventPayload) (Event, error) {
	return appendEvent(ctx, tx, e, data, nil)
}

// appendEvent is Append with, from Apply, the obligation members of the
// event's data.
func appendEvent(ctx context.Context, tx EventAppender, e Event, data EventPayload, move *obligationData) (Event, error) {
	raw, err := encodeEventData(e.Type, data, move)
	if err != nil {
		return Event{}, fmt.Errorf("encode %s event: %w", e.Type, err)
	}
	e.Data = raw
	e, err = tx.AppendEvent(ctx, e)
	if err != nil {
		return Event{}, fmt.Errorf("append %s event: %w", e.Type, err)
	}
	return e, nil
}

// CompensationKey is the delegation's compensation idempotency key: derived
// from its id alone, so it is the same on every retry, replica and restart.
func CompensationKey(d Delegation) string {
	sum := sha256.Sum256([]byte("quittance/compensation/v1:" + d.ID.String()))
	return "qc_" + hex.EncodeToString(sum[:16])
}
