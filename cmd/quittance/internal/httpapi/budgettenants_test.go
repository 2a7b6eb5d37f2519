package httpapi_test

import (
	"bytes"
	"net/http"
	"slices"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
)

// sameRefusal fails unless a and b are the same answer: status, problem
// content type and body, byte for byte.
func sameRefusal(t *testing.T, what string, a, b *apitest.Response) {
	t.Helper()
	if a.Status != b.Status || a.Header.Get("Content-Type") != b.Header.Get("Content-Type") || !bytes.Equal(a.Body, b.Body) {
		t.Fatalf("%s: answered\n  %d %s %s\nand\n  %d %s %s", what,
			a.Status, a.Header.Get("Content-Type"), a.Body, b.Status, b.Header.Get("Content-Type"), b.Body)
	}
}

// TestForeignBudgetRefusedAsNonexistent: an orchestrator of tenant globex
// that names tenant acme's budget is answered exactly as when that budget
// did not exist, byte for byte (with a known org and with an unknown one,
// so not even an org's existence tells the budget's); acme's budget does
// not move. A tenant the budget no longer names may cut its hold, never
// raise it.
func TestForeignBudgetRefusedAsNonexistent(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	e.PutOrg(t, "org-b", false)
	acme, globex := e.NewOrchestrator(t, "acme"), e.NewOrchestrator(t, "globex")
	create := func(op, org string) *apitest.Response {
		return e.Do(t, http.MethodPost, "/v1/delegations", globex, apitest.NewCreateRequest(op, org, "procurement", "acme-ops", 100, "EUR"))
	}
	missing, missingOrg := create("op-1", "org-b"), create("op-2", "org-nope")
	missing.Problem(t, http.StatusUnprocessableEntity, "budget_not_found")

	budget := e.PutBudgetFor(t, "acme-ops", "EUR", 10_000, "acme")
	sameRefusal(t, "globex's hold on acme's budget, and on no budget", create("op-1", "org-b"), missing)
	sameRefusal(t, "globex's hold on acme's budget at an unknown org, and on no budget", create("op-2", "org-nope"), missingOrg)
	if after := e.Budget(t, "acme-ops"); after != budget {
		t.Fatalf("acme's budget moved: %+v, was %+v", after, budget)
	}
	// acme itself holds on it.
	e.CreateDelegation(t, acme, apitest.NewCreateRequest("op-a", "org-b", "procurement", "acme-ops", 100, "EUR"))

	// A budget that stops naming a tenant: its holds may be cut, not raised.
	e.PutBudgetFor(t, "shared", "EUR", 10_000, "acme", "globex")
	d := e.CreateDelegation(t, globex, apitest.NewCreateRequest("op-g", "org-b", "procurement", "shared", 500, "EUR"))
	e.PutBudgetFor(t, "shared", "EUR", 10_000, "acme")
	before := e.Budget(t, "shared")
	e.Do(t, http.MethodPatch, "/v1/delegations/"+d.ID+"/hold", globex, map[string]any{"amount_minor": 600}).
		Problem(t, http.StatusConflict, "budget_not_held_for_tenant")
	if after := e.Budget(t, "shared"); after != before {
		t.Fatalf("a refused raise moved the budget: %+v, was %+v", after, before)
	}
	e.Do(t, http.MethodPatch, "/v1/delegations/"+d.ID+"/hold", globex, map[string]any{"amount_minor": 400}).Expect(t, http.StatusOK)
	if got := e.Budget(t, "shared"); got.HeldMinor != 400 {
		t.Fatalf("after the cut the budget holds %d, want 400", got.HeldMinor)
	}
}

