package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
)

func countRows(t *testing.T, env *apitest.Env, query string, args ...any) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestCreateIsIdempotent(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.PutBudget(t, "b", "EUR", 1000)
	env.PutOrg(t, "org", false)
	env.PutOrg(t, "other-org", false)
	env.PutBudget(t, "b2", "EUR", 1000)
	orch := env.NewOrchestrator(t, "acme")
	req := apitest.NewCreateRequest("op-1", "org", "procurement", "b", 400, "EUR")
	first := env.CreateDelegation(t, orch, req)

	var again httpapi.DelegationBody
	env.Do(t, http.MethodPost, "/v1/delegations", orch, req).Expect(t, http.StatusOK).JSON(t, &again)
	if again.ID != first.ID || again.Version != first.Version {
		t.Fatalf("retry returned %s v%d, want %s v%d", again.ID, again.Version, first.ID, first.Version)
	}
	expectBudget(t, env, "b", budgetWant{available: 600, held: 400})

	// The same id with any field different is refused, and nothing is written.
	variants := map[string]func(*apitest.CreateRequest){
		"amount":      func(r *apitest.CreateRequest) { r.Hold.AmountMinor = 401 },
		"org":         func(r *apitest.CreateRequest) { r.OrgID = "other-org" },
		"budget":      func(r *apitest.CreateRequest) { r.BudgetID = "b2" },
		"task class":  func(r *apitest.CreateRequest) { r.TaskClass = "payment" },
		"remote task": func(r *apitest.CreateRequest) { r.Remote.TaskID = "another-task" },
		"context":     func(r *apitest.CreateRequest) { r.Remote.ContextID = "another-context" },
	}
	for name, change := range variants {
		r := req
		change(&r)
		before := env.Snapshot(t)
		env.Do(t, http.MethodPost, "/v1/delegations", orch, r).Problem(t, http.StatusUnprocessableEntity, "idempotency_mismatch")
		env.AssertUnchanged(t, before, "a mismatched retry ("+name+")")
	}

	// Idempotency is per tenant: another tenant may use the same operation
	// id (with its own remote task).
	other := env.NewOrchestrator(t, "globex")
	r := req
	r.Remote.TaskID = "globex-task"
	d := env.CreateDelegation(t, other, r)
	if d.ID == first.ID || d.Tenant != "globex" {
		t.Fatalf("another tenant's delegation: %+v", d)
	}
	// A remote task already recorded on another delegation is refused.
	r = apitest.NewCreateRequest("op-2", "org", "procurement", "b", 1, "EUR")
	r.Remote.TaskID = req.Remote.TaskID
	before := env.Snapshot(t)
	env.Do(t, http.MethodPost, "/v1/delegations", orch, r).Problem(t, http.StatusConflict, "remote_task_taken")
	env.AssertUnchanged(t, before, "a delegation reusing a remote task")

	// A retry is answered with what was recorded even when the request
	// could no longer be made: the org's identity was revoked since.
	env.Do(t, http.MethodPost, "/admin/v1/orgs/org/revoke-identity", env.OncallToken, map[string]any{"reason": "key leaked"}).Expect(t, http.StatusOK)
	env.Do(t, http.MethodPost, "/v1/delegations", orch, req).Expect(t, http.StatusOK).JSON(t, &again)
	if again.ID != first.ID {
		t.Fatalf("retry after revocation returned %s, want %s", again.ID, first.ID)
	}
	r = apitest.NewCreateRequest("op-3", "org", "procurement", "b", 1, "EUR")
	env.Do(t, http.MethodPost, "/v1/delegations", orch, r).Problem(t, http.StatusConflict, "org_identity_revoked")
	env.CheckInvariants(t)
}

