package httpapi_test

import (
	"cmp"
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
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
)

// signedOrg registers org with the taskKeeper's card and a key of its own,
// so it can post signed acks, and returns the signer.
func (e *a2aEnv) signedOrg(t *testing.T, org string, k *taskKeeper) *compensationtest.Signer {
	t.Helper()
	s := compensationtest.NewEd25519Signer(t, org+"-1")
	e.must(t, http.MethodPut, "/admin/v1/orgs/"+org, e.OncallToken, map[string]any{
		"name": "Supplier " + org, "agent_card_url": k.cardURL, "allowed_hosts": []string{"127.0.0.1"},
		"jwks": json.RawMessage(s.JWKS()),
	}, http.StatusCreated)
	return s
}

// postAck posts a signed ack for d with receiptID and returns the outcome.
func (e *a2aEnv) postAck(t *testing.T, s *compensationtest.Signer, d httpapi.DelegationBody, receiptID string) string {
	t.Helper()
	c := compensationtest.AckClaims(d.OrgID, a2aLedgerID, d.Remote.TaskID, d.Compensation.IdempotencyKey, time.Now())
	c["receipt_id"] = receiptID
	req, err := http.NewRequest(http.MethodPost, e.URL+"/v1/compensation/acks", strings.NewReader(s.Sign(t, ackTyp, c)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/jose")
	var out evidenceResponse
	e.Send(t, req).Expect(t, http.StatusOK).JSON(t, &out)
	return out.Evidence.Outcome
}

// postExpiringAck posts a signed ack for d with receiptID, as a remote org
// does, and expects it accepted: its exp passed 57 seconds ago, within the
// clock skew allowed (compensation.ClockSkew) for 3 seconds more.
func (e *a2aEnv) postExpiringAck(t *testing.T, s *compensationtest.Signer, d httpapi.DelegationBody, receiptID string) {
	t.Helper()
	now := time.Now()
	c := compensationtest.AckClaims(d.OrgID, a2aLedgerID, d.Remote.TaskID, d.Compensation.IdempotencyKey, now.Add(-2*time.Minute))
	c["receipt_id"], c["exp"] = receiptID, now.Add(-compensation.ClockSkew+3*time.Second).Unix()
	req, err := http.NewRequest(http.MethodPost, e.URL+"/v1/compensation/acks", strings.NewReader(s.Sign(t, ackTyp, c)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/jose")
	e.Send(t, req).Expect(t, http.StatusOK)
}

// verifyStoredTokens verifies every token stored on delegation d's events
// as verify-chain does (compensation.VerifyStoredTokens, against the org's
// key history) and returns how many there are.
func (e *a2aEnv) verifyStoredTokens(t *testing.T, d httpapi.DelegationBody) int {
	t.Helper()
	var history struct {
		Keys []ledger.OrgKey `json:"keys"`
	}
	if err := json.Unmarshal(e.must(t, http.MethodGet, "/admin/v1/orgs/"+d.OrgID+"/keys", e.OncallToken, nil, http.StatusOK), &history); err != nil {
		t.Fatal(err)
	}
	for i := range history.Keys {
		history.Keys[i].OrgID = d.OrgID
	}
	var events []ledger.Event
	for _, r := range e.events(t, d.ID) {
		ev, err := r.Event()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
	}
	owner := compensation.TokenOwner{
		DelegationID: uuid.MustParse(d.ID), OrgID: d.OrgID, RemoteTaskID: d.Remote.TaskID, LedgerID: a2aLedgerID,
		History: history.Keys, Slack: ledger.EventTimeSlack,
	}
	verified := compensation.VerifyStoredTokens(owner, events)
	for _, v := range verified {
		if v.Err != nil {
			t.Errorf("event %d (%s): token does not verify: %v", v.Event.StreamSeq, v.Event.Type, v.Err)
		}
	}
	return len(verified)
}

// TestA2AEarlyAckWithExtraTaskApplied: the org acks compensation early,
// while the obligation is held, on a delegation with an extra remote task.
// The cancel ends the tracked task; the extra task gates it, so the early
// ack stays received — and is applied once the compensation request has
// named the (canceled) extra task: compensated with the ack's token. The
// agent's receipt, the same assertion, is then a duplicate, not a conflict.
func TestA2AEarlyAckWithExtraTaskApplied(t *testing.T) {
	t.Parallel()
	k := dupAgent(t, &taskKeeper{receiptID: "rcpt-early"})
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 50 * time.Millisecond})
	s := e.signedOrg(t, "dup", k)
	d := e.dispatch(t, "po-early-extra", "dup")
	e.waitEvent(t, d.ID, ledger.EventTypeRemoteTaskEnded) // kt-1 found and canceled
	d = e.get(t, d.ID)
	if d.Remote.TaskID != "kt-2" || d.Compensation == nil {
		t.Fatalf("dispatched delegation = %+v", d)
	}
	if got := e.postAck(t, s, d, "rcpt-early"); got != "received" {
		t.Fatalf("early ack: outcome %q, want received", got)
	}
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	got := e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if got.HoldState != "returned" || got.TaskStatus != "canceled" {
		t.Fatalf("after compensation: %+v", got)
	}
	reqs := k.compensationRequests()
	if extra, _ := reqs[0]["extraTaskIds"].([]any); len(extra) != 1 || extra[0] != "kt-1" {
		t.Fatalf("compensation request = %v, want extraTaskIds [kt-1]", reqs[0])
	}
	events := e.events(t, d.ID)
	var acked []ledger.EventRecord
	for _, ev := range events {
		if ev.Type == ledger.EventTypeCompensationAcked {
			acked = append(acked, ev)
		}
	}
	if len(acked) != 1 || acked[0].Evidence == "" || acked[0].ObligationFrom != "revocation_pending_compensation" {
		t.Fatalf("compensation_acked events = %+v, want one from revocation_pending_compensation carrying the early ack", acked)
	}
	if n := countEvents(events, ledger.EventTypeEvidenceConflict); n != 0 {
		t.Fatalf("%d evidence_conflict events", n)
	}
	e.CheckInvariants(t)
}

// TestA2APostedAckWaitsForExtraTask: the obligation waits for compensation
// and the delegation has an extra task the agent will not cancel yet. A
// signed ack posted over HTTP does not close the obligation: it is held as
// received (evidence_received, held_for extra_tasks_open). Once the agent
// lets the extra task be canceled, the held ack compensates the obligation
// by itself — no second ack, and the agent never sent a receipt — and,
// applied after its exp, verifies as it was accepted.
func TestA2APostedAckWaitsForExtraTask(t *testing.T) {
	t.Parallel()
	k := dupAgent(t, &taskKeeper{compWorking: true})
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 50 * time.Millisecond})
	s := e.signedOrg(t, "dup", k)
	d := e.dispatch(t, "po-posted-extra", "dup")
	e.waitEvent(t, d.ID, ledger.EventTypeRemoteTaskEnded)
	// kt-3, made by hand in the delegation's context, is found by the
	// compensation lookup and will not be canceled for now.
	id := uuid.MustParse(d.ID)
	k.mu.Lock()
	k.newTask(delegate.DispatchContextID(id), delegate.DispatchMessageID(id), "working")
	k.stuck["kt-3"] = true
	k.mu.Unlock()

	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	d = e.waitFor(t, d.ID, "a compensation request", func(d httpapi.DelegationBody) bool { return d.Compensation != nil && d.Compensation.Attempts > 0 })
	e.postExpiringAck(t, s, d, "rcpt-posted")
	time.Sleep(4 * time.Second) // past the ack's exp and the clock skew
	if got := e.get(t, d.ID); got.ObligationState != "revocation_pending_compensation" || got.HoldState != "active" {
		t.Fatalf("closed while an extra task runs: %+v", got)
	}
	received := eventsData(t, e.events(t, d.ID), ledger.EventTypeEvidenceReceived)
	if len(received) != 1 || received[0]["held_for"] != "extra_tasks_open" {
		t.Fatalf("evidence_received = %v, want one held_for extra_tasks_open", received)
	}
	if open, _ := received[0]["open_remote_tasks"].([]any); len(open) != 1 || open[0] != "kt-3" {
		t.Fatalf("open_remote_tasks = %v, want [kt-3]", received[0]["open_remote_tasks"])
	}

	k.setStuck("kt-3", false)
	got := e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if got.HoldState != "returned" || k.state("kt-3") != "canceled" {
		t.Fatalf("after compensation: %+v, kt-3 %s", got, k.state("kt-3"))
	}
	reqs := k.compensationRequests()
	if extra, _ := reqs[len(reqs)-1]["extraTaskIds"].([]any); len(extra) != 2 {
		t.Fatalf("compensation request = %v, want both extra tasks named", reqs[len(reqs)-1])
	}
	if n := e.verifyStoredTokens(t, got); n != 2 {
		t.Errorf("%d stored tokens, want 2 (received, then applied)", n)
	}
	e.CheckInvariants(t)
}

