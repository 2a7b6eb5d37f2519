package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
)

// budgetWant is where a budget's money should be.
type budgetWant struct{ available, held, spent, writtenOff int64 }

func expectBudget(t *testing.T, env *apitest.Env, id string, want budgetWant) {
	t.Helper()
	b := env.Budget(t, id)
	got := budgetWant{b.AvailableMinor, b.HeldMinor, b.SpentMinor, b.WrittenOffMinor}
	if got != want {
		t.Fatalf("budget %s: available/held/spent/written_off = %+v, want %+v", id, got, want)
	}
}

// TestObligationOutcomesFromTaskStatus drives every outcome of a held
// obligation that a task-status report can reach.
func TestObligationOutcomesFromTaskStatus(t *testing.T) {
	t.Parallel()
	const amount = 300
	cases := []struct {
		name      string
		class     string
		sharedOrg bool
		// setup registers extra task classes.
		setup      func(t *testing.T, env *apitest.Env)
		status     string
		state      ledger.ObligationState
		reason     string
		hold       string
		budget     budgetWant
		wantGated  bool
		wantKeySet bool
	}{
		{name: "completed settles", class: "procurement", status: "TASK_STATE_COMPLETED",
			state: ledger.ObligationSettled, reason: ledger.ReasonCompleted, hold: "consumed",
			budget: budgetWant{available: 1000 - amount, spent: amount}},
		{name: "rejected releases", class: "procurement", status: "TASK_STATE_REJECTED",
			state: ledger.ObligationReleased, reason: ledger.ReasonRejectedBeforeWork, hold: "returned",
			budget: budgetWant{available: 1000}},
		{name: "canceled read_only releases", class: "read_only", status: "TASK_STATE_CANCELED",
			state: ledger.ObligationReleased, reason: ledger.ReasonGateNotRequired, hold: "returned",
			budget: budgetWant{available: 1000}},
		{name: "failed read_only releases", class: "read_only", status: "failed",
			state: ledger.ObligationReleased, reason: ledger.ReasonGateNotRequired, hold: "returned",
			budget: budgetWant{available: 1000}},
		{name: "canceled with shared coordinator releases", class: "procurement", sharedOrg: true, status: "TASK_STATE_CANCELED",
			state: ledger.ObligationReleased, reason: ledger.ReasonGateNotRequired, hold: "returned",
			budget: budgetWant{available: 1000}},
		{name: "canceled procurement waits for compensation", class: "procurement", status: "canceled",
			state: ledger.ObligationRevocationPendingCompensation, reason: ledger.ReasonCompensationRequired, hold: "active",
			budget: budgetWant{available: 1000 - amount, held: amount}, wantGated: true, wantKeySet: true},
		{name: "failed procurement waits for compensation", class: "procurement", status: "TASK_STATE_FAILED",
			state: ledger.ObligationRevocationPendingCompensation, reason: ledger.ReasonCompensationRequired, hold: "active",
			budget: budgetWant{available: 1000 - amount, held: amount}, wantGated: true, wantKeySet: true},
		{name: "unknown class fails safe", class: "teleportation", status: "TASK_STATE_CANCELED",
			state: ledger.ObligationRevocationPendingCompensation, reason: ledger.ReasonCompensationRequired, hold: "active",
			budget: budgetWant{available: 1000 - amount, held: amount}, wantGated: true, wantKeySet: true},
		{name: "failed on a class gating only on canceled releases", class: "cancel_only", status: "TASK_STATE_FAILED",
			setup: func(t *testing.T, env *apitest.Env) {
				env.PutTaskClass(t, "cancel_only", true, []string{"canceled"}, time.Hour)
			},
			state: ledger.ObligationReleased, reason: ledger.ReasonGateNotRequired, hold: "returned",
			budget: budgetWant{available: 1000}},
		{name: "canceled on a class gating only on canceled waits, with the class's timeout", class: "cancel_only", status: "TASK_STATE_CANCELED",
			setup: func(t *testing.T, env *apitest.Env) {
				env.PutTaskClass(t, "cancel_only", true, []string{"TASK_STATE_CANCELED"}, 90*time.Minute)
			},
			state: ledger.ObligationRevocationPendingCompensation, reason: ledger.ReasonCompensationRequired, hold: "active",
			budget: budgetWant{available: 1000 - amount, held: amount}, wantGated: true, wantKeySet: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := apitest.New(t)
			env.PutBudget(t, "b", "USD", 1000)
			env.PutOrg(t, "org", tc.sharedOrg)
			if tc.setup != nil {
				tc.setup(t, env)
			}
			orch := env.NewOrchestrator(t, "acme")
			d := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op", "org", tc.class, "b", amount, "USD"))
			expectBudget(t, env, "b", budgetWant{available: 1000 - amount, held: amount})
			env.ReportStatus(t, orch, d.ID, "TASK_STATE_WORKING", time.Time{})
			endAt := env.Clock.Advance(time.Minute)
			got := env.ReportStatus(t, orch, d.ID, tc.status, time.Time{})
			if got.ObligationState != string(tc.state) || got.ObligationReason != tc.reason || got.HoldState != tc.hold {
				t.Fatalf("obligation %s (%s), hold %s; want %s (%s), hold %s", got.ObligationState, got.ObligationReason, got.HoldState, tc.state, tc.reason, tc.hold)
			}
			// The key is shown in every state, the same as at creation;
			// only a gated end sets a deadline.
			if got.Compensation == nil || got.Compensation.IdempotencyKey != d.Compensation.IdempotencyKey || d.Compensation.IdempotencyKey == "" {
				t.Fatalf("compensation %+v, want the key shown at creation (%+v)", got.Compensation, d.Compensation)
			}
			if (got.Compensation.Deadline != nil) != tc.wantKeySet {
				t.Fatalf("compensation %+v, want a deadline = %v", got.Compensation, tc.wantKeySet)
			}
			if tc.wantKeySet {
				want := endAt.Add(72 * time.Hour)
				if tc.class == "cancel_only" {
					want = endAt.Add(90 * time.Minute)
				}
				if got.Compensation.Deadline == nil || !got.Compensation.Deadline.Equal(want) {
					t.Fatalf("deadline %v, want %v", got.Compensation.Deadline, want)
				}
			}
			expectBudget(t, env, "b", tc.budget)
			events := env.Events(t, orch, d.ID)
			last := events[len(events)-1]
			if last.ObligationFrom != "held" || last.ObligationTo != tc.state {
				t.Fatalf("last event %s: %s → %s", last.Type, last.ObligationFrom, last.ObligationTo)
			}
			var data struct {
				GateApplies *bool `json:"gate_applies"`
				Hold        *struct {
					Movement string `json:"movement"`
				} `json:"hold"`
			}
			if err := json.Unmarshal(last.Data, &data); err != nil {
				t.Fatal(err)
			}
			if data.GateApplies == nil || *data.GateApplies != tc.wantGated {
				t.Fatalf("event gate_applies = %v, want %v (%s)", data.GateApplies, tc.wantGated, last.Data)
			}
			if (data.Hold != nil) != (tc.hold != "active") {
				t.Fatalf("event hold movement %+v for hold %s", data.Hold, tc.hold)
			}
			env.CheckInvariants(t)
		})
	}
}

