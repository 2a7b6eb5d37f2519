package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ChangeBudgetTenants names the tenants whose orchestrators may hold on a
// budget. Whoever may hold on a budget may spend it (a report of completed
// settles the hold), so naming a tenant is a privileged change.
const ChangeBudgetTenants ChangeKind = "budget_tenants_update"

// maxBudgetTenants caps the tenants one budget names.
const maxBudgetTenants = 100

type budgetTenantsPayload struct {
	ID      string   `json:"id"`
	Tenants []string `json:"tenants"`
	// Base is the budget's list when the change was asked for; the
	// approval is refused if it changed since, so an approver never
	// applies a list decided against another one.
	Base []string `json:"base"`
}

// HoldsFor reports whether orchestrators of tenant may hold on b: the one
// rule for which budget a delegation may hold on, or raise a hold on.
func (b Budget) HoldsFor(tenant string) bool {
	return tenant != "" && slices.Contains(b.Tenants, tenant)
}

// budgetTenants checks a requested tenant list and returns it sorted
// without duplicates, the form stored and compared.
func budgetTenants(ts []string) ([]string, error) {
	if len(ts) > maxBudgetTenants {
		return nil, Invalid("tenants", "names at most %d tenants", maxBudgetTenants)
	}
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		if err := CheckID("tenants", t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// setBudgetTenants names tenants on budget b in tx, a privileged change
// (ApplyOrRequest): at once where p may make it alone, otherwise as a
// pending budget_tenants_update change, which it returns. A list equal to
// b's changes nothing.
func (s *Service) setBudgetTenants(ctx context.Context, tx Tx, p Principal, b *Budget, tenants []string, now time.Time) (*PendingChange, error) {
	if slices.Equal(tenants, b.Tenants) {
		return nil, nil
	}
	pl := budgetTenantsPayload{ID: b.ID, Tenants: tenants, Base: nonNil(b.Tenants)}
	req := ChangeRequest{By: p, At: now, Kind: ChangeBudgetTenants, Target: "budget:" + b.ID, Payload: pl,
		Summary: fmt.Sprintf("let tenants [%s] hold on budget %s (now [%s])", strings.Join(tenants, ", "), b.ID, strings.Join(b.Tenants, ", "))}
	return s.ApplyOrRequest(ctx, tx, p, req, func() error {
		return s.applyBudgetTenants(ctx, tx, b, pl, applied{actor: p.Actor(), at: now})
	})
}

// applyBudgetTenants stores pl's list on b, with its budget_tenants_changed
// event on the budget's stream.
func (s *Service) applyBudgetTenants(ctx context.Context, tx Tx, b *Budget, pl budgetTenantsPayload, by applied) error {
	if err := tx.SetBudgetTenants(ctx, b.ID, pl.Tenants, by.at); err != nil {
		return err
	}
	data := BudgetTenantsChangedData{Tenants: nonNil(pl.Tenants), PreviousTenants: nonNil(b.Tenants), PendingChangeID: by.change}
	b.Tenants, b.UpdatedAt = pl.Tenants, by.at
	_, err := Append(ctx, tx, Event{Stream: "budget:" + b.ID, Type: EventTypeBudgetTenantsChanged, At: by.at, Actor: by.actor}, data)
	return err
}

// applyBudgetTenantsChange applies an approved budget_tenants_update.
func (s *Service) applyBudgetTenantsChange(ctx context.Context, tx Tx, p Principal, c PendingChange, now time.Time) (string, error) {
	pl, err := DecodeChangePayload[budgetTenantsPayload](c)
	if err != nil {
		return "", err
	}
	if pl.Tenants, err = budgetTenants(pl.Tenants); err != nil {
		return "", err
	}
	b, err := tx.BudgetForUpdate(ctx, pl.ID)
	if err != nil {
		return "", err
	}
	if !slices.Equal(b.Tenants, pl.Base) {
		return "", Conflict("budget_changed", "budget %s's tenants changed since the change was asked for; ask again", pl.ID)
	}
	return "", s.applyBudgetTenants(ctx, tx, &b, pl, applied{actor: p.Actor(), at: now, change: c.ID.String()})
}

// BudgetTenantsUpdate is what a budget_tenants_update change applies: the
// budget and its tenant list as it will be. ok is false for any other
// kind.
func (c PendingChange) BudgetTenantsUpdate() (budgetID string, tenants []string, ok bool) {
	var pl budgetTenantsPayload
	if c.Kind != ChangeBudgetTenants || json.Unmarshal(c.Payload, &pl) != nil {
		return "", nil, false
	}
	return pl.ID, pl.Tenants, true
}

func nonNil(ts []string) []string {
	if ts == nil {
		return []string{}
	}
	return ts
}