// TestReportedRejectionWithExtraTaskGates: an orchestrator reports the
// tracked task rejected on a delegation Quittance dispatched, which has an
// extra remote task. The report is the orchestrator's word: it releases
// nothing and is recorded. When the agent itself rejects the tracked task,
// Quittance's own observation does not release the hold either: the extra
// task may have done the work, so the obligation waits for compensation
// and the compensation request names it.
func TestReportedRejectionWithExtraTaskGates(t *testing.T) {
	t.Parallel()
	k := &taskKeeper{}
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 50 * time.Millisecond})
	d := e.extraTaskDispatch(t, k, "po-report-extra")
	got := e.ReportStatus(t, e.orch, d.ID, "rejected", time.Time{})
	if got.ObligationState != "held" || got.HoldState != "active" {
		t.Fatalf("after a reported rejection: %+v", got)
	}
	if said := eventsData(t, e.events(t, d.ID), ledger.EventTypeTaskStatusReported); len(said) != 1 || said[0]["state"] != "rejected" {
		t.Fatalf("the reported rejection as recorded: %v", said)
	}
	k.mu.Lock()
	k.tasks["kt-2"]["status"] = map[string]any{"state": "rejected"}
	k.mu.Unlock()
	e.waitFor(t, d.ID, "the observed rejection", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "rejected" })
	var changed map[string]any
	for _, m := range eventsData(t, e.events(t, d.ID), ledger.EventTypeTaskStatusChanged) {
		if m["state"] == "rejected" {
			changed = m
		}
	}
	if ids, _ := changed["extra_remote_tasks"].([]any); len(ids) != 1 || ids[0] != "kt-1" {
		t.Fatalf("the observed rejection does not name the extra task: %v", changed)
	}
	got = e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if reqs := k.compensationRequests(); len(reqs) == 0 {
		t.Fatal("no compensation request")
	} else if extra, _ := reqs[0]["extraTaskIds"].([]any); len(extra) != 1 || extra[0] != "kt-1" {
		t.Fatalf("compensation request = %v", reqs[0])
	}
	if got.HoldState != "returned" {
		t.Fatalf("after compensation: %+v", got)
	}
	e.CheckInvariants(t)
}