// TestTaskStatusRules checks ledger/DESIGN.md §2.1: terminal statuses are
// immutable, a different later terminal status is a status_conflict event,
// a repeat of what is applied appends no event and only moves
// last_observed_at, stale reports are recorded and ignored, and v0.3 names
// are accepted.
func TestTaskStatusRules(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.PutBudget(t, "b", "EUR", 10_000)
	env.PutOrg(t, "org", false)
	orch := env.NewOrchestrator(t, "acme")
	t0 := apitest.Epoch.Add(-time.Hour)

	type eventCheck func(t *testing.T, d httpapi.DelegationBody, ev ledger.EventRecord)
	step := func(t *testing.T, id, state string, at time.Time, wantType ledger.EventType, check eventCheck) httpapi.DelegationBody {
		t.Helper()
		nEvents := len(env.Events(t, orch, id))
		now := env.Clock.Advance(time.Second)
		d := env.ReportStatus(t, orch, id, state, at)
		if d.LastObservedAt == nil || !d.LastObservedAt.Equal(now) {
			t.Fatalf("report %s at %v: last_observed_at %v, want %v", state, at, d.LastObservedAt, now)
		}
		events := env.Events(t, orch, id)
		if wantType == "" {
			// A repeat of what is applied only moves last_observed_at.
			if len(events) != nEvents {
				t.Fatalf("report %s at %v: %d new events, want none (%s)", state, at, len(events)-nEvents, events[len(events)-1].Type)
			}
			return d
		}
		if len(events) != nEvents+1 {
			t.Fatalf("report %s at %v: %d new events, want exactly 1", state, at, len(events)-nEvents)
		}
		last := events[len(events)-1]
		if last.Type != wantType {
			t.Fatalf("report %s at %v: event %s, want %s (%s)", state, at, last.Type, wantType, last.Data)
		}
		if check != nil {
			check(t, d, last)
		}
		return d
	}

	t.Run("v0.3 names and ordering", func(t *testing.T) {
		d := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op-v03", "org", "procurement", "b", 100, "EUR"))
		got := step(t, d.ID, "submitted", t0, ledger.EventTypeTaskStatusChanged, nil)
		got = step(t, d.ID, "input-required", t0.Add(time.Second), ledger.EventTypeTaskStatusChanged, nil)
		if got.TaskStatus != "input_required" {
			t.Fatalf("input-required stored as %q", got.TaskStatus)
		}
		got = step(t, d.ID, "auth-required", t0.Add(2*time.Second), ledger.EventTypeTaskStatusChanged, nil)
		if got.TaskStatus != "auth_required" {
			t.Fatalf("auth-required stored as %q", got.TaskStatus)
		}
		// The same non-terminal status again appends nothing.
		step(t, d.ID, "TASK_STATE_AUTH_REQUIRED", t0.Add(3*time.Second), "", nil)
		// And with an older timestamp: the same status and message is a
		// repeat whatever its time, never stale.
		step(t, d.ID, "auth-required", t0, "", nil)
		// Stale: older than the last applied.
		budgetBefore := env.Budget(t, "b")
		got = step(t, d.ID, "TASK_STATE_WORKING", t0.Add(time.Second), ledger.EventTypeTaskStatusStale,
			func(t *testing.T, d httpapi.DelegationBody, ev ledger.EventRecord) {
				if ev.ObligationTo != "" {
					t.Fatal("a stale report moved the obligation")
				}
			})
		if got.TaskStatus != "auth_required" || got.TaskStatusAt == nil || !got.TaskStatusAt.Equal(t0.Add(2*time.Second)) {
			t.Fatalf("after a stale report: %s at %v", got.TaskStatus, got.TaskStatusAt)
		}
		// A stale terminal status does not move money.
		got = step(t, d.ID, "TASK_STATE_COMPLETED", t0, ledger.EventTypeTaskStatusStale, nil)
		if got.TaskStatus != "auth_required" || got.ObligationState != "held" {
			t.Fatalf("a stale terminal report applied: %s / %s", got.TaskStatus, got.ObligationState)
		}
		if b := env.Budget(t, "b"); b.HeldMinor != budgetBefore.HeldMinor || b.SpentMinor != budgetBefore.SpentMinor {
			t.Fatalf("a stale report moved money: %+v → %+v", budgetBefore, b)
		}
		// Finally it completes.
		got = step(t, d.ID, "completed", t0.Add(10*time.Second), ledger.EventTypeTaskStatusChanged, nil)
		if got.ObligationState != "settled" {
			t.Fatalf("completed → %s", got.ObligationState)
		}
		env.CheckInvariants(t)
	})

	t.Run("terminal is immutable", func(t *testing.T) {
		d := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op-term", "org", "procurement", "b", 200, "EUR"))
		step(t, d.ID, "TASK_STATE_WORKING", t0, ledger.EventTypeTaskStatusChanged, nil)
		canceled := step(t, d.ID, "TASK_STATE_CANCELED", t0.Add(time.Second), ledger.EventTypeTaskStatusChanged, nil)
		if canceled.ObligationState != "revocation_pending_compensation" {
			t.Fatalf("canceled → %s", canceled.ObligationState)
		}
		budget := env.Budget(t, "b")
		for i, tc := range []struct {
			state    string
			wantType ledger.EventType
		}{
			{"TASK_STATE_COMPLETED", ledger.EventTypeStatusConflict},
			{"completed", ledger.EventTypeStatusConflict},
			{"TASK_STATE_REJECTED", ledger.EventTypeStatusConflict},
			{"failed", ledger.EventTypeStatusConflict},
			{"TASK_STATE_WORKING", ledger.EventTypeStatusConflict},
			{"TASK_STATE_CANCELED", ""},
			{"canceled", ""},
			{"cancelled", ""},
		} {
			at := t0.Add(time.Duration(10+i) * time.Second)
			got := step(t, d.ID, tc.state, at, tc.wantType, func(t *testing.T, _ httpapi.DelegationBody, ev ledger.EventRecord) {
				if ev.ObligationFrom != "" || ev.ObligationTo != "" {
					t.Fatalf("%s after canceled carried a transition %s → %s", tc.state, ev.ObligationFrom, ev.ObligationTo)
				}
				var data struct {
					State    string `json:"state"`
					Previous string `json:"previous"`
				}
				if err := json.Unmarshal(ev.Data, &data); err != nil {
					t.Fatal(err)
				}
				if data.Previous != "canceled" || data.State == "" {
					t.Fatalf("anomaly event data %s does not name both statuses", ev.Data)
				}
			})
			if got.TaskStatus != "canceled" || got.ObligationState != "revocation_pending_compensation" || got.Version != canceled.Version {
				t.Fatalf("after %s: %s / %s v%d; want the canceled delegation unchanged", tc.state, got.TaskStatus, got.ObligationState, got.Version)
			}
			if b := env.Budget(t, "b"); b != budget {
				t.Fatalf("after %s the budget moved: %+v → %+v", tc.state, budget, b)
			}
		}
		env.CheckInvariants(t)
	})

	t.Run("completed then canceled is a conflict, money stays spent", func(t *testing.T) {
		d := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op-done", "org", "procurement", "b", 50, "EUR"))
		step(t, d.ID, "TASK_STATE_COMPLETED", t0, ledger.EventTypeTaskStatusChanged, nil)
		budget := env.Budget(t, "b")
		got := step(t, d.ID, "TASK_STATE_CANCELED", t0.Add(time.Hour), ledger.EventTypeStatusConflict, nil)
		if got.ObligationState != "settled" || got.TaskStatus != "completed" {
			t.Fatalf("after conflict: %s / %s", got.TaskStatus, got.ObligationState)
		}
		if b := env.Budget(t, "b"); b != budget {
			t.Fatalf("a conflicting status moved money: %+v → %+v", budget, b)
		}
		// A cancel request on a terminal task is refused and writes nothing.
		before := env.Snapshot(t)
		env.Do(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", orch, nil).Problem(t, http.StatusConflict, "task_terminal")
		env.AssertUnchanged(t, before, "cancel of a completed task")
		env.CheckInvariants(t)
	})

	t.Run("cancel request twice records once", func(t *testing.T) {
		d := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op-cancel", "org", "procurement", "b", 10, "EUR"))
		var first, second httpapi.DelegationBody
		env.Do(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", orch, nil).Expect(t, http.StatusOK).JSON(t, &first)
		before := env.Snapshot(t)
		env.Clock.Advance(time.Second)
		env.Do(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", orch, nil).Expect(t, http.StatusOK).JSON(t, &second)
		env.AssertUnchanged(t, before, "a second cancel request")
		if first.CancelRequestedAt == nil || second.CancelRequestedAt == nil || !first.CancelRequestedAt.Equal(*second.CancelRequestedAt) {
			t.Fatalf("cancel_requested_at %v then %v", first.CancelRequestedAt, second.CancelRequestedAt)
		}
		if first.ObligationState != "held" {
			t.Fatalf("a cancel request moved the obligation to %s", first.ObligationState)
		}
	})
}

// TestStatusWithoutTimestampUsesClock: a report without a timestamp is
// taken at the service's clock, so a later one is never stale.
func TestStatusWithoutTimestampUsesClock(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.PutBudget(t, "b", "EUR", 100)
	env.PutOrg(t, "org", false)
	orch := env.NewOrchestrator(t, "acme")
	d := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op", "org", "payment", "b", 100, "EUR"))
	for i, st := range []string{"submitted", "working", "input-required", "working", "TASK_STATE_COMPLETED"} {
		now := env.Clock.Advance(time.Second)
		got := env.ReportStatus(t, orch, d.ID, st, time.Time{})
		if got.TaskStatusAt == nil || !got.TaskStatusAt.Equal(now) {
			t.Fatalf("step %d: task_status_at %v, want %v", i, got.TaskStatusAt, now)
		}
	}
	if got := env.Delegation(t, orch, d.ID); got.ObligationState != "settled" {
		t.Fatalf("obligation %s", got.ObligationState)
	}
	expectBudget(t, env, "b", budgetWant{spent: 100})
	for _, e := range env.Events(t, orch, d.ID) {
		if e.Type == ledger.EventTypeTaskStatusStale {
			t.Fatalf("a report without a timestamp was stale: %s", e.Data)
		}
	}
}
