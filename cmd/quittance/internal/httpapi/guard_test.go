package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
)

// Whose word counts (ledger/DESIGN.md §2.4): on a delegation Quittance
// dispatched, an orchestrator can commit money but never free it on its
// own word. Each test is an attack an orchestrator credential could make,
// against a real A2A agent, through the public API.

// dispatchHold asks Quittance to dispatch work of class to org, holding
// amount EUR minor units of the "ops" budget.
func (e *a2aEnv) dispatchHold(t *testing.T, op, org, class string, amount int64) httpapi.DelegationBody {
	t.Helper()
	var d httpapi.DelegationBody
	out := e.must(t, http.MethodPost, "/v1/delegations", e.orch, map[string]any{
		"business_operation_id": op, "org_id": org, "task_class": class, "budget_id": "ops",
		"hold":     map[string]any{"amount_minor": amount, "currency": "EUR"},
		"dispatch": map[string]any{"message": map[string]any{"parts": []any{map[string]any{"text": "buy 3 pallets"}}}},
	}, http.StatusCreated)
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func working(d httpapi.DelegationBody) bool { return dispatched(d) && d.TaskStatus == "working" }

// TestDispatchedHoldIsRaisedNeverLowered: a dispatched, working
// delegation's 6,000 hold cut to 1 is refused (409 hold_lower_refused) and
// changes nothing; a raise is taken; after a cancel request, and while a
// dispatch is unknown, a cut is refused too. Before the dispatch is sent,
// a cut is still allowed.
func TestDispatchedHoldIsRaisedNeverLowered(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{refuseCancel: true}, "127.0.0.1")
	e := newA2AEnv(t, apitest.Worker{})
	e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)
	d := e.dispatchHold(t, "po-cut", "supplier", "procurement", 6_000)
	e.waitFor(t, d.ID, "the dispatched task working", working)
	hold := "/v1/delegations/" + d.ID + "/hold"

	before := e.Snapshot(t)
	e.Do(t, http.MethodPatch, hold, e.orch, map[string]any{"amount_minor": 1}).Problem(t, http.StatusConflict, ledger.CodeHoldLowerRefused)
	e.AssertUnchanged(t, before, "a refused cut of a dispatched hold")
	if b := e.Budget(t, "ops"); b.HeldMinor != 6_000 || b.AvailableMinor != 994_000 {
		t.Fatalf("budget after a refused cut: %+v", b)
	}

	var got httpapi.DelegationBody
	e.Do(t, http.MethodPatch, hold, e.orch, map[string]any{"amount_minor": 7_000}).Expect(t, http.StatusOK).JSON(t, &got)
	if got.Hold.AmountMinor != 7_000 {
		t.Fatalf("after a raise: %+v", got.Hold)
	}

	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	e.waitEvent(t, d.ID, ledger.EventTypeCancelRefused)
	before = e.Snapshot(t)
	e.Do(t, http.MethodPatch, hold, e.orch, map[string]any{"amount_minor": 6_999}).Problem(t, http.StatusConflict, ledger.CodeHoldLowerRefused)
	e.AssertUnchanged(t, before, "a cut after a cancel request")

	u, _ := e.unknownDispatch(t, &taskKeeper{}, "unknown")
	before = e.Snapshot(t)
	e.Do(t, http.MethodPatch, "/v1/delegations/"+u.ID+"/hold", e.orch, map[string]any{"amount_minor": 1}).
		Problem(t, http.StatusConflict, ledger.CodeHoldLowerRefused)
	e.AssertUnchanged(t, before, "a cut while the dispatch is unknown")
	e.CheckInvariants(t)

	// No worker runs here: the dispatch is queued, never claimed, so
	// nothing was sent and the orchestrator may still lower its hold.
	q := apitest.New(t)
	orch := q.NewOrchestrator(t, "acme")
	q.PutBudget(t, "ops", "EUR", 10_000)
	q.Do(t, http.MethodPut, "/admin/v1/orgs/later", q.OncallToken, map[string]any{
		"name": "Later", "agent_card_url": "http://127.0.0.1:9/card", "allowed_hosts": []string{"127.0.0.1"},
	}).Expect(t, http.StatusCreated)
	var queued httpapi.DelegationBody
	q.Do(t, http.MethodPost, "/v1/delegations", orch, map[string]any{
		"business_operation_id": "po-queued", "org_id": "later", "task_class": "procurement", "budget_id": "ops",
		"hold":     map[string]any{"amount_minor": 6_000, "currency": "EUR"},
		"dispatch": map[string]any{"message": map[string]any{"parts": []any{map[string]any{"text": "later"}}}},
	}).Expect(t, http.StatusCreated).JSON(t, &queued)
	q.Do(t, http.MethodPatch, "/v1/delegations/"+queued.ID+"/hold", orch, map[string]any{"amount_minor": 1}).Expect(t, http.StatusOK)
	if b := q.Budget(t, "ops"); b.HeldMinor != 1 {
		t.Fatalf("a cut before the dispatch was sent: budget %+v", b)
	}
}

