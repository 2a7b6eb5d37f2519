package ledger

import (
	"context"

	"github.com/google/uuid"
)

// ChangeHold sets the hold of a held obligation to amountMinor (ledger/DESIGN.md
// §2.3): a hold is a cap on what the work may cost, and the orchestrator
// learns the price as the work goes. A raise holds the difference from the
// budget's available amount (ErrInsufficientFunds, and nothing changed,
// when it does not cover it); a cut returns the difference. The
// hold_changed event records the old and the new amount. The same amount
// again changes nothing and records nothing. In any state but held the
// change is refused with a *ConflictError (hold_not_changeable): once the
// task has ended, only the evidence of its end moves the hold. On a
// delegation Quittance dispatched, a cut is refused (CodeHoldLowerRefused,
// nothing changed) once the dispatch may have been sent, while it is
// unknown and after a cancel request (checkHoldCut, ledger/DESIGN.md §2.4):
// an orchestrator can commit money, never free it on its own word. A raise
// on a budget that no longer names the delegation's tenant is refused
// (budget_not_held_for_tenant).
func (s *Service) ChangeHold(ctx context.Context, p Principal, id uuid.UUID, amountMinor int64) (Delegation, error) {
	if err := Authorize(p, ActionDelegate); err != nil {
		return Delegation{}, err
	}
	if amountMinor <= 0 {
		return Delegation{}, Invalid("amount_minor", "must be a positive integer number of minor units")
	}
	var out Delegation
	err := s.store.InTx(WithWriteKeys(ctx, WriteKeys{Delegations: []uuid.UUID{id}}), func(tx Tx) error {
		d, st, err := LockVisibleDispatch(ctx, tx, p, id)
		if err != nil {
			return err
		}
		if d.ObligationState != ObligationHeld {
			return Conflict("hold_not_changeable", "the obligation is %s; only a held obligation's hold can change", d.ObligationState)
		}
		if d.Hold.AmountMinor == amountMinor {
			out = d
			return nil
		}
		if err := checkHoldCut(d, st, amountMinor); err != nil {
			return err
		}
		if amountMinor > d.Hold.AmountMinor {
			// A raise holds more of the budget: only while the budget
			// still names the delegation's tenant.
			b, err := tx.Budget(ctx, d.BudgetID)
			if err != nil {
				return err
			}
			if !b.HoldsFor(d.Tenant) {
				return Conflict("budget_not_held_for_tenant", "budget %s no longer names tenant %s; the hold may be cut, not raised", d.BudgetID, d.Tenant)
			}
		}
		out, _, err = Apply(ctx, tx, d, Change{Type: EventTypeHoldChanged, Actor: p.Actor(), At: s.Now(), HoldAmountMinor: amountMinor, Data: HoldChangedData{}})
		return err
	})
	return out, err
}