// TestReportCannotEndUnknownDispatch: while a delegation's dispatch is
// unknown, an orchestrator's report — a rejection, a cancel, a completion,
// or a working task — is its word alone: recorded as a
// task_status_reported event, it changes neither the task status, nor the
// obligation, nor the money, and the delegation stays listed.
func TestReportCannotEndUnknownDispatch(t *testing.T) {
	t.Parallel()
	e := newA2AEnv(t, apitest.Worker{NoPush: true})
	d, _ := e.unknownDispatch(t, &taskKeeper{}, "unknown")
	before := e.get(t, d.ID)
	states := []string{"rejected", "TASK_STATE_CANCELED", "failed", "completed", "working"}
	for _, state := range states {
		got := e.ReportStatus(t, e.orch, d.ID, state, time.Time{})
		if got.ObligationState != "held" || got.HoldState != "active" || got.TaskStatus != before.TaskStatus || got.Version != before.Version {
			t.Fatalf("a report of %s changed the delegation: %+v, was %+v", state, got, before)
		}
	}
	said := eventsData(t, e.events(t, d.ID), ledger.EventTypeTaskStatusReported)
	if len(said) != len(states) {
		t.Fatalf("%d task_status_reported events, want %d", len(said), len(states))
	}
	for _, m := range said {
		if m["observe_requested"] != false {
			t.Fatalf("a report without a task id asked for an observation: %v", m)
		}
	}
	if ids := e.listCondition(t, "dispatch_unknown"); len(ids) != 1 || ids[0] != d.ID {
		t.Fatalf("condition=dispatch_unknown lists %v", ids)
	}
	e.CheckInvariants(t)
}

