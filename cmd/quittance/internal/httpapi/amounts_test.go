package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
)

// Amounts that really moved (ledger/DESIGN.md §2.3): a hold is a cap, raised
// or lowered while held; a settlement spends what the work cost and
// returns the rest; a compensation returns what the remote reversed and
// spends the rest. Every test re-checks conservation and the journal with
// CheckInvariants, and every refused amount changes nothing.

// amountsEnv is a budget "b" of 1000 USD, an org and an orchestrator.
func amountsEnv(t *testing.T) (*apitest.Env, string) {
	t.Helper()
	env := apitest.New(t)
	env.PutBudget(t, "b", "USD", 1000)
	env.PutOrg(t, "org", false)
	return env, env.NewOrchestrator(t, "acme")
}

// lastEventData decodes the data of the delegation's last event of type typ.
func lastEventData(t *testing.T, env *apitest.Env, token, id string, typ ledger.EventType, v any) {
	t.Helper()
	events := env.Events(t, token, id)
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type == typ {
			if err := json.Unmarshal(events[i].Data, v); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no %s event among %+v", typ, events)
}

// holdData is the hold part of a transition's or hold change's event data.
type holdData struct {
	Hold struct {
		Movement        string `json:"movement"`
		AmountMinor     int64  `json:"amount_minor"`
		OldAmountMinor  int64  `json:"old_amount_minor"`
		NewAmountMinor  int64  `json:"new_amount_minor"`
		SpentMinor      int64  `json:"spent_minor"`
		ReturnedMinor   int64  `json:"returned_minor"`
		WrittenOffMinor int64  `json:"written_off_minor"`
	} `json:"hold"`
	SettledAmountMinor  *int64 `json:"settled_amount_minor"`
	ReversedAmountMinor *int64 `json:"reversed_amount_minor"`
}

func TestPartialSettlementSpendsWhatTheWorkCost(t *testing.T) {
	t.Parallel()
	env, orch := amountsEnv(t)
	d := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op", "org", "procurement", "b", 300, "USD"))
	env.ReportStatus(t, orch, d.ID, "TASK_STATE_WORKING", time.Time{})
	path := "/v1/delegations/" + d.ID + "/task-status"

	// Refused amounts change nothing.
	before := env.Snapshot(t)
	for name, body := range map[string]any{
		"more than the hold": map[string]any{"state": "TASK_STATE_COMPLETED", "settled_amount_minor": 301},
		"negative":           map[string]any{"state": "TASK_STATE_COMPLETED", "settled_amount_minor": -1},
		"a fraction":         `{"state":"TASK_STATE_COMPLETED","settled_amount_minor":1.5}`,
		"a string":           `{"state":"TASK_STATE_COMPLETED","settled_amount_minor":"120"}`,
		"not completed":      map[string]any{"state": "TASK_STATE_WORKING", "settled_amount_minor": 120},
		"canceled":           map[string]any{"state": "TASK_STATE_CANCELED", "settled_amount_minor": 0},
	} {
		env.Do(t, http.MethodPost, path, orch, body).Problem(t, http.StatusUnprocessableEntity, "")
		env.AssertUnchanged(t, before, name)
	}

	var got httpapi.DelegationBody
	env.Do(t, http.MethodPost, path, orch, map[string]any{"state": "TASK_STATE_COMPLETED", "settled_amount_minor": 120}).
		Expect(t, http.StatusOK).JSON(t, &got)
	if got.ObligationState != "settled" || got.HoldState != "consumed" || got.SettledAmountMinor == nil || *got.SettledAmountMinor != 120 ||
		got.Hold.AmountMinor != 300 || got.ReversedAmountMinor != nil {
		t.Fatalf("after a partial settlement: %+v", got)
	}
	expectBudget(t, env, "b", budgetWant{available: 880, spent: 120})
	var data holdData
	lastEventData(t, env, orch, d.ID, ledger.EventTypeTaskStatusChanged, &data)
	if data.SettledAmountMinor == nil || *data.SettledAmountMinor != 120 || data.Hold.SpentMinor != 120 || data.Hold.ReturnedMinor != 180 ||
		data.Hold.Movement != "spend" || data.Hold.AmountMinor != 300 {
		t.Fatalf("settlement event data %+v", data)
	}
	if again := env.Delegation(t, orch, d.ID); again.SettledAmountMinor == nil || *again.SettledAmountMinor != 120 {
		t.Fatalf("read back: settled %v", again.SettledAmountMinor)
	}

	// The same report again is a repeat; another amount cannot resettle.
	before = env.Snapshot(t)
	env.Do(t, http.MethodPost, path, orch, map[string]any{"state": "TASK_STATE_COMPLETED", "settled_amount_minor": 120}).Expect(t, http.StatusOK)
	env.Do(t, http.MethodPost, path, orch, map[string]any{"state": "TASK_STATE_COMPLETED", "settled_amount_minor": 200}).
		Problem(t, http.StatusConflict, "settlement_not_applicable")
	env.AssertUnchanged(t, before, "a resettlement")

	// Zero spends nothing; no amount spends the whole hold.
	zero := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op-zero", "org", "procurement", "b", 100, "USD"))
	env.Do(t, http.MethodPost, "/v1/delegations/"+zero.ID+"/task-status", orch, map[string]any{"state": "completed", "settled_amount_minor": 0}).
		Expect(t, http.StatusOK).JSON(t, &got)
	if got.SettledAmountMinor == nil || *got.SettledAmountMinor != 0 {
		t.Fatalf("settled with 0: %+v", got.SettledAmountMinor)
	}
	whole := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op-whole", "org", "procurement", "b", 50, "USD"))
	if got := env.ReportStatus(t, orch, whole.ID, "TASK_STATE_COMPLETED", time.Time{}); got.SettledAmountMinor == nil || *got.SettledAmountMinor != 50 {
		t.Fatalf("settled without an amount: %+v", got.SettledAmountMinor)
	}
	expectBudget(t, env, "b", budgetWant{available: 830, spent: 170})

	// A settled amount on an obligation that does not settle is refused.
	esc := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op-esc", "org", "procurement", "b", 100, "USD"))
	env.ReportStatus(t, orch, esc.ID, "TASK_STATE_CANCELED", time.Time{})
	before = env.Snapshot(t)
	env.Do(t, http.MethodPost, "/v1/delegations/"+esc.ID+"/task-status", orch, map[string]any{"state": "completed", "settled_amount_minor": 10}).
		Problem(t, http.StatusConflict, "settlement_not_applicable")
	env.AssertUnchanged(t, before, "a settled amount on a pending obligation")
	env.CheckInvariants(t)
}

func TestHoldChangeWhileHeld(t *testing.T) {
	t.Parallel()
	env, orch := amountsEnv(t)
	d := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op", "org", "procurement", "b", 300, "USD"))
	path := "/v1/delegations/" + d.ID + "/hold"
	var got httpapi.DelegationBody

	// A raise the budget covers.
	env.Do(t, http.MethodPatch, path, orch, map[string]any{"amount_minor": 700}).Expect(t, http.StatusOK).JSON(t, &got)
	if got.Hold.AmountMinor != 700 || got.ObligationState != "held" || got.Version != d.Version+1 {
		t.Fatalf("after a raise: %+v", got)
	}
	expectBudget(t, env, "b", budgetWant{available: 300, held: 700})
	var data holdData
	lastEventData(t, env, orch, d.ID, ledger.EventTypeHoldChanged, &data)
	if data.Hold.OldAmountMinor != 300 || data.Hold.NewAmountMinor != 700 || data.Hold.Movement != "hold" || data.Hold.AmountMinor != 400 {
		t.Fatalf("hold_changed data %+v", data)
	}
	env.CheckInvariants(t)

	// A raise it does not cover, and bad amounts, change nothing.
	other := env.NewOrchestrator(t, "globex")
	before := env.Snapshot(t)
	env.Do(t, http.MethodPatch, path, orch, map[string]any{"amount_minor": 1001}).Problem(t, http.StatusUnprocessableEntity, "insufficient_funds")
	env.AssertUnchanged(t, before, "a raise beyond the budget")
	for name, body := range map[string]any{
		"zero": map[string]any{"amount_minor": 0}, "negative": map[string]any{"amount_minor": -5},
		"a fraction": `{"amount_minor": 2.5}`, "a string": `{"amount_minor": "500"}`, "missing": `{}`,
	} {
		env.Do(t, http.MethodPatch, path, orch, body).Problem(t, http.StatusUnprocessableEntity, "")
		env.AssertUnchanged(t, before, name)
	}
	// Another tenant's orchestrator cannot see it; on-call is not an orchestrator.
	env.Do(t, http.MethodPatch, path, other, map[string]any{"amount_minor": 500}).Problem(t, http.StatusNotFound, "not_found")
	env.Do(t, http.MethodPatch, path, env.OncallToken, map[string]any{"amount_minor": 500}).Problem(t, http.StatusForbidden, "forbidden")
	// The same amount again is no change.
	env.Do(t, http.MethodPatch, path, orch, map[string]any{"amount_minor": 700}).Expect(t, http.StatusOK)
	env.AssertUnchanged(t, before, "refused hold changes")

	// A cut returns the difference.
	env.Do(t, http.MethodPatch, path, orch, map[string]any{"amount_minor": 250}).Expect(t, http.StatusOK).JSON(t, &got)
	if got.Hold.AmountMinor != 250 {
		t.Fatalf("after a cut: %+v", got)
	}
	expectBudget(t, env, "b", budgetWant{available: 750, held: 250})
	lastEventData(t, env, orch, d.ID, ledger.EventTypeHoldChanged, &data)
	if data.Hold.OldAmountMinor != 700 || data.Hold.NewAmountMinor != 250 || data.Hold.Movement != "return" || data.Hold.AmountMinor != 450 {
		t.Fatalf("hold_changed data after the cut %+v", data)
	}
	env.CheckInvariants(t)

	// The new hold is what settles, and once the task ended the hold is fixed.
	env.Do(t, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", orch, map[string]any{"state": "completed", "settled_amount_minor": 200}).
		Expect(t, http.StatusOK)
	expectBudget(t, env, "b", budgetWant{available: 800, spent: 200})
	before = env.Snapshot(t)
	env.Do(t, http.MethodPatch, path, orch, map[string]any{"amount_minor": 100}).Problem(t, http.StatusConflict, "hold_not_changeable")
	env.AssertUnchanged(t, before, "a hold change after settlement")
	pending := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op-pending", "org", "procurement", "b", 100, "USD"))
	env.ReportStatus(t, orch, pending.ID, "TASK_STATE_CANCELED", time.Time{})
	before = env.Snapshot(t)
	env.Do(t, http.MethodPatch, "/v1/delegations/"+pending.ID+"/hold", orch, map[string]any{"amount_minor": 50}).
		Problem(t, http.StatusConflict, "hold_not_changeable")
	env.AssertUnchanged(t, before, "a hold change after the task ended")
	env.CheckInvariants(t)
}

func TestPartialCompensationBySignedAck(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	d := e.pending(t, orgB, 1000)
	budgetBefore := e.Budget(t, budgetID)

	// Refused amounts change nothing, not even the chain. An amount that
	// is no non-negative integer is refused before the token is accepted
	// as verified, so the answer is the uniform token_refused (reason
	// token_amount_invalid, counted); one over the hold is told to the org
	// that signed it.
	for name, amount := range map[string]any{
		"more than the hold": 1001, "negative": -1, "a fraction": 1.5, "a string": "400",
	} {
		before := e.state(t, d.ID)
		claims := e.ackClaims(d)
		claims["reversed_amount_minor"] = amount
		r := e.post(t, acksPath, e.b.Sign(t, ackTyp, claims))
		if name == "more than the hold" {
			r.Problem(t, http.StatusUnprocessableEntity, "token_amount_invalid")
		} else {
			refusedUniformly(t, r)
		}
		if after := e.state(t, d.ID); after != before {
			t.Fatalf("%s: state %+v, want %+v", name, after, before)
		}
	}
	decl := e.declClaims(d)
	decl["reversed_amount_minor"] = 10
	refusedUniformly(t, e.post(t, declsPath, e.b.Sign(t, declTyp, decl)))
	if n := e.refusalCounts(t)[[2]string{orgB, compensation.CodeTokenAmountInvalid}]; n != 5 {
		t.Fatalf("%d token_amount_invalid refusals counted, want 5", n)
	}

	claims := e.ackClaims(d)
	claims["reversed_amount_minor"] = 400
	token := e.b.Sign(t, ackTyp, claims)
	got := e.accept(t, acksPath, token, "applied")
	if got.ObligationState != "compensated" || got.HoldState != "returned" || got.ReversedAmountMinor == nil || *got.ReversedAmountMinor != 400 {
		t.Fatalf("after a partial ack: %+v", got.DelegationBody)
	}
	b := e.Budget(t, budgetID)
	if b.AvailableMinor != budgetBefore.AvailableMinor+400 || b.SpentMinor != budgetBefore.SpentMinor+600 || b.HeldMinor != budgetBefore.HeldMinor-1000 {
		t.Fatalf("budget %+v after reversing 400 of 1000 (before %+v)", b, budgetBefore)
	}
	var data holdData
	lastEventData(t, e.Env, e.orch, d.ID, ledger.EventTypeCompensationAcked, &data)
	if data.ReversedAmountMinor == nil || *data.ReversedAmountMinor != 400 || data.Hold.ReturnedMinor != 400 || data.Hold.SpentMinor != 600 {
		t.Fatalf("compensation_acked data %+v", data)
	}
	e.accept(t, acksPath, token, "duplicate")

	// Reversing nothing spends the whole hold; no claim returns all of it.
	zero := e.pending(t, orgB, 500)
	claims = e.ackClaims(zero)
	claims["reversed_amount_minor"] = 0
	if got := e.accept(t, acksPath, e.b.Sign(t, ackTyp, claims), "applied"); got.ReversedAmountMinor == nil || *got.ReversedAmountMinor != 0 {
		t.Fatalf("reversed 0: %+v", got.ReversedAmountMinor)
	}
	whole := e.pending(t, orgB, 200)
	if got := e.accept(t, acksPath, e.ack(t, whole), "applied"); got.ReversedAmountMinor == nil || *got.ReversedAmountMinor != 200 {
		t.Fatalf("reversed without a claim: %+v", got.ReversedAmountMinor)
	}
	b = e.Budget(t, budgetID)
	if b.SpentMinor != budgetBefore.SpentMinor+600+500 {
		t.Fatalf("budget %+v", b)
	}
	e.CheckInvariants(t)
}

func TestPartialCompensationByA2AReceipt(t *testing.T) {
	t.Parallel()
	partial := startV03Peer(t, &v03Peer{receiptExtra: map[string]any{"reversedAmountMinor": 5_000}}, "127.0.0.1")
	tooMuch := startV03Peer(t, &v03Peer{receiptExtra: map[string]any{"reversedAmountMinor": 12_501}}, "127.0.0.1")
	e := newA2AEnv(t, apitest.Worker{CompensationMaxAttempts: 2})
	e.putOrg(t, "partial", partial.cardURL, http.StatusCreated)
	e.putOrg(t, "too-much", tooMuch.cardURL, http.StatusCreated)

	d := e.dispatch(t, "po-partial", "partial")
	e.waitFor(t, d.ID, "the dispatched task", func(d httpapi.DelegationBody) bool { return dispatched(d) && d.TaskStatus == "working" })
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	d = e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if d.ReversedAmountMinor == nil || *d.ReversedAmountMinor != 5_000 || d.HoldState != "returned" {
		t.Fatalf("after a partial receipt: %+v", d)
	}
	b := e.Budget(t, "ops")
	if b.AvailableMinor != 1_000_000-7_500 || b.SpentMinor != 7_500 || b.HeldMinor != 0 {
		t.Fatalf("budget after reversing 5000 of 12500: %+v", b)
	}

	// A receipt reversing more than the hold proves nothing: the attempts
	// fail and the hold stays, whole.
	over := e.dispatch(t, "po-over", "too-much")
	e.waitFor(t, over.ID, "the dispatched task", func(d httpapi.DelegationBody) bool { return dispatched(d) && d.TaskStatus == "working" })
	e.must(t, http.MethodPost, "/v1/delegations/"+over.ID+"/cancel", e.orch, nil, http.StatusOK)
	over = e.waitFor(t, over.ID, "compensation_unconfirmed", func(d httpapi.DelegationBody) bool {
		return d.ObligationState == "compensation_unconfirmed"
	})
	if over.HoldState != "active" || over.ReversedAmountMinor != nil || over.Hold.AmountMinor != 12_500 {
		t.Fatalf("after receipts reversing more than the hold: %+v", over)
	}
	events := e.events(t, over.ID)
	if countEvents(events, ledger.EventTypeCompensationRequestFailed) < 1 || countEvents(events, ledger.EventTypeCompensationRetriesExhausted) != 1 {
		t.Fatalf("want failed compensation attempts until they were exhausted; events %+v", events)
	}
	b = e.Budget(t, "ops")
	if b.HeldMinor != 12_500 || b.SpentMinor != 7_500 {
		t.Fatalf("budget with the refused receipts: %+v", b)
	}
	e.CheckInvariants(t)
}