// TestDispatchedReportIsTheOrchestratorsWord: while the remote task is
// still working, the orchestrator reports it completed with nothing
// spent, then rejected, canceled and failed. Each report is recorded as a
// task_status_reported event with what it said and asks Quittance to look
// at the task itself; none changes the task status, the obligation or the
// budget. When the remote task really completes, the observation a report
// asks for settles the whole hold.
func TestDispatchedReportIsTheOrchestratorsWord(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{}, "127.0.0.1")
	// No push and no poll within the test: only a report makes Quittance
	// look at the task again.
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: time.Hour})
	e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)
	d := e.dispatchHold(t, "po-word", "supplier", "procurement", 6_100)
	d = e.waitFor(t, d.ID, "the dispatched task working", working)
	path := "/v1/delegations/" + d.ID + "/task-status"

	reports := []map[string]any{
		{"state": "TASK_STATE_COMPLETED", "settled_amount_minor": 0},
		{"state": "rejected"},
		{"state": "canceled"},
		{"state": "failed"},
		{"state": "completed"},
	}
	for _, body := range reports {
		var got httpapi.DelegationBody
		e.Do(t, http.MethodPost, path, e.orch, body).Expect(t, http.StatusOK).JSON(t, &got)
		if got.ObligationState != "held" || got.HoldState != "active" || got.TaskStatus != "working" || got.Version != d.Version {
			t.Fatalf("after reporting %v: %+v", body, got)
		}
		if b := e.Budget(t, "ops"); b.HeldMinor != 6_100 || b.AvailableMinor != 993_900 || b.SpentMinor != 0 {
			t.Fatalf("after reporting %v: budget %+v", body, b)
		}
	}
	said := eventsData(t, e.events(t, d.ID), ledger.EventTypeTaskStatusReported)
	if len(said) != len(reports) {
		t.Fatalf("%d task_status_reported events, want %d", len(said), len(reports))
	}
	if first := said[0]; first["state"] != "completed" || first["settled_amount_minor"] != float64(0) || first["observe_requested"] != true ||
		first["task_status"] != "working" || first["obligation_state"] != "held" {
		t.Fatalf("the first report as recorded: %v", first)
	}
	if n := countEvents(e.events(t, d.ID), ledger.EventTypeTaskStatusChanged); n != 1 {
		t.Fatalf("%d task_status_changed events, want the dispatch's working alone", n)
	}
	// The reports asked Quittance to look: an observe job prompted by a
	// report ran, found the task working and changed nothing.
	waitOutbox(t, e, d.ID, compensation.SourceReportedPoll, "observed")

	// The remote task completes; the orchestrator's next report, whatever
	// it says, has Quittance look, and Quittance's own observation settles.
	close(peer.release)
	e.ReportStatus(t, e.orch, d.ID, "working", time.Time{})
	got := e.waitFor(t, d.ID, "settled", func(d httpapi.DelegationBody) bool { return d.ObligationState == "settled" })
	if got.SettledAmountMinor == nil || *got.SettledAmountMinor != 6_100 {
		t.Fatalf("Quittance's own observation settled %v, want the whole hold", got.SettledAmountMinor)
	}
	if b := e.Budget(t, "ops"); b.SpentMinor != 6_100 || b.HeldMinor != 0 {
		t.Fatalf("after the observed completion: budget %+v", b)
	}
	e.CheckInvariants(t)
}

