package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
)

// budgetAnswer is what budgets show and budgets set print.
type budgetAnswer struct {
	ID             string   `json:"id"`
	Currency       string   `json:"currency"`
	FundedMinor    int64    `json:"funded_minor"`
	AvailableMinor int64    `json:"available_minor"`
	Tenants        []string `json:"tenants"`
	PendingChange  *struct {
		ID   string `json:"id"`
		Kind string `json:"kind"`
	} `json:"pending_change"`
}

// TestCLIBudgets: budgets set creates and funds a budget at once, but the
// tenants it names wait for a second on-call principal (the requester
// cannot approve them), and until then the tenant's orchestrator cannot
// hold on it; budgets show prints the tenants. Flags not given keep their
// value. Bad invocations exit 2 on one line; an orchestrator may not read
// a budget (exit 4).
func TestCLIBudgets(t *testing.T) {
	t.Parallel()
	e := startService(t)
	run := func(token string, args ...string) budgetAnswer {
		t.Helper()
		out, errOut, code := e.cli(t, token, args...)
		var a budgetAnswer
		if code != 0 || json.Unmarshal([]byte(out), &a) != nil {
			t.Fatalf("%v: exit %d %q %s", args, code, out, errOut)
		}
		return a
	}
	if _, errOut, code := e.cli(t, e.oncall, "orgs", "register", "supplier", "--name", "Supplier"); code != 0 {
		t.Fatalf("orgs register: exit %d %s", code, errOut)
	}
	orch := e.newToken(t, "--role", "orchestrator", "--tenant", "acme", "--name", "agent")
	hold := func(op string) int {
		return e.api(t, http.MethodPost, "/v1/delegations", orch, map[string]any{
			"business_operation_id": op, "org_id": "supplier", "task_class": "procurement", "budget_id": "ops",
			"hold": map[string]any{"amount_minor": 100, "currency": "EUR"}, "remote": map[string]any{"task_id": "task-" + op},
		}, nil)
	}

	a := run(e.oncall, "budgets", "set", "ops", "--currency", "EUR", "--funded-minor", "5000", "--tenants", "acme")
	if a.PendingChange == nil || a.PendingChange.Kind != "budget_tenants_update" || a.FundedMinor != 5000 || len(a.Tenants) != 0 {
		t.Fatalf("budgets set with tenants printed %+v", a)
	}
	if got := run(e.oncall, "budgets", "show", "ops"); got.FundedMinor != 5000 || got.Tenants == nil || len(got.Tenants) != 0 {
		t.Fatalf("budgets show before the approval: %+v", got)
	}
	if s := hold("op-1"); s != http.StatusUnprocessableEntity {
		t.Fatalf("a hold before the approval: %d", s)
	}
	if _, errOut, code := e.cli(t, e.oncall, "changes", "approve", a.PendingChange.ID); code != errkind.ExitAuth {
		t.Fatalf("the requester approving: exit %d %s, want 4", code, errOut)
	}
	if _, errOut, code := e.cli(t, e.oncall2, "changes", "approve", a.PendingChange.ID); code != 0 {
		t.Fatalf("changes approve: exit %d %s", code, errOut)
	}
	if got := run(e.oncall, "budgets", "show", "ops"); !slices.Equal(got.Tenants, []string{"acme"}) {
		t.Fatalf("budgets show after the approval: %+v", got)
	}
	if s := hold("op-2"); s != http.StatusCreated {
		t.Fatalf("a hold after the approval: %d", s)
	}

	// Funding alone applies at once and keeps the currency and tenants.
	if got := run(e.oncall, "budgets", "set", "ops", "--funded-minor", "6000"); got.PendingChange != nil || got.FundedMinor != 6000 ||
		got.AvailableMinor != 5900 || got.Currency != "EUR" || !slices.Equal(got.Tenants, []string{"acme"}) {
		t.Fatalf("budgets set --funded-minor printed %+v", got)
	}

	for _, args := range [][]string{
		{"budgets", "set", "ops"},
		{"budgets", "set", "nope", "--funded-minor", "1"},
		{"budgets", "set", "ops", "--funded-minor", "-1"},
	} {
		if _, errOut, code := e.cli(t, e.oncall, args...); code != exitUsage || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d %q, want 2 and one line", args, code, errOut)
		}
	}
	if _, errOut, code := e.cli(t, orch, "budgets", "show", "ops"); code != errkind.ExitAuth {
		t.Errorf("budgets show as an orchestrator: exit %d %s, want 4", code, errOut)
	}
}
