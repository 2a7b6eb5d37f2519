package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/demoagent"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
)

// readAll GETs paths as token, each of which must answer without a
// server error: what they send is what is planned.
func readAll(t *testing.T, e *apitest.Env, token string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if r := e.Do(t, http.MethodGet, p, token, nil); r.Status >= 500 {
			t.Fatalf("GET %s: %d %s", p, r.Status, r.Body)
		}
	}
}

// consoleReads signs in to the console with token, through its sign-in
// form, and GETs paths, each of which must answer 200.
func consoleReads(t *testing.T, e *apitest.Env, token string, paths ...string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) string {
		t.Helper()
		resp, err := c.Get(e.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return string(body)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(get("/console/sign-in"))
	if csrf == nil {
		t.Fatal("no CSRF token on the sign-in form")
	}
	resp, err := c.PostForm(e.URL+"/console/sign-in", url.Values{"csrf": {csrf[1]}, "token": {token}, "next": {"/console/"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("console sign-in: %d", resp.StatusCode)
	}
	for _, p := range paths {
		get(p)
	}
}

// readDelegation GETs the per-item reads of delegation id: those of its
// orchestrator (orch) and those of on-call (its evidence, its evidence
// pack, its case).
func readDelegation(t *testing.T, e *apitest.Env, orch, id string) {
	t.Helper()
	base := "/v1/delegations/" + id
	readAll(t, e, orch, base, base+"/events", base+"/task")
	readAll(t, e, e.OncallToken, base+"/evidence", base+"/evidence-pack", base+"/case")
}

// TestWritePathPlansUseIndexes plans every statement the calls of an
// orchestrator, a signer and on-call send, as a pooled connection runs it
// once its prepared statement goes generic, against tables of tens of
// thousands of rows, and refuses a scan of a whole large table: the cost
// of such a statement grows with the ledger, not with the call. It covers
// the benchmarked lifecycle (create → canceled → signed ack), the deadline
// sweep, a declaration, a hold raised and cut, a settlement, a write-off
// below the threshold, one approved and one rejected by a second on-call,
// case handling (owner, note, snooze), both batch endpoints, the event
// feed, the per-item reads of a delegation and a write-off (the API's and
// the console's), and an org's identity revoked, with the release its
// declaration made acknowledged. A flush's pre-read that found its
// delegations with an OR of an id list and a subquery scanned delegations
// whole, 195 ms a flush at 300,000 rows; the benchmark's lifecycle runs
// start from an empty database and did not show it.
// TestWorkerPathPlansUseIndexes does the same for the A2A and webhook
// workers.
func TestWritePathPlansUseIndexes(t *testing.T) {
	t.Parallel()
	e, rt := tracedCompEnv(t, apitest.WithPrivateCluster())
	alice := e.NewToken(t, ledger.RoleOncall, "", "alice")
	bob := e.NewToken(t, ledger.RoleOncall, "", "bob")
	finance := e.NewToken(t, ledger.RoleFinance, "", "finance")
	// Warm up (authentication, statement caches).
	e.accept(t, acksPath, e.ack(t, e.pending(t, orgB, 100)), "applied")
	e.CheckPlansOf(t, rt, orgB, budgetID, "the write path", func() {
		d := e.delegation(t, orgB, 100)
		d = e.ReportStatus(t, e.orch, d.ID, "TASK_STATE_CANCELED", time.Time{})
		e.acceptAnswer(t, acksPath, e.ack(t, d), "applied")
		declared := e.pending(t, orgB, 100)
		e.accept(t, declsPath, e.declaration(t, declared), "applied")
		held := e.delegation(t, orgB, 500)
		for _, amount := range []int64{800, 300} {
			e.Do(t, http.MethodPatch, "/v1/delegations/"+held.ID+"/hold", e.orch, map[string]any{"amount_minor": amount}).Expect(t, http.StatusOK)
		}
		e.ReportStatus(t, e.orch, held.ID, "TASK_STATE_COMPLETED", time.Time{})
		e.writeOff(t, alice, e.pending(t, orgB, 100).ID, "vendor confirmed no refund").Expect(t, http.StatusCreated)
		var w httpapi.WriteOffBody
		e.writeOff(t, alice, e.pending(t, orgB, threshold+1).ID, "remote org bankrupt").Expect(t, http.StatusCreated).JSON(t, &w)
		e.approve(t, bob, w.ID).Expect(t, http.StatusOK)
		var rejected httpapi.WriteOffBody
		e.writeOff(t, alice, e.pending(t, orgB, threshold+1).ID, "remote org bankrupt").Expect(t, http.StatusCreated).JSON(t, &rejected)
		e.Do(t, http.MethodPost, "/admin/v1/write-offs/"+rejected.ID+"/reject", bob, map[string]any{"reason": "refund arrived"}).Expect(t, http.StatusOK)
		// Case handling of an open obligation.
		open := "/v1/delegations/" + e.pending(t, orgB, 100).ID
		e.Do(t, http.MethodPut, open+"/owner", alice, map[string]any{"owner": "alice"}).Expect(t, http.StatusOK)
		e.Do(t, http.MethodPost, open+"/notes", alice, map[string]any{"note": "asked for a receipt"}).Expect(t, http.StatusCreated)
		e.Do(t, http.MethodPost, open+"/snooze", alice, map[string]any{"until": e.Clock.Now().Add(48 * time.Hour), "reason": "waiting"}).Expect(t, http.StatusOK)
		items := make([]any, 3)
		for i := range items {
			items[i] = apitest.NewCreateRequest(fmt.Sprintf("plans-batch-%d", i), orgB, "procurement", budgetID, 1, "EUR")
		}
		batch(t, e.Env, "/v1/delegations/batch", e.orch, map[string]any{"delegations": items}, len(items))
		tokens := []string{e.ack(t, e.pending(t, orgB, 100)), e.declaration(t, e.pending(t, orgB, 100))}
		batch(t, e.Env, "/v1/compensation/evidence/batch", "", map[string]any{"tokens": tokens}, len(tokens))
		readDelegation(t, e.Env, e.orch, d.ID)
		readAll(t, e.Env, e.orch, "/v1/events", "/v1/events?limit=10")
		readAll(t, e.Env, alice, "/admin/v1/write-offs/"+w.ID)
		// The console's org page is left out: it lists the org's open
		// obligations through the queue's query, a list read whose optional
		// filters leave a generic plan no index.
		consoleReads(t, e.Env, alice, "/console/delegations/"+d.ID)
		// And the deadline sweep, which moves obligations in batches.
		e.pending(t, orgB, 100)
		e.Clock.Advance(ledger.DefaultCompensationTimeout + time.Minute)
		if n := e.sweep(t); n != 3 {
			t.Fatalf("the sweep moved %d, want 3", n)
		}
		// And a revoked identity, which escalates the org's open obligations.
		e.Do(t, http.MethodPost, "/admin/v1/orgs/"+orgB+"/revoke-identity", alice, map[string]any{"reason": "signing key leaked"}).Expect(t, http.StatusOK)
		// Finance acknowledges the release on the discredited declaration.
		e.Do(t, http.MethodPost, "/v1/delegations/"+declared.ID+"/revoked-release/acknowledge", finance,
			map[string]any{"note": "claimed back from the supplier"}).Expect(t, http.StatusOK)
	})
}

// TestWorkerPathPlansUseIndexes is TestWritePathPlansUseIndexes for what
// runs per job: two delegations dispatched through the A2A workers to the
// demo supplier's agent on loopback, observed by push, stream and poll,
// one canceled (the cancel, the compensation request and the agent's
// signed receipt) and one completing (settled); a third, to an agent that
// asks a question, answered by a follow-up message; a fourth whose
// compensation fails until on-call redrives it; webhook deliveries of
// their events claimed and attempted to an endpoint on loopback; an open
// event stream; and the per-item reads of a dispatched delegation.
func TestWorkerPathPlansUseIndexes(t *testing.T) {
	t.Parallel()
	rt := &apitest.Recorder{}
	agent, base := serveDemoAgent(t, demoagent.Config{WorkDelay: 1500 * time.Millisecond})
	e := newA2AEnv(t, apitest.Worker{Webhooks: true, Streaming: true, PollAfter: 200 * time.Millisecond}, apitest.WithRecorder(rt), apitest.WithPrivateCluster())
	e.must(t, http.MethodPut, "/admin/v1/orgs/"+agent.OrgID(), e.OncallToken, map[string]any{
		"name": "Demo supplier", "agent_card_url": agent.CardURL(base), "allowed_hosts": []string{"127.0.0.1"},
		"jwks": json.RawMessage(agent.JWKS()), "require_signed_receipts": true,
	}, http.StatusCreated)
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(hooks.Close)
	e.must(t, http.MethodPut, "/v1/webhooks/plans", e.orch, map[string]any{"url": hooks.URL + "/hook"}, http.StatusCreated)
	asker := startOrchPeer(t)
	e.putOrg(t, "asker", asker.cardURL, http.StatusCreated)
	failing := startV03Peer(t, &v03Peer{compOutcome: "failed"}, "127.0.0.1")
	e.putOrg(t, "failing", failing.cardURL, http.StatusCreated)
	e.CheckPlansOf(t, rt, agent.OrgID(), "ops", "the workers", func() {
		stream := openStream(t, e.URL+"/v1/events?stream=true", e.orch, "")
		defer stream.close()
		canceled, completed := e.dispatch(t, "po-plans-1", agent.OrgID()), e.dispatch(t, "po-plans-2", agent.OrgID())
		e.waitFor(t, canceled.ID, "the dispatched task", dispatched)
		e.must(t, http.MethodPost, "/v1/delegations/"+canceled.ID+"/cancel", e.orch, nil, http.StatusOK)
		e.waitFor(t, canceled.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
		e.waitFor(t, completed.ID, "settled", func(d httpapi.DelegationBody) bool { return d.ObligationState == "settled" })
		// A follow-up message answers a task that asks a question.
		asked := (&orchEnv{e}).dispatchText(t, "po-plans-3", "asker", "input_required", nil)
		e.waitFor(t, asked.ID, "input_required", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "input_required" })
		e.must(t, http.MethodPost, "/v1/delegations/"+asked.ID+"/messages", e.orch, map[string]any{
			"message_id": "answer-1", "message": map[string]any{"parts": []any{map[string]any{"text": "CC-42"}}},
		}, http.StatusAccepted)
		e.waitFor(t, asked.ID, "settled", func(d httpapi.DelegationBody) bool { return d.ObligationState == "settled" })
		// A compensation that fails until on-call redrives it.
		redriven := e.dispatch(t, "po-plans-4", "failing")
		e.waitFor(t, redriven.ID, "the dispatched task", dispatched)
		e.must(t, http.MethodPost, "/v1/delegations/"+redriven.ID+"/cancel", e.orch, nil, http.StatusOK)
		e.waitFor(t, redriven.ID, "unconfirmed", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensation_unconfirmed" })
		failing.mu.Lock()
		failing.compOutcome = "compensated"
		failing.mu.Unlock()
		e.must(t, http.MethodPost, "/admin/v1/delegations/"+redriven.ID+"/compensation/redrive", e.OncallToken,
			map[string]any{"reason": "supplier fixed their compensation handler"}, http.StatusOK)
		e.waitFor(t, redriven.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
		stream.next(t)
		deadline := time.Now().Add(15 * time.Second)
		for !delivered(t, e) {
			if time.Now().After(deadline) {
				t.Fatal("the webhook deliveries were not all delivered")
			}
			time.Sleep(20 * time.Millisecond)
		}
		readDelegation(t, e.Env, e.orch, canceled.ID)
	})
}

// delivered: every delivery of the webhook "plans" was delivered, and there
// is at least one.
func delivered(t *testing.T, e *a2aEnv) bool {
	t.Helper()
	var out deliveryList
	e.Do(t, http.MethodGet, "/v1/webhooks/plans/deliveries", e.orch, nil).Expect(t, http.StatusOK).JSON(t, &out)
	for _, d := range out.Deliveries {
		if d.Status != "delivered" {
			return false
		}
	}
	return len(out.Deliveries) > 0
}

// TestDispatchResolvePlansUseIndexes is TestWritePathPlansUseIndexes for a
// dispatch whose outcome nothing proves: the worker's dispatch and resend
// to an agent that lost the answer and refuses the resend, the delegation
// put in the dispatch_unknown condition, on-call resolving it with the
// task the org names, and the worker observing that task.
func TestDispatchResolvePlansUseIndexes(t *testing.T) {
	t.Parallel()
	rt := &apitest.Recorder{}
	agent := startLostAnswerAgent(t)
	e := newA2AEnv(t, apitest.Worker{NoPush: true}, apitest.WithRecorder(rt), apitest.WithPrivateCluster())
	e.putOrg(t, "flaky", agent.cardURL, http.StatusCreated)
	e.CheckPlansOf(t, rt, "flaky", "ops", "a dispatch resolved", func() {
		d := e.dispatch(t, "po-resolve", "flaky")
		e.waitEvent(t, d.ID, ledger.EventTypeDispatchUnknown)
		e.must(t, http.MethodPost, "/admin/v1/delegations/"+d.ID+"/dispatch/resolve", e.OncallToken, map[string]any{
			"task_id": "t-found", "context_id": "ctx-t-found", "reason": "Flaky's ops confirmed the task by messageId",
		}, http.StatusOK)
		e.waitFor(t, d.ID, "the resolved task observed", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "working" })
	})
}

// TestExtraTaskPlansUseIndexes is TestWritePathPlansUseIndexes for a
// dispatch that created an extra task at its agent: the extra task found,
// its compensation requested when the delegation settles, and on-call
// writing it off when the org never answers.
func TestExtraTaskPlansUseIndexes(t *testing.T) {
	t.Parallel()
	rt := &apitest.Recorder{}
	k := &taskKeeper{compWorking: true}
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 50 * time.Millisecond}, apitest.WithRecorder(rt), apitest.WithPrivateCluster())
	dupAgent(t, k)
	e.putOrg(t, "dup", k.cardURL, http.StatusCreated)
	e.CheckPlansOf(t, rt, "dup", "ops", "an extra task written off", func() {
		d := e.dispatch(t, "po-writeoff-extra", "dup")
		e.waitEvent(t, d.ID, ledger.EventTypeRemoteTaskEnded)
		k.mu.Lock()
		k.tasks["kt-2"]["status"] = map[string]any{"state": "completed"}
		k.mu.Unlock()
		e.waitEvent(t, d.ID, ledger.EventTypeExtraTaskCompensationRequired)
		e.must(t, http.MethodPost, "/admin/v1/delegations/"+d.ID+"/remote-tasks/kt-1/write-off", e.OncallToken,
			map[string]any{"reason": "org confirmed the duplicate PO was voided"}, http.StatusOK)
	})
}