// TestNoBalanceOracleAcrossTenants: an orchestrator that probes another
// tenant's budget with holds of every size (the binary search that
// insufficient_funds allowed) gets one answer, the same for each amount and
// the same as for a budget that does not exist, and holds nothing.
func TestNoBalanceOracleAcrossTenants(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	e.PutOrg(t, "org-b", false)
	globex := e.NewOrchestrator(t, "globex")
	probe := func(budget string, amount int64) *apitest.Response {
		return e.Do(t, http.MethodPost, "/v1/delegations", globex, apitest.NewCreateRequest("probe", "org-b", "procurement", budget, amount, "EUR"))
	}
	nowhere := probe("acme-ops", 1)
	nowhere.Problem(t, http.StatusUnprocessableEntity, "budget_not_found")
	budget := e.PutBudgetFor(t, "acme-ops", "EUR", 5_000, "acme")
	for _, amount := range []int64{1, 2_500, 4_999, 5_000, 5_001, 10_000, 1 << 40} {
		r := probe("acme-ops", amount)
		// Only the amount differs from the first probe, and the answer
		// names the budget, not the amount.
		if r.Status != nowhere.Status || !bytes.Equal(r.Body, nowhere.Body) {
			t.Fatalf("a hold of %d on acme's budget: %d %s, want the answer for no budget: %d %s",
				amount, r.Status, r.Body, nowhere.Status, nowhere.Body)
		}
	}
	if after := e.Budget(t, "acme-ops"); after != budget {
		t.Fatalf("the probes moved acme's budget: %+v, was %+v", after, budget)
	}
	// An orchestrator may not read a budget at all, whoever's it is and
	// whether or not it exists.
	for _, id := range []string{"acme-ops", "no-such-budget"} {
		e.Do(t, http.MethodGet, "/admin/v1/budgets/"+id, globex, nil).Problem(t, http.StatusForbidden, "forbidden")
	}
}

// TestBudgetTenantsTwoPerson: outside dev, naming a budget's tenants is a
// change one on-call principal asks for and a different one approves.
// Until then it has no effect: a new budget (funded at once) holds for
// nobody, and an existing one keeps the tenants it had. The requester may
// not approve it.
func TestBudgetTenantsTwoPerson(t *testing.T) {
	t.Parallel()
	e := newProdEnv(t)
	hold := func(token, op, budget string) *apitest.Response {
		return e.Do(t, http.MethodPost, "/v1/delegations", token, apitest.NewCreateRequest(op, orgB, "procurement", budget, 100, "EUR"))
	}
	var asked httpapi.BudgetView
	e.Do(t, http.MethodPut, "/admin/v1/budgets/team", e.alice.Token, map[string]any{"currency": "EUR", "funded_minor": 9_000, "tenants": []string{"acme"}}).
		Expect(t, http.StatusAccepted).JSON(t, &asked)
	if asked.PendingChange == nil || asked.PendingChange.Kind != "budget_tenants_update" || len(asked.Tenants) != 0 || asked.FundedMinor != 9_000 {
		t.Fatalf("the answer to a new budget naming acme: %+v", asked)
	}
	hold(e.orch, "t-1", "team").Problem(t, http.StatusUnprocessableEntity, "budget_not_found")
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+asked.PendingChange.ID+"/approve", e.alice.Token, nil).
		Problem(t, http.StatusForbidden, "self_approval")
	hold(e.orch, "t-2", "team").Problem(t, http.StatusUnprocessableEntity, "budget_not_found")
	e.Approve(t, e.bob.Token, asked.PendingChange.ID)
	if got := tenantsOf(t, e.Env, "team", e.alice.Token); !slices.Equal(got, []string{"acme"}) {
		t.Fatalf("after bob's approval the budget names %q", got)
	}
	e.CreateDelegation(t, e.orch, apitest.NewCreateRequest("t-3", orgB, "procurement", "team", 100, "EUR"))

	// Taking acme off waits for approval too; acme holds on it meanwhile.
	var off httpapi.BudgetView
	e.Do(t, http.MethodPut, "/admin/v1/budgets/team", e.bob.Token, map[string]any{"currency": "EUR", "funded_minor": 9_000, "tenants": []string{"umbrella"}}).
		Expect(t, http.StatusAccepted).JSON(t, &off)
	if !slices.Equal(off.Tenants, []string{"acme"}) {
		t.Fatalf("a pending change of the tenants showed %q", off.Tenants)
	}
	e.CreateDelegation(t, e.orch, apitest.NewCreateRequest("t-4", orgB, "procurement", "team", 100, "EUR"))
	// The same PUT without tenants changes only the funding, at once.
	e.Do(t, http.MethodPut, "/admin/v1/budgets/team", e.bob.Token, map[string]any{"currency": "EUR", "funded_minor": 9_500}).Expect(t, http.StatusOK)
	e.Approve(t, e.alice.Token, off.PendingChange.ID)
	hold(e.orch, "t-5", "team").Problem(t, http.StatusUnprocessableEntity, "budget_not_found")
	if got := tenantsOf(t, e.Env, "team", e.alice.Token); !slices.Equal(got, []string{"umbrella"}) {
		t.Fatalf("after the approval the budget names %q", got)
	}
}

