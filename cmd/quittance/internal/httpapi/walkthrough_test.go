package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
)

// TestREADMEWalkthrough follows the first part of the walk-through in
// README.md, in process and with a fake clock: a canceled procurement
// delegation is held in revocation_pending_compensation, with its budget
// still held, and time alone does not move it. (cmd/quittance's
// TestDocWalkthroughs runs the walk-through itself, as written.)
func TestREADMEWalkthrough(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)

	r := env.Do(t, http.MethodPut, "/admin/v1/budgets/procurement-eu", env.OncallToken,
		`{"currency":"EUR","funded_minor":1000000,"tenants":["buyers"]}`).Expect(t, http.StatusCreated)
	var budget httpapi.BudgetBody
	r.JSON(t, &budget)
	if budget.FundedMinor != 1_000_000 || budget.AvailableMinor != 1_000_000 || budget.HeldMinor != 0 {
		t.Fatalf("new budget: %+v", budget)
	}
	env.Do(t, http.MethodPut, "/admin/v1/orgs/acme-supplies", env.OncallToken,
		`{"name":"ACME Supplies","shared_coordinator":false}`).Expect(t, http.StatusCreated)
	var tok struct {
		ID, Token, Role, Tenant string
	}
	env.Do(t, http.MethodPost, "/admin/v1/tokens", env.OncallToken,
		`{"role":"orchestrator","tenant":"buyers","name":"procurement-agent"}`).Expect(t, http.StatusCreated).JSON(t, &tok)
	if tok.Token == "" || tok.Role != "orchestrator" || tok.Tenant != "buyers" {
		t.Fatalf("token response: %+v", tok)
	}
	orch := tok.Token

	create := `{
    "business_operation_id": "po-2026-0042",
    "org_id": "acme-supplies", "task_class": "procurement", "budget_id": "procurement-eu",
    "hold": {"amount_minor": 125000, "currency": "EUR"},
    "remote": {"task_id": "acme-task-17", "context_id": "ctx-po-42"}}`
	var d httpapi.DelegationBody
	env.Do(t, http.MethodPost, "/v1/delegations", orch, create).Expect(t, http.StatusCreated).JSON(t, &d)
	if d.ID == "" || d.Tenant != "buyers" || d.TaskStatus != "unknown" || d.ObligationState != "held" || d.HoldState != "active" ||
		d.Hold.AmountMinor != 125_000 || d.Hold.Currency != "EUR" || d.Remote.TaskID != "acme-task-17" || d.Remote.ContextID != "ctx-po-42" {
		t.Fatalf("created delegation: %+v", d)
	}
	if !d.CreatedAt.Equal(apitest.Epoch) {
		t.Fatalf("created_at %v, want the fake clock's %v", d.CreatedAt, apitest.Epoch)
	}
	// Retrying returns the same delegation and holds nothing more.
	var again httpapi.DelegationBody
	env.Do(t, http.MethodPost, "/v1/delegations", orch, create).Expect(t, http.StatusOK).JSON(t, &again)
	if again.ID != d.ID {
		t.Fatalf("retry returned %s, want %s", again.ID, d.ID)
	}
	if b := env.Budget(t, "procurement-eu"); b.HeldMinor != 125_000 || b.AvailableMinor != 875_000 {
		t.Fatalf("budget after create and retry: %+v", b)
	}

	env.Clock.Advance(time.Minute)
	env.Do(t, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", orch, `{"state":"TASK_STATE_WORKING"}`).Expect(t, http.StatusOK).JSON(t, &d)
	if d.TaskStatus != "working" || d.ObligationState != "held" {
		t.Fatalf("after working: %s / %s", d.TaskStatus, d.ObligationState)
	}
	env.Clock.Advance(time.Minute)
	env.Do(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", orch, nil).Expect(t, http.StatusOK).JSON(t, &d)
	if d.CancelRequestedAt == nil || d.ObligationState != "held" || d.HoldState != "active" {
		t.Fatalf("after cancel request: %+v", d)
	}
	canceledAt := env.Clock.Advance(time.Minute)
	env.Do(t, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", orch, `{"state":"TASK_STATE_CANCELED"}`).Expect(t, http.StatusOK).JSON(t, &d)
	if d.TaskStatus != "canceled" || d.ObligationState != "revocation_pending_compensation" || d.HoldState != "active" ||
		d.ObligationReason != ledger.ReasonCompensationRequired {
		t.Fatalf("after canceled: task %s, obligation %s (%s), hold %s", d.TaskStatus, d.ObligationState, d.ObligationReason, d.HoldState)
	}
	if d.Compensation == nil || d.Compensation.IdempotencyKey == "" || d.Compensation.Deadline == nil {
		t.Fatalf("compensation not shown: %+v", d.Compensation)
	}
	if want := canceledAt.Add(72 * time.Hour); !d.Compensation.Deadline.Equal(want) {
		t.Fatalf("compensation deadline %v, want now + 72h = %v", d.Compensation.Deadline, want)
	}
	// The key is stable: reading the delegation again shows the same one.
	if got := env.Delegation(t, orch, d.ID); got.Compensation == nil || got.Compensation.IdempotencyKey != d.Compensation.IdempotencyKey {
		t.Fatalf("compensation key changed on read: %+v", got.Compensation)
	}
	if b := env.Budget(t, "procurement-eu"); b.AvailableMinor != 875_000 || b.HeldMinor != 125_000 || b.SpentMinor != 0 || b.FundedMinor != 1_000_000 {
		t.Fatalf("budget after cancel: %+v; the hold must stay until compensation is confirmed", b)
	}

	// Time alone does not move the hold.
	env.Clock.Advance(200 * time.Hour)
	if got := env.Delegation(t, orch, d.ID); got.ObligationState != "revocation_pending_compensation" || got.HoldState != "active" {
		t.Fatalf("after the deadline passed with nobody acting: %s / %s", got.ObligationState, got.HoldState)
	}

	events := env.Events(t, orch, d.ID)
	wantTypes := []ledger.EventType{"delegation_created", "task_status_changed", "cancel_requested", "task_status_changed"}
	if len(events) != len(wantTypes) {
		t.Fatalf("%d events, want %d: %+v", len(events), len(wantTypes), events)
	}
	for i, e := range events {
		if e.Type != wantTypes[i] || e.StreamSeq != int32(i+1) || e.Hash == "" || len(e.PrevHash) != 64 {
			t.Errorf("event %d: %+v, want type %s", i+1, e, wantTypes[i])
		}
		if e.Actor != env.Actor(t, orch) {
			t.Errorf("event %d actor %q", i+1, e.Actor)
		}
	}
	last := events[len(events)-1]
	if last.ObligationFrom != "held" || last.ObligationTo != "revocation_pending_compensation" {
		t.Fatalf("last event transition %s → %s", last.ObligationFrom, last.ObligationTo)
	}
	chain := apitest.LedgerEvents(t, events)
	if err := ledger.VerifyChain(chain); err != nil {
		t.Fatalf("the events the API shows do not verify: %v", err)
	}
	chain[1].Actor = "token:someone-else"
	if ledger.VerifyChain(chain) == nil {
		t.Fatal("a changed event still verifies")
	}
	env.CheckInvariants(t)
}
