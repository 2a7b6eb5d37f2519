package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
	Data                map[string]any
	// Evidence is a verbatim token the change rests on.
	Evidence string
	// NewStream says the event starts d's stream: d was inserted by this
	// transaction, so no other can have appended to its stream, and the
	// event is appended as the first without reading a head.
	NewStream bool
}

// Apply is the one writer of delegation changes. Inside tx it applies the
// obligation event (if any) to d through the state machine, moves the hold
// to match, writes d, and appends exactly one event — so the state change,
// its money and its evidence commit together or not at all: no hold leaves
// "active" without the evidence that moved it, and every transition has
// its one event. Callers set any other fields of d (the task status)
// before calling it.
func Apply(ctx context.Context, tx ChangeTx, d Delegation, c Change) (Delegation, Event, error) {
	from := d.ObligationState
	data := map[string]any{}
	for k, v := range c.Data {
		data[k] = v
	}
	var (
		to   ObligationState
		move *BudgetMove
	)
	if c.Obligation != "" {
		next, reason, err := NextObligation(from, c.Obligation)
		if err != nil {
			return Delegation{}, Event{}, err
		}
		to = next
		d.ObligationState = next
		d.ObligationReason = reason
		data["obligation_event"] = string(c.Obligation)
		data["reason"] = reason
		if kind, ok := HoldMove(from, next); ok {
			move = &BudgetMove{BudgetID: d.BudgetID, DelegationID: d.ID, Kind: kind, AmountMinor: d.Hold.AmountMinor, At: c.At}
			data["hold"] = map[string]any{"movement": string(kind), "amount_minor": d.Hold.AmountMinor, "currency": d.Hold.Currency}
		}
		if next == ObligationRevocationPendingCompensation || UsesHeldEvidence(c.Obligation) {
			// Compensation is sought, or was done with the task's end.
			d.Compensation.IdempotencyKey = CompensationKey(d)
		}
		if next == ObligationRevocationPendingCompensation {
			d.Compensation.Deadline = c.At.Add(c.CompensationTimeout)
			data["compensation"] = map[string]any{
				"idempotency_key": d.Compensation.IdempotencyKey,
				"deadline":        d.Compensation.Deadline.UTC().Format(time.RFC3339Nano),
			}
		}
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
	if to != "" {
		e.ObligationFrom, e.ObligationTo = from, to
	}
	e, err := Append(ctx, tx, e, data)
	if err != nil {
		return Delegation{}, Event{}, err
	}
	// The budget row is the one many delegations share: it is moved last,
	// so its lock is held for the shortest time before the commit.
	if move != nil {
		if _, err := tx.MoveBudget(ctx, *move); err != nil {
			return Delegation{}, Event{}, fmt.Errorf("move hold of delegation %s: %w", d.ID, err)
		}
	}
	return d, e, nil
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

// Append appends e to its stream with data as its JSON data: every event
// of the ledger, a delegation's or another stream's (budget, org, task
// class, token), is written through it.
func Append(ctx context.Context, tx EventAppender, e Event, data map[string]any) (Event, error) {
	if data == nil {
		data = map[string]any{}
	}
	raw, err := json.Marshal(data)
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