// waitOutbox waits until an observe job of delegation id prompted by
// source is done with outcome.
func waitOutbox(t *testing.T, e *a2aEnv, id, source, outcome string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var n int
		err := e.Pool.QueryRow(context.Background(), `
			SELECT count(*) FROM a2a_outbox
			WHERE delegation_id = $1 AND kind = 'observe' AND payload->>'source' = $2 AND outcome = $3 AND done_at IS NOT NULL`,
			uuid.MustParse(id), source, outcome).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s observe job prompted by %s", outcome, source)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFarFutureReportKeepsOwnObservations: a report dated 9999-12-31 on a
// dispatched delegation is recorded as dated now; Quittance's own later
// observations still apply: the cancel reply ends the task (and the gate
// asks for compensation), and on another delegation a poll settles it.
func TestFarFutureReportKeepsOwnObservations(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{}, "127.0.0.1")
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 50 * time.Millisecond})
	e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)
	future := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

	canceled := e.dispatchHold(t, "po-future-cancel", "supplier", "procurement", 6_000)
	e.waitFor(t, canceled.ID, "working", working)
	e.ReportStatus(t, e.orch, canceled.ID, "input_required", future)
	said := eventsData(t, e.events(t, canceled.ID), ledger.EventTypeTaskStatusReported)
	if len(said) != 1 || said[0]["reported_timestamp"] != "9999-12-31T23:59:59Z" || strings.HasPrefix(said[0]["timestamp"].(string), "9999") {
		t.Fatalf("the far-future report as recorded: %v", said)
	}
	e.must(t, http.MethodPost, "/v1/delegations/"+canceled.ID+"/cancel", e.orch, nil, http.StatusOK)
	got := e.waitFor(t, canceled.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if got.TaskStatus != "canceled" || countEvents(e.events(t, canceled.ID), ledger.EventTypeTaskStatusStale) != 0 {
		t.Fatalf("after the cancel reply: %+v; events %+v", got, e.events(t, canceled.ID))
	}

	polled := e.dispatchHold(t, "po-future-poll", "supplier", "procurement", 6_000)
	e.waitFor(t, polled.ID, "working", working)
	e.ReportStatus(t, e.orch, polled.ID, "TASK_STATE_INPUT_REQUIRED", future)
	close(peer.release)
	got = e.waitFor(t, polled.ID, "settled by a poll", func(d httpapi.DelegationBody) bool { return d.ObligationState == "settled" })
	if got.TaskStatus != "completed" || countEvents(e.events(t, polled.ID), ledger.EventTypeTaskStatusStale) != 0 {
		t.Fatalf("after the poll: %+v", got)
	}
	e.CheckInvariants(t)
}

// TestRecordModeReportIsClamped: in record mode the orchestrator is the
// only source and its report applies, but one dated 9999-12-31 is taken as
// dated now, so the orchestrator's own next report is not stale.
func TestRecordModeReportIsClamped(t *testing.T) {
	t.Parallel()
	env, orch := amountsEnv(t)
	d := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op-future", "org", "procurement", "b", 300, "USD"))
	env.ReportStatus(t, orch, d.ID, "working", time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))
	var data map[string]any
	lastEventData(t, env, orch, d.ID, ledger.EventTypeTaskStatusChanged, &data)
	if data["reported_timestamp"] != "9999-12-31T00:00:00Z" || strings.HasPrefix(data["timestamp"].(string), "9999") {
		t.Fatalf("the far-future report as applied: %v", data)
	}
	got := env.ReportStatus(t, orch, d.ID, "completed", time.Time{})
	if got.ObligationState != "settled" {
		t.Fatalf("the next report after a far-future one: %+v", got)
	}
}