// TestReportedRejectionOfDispatchedTaskIsGated: on a delegation Quittance
// dispatched and follows itself, an orchestrator's report that the task
// was rejected returns nothing: the obligation stays held, the hold
// active, the budget as it was, and the report is recorded as its word.
func TestReportedRejectionOfDispatchedTaskIsGated(t *testing.T) {
	t.Parallel()
	k := startTaskKeeper(t, &taskKeeper{onSend: func(int) string { return "reply" }})
	e := newA2AEnv(t, apitest.Worker{NoPush: true})
	e.putOrg(t, "one", k.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-report-dispatched", "one")
	e.waitFor(t, d.ID, "the dispatched task", dispatched)
	budget := e.Budget(t, "ops")
	got := e.ReportStatus(t, e.orch, d.ID, "rejected", time.Time{})
	if got.ObligationState != "held" || got.HoldState != "active" || got.TaskStatus == "rejected" {
		t.Fatalf("after a reported rejection of a dispatched task: %+v", got)
	}
	if after := e.Budget(t, "ops"); after.AvailableMinor != budget.AvailableMinor || after.HeldMinor != budget.HeldMinor {
		t.Fatalf("a reported rejection moved money: %+v, was %+v", after, budget)
	}
	if said := eventsData(t, e.events(t, d.ID), ledger.EventTypeTaskStatusReported); len(said) != 1 || said[0]["state"] != "rejected" {
		t.Fatalf("the reported rejection as recorded: %v", said)
	}
	if len(k.compensationRequests()) != 0 {
		t.Fatal("a reported rejection asked the org for compensation")
	}
	e.CheckInvariants(t)
}

// finishCompensationTask completes the agent's compensation task id with a
// receipt echoing the request's task and key: compensated, unless
// compOutcome says otherwise.
func (k *taskKeeper) finishCompensationTask(id string, req map[string]any) {
	k.mu.Lock()
	defer k.mu.Unlock()
	task := k.tasks[id]
	task["status"] = map[string]any{"state": "completed"}
	task["artifacts"] = []any{map[string]any{
		"artifactId": compensation.ReceiptArtifactName, "name": compensation.ReceiptArtifactName,
		"parts": []any{map[string]any{"kind": "data", "data": map[string]any{
			"outcome": cmp.Or(k.compOutcome, "compensated"), "receiptId": "rcpt-dup-po", "taskId": req["taskId"], "idempotencyKey": req["idempotencyKey"],
		}}},
	}}
}

// extraTaskAnomalies lists the open extra_task_compensation anomalies of
// delegation id.
func (e *a2aEnv) extraTaskAnomalies(t *testing.T, id string) []httpapi.AnomalyBody {
	t.Helper()
	var out struct {
		Anomalies []httpapi.AnomalyBody `json:"anomalies"`
	}
	if err := json.Unmarshal(e.must(t, http.MethodGet, "/v1/anomalies?kind=extra_task_compensation", e.OncallToken, nil, http.StatusOK), &out); err != nil {
		t.Fatal(err)
	}
	var mine []httpapi.AnomalyBody
	for _, a := range out.Anomalies {
		if a.DelegationID == id {
			mine = append(mine, a)
		}
	}
	return mine
}

// TestA2ACompletedDelegationCompensatesExtraTask: the resend's second task
// is tracked and the first (kt-1) is an extra task, canceled at once —
// canceled, which says nothing of what it committed. The tracked task then
// completes: the obligation settles, spending the hold once, and the extra
// task is not forgotten. An extra_task_compensation anomaly is listed, and
// a compensation request names kt-1 alone, under a key of its own (not the
// delegation's). While the agent works on it the anomaly stays; its
// compensated receipt resolves it (extra_task_compensated) and the anomaly
// is no longer listed. No money moves after the settlement.
func TestA2ACompletedDelegationCompensatesExtraTask(t *testing.T) {
	t.Parallel()
	k := &taskKeeper{compWorking: true}
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 50 * time.Millisecond})
	d := e.extraTaskDispatch(t, k, "po-complete-extra") // kt-1 found and canceled
	d = e.get(t, d.ID)
	if d.Remote.TaskID != "kt-2" || k.state("kt-1") != "canceled" {
		t.Fatalf("dispatched delegation = %+v, kt-1 %s", d.Remote, k.state("kt-1"))
	}
	k.mu.Lock()
	k.tasks["kt-2"]["status"] = map[string]any{"state": "completed"}
	k.mu.Unlock()
	settled := e.waitFor(t, d.ID, "settled", func(d httpapi.DelegationBody) bool { return d.ObligationState == "settled" })
	if settled.HoldState != "consumed" {
		t.Fatalf("after completion: %+v", settled)
	}
	required := eventsData(t, e.waitEvent(t, d.ID, ledger.EventTypeExtraTaskCompensationRequired), ledger.EventTypeExtraTaskCompensationRequired)
	key := compensation.ExtraTaskKey(ledger.Delegation{ID: uuid.MustParse(d.ID)}, "kt-1")
	if len(required) != 1 || required[0]["task_id"] != "kt-1" || required[0]["idempotency_key"] != key || required[0]["state"] != "canceled" {
		t.Fatalf("extra_task_compensation_required = %v, want kt-1 under %s", required, key)
	}
	if key == d.Compensation.IdempotencyKey {
		t.Fatal("the extra task's key is the delegation's")
	}
	reqs := k.awaitCompensationRequests()
	if len(reqs) != 1 || reqs[0]["taskId"] != "kt-1" || reqs[0]["idempotencyKey"] != key || reqs[0]["reason"] != compensation.ExtraTaskReason {
		t.Fatalf("compensation requests = %v, want one about kt-1 under its own key", reqs)
	}
	if _, ok := reqs[0]["extraTaskIds"]; ok {
		t.Fatalf("the request about an extra task names others: %v", reqs[0])
	}
	// The agent is working on it: the anomaly stays listed.
	time.Sleep(300 * time.Millisecond)
	if got := e.extraTaskAnomalies(t, d.ID); len(got) != 1 || got[0].Kind != "extra_task_compensation" {
		t.Fatalf("extra_task_compensation anomalies = %+v, want one", got)
	}
	if n := len(k.compensationRequests()); n != 1 {
		t.Fatalf("%d compensation requests while the first is worked on, want 1 (the task is followed, not resent)", n)
	}
	k.mu.Lock()
	compTask := k.order[len(k.order)-1]
	k.mu.Unlock()
	k.finishCompensationTask(compTask, reqs[0])
	ended := e.waitEvent(t, d.ID, ledger.EventTypeExtraTaskCompensated)
	done := eventsData(t, ended, ledger.EventTypeExtraTaskCompensated)
	if len(done) != 1 || done[0]["task_id"] != "kt-1" || done[0]["resolution"] != "compensated" || done[0]["receipt_id"] != "rcpt-dup-po" {
		t.Fatalf("extra_task_compensated = %v", done)
	}
	if got := e.extraTaskAnomalies(t, d.ID); len(got) != 0 {
		t.Fatalf("a resolved extra task is still an anomaly: %+v", got)
	}
	after := e.get(t, d.ID)
	if after.ObligationState != "settled" || after.HoldState != "consumed" {
		t.Fatalf("the extra task's compensation moved the obligation: %+v", after)
	}
	if n := countEvents(e.events(t, d.ID), ledger.EventTypeCompensationAcked); n != 0 {
		t.Fatalf("%d compensation_acked events on a settled delegation", n)
	}
	e.CheckInvariants(t)
}