// TestConcurrentIdenticalCreates: 20 identical requests at once make one
// delegation and one hold; one caller gets 201, the others 200 with the same id.
func TestConcurrentIdenticalCreates(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.PutBudget(t, "b", "EUR", 10_000)
	env.PutOrg(t, "org", false)
	orch := env.NewOrchestrator(t, "acme")
	req := apitest.NewCreateRequest("op-race", "org", "procurement", "b", 700, "EUR")

	const n = 20
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		resps = make([]*apitest.Response, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resps[i] = env.Do(t, http.MethodPost, "/v1/delegations", orch, req)
		}()
	}
	close(start)
	wg.Wait()

	created, ok := 0, 0
	ids := map[string]int{}
	for _, r := range resps {
		switch r.Status {
		case http.StatusCreated:
			created++
		case http.StatusOK:
			ok++
		default:
			t.Errorf("status %d: %s", r.Status, r.Body)
			continue
		}
		var d httpapi.DelegationBody
		r.JSON(t, &d)
		ids[d.ID]++
	}
	if created != 1 || ok != n-1 || len(ids) != 1 {
		t.Fatalf("%d × 201, %d × 200, ids %v; want 1 × 201, %d × 200, one id", created, ok, ids, n-1)
	}
	expectBudget(t, env, "b", budgetWant{available: 10_000 - 700, held: 700})
	if got := countRows(t, env, `SELECT count(*) FROM delegations`); got != 1 {
		t.Fatalf("%d delegations", got)
	}
	if got := countRows(t, env, `SELECT count(*) FROM budget_entries WHERE kind = 'hold'`); got != 1 {
		t.Fatalf("%d hold journal rows, want 1", got)
	}
	if got := countRows(t, env, `SELECT count(*) FROM events WHERE type = 'delegation_created'`); got != 1 {
		t.Fatalf("%d delegation_created events, want 1", got)
	}
	env.CheckInvariants(t)
}

// TestConcurrentHoldsNeverOverdraw: 50 concurrent holds of 30 on a budget
// of 1000: exactly 33 fit.
func TestConcurrentHoldsNeverOverdraw(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.PutBudget(t, "b", "EUR", 1000)
	env.PutOrg(t, "org", false)
	orch := env.NewOrchestrator(t, "acme")

	const n = 50
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		resps = make([]*apitest.Response, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resps[i] = env.Do(t, http.MethodPost, "/v1/delegations", orch,
				apitest.NewCreateRequest(fmt.Sprintf("op-%02d", i), "org", "procurement", "b", 30, "EUR"))
		}()
	}
	close(start)
	wg.Wait()
	created, refused := 0, 0
	for _, r := range resps {
		switch r.Status {
		case http.StatusCreated:
			created++
		case http.StatusUnprocessableEntity:
			r.Problem(t, http.StatusUnprocessableEntity, "insufficient_funds")
			refused++
		default:
			t.Errorf("status %d: %s", r.Status, r.Body)
		}
	}
	if created != 33 || refused != 17 {
		t.Fatalf("%d created, %d refused; want 33 and 17", created, refused)
	}
	expectBudget(t, env, "b", budgetWant{available: 10, held: 990})
	if got := countRows(t, env, `SELECT count(*) FROM delegations`); got != 33 {
		t.Fatalf("%d delegations rows, want 33: refused creates must write nothing", got)
	}
	if got := countRows(t, env, `SELECT count(*) FROM events WHERE delegation_id IS NOT NULL`); got != 33 {
		t.Fatalf("%d delegation events, want 33", got)
	}
	env.CheckInvariants(t)
}

// TestConcurrentReportsOnOneDelegation: racing terminal reports on one
// delegation apply exactly one; the other statuses are recorded as
// conflicts, repeats of the applied one append nothing, and the money moves
// once.
func TestConcurrentReportsOnOneDelegation(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.PutBudget(t, "b", "EUR", 1000)
	env.PutOrg(t, "org", false)
	orch := env.NewOrchestrator(t, "acme")
	d := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op", "org", "procurement", "b", 100, "EUR"))

	states := []string{"completed", "canceled", "rejected", "failed"}
	const n = 24
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			env.Do(t, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", orch,
				map[string]any{"state": states[i%len(states)]}).Expect(t, http.StatusOK)
		}()
	}
	close(start)
	wg.Wait()
	got := env.Delegation(t, orch, d.ID)
	wantState := map[string]string{
		"completed": "settled", "canceled": "revocation_pending_compensation",
		"failed": "revocation_pending_compensation", "rejected": "released",
	}[got.TaskStatus]
	if wantState == "" || got.ObligationState != wantState {
		t.Fatalf("after racing reports: task %s, obligation %s", got.TaskStatus, got.ObligationState)
	}
	// Each report of another terminal status than the applied one is a
	// status_conflict event; a repeat of the applied one appends nothing.
	events := env.Events(t, orch, d.ID)
	if want := 1 + 1 + (n - n/len(states)); len(events) != want {
		t.Fatalf("%d events for %d reports, want %d", len(events), n, want)
	}
	transitions, conflicts := 0, 0
	for _, e := range events {
		if e.ObligationTo != "" {
			transitions++
		}
		if e.Type == ledger.EventTypeStatusConflict {
			conflicts++
		}
	}
	if want := n - n/len(states); conflicts != want {
		t.Fatalf("%d status_conflict events, want %d", conflicts, want)
	}
	if transitions != 1 {
		t.Fatalf("%d obligation transitions, want exactly 1", transitions)
	}
	env.CheckInvariants(t)
}