// TestTaskClassPolicyDecidesTheGate: outside dev, an orchestrator's choice
// of read_only does not make Quittance's observed cancel release the hold:
// with no policy, and with a policy only one on-call person asked for, the
// cancel gates (revocation_pending_compensation, compensation sought).
// Once a second on-call person approves the policy listing read_only, an
// observed cancel of a read_only delegation releases without evidence.
func TestTaskClassPolicyDecidesTheGate(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{}, "127.0.0.1")
	e := &a2aEnv{Env: apitest.New(t, apitest.WithClock(ledger.SystemClock{}), apitest.WithLedgerID(a2aLedgerID),
		apitest.WithWorker(apitest.Worker{CompensationMaxAttempts: 3}), apitest.WithProduction())}
	a, b := e.TwoOncall(t, "alice", "bob")
	var minted struct {
		Token string `json:"token"`
	}
	e.Do(t, http.MethodPost, "/admin/v1/tokens", a.Token, map[string]any{"role": "orchestrator", "tenant": "acme", "name": "orchestrator-acme"}).
		Expect(t, http.StatusCreated).JSON(t, &minted)
	e.orch = minted.Token
	var ops httpapi.BudgetView
	e.Do(t, http.MethodPut, "/admin/v1/budgets/ops", a.Token, map[string]any{"currency": "EUR", "funded_minor": 1_000_000, "tenants": []string{"acme"}}).
		Expect(t, http.StatusAccepted).JSON(t, &ops)
	e.Approve(t, b.Token, ops.PendingChange.ID)
	r := e.Do(t, http.MethodPut, "/admin/v1/orgs/supplier", a.Token, map[string]any{
		"name": "Supplier", "agent_card_url": peer.cardURL, "allowed_hosts": []string{"127.0.0.1"},
	})
	if r.Status == http.StatusAccepted {
		var body httpapi.OrgBody
		r.JSON(t, &body)
		e.Approve(t, b.Token, body.PendingChange.ID)
	} else {
		r.Expect(t, http.StatusCreated)
	}
	policy := "/admin/v1/orgs/supplier/task-class-policies/acme"

	cancelPath := func(op string) string {
		t.Helper()
		d := e.dispatchHold(t, op, "supplier", "read_only", 6_000)
		e.waitFor(t, d.ID, "working", working)
		e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
		d = e.waitFor(t, d.ID, "the cancel's end", func(d httpapi.DelegationBody) bool { return d.ObligationState != "held" })
		d = e.waitFor(t, d.ID, "the obligation's end", func(d httpapi.DelegationBody) bool {
			return d.ObligationState != "revocation_pending_compensation"
		})
		return obligationPath(e.events(t, d.ID))
	}
	const gated = "held->revocation_pending_compensation,revocation_pending_compensation->compensated"
	if p := cancelPath("po-no-policy"); p != gated {
		t.Fatalf("read_only with no policy: obligation path %s, want %s", p, gated)
	}

	var asked httpapi.TaskClassPolicyBody
	e.Do(t, http.MethodPut, policy, a.Token, map[string]any{"classes": []string{"read_only", "procurement"}}).
		Expect(t, http.StatusAccepted).JSON(t, &asked)
	if asked.PendingChange == nil || asked.PendingChange.Kind != string(ledger.ChangeTaskClassPolicyUpdate) || len(asked.Classes) != 0 {
		t.Fatalf("a policy asked for by one on-call person: %+v", asked)
	}
	e.Do(t, http.MethodGet, policy, a.Token, nil).Problem(t, http.StatusNotFound, "")
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+asked.PendingChange.ID+"/approve", a.Token, nil).Problem(t, http.StatusForbidden, "")
	if p := cancelPath("po-one-person"); p != gated {
		t.Fatalf("read_only with a policy one person asked for: obligation path %s, want %s", p, gated)
	}

	e.Approve(t, b.Token, asked.PendingChange.ID)
	var shown httpapi.TaskClassPolicyBody
	e.Do(t, http.MethodGet, policy, a.Token, nil).Expect(t, http.StatusOK).JSON(t, &shown)
	if strings.Join(shown.Classes, ",") != "procurement,read_only" {
		t.Fatalf("the approved policy: %+v", shown)
	}
	if p := cancelPath("po-approved"); p != "held->released" {
		t.Fatalf("read_only with an approved policy: obligation path %s, want held->released", p)
	}
	e.CheckInvariants(t)
}