// TestExtraTaskWriteOff: an extra task of a settled delegation whose org
// never answers its compensation request stays an anomaly until on-call
// writes it off, with a reason; the write-off moves no money, a second one
// is 409 extra_task_not_open, an unknown task 404, an orchestrator 403, and
// an empty reason 422 — each changing nothing.
func TestExtraTaskWriteOff(t *testing.T) {
	t.Parallel()
	k := &taskKeeper{compWorking: true}
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 50 * time.Millisecond})
	d := e.extraTaskDispatch(t, k, "po-writeoff-extra")
	k.mu.Lock()
	k.tasks["kt-2"]["status"] = map[string]any{"state": "completed"}
	k.mu.Unlock()
	e.waitEvent(t, d.ID, ledger.EventTypeExtraTaskCompensationRequired)
	path := "/admin/v1/delegations/" + d.ID + "/remote-tasks/kt-1/write-off"
	e.Do(t, http.MethodPost, path, e.OncallToken, map[string]any{"reason": " "}).Problem(t, http.StatusUnprocessableEntity, "")
	if r := e.Do(t, http.MethodPost, path, e.orch, map[string]any{"reason": "not mine"}); r.Status != http.StatusForbidden {
		t.Fatalf("an orchestrator's write-off: %d", r.Status)
	}
	e.Do(t, http.MethodPost, "/admin/v1/delegations/"+d.ID+"/remote-tasks/kt-9/write-off", e.OncallToken, map[string]any{"reason": "x"}).Problem(t, http.StatusNotFound, "")
	if got := e.extraTaskAnomalies(t, d.ID); len(got) != 1 {
		t.Fatalf("before the write-off: %d anomalies", len(got))
	}
	e.must(t, http.MethodPost, path, e.OncallToken, map[string]any{"reason": "org confirmed the duplicate PO was voided, ticket OPS-12"}, http.StatusOK)
	if got := e.extraTaskAnomalies(t, d.ID); len(got) != 0 {
		t.Fatalf("after the write-off: %+v", got)
	}
	e.Do(t, http.MethodPost, path, e.OncallToken, map[string]any{"reason": "again"}).Problem(t, http.StatusConflict, "extra_task_not_open")
	if n := countEvents(e.events(t, d.ID), ledger.EventTypeExtraTaskWrittenOff); n != 1 {
		t.Fatalf("%d extra_task_written_off events, want 1", n)
	}
	if got := e.get(t, d.ID); got.ObligationState != "settled" || got.HoldState != "consumed" {
		t.Fatalf("after the write-off: %+v", got)
	}
	e.CheckInvariants(t)
}