// TestFreshTenantHoldsOnNothing: outside dev one on-call principal creates
// the first orchestrator of a fresh tenant alone; that orchestrator can
// hold on no budget, whichever it names, until a budget names its tenant
// (a change a second on-call principal approves).
func TestFreshTenantHoldsOnNothing(t *testing.T) {
	t.Parallel()
	e := newProdEnv(t)
	fresh := mint(t, e.Env, e.alice.Token, map[string]any{"role": "orchestrator", "tenant": "newco", "name": "newco-agent"}, http.StatusCreated).Token
	before := budgetAs(t, e.Env, budgetID, e.alice.Token)
	for i, b := range []string{budgetID, "no-such-budget"} {
		e.Do(t, http.MethodPost, "/v1/delegations", fresh, apitest.NewCreateRequest("n-"+string(rune('a'+i)), orgB, "procurement", b, 100, "EUR")).
			Problem(t, http.StatusUnprocessableEntity, "budget_not_found")
	}
	if after := budgetAs(t, e.Env, budgetID, e.alice.Token); after != before {
		t.Fatalf("the fresh tenant's attempts moved the budget: %+v, was %+v", after, before)
	}
	// alice alone cannot change that.
	var asked httpapi.BudgetView
	e.Do(t, http.MethodPut, "/admin/v1/budgets/"+budgetID, e.alice.Token, map[string]any{"currency": "EUR", "funded_minor": funded, "tenants": []string{"acme", "newco"}}).
		Expect(t, http.StatusAccepted).JSON(t, &asked)
	e.Do(t, http.MethodPost, "/v1/delegations", fresh, apitest.NewCreateRequest("n-c", orgB, "procurement", budgetID, 100, "EUR")).
		Problem(t, http.StatusUnprocessableEntity, "budget_not_found")
	e.Approve(t, e.bob.Token, asked.PendingChange.ID)
	e.CreateDelegation(t, fresh, apitest.NewCreateRequest("n-d", orgB, "procurement", budgetID, 100, "EUR"))

	// A tenant a budget names is in use: its first orchestrator takes a
	// second person too, or one person could create a credential that
	// spends the budget.
	e.Do(t, http.MethodPut, "/admin/v1/budgets/"+budgetID, e.alice.Token, map[string]any{"currency": "EUR", "funded_minor": funded, "tenants": []string{"acme", "later", "newco"}}).
		Expect(t, http.StatusAccepted).JSON(t, &asked)
	e.Approve(t, e.bob.Token, asked.PendingChange.ID)
	if got := mint(t, e.Env, e.alice.Token, map[string]any{"role": "orchestrator", "tenant": "later", "name": "later-agent"}, http.StatusAccepted); got.PendingChange == nil {
		t.Fatalf("the first orchestrator of a tenant a budget names: %+v, want a pending change", got)
	}
}

func budgetView(t *testing.T, e *apitest.Env, budget, token string) httpapi.BudgetView {
	t.Helper()
	var b httpapi.BudgetView
	e.Do(t, http.MethodGet, "/admin/v1/budgets/"+budget, token, nil).Expect(t, http.StatusOK).JSON(t, &b)
	return b
}

func budgetAs(t *testing.T, e *apitest.Env, budget, token string) httpapi.BudgetBody {
	t.Helper()
	return budgetView(t, e, budget, token).BudgetBody
}

func tenantsOf(t *testing.T, e *apitest.Env, budget, token string) []string {
	t.Helper()
	return budgetView(t, e, budget, token).Tenants
}