// extraTaskRow reads where the compensation of extra task taskID of
// delegation id stands, as recorded: the attempt count, the resolution
// ("" while open), and how many compensation request jobs of the
// delegation are open.
func (e *a2aEnv) extraTaskRow(t *testing.T, id, taskID string) (attempts int, resolution string, openJobs int) {
	t.Helper()
	err := e.Pool.QueryRow(context.Background(), `SELECT r.compensation_attempts, coalesce(r.compensation_resolution, ''),
		(SELECT count(*) FROM a2a_outbox o WHERE o.delegation_id = r.delegation_id AND o.kind = 'compensation_request' AND o.done_at IS NULL)
		FROM delegation_remote_tasks r WHERE r.delegation_id = $1 AND r.task_id = $2`, id, taskID).Scan(&attempts, &resolution, &openJobs)
	if err != nil {
		t.Fatal(err)
	}
	return attempts, resolution, openJobs
}

// TestExtraTaskRedrive: the compensation requests about an extra task of a
// settled delegation exhaust against an agent that answers each with a
// failed receipt. While they are still being sent a redrive is refused
// (409 redrive_not_allowed), as it is from finance (403), without a reason
// (422) or for a task that is not the delegation's (404), each changing
// nothing. Once they are exhausted, on-call's redrive records
// extra_task_compensation_redriven (the task, who, why) and the requests
// start again under the task's own key; the agent now answers with a
// compensated receipt, which resolves the task and ends the anomaly. A
// redrive of the resolved task is refused. No money moves.
func TestExtraTaskRedrive(t *testing.T) {
	t.Parallel()
	k := &taskKeeper{compWorking: true}
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 50 * time.Millisecond, CompensationMaxAttempts: 2})
	finance := e.NewToken(t, ledger.RoleFinance, "", "finance-1")
	d := e.extraTaskDispatch(t, k, "po-redrive-extra")
	k.mu.Lock()
	k.tasks["kt-2"]["status"] = map[string]any{"state": "completed"}
	k.mu.Unlock()
	e.waitFor(t, d.ID, "settled", func(d httpapi.DelegationBody) bool { return d.ObligationState == "settled" })
	reqs := k.awaitCompensationRequests()
	if len(reqs) != 1 {
		t.Fatalf("compensation requests = %v, want one", reqs)
	}
	path := "/admin/v1/delegations/" + d.ID + "/remote-tasks/kt-1/redrive"
	reason := map[string]any{"reason": "Supplier fixed its compensation handler (INC-31)"}
	refused := func(what, token, p string, body map[string]any, status int, code string) {
		t.Helper()
		attempts, _, jobs := e.extraTaskRow(t, d.ID, "kt-1")
		n := len(e.events(t, d.ID))
		e.Do(t, http.MethodPost, p, token, body).Problem(t, status, code)
		if got, _, gotJobs := e.extraTaskRow(t, d.ID, "kt-1"); got != attempts || gotJobs != jobs {
			t.Fatalf("%s changed the task: attempts %d, open jobs %d; were %d, %d", what, got, gotJobs, attempts, jobs)
		}
		if got := len(e.events(t, d.ID)); got != n {
			t.Fatalf("%s recorded %d events", what, got-n)
		}
	}
	// The agent works on the first request: the series is still running.
	// The worker records the attempt after the agent has received it, so
	// wait for that record before taking the refusal's snapshot.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if attempts, _, _ := e.extraTaskRow(t, d.ID, "kt-1"); attempts == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first compensation request was never recorded as an attempt")
		}
	}
	refused("a redrive while requests are sent", e.OncallToken, path, reason, http.StatusConflict, "redrive_not_allowed")

	// Every answer from now on is a failed receipt: the requests exhaust.
	k.mu.Lock()
	k.compWorking, k.compOutcome = false, "failed"
	compTask := k.order[len(k.order)-1]
	k.mu.Unlock()
	k.finishCompensationTask(compTask, reqs[0])
	e.waitEvent(t, d.ID, ledger.EventTypeExtraTaskCompensationExhausted)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, _, jobs := e.extraTaskRow(t, d.ID, "kt-1"); jobs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the compensation request job is still open after the requests exhausted")
		}
	}
	if attempts, res, _ := e.extraTaskRow(t, d.ID, "kt-1"); attempts != 2 || res != "" {
		t.Fatalf("after exhaustion: attempts %d, resolution %q", attempts, res)
	}
	sent := len(k.compensationRequests())

	refused("finance's redrive", finance, path, reason, http.StatusForbidden, "")
	refused("a redrive without a reason", e.OncallToken, path, map[string]any{"reason": ""}, http.StatusUnprocessableEntity, "")
	refused("a redrive with a blank reason", e.OncallToken, path, map[string]any{"reason": "  "}, http.StatusUnprocessableEntity, "validation_failed")
	refused("a redrive of a task that is not the delegation's", e.OncallToken,
		"/admin/v1/delegations/"+d.ID+"/remote-tasks/kt-9/redrive", reason, http.StatusNotFound, "not_found")
	if n := len(k.compensationRequests()); n != sent {
		t.Fatalf("refused redrives sent %d requests", n-sent)
	}

	// The org fixed its handler: the redriven requests bring a receipt.
	k.mu.Lock()
	k.compOutcome = ""
	k.mu.Unlock()
	var out httpapi.DelegationBody
	if err := json.Unmarshal(e.must(t, http.MethodPost, path, e.OncallToken, reason, http.StatusOK), &out); err != nil || out.ID != d.ID || out.ObligationState != "settled" {
		t.Fatalf("redrive answered %+v (%v)", out, err)
	}
	redriven := eventsData(t, e.events(t, d.ID), ledger.EventTypeExtraTaskCompensationRedriven)
	key := compensation.ExtraTaskKey(ledger.Delegation{ID: uuid.MustParse(d.ID)}, "kt-1")
	if len(redriven) != 1 || redriven[0]["task_id"] != "kt-1" || redriven[0]["reason"] != reason["reason"] ||
		redriven[0]["idempotency_key"] != key || redriven[0]["previous_attempts"] != float64(2) {
		t.Fatalf("extra_task_compensation_redriven = %v", redriven)
	}
	done := eventsData(t, e.waitEvent(t, d.ID, ledger.EventTypeExtraTaskCompensated), ledger.EventTypeExtraTaskCompensated)
	if len(done) != 1 || done[0]["task_id"] != "kt-1" || done[0]["resolution"] != "compensated" {
		t.Fatalf("extra_task_compensated = %v", done)
	}
	for _, ev := range e.events(t, d.ID) {
		if ev.Type == ledger.EventTypeExtraTaskCompensationRedriven && ev.Actor == "" {
			t.Fatalf("the redrive names no actor: %+v", ev)
		}
	}
	all := k.compensationRequests()
	if len(all) <= sent {
		t.Fatalf("no compensation request after the redrive: %v", all)
	}
	for _, r := range all {
		if r["taskId"] != "kt-1" || r["idempotencyKey"] != key {
			t.Fatalf("a request about another task or under another key: %v, want kt-1 under %s", r, key)
		}
	}
	if got := e.extraTaskAnomalies(t, d.ID); len(got) != 0 {
		t.Fatalf("the redriven task is still an anomaly: %+v", got)
	}
	if _, res, _ := e.extraTaskRow(t, d.ID, "kt-1"); res != "compensated" {
		t.Fatalf("resolution after the redrive: %q", res)
	}
	refused("a redrive of a resolved task", e.OncallToken, path, reason, http.StatusConflict, "redrive_not_allowed")
	if got := e.get(t, d.ID); got.ObligationState != "settled" || got.HoldState != "consumed" {
		t.Fatalf("the redrive moved the obligation: %+v", got)
	}
	e.CheckInvariants(t)
}

// TestExtraTaskRedriveWrittenOff: an extra task on-call wrote off cannot
// be redriven (409 redrive_not_allowed), and the refusal records nothing.
func TestExtraTaskRedriveWrittenOff(t *testing.T) {
	t.Parallel()
	k := &taskKeeper{compWorking: true}
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 50 * time.Millisecond})
	d := e.extraTaskDispatch(t, k, "po-redrive-written-off")
	k.mu.Lock()
	k.tasks["kt-2"]["status"] = map[string]any{"state": "completed"}
	k.mu.Unlock()
	e.waitEvent(t, d.ID, ledger.EventTypeExtraTaskCompensationRequired)
	e.must(t, http.MethodPost, "/admin/v1/delegations/"+d.ID+"/remote-tasks/kt-1/write-off", e.OncallToken,
		map[string]any{"reason": "org confirmed the duplicate PO was voided, ticket OPS-13"}, http.StatusOK)
	n := len(e.events(t, d.ID))
	r := e.Do(t, http.MethodPost, "/admin/v1/delegations/"+d.ID+"/remote-tasks/kt-1/redrive", e.OncallToken, map[string]any{"reason": "try again"})
	r.Problem(t, http.StatusConflict, "redrive_not_allowed")
	if !strings.Contains(string(r.Body), "written_off") {
		t.Fatalf("the refusal does not say the task was written off: %s", r.Body)
	}
	if got := len(e.events(t, d.ID)); got != n {
		t.Fatalf("the refused redrive recorded %d events", got-n)
	}
	if _, res, _ := e.extraTaskRow(t, d.ID, "kt-1"); res != "written_off" {
		t.Fatalf("resolution %q", res)
	}
}

// TestA2AExtraTaskFoundAfterCompletionIsAsked: the delegation's task
// completes with no other task known, and the obligation settles. The
// agent then pushes about a second task in the delegation's own context
// (one nobody looked up: a resend the agent did not deduplicate). It is
// recorded and asked about as an extra task known at the settlement would
// be: an extra_task_compensation anomaly, one compensation request under
// the task's own key, resolved by the receipt. A push about the task that
// answered that request records it as a compensation task, which is never
// asked about itself. No money moves.
func TestA2AExtraTaskFoundAfterCompletionIsAsked(t *testing.T) {
	t.Parallel()
	k := startTaskKeeper(t, &taskKeeper{push: true, compWorking: true, onSend: func(int) string { return "reply" }})
	e := newA2AEnv(t, apitest.Worker{PollAfter: 50 * time.Millisecond})
	e.putOrg(t, "late", k.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-late-extra", "late")
	d = e.waitFor(t, d.ID, "the dispatched task", dispatched)
	k.mu.Lock()
	k.tasks[d.Remote.TaskID]["status"] = map[string]any{"state": "completed"}
	k.mu.Unlock()
	settled := e.waitFor(t, d.ID, "settled", func(d httpapi.DelegationBody) bool { return d.ObligationState == "settled" })
	if n := countEvents(e.events(t, d.ID), ledger.EventTypeExtraTaskCompensationRequired); n != 0 || settled.HoldState != "consumed" {
		t.Fatalf("settled with nothing extra known: %+v, %d extra_task_compensation_required", settled, n)
	}

	id := uuid.MustParse(d.ID)
	k.mu.Lock()
	late := k.newTask(delegate.DispatchContextID(id), delegate.DispatchMessageID(id), "completed")["id"].(string)
	k.mu.Unlock()
	if status := k.pushTask(t, late); status != http.StatusAccepted {
		t.Fatalf("push about %s answered %d", late, status)
	}
	required := eventsData(t, e.waitEvent(t, d.ID, ledger.EventTypeExtraTaskCompensationRequired), ledger.EventTypeExtraTaskCompensationRequired)
	key := compensation.ExtraTaskKey(ledger.Delegation{ID: id}, late)
	if len(required) != 1 || required[0]["task_id"] != late || required[0]["idempotency_key"] != key || required[0]["requested"] != true {
		t.Fatalf("extra_task_compensation_required = %v, want %s under %s", required, late, key)
	}
	if got := e.extraTaskAnomalies(t, d.ID); len(got) != 1 {
		t.Fatalf("extra_task_compensation anomalies = %+v, want one", got)
	}
	reqs := k.awaitCompensationRequests()
	if len(reqs) != 1 || reqs[0]["taskId"] != late || reqs[0]["idempotencyKey"] != key {
		t.Fatalf("compensation requests = %v, want one about %s under its own key", reqs, late)
	}
	k.mu.Lock()
	compTask := k.order[len(k.order)-1]
	k.mu.Unlock()
	k.finishCompensationTask(compTask, reqs[0])
	done := eventsData(t, e.waitEvent(t, d.ID, ledger.EventTypeExtraTaskCompensated), ledger.EventTypeExtraTaskCompensated)
	if len(done) != 1 || done[0]["task_id"] != late || done[0]["resolution"] != "compensated" {
		t.Fatalf("extra_task_compensated = %v", done)
	}
	if got := e.extraTaskAnomalies(t, d.ID); len(got) != 0 {
		t.Fatalf("a resolved extra task is still an anomaly: %+v", got)
	}

	if status := k.pushTask(t, compTask); status != http.StatusAccepted {
		t.Fatalf("push about the compensation task %s answered %d", compTask, status)
	}
	var found []map[string]any
	for deadline := time.Now().Add(10 * time.Second); len(found) < 2 && time.Now().Before(deadline); {
		found = eventsData(t, e.events(t, d.ID), ledger.EventTypeRemoteTaskFound)
		time.Sleep(20 * time.Millisecond)
	}
	if len(found) != 2 || found[1]["task_id"] != compTask || found[1]["purpose"] != "compensation" {
		t.Fatalf("remote_task_found = %v, want %s and then the compensation task %s", found, late, compTask)
	}
	time.Sleep(300 * time.Millisecond)
	events := e.events(t, d.ID)
	if n := countEvents(events, ledger.EventTypeExtraTaskCompensationRequired); n != 1 {
		t.Fatalf("%d extra_task_compensation_required events after the compensation task was found, want 1", n)
	}
	if n := len(k.compensationRequests()); n != 1 {
		t.Fatalf("%d compensation requests, want 1: the compensation task was asked about", n)
	}
	if after := e.get(t, d.ID); after.ObligationState != "settled" || after.HoldState != "consumed" {
		t.Fatalf("the late extra task's compensation moved the obligation: %+v", after)
	}
	e.CheckInvariants(t)
}
