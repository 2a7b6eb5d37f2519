package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/delegate/jspeer"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
)

// These tests run the whole A2A lifecycle through Quittance's public API
// against the official JS SDK (@a2a-js/sdk 1.3, A2A v1.0) in a Node process
// on loopback (delegate/jspeer): the org is registered with its agent card
// and JWKS through the admin API, work is dispatched, canceled and answered
// through /v1/delegations, pushes arrive at the API's own /a2a/push/{id},
// and compensation over A2A ends in receipts the peer signed. Without node
// and npm they skip, unless QUITTANCE_REQUIRE_JS_PEER is set (CI sets it).

const (
	jsLedgerID = "ledger-js-test"
	jsOrgID    = "js-supplier"
	jsFunded   = 1_000_000
	jsHold     = 5_000
)

// startJSPeer starts a JS SDK peer that signs receipts as jsOrgID for
// jsLedgerID. It stops when t ends.
func startJSPeer(t *testing.T, opts ...jspeer.Option) *jspeer.Peer {
	t.Helper()
	return jspeer.Start(t, append([]jspeer.Option{jspeer.WithOrgID(jsOrgID), jspeer.WithLedgerID(jsLedgerID)}, opts...)...)
}

// jsEnv is the API with its A2A workers on the system clock (receipts are
// checked against real time), an orchestrator token of tenant acme, a
// budget "ops" funded with jsFunded, and the peer registered as an org.
type jsEnv struct {
	*apitest.Env
	peer *jspeer.Peer
	orch string
}

// newJSEnv starts a jsEnv on a fresh database. Start the peer first, so it
// outlives the workers.
func newJSEnv(t *testing.T, peer *jspeer.Peer, w apitest.Worker) *jsEnv {
	t.Helper()
	e := &jsEnv{
		Env:  apitest.New(t, apitest.WithClock(ledger.SystemClock{}), apitest.WithLedgerID(jsLedgerID), apitest.WithWorker(w)),
		peer: peer,
	}
	e.orch = e.NewOrchestrator(t, "acme")
	e.PutBudget(t, "ops", "EUR", jsFunded)
	var org httpapi.OrgBody
	e.Do(t, http.MethodPut, "/admin/v1/orgs/"+peer.OrgID, e.OncallToken, map[string]any{
		"name": "JS supplier", "agent_card_url": peer.CardURL, "allowed_hosts": peer.AllowedHosts,
		"jwks": json.RawMessage(peer.JWKS), "require_signed_receipts": true,
	}).Expect(t, http.StatusCreated).JSON(t, &org)
	if org.AgentCardURL != peer.CardURL || !org.RequireSignedReceipts || org.JWKS == nil {
		t.Fatalf("registered org = %+v", org)
	}
	return e
}

// dispatch asks Quittance to send the scenario's message to the peer and
// returns the delegation as created: held, with no remote task yet.
func (e *jsEnv) dispatch(t *testing.T, op, scenario string) httpapi.DelegationBody {
	t.Helper()
	var d httpapi.DelegationBody
	e.Do(t, http.MethodPost, "/v1/delegations", e.orch, map[string]any{
		"business_operation_id": op, "org_id": e.peer.OrgID, "task_class": "procurement", "budget_id": "ops",
		"hold": map[string]any{"amount_minor": jsHold, "currency": "EUR"},
		"dispatch": map[string]any{"message": map[string]any{
			"parts": []any{map[string]any{"text": scenario}, map[string]any{"data": map[string]any{"sku": "P-1", "qty": 3}}},
		}},
	}).Expect(t, http.StatusCreated).JSON(t, &d)
	if d.ObligationState != "held" || d.HoldState != "active" || d.Remote.TaskID != "" {
		t.Fatalf("dispatched delegation at creation = %+v", d)
	}
	e.expectBudget(t, jsHold, 0)
	return d
}

func (e *jsEnv) cancel(t *testing.T, id string) {
	t.Helper()
	var d httpapi.DelegationBody
	e.Do(t, http.MethodPost, "/v1/delegations/"+id+"/cancel", e.orch, nil).Expect(t, http.StatusOK).JSON(t, &d)
	if d.CancelRequestedAt == nil {
		t.Fatalf("cancel accepted without cancel_requested_at: %+v", d)
	}
}

func (e *jsEnv) get(t *testing.T, id string) httpapi.DelegationBody {
	t.Helper()
	return e.Delegation(t, e.orch, id)
}

func (e *jsEnv) events(t *testing.T, id string) []ledger.EventRecord {
	t.Helper()
	return e.Events(t, e.orch, id)
}

// waitFor polls the delegation through the API until ok holds, failing
// after 20s with its events and the peer's output.
func (e *jsEnv) waitFor(t *testing.T, id, what string, ok func(httpapi.DelegationBody) bool) httpapi.DelegationBody {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		d := e.get(t, id)
		if ok(d) {
			checkStoredReceipt(t, d)
			return d
		}
		if time.Now().After(deadline) {
			var lines []string
			for _, ev := range e.events(t, id) {
				lines = append(lines, string(ev.Type)+" "+string(ev.Data))
			}
			t.Fatalf("timed out waiting for %s: %+v\nevents:\n%s\npeer output:\n%s", what, d, strings.Join(lines, "\n"), e.peer.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitForEvent polls the delegation's events until one of type typ shows.
func (e *jsEnv) waitForEvent(t *testing.T, id string, typ ledger.EventType) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for countEvents(e.events(t, id), typ) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no %s event: %+v\npeer output:\n%s", typ, e.events(t, id), e.peer.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// expectBudget checks the budget's columns through the admin API: held
// and spent as given, nothing written off, the rest available.
func (e *jsEnv) expectBudget(t *testing.T, held, spent int64) {
	t.Helper()
	b := e.Budget(t, "ops")
	if b.FundedMinor != jsFunded || b.HeldMinor != held || b.SpentMinor != spent || b.WrittenOffMinor != 0 ||
		b.AvailableMinor != jsFunded-held-spent {
		t.Fatalf("budget = %+v, want held %d and spent %d of %d", b, held, spent, jsFunded)
	}
}

// expectIntact checks that the delegation's events, as the API publishes
// them, form a verifying hash chain, and re-checks the ledger's invariants
// from the database.
func (e *jsEnv) expectIntact(t *testing.T, id string) {
	t.Helper()
	if err := ledger.VerifyChain(apitest.LedgerEvents(t, e.events(t, id))); err != nil {
		t.Fatalf("event chain of %s: %v", id, err)
	}
	e.CheckInvariants(t)
}

// verifyEvidence checks that token is a JWS of kind the peer signed for
// this ledger, about the remote task.
func (e *jsEnv) verifyEvidence(t *testing.T, token string, kind compensation.TokenKind, taskID string) {
	t.Helper()
	keys, err := jose.ParseOrgJWKS(e.peer.JWKS)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := compensation.Verify(compensation.VerifyInput{
		Token: []byte(token), Kind: kind, OrgID: e.peer.OrgID, Keys: keys, LedgerID: jsLedgerID, Now: time.Now(),
	})
	if err != nil {
		t.Fatalf("evidence %q does not verify as %s against the peer's JWKS: %v", token, kind, err)
	}
	if claims.Subject != taskID {
		t.Fatalf("evidence is about task %q, want %q", claims.Subject, taskID)
	}
}

// obligationPath lists the obligation transitions the events record.
func obligationPath(events []ledger.EventRecord) string {
	var path []string
	for _, ev := range events {
		if ev.ObligationTo != "" {
			path = append(path, string(ev.ObligationFrom)+"->"+string(ev.ObligationTo))
		}
	}
	return strings.Join(path, ",")
}

// eventOf returns the one event of type typ, failing unless there is
// exactly one.
func eventOf(t *testing.T, events []ledger.EventRecord, typ ledger.EventType) ledger.EventRecord {
	t.Helper()
	var found []ledger.EventRecord
	for _, ev := range events {
		if ev.Type == typ {
			found = append(found, ev)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s events, want 1: %+v", len(found), typ, events)
	}
	return found[0]
}

// settledBy returns the sources of the task_status_changed events that
// moved the obligation to settled.
func settledBy(events []ledger.EventRecord) []string {
	var out []string
	for _, ev := range events {
		if ev.Type == ledger.EventTypeTaskStatusChanged && ev.ObligationTo == ledger.ObligationSettled {
			var data struct {
				Source string `json:"source"`
			}
			_ = json.Unmarshal(ev.Data, &data)
			out = append(out, data.Source)
		}
	}
	return out
}

func dispatchedV1(t *testing.T, d httpapi.DelegationBody) {
	t.Helper()
	if d.Remote.ProtocolVersion != "1.0" || d.Remote.ContextID == "" {
		t.Fatalf("remote = %+v, want A2A 1.0 with a context id", d.Remote)
	}
}

func TestJSPeerCancelThenSignedCompensation(t *testing.T) {
	t.Parallel()
	peer := startJSPeer(t)
	e := newJSEnv(t, peer, apitest.Worker{Streaming: true})
	d := e.dispatch(t, "po-js-1", jspeer.ScenarioWork)
	d = e.waitFor(t, d.ID, "the dispatched task", dispatched)
	dispatchedV1(t, d)

	e.cancel(t, d.ID)
	d = e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if d.TaskStatus != "canceled" || d.HoldState != "returned" || d.Compensation == nil || d.Compensation.Receipt == nil {
		t.Fatalf("after compensation: %+v", d)
	}
	events := e.events(t, d.ID)
	if got, want := obligationPath(events), "held->revocation_pending_compensation,revocation_pending_compensation->compensated"; got != want {
		t.Fatalf("obligation path %s, want %s", got, want)
	}
	for _, typ := range []ledger.EventType{ledger.EventTypeTaskDispatched, ledger.EventTypeCancelRequested, ledger.EventTypeCompensationRequested} {
		eventOf(t, events, typ)
	}
	acked := eventOf(t, events, ledger.EventTypeCompensationAcked)
	if acked.ObligationFrom != ledger.ObligationRevocationPendingCompensation || acked.ObligationTo != ledger.ObligationCompensated {
		t.Fatalf("compensation_acked moved %s -> %s", acked.ObligationFrom, acked.ObligationTo)
	}
	e.verifyEvidence(t, acked.Evidence, compensation.KindAck, d.Remote.TaskID)
	e.expectBudget(t, 0, 0)
	e.expectIntact(t, d.ID)
}

func TestJSPeerNoEffectsDeclarationReleases(t *testing.T) {
	t.Parallel()
	peer := startJSPeer(t, jspeer.WithNoEffects())
	e := newJSEnv(t, peer, apitest.Worker{})
	d := e.dispatch(t, "po-js-2", jspeer.ScenarioWork)
	d = e.waitFor(t, d.ID, "the dispatched task", dispatched)
	e.cancel(t, d.ID)
	d = e.waitFor(t, d.ID, "released", func(d httpapi.DelegationBody) bool { return d.ObligationState == "released" })
	if d.ObligationReason != ledger.ReasonNoCompensationDeclared || d.HoldState != "returned" || d.TaskStatus != "canceled" {
		t.Fatalf("after the declaration: %+v", d)
	}
	events := e.events(t, d.ID)
	if got, want := obligationPath(events), "held->revocation_pending_compensation,revocation_pending_compensation->released"; got != want {
		t.Fatalf("obligation path %s, want %s", got, want)
	}
	declared := eventOf(t, events, ledger.EventTypeNoCompensationDeclared)
	if declared.ObligationTo != ledger.ObligationReleased {
		t.Fatalf("no_compensation_declared moved to %s", declared.ObligationTo)
	}
	e.verifyEvidence(t, declared.Evidence, compensation.KindDeclaration, d.Remote.TaskID)
	e.expectBudget(t, 0, 0)
	e.expectIntact(t, d.ID)
}

func TestJSPeerAtomicCancelAndCompensate(t *testing.T) {
	t.Parallel()
	peer := startJSPeer(t, jspeer.WithAtomicCancel())
	// No push, no stream, no poll: the receipt comes in the cancel reply.
	e := newJSEnv(t, peer, apitest.Worker{NoPush: true})
	d := e.dispatch(t, "po-js-3", jspeer.ScenarioWork)
	d = e.waitFor(t, d.ID, "the dispatched task", dispatched)
	e.cancel(t, d.ID)
	d = e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if d.ObligationReason != ledger.ReasonAtomicCompensation || d.HoldState != "returned" || d.TaskStatus != "canceled" {
		t.Fatalf("compensated = %+v, want it by the atomic receipt", d)
	}
	events := e.events(t, d.ID)
	if got, want := obligationPath(events), "held->compensated"; got != want {
		t.Fatalf("obligation path %s, want %s", got, want)
	}
	if n := countEvents(events, ledger.EventTypeCompensationRequested); n != 0 {
		t.Fatalf("%d compensation requests sent although the cancel reply carried the receipt: %+v", n, events)
	}
	// The canceled status from the cancel reply carries the signed ack.
	for _, ev := range events {
		if ev.ObligationTo == ledger.ObligationCompensated {
			if ev.Type != ledger.EventTypeTaskStatusChanged || !strings.Contains(string(ev.Data), `"source":"cancel"`) {
				t.Fatalf("compensated by %s %s, want the cancel reply's status", ev.Type, ev.Data)
			}
			e.verifyEvidence(t, ev.Evidence, compensation.KindAck, d.Remote.TaskID)
		}
	}
	e.expectBudget(t, 0, 0)
	e.expectIntact(t, d.ID)
}

// completes dispatches a task the peer completes after a while and waits
// until Quittance settles it, checking what the settlement left.
func (e *jsEnv) completes(t *testing.T, op string) []ledger.EventRecord {
	t.Helper()
	d := e.dispatch(t, op, jspeer.ScenarioWork)
	d = e.waitFor(t, d.ID, "settled", func(d httpapi.DelegationBody) bool { return d.ObligationState == "settled" })
	dispatchedV1(t, d)
	if d.TaskStatus != "completed" || d.HoldState != "consumed" {
		t.Fatalf("after completion: %+v", d)
	}
	e.expectBudget(t, 0, jsHold)
	e.expectIntact(t, d.ID)
	return e.events(t, d.ID)
}

func TestJSPeerStreamingObservesCompletion(t *testing.T) {
	t.Parallel()
	peer := startJSPeer(t, jspeer.WithWorkDuration(1500*time.Millisecond))
	e := newJSEnv(t, peer, apitest.Worker{NoPush: true, Streaming: true})
	if got := settledBy(e.completes(t, "po-js-4")); len(got) != 1 || got[0] != "stream" {
		t.Fatalf("settled by %v, want the stream (no push, no poll)", got)
	}
}

func TestJSPeerPushObservesCompletion(t *testing.T) {
	t.Parallel()
	peer := startJSPeer(t, jspeer.WithWorkDuration(1500*time.Millisecond))
	// The peer pushes to the API's own receiver, POST /a2a/push/{id}.
	e := newJSEnv(t, peer, apitest.Worker{})
	if got := settledBy(e.completes(t, "po-js-5")); len(got) != 1 || got[0] != "push" {
		t.Fatalf("settled by %v, want a push confirmed by GetTask", got)
	}
}

func TestJSPeerNotCancelableKeepsHold(t *testing.T) {
	t.Parallel()
	peer := startJSPeer(t)
	e := newJSEnv(t, peer, apitest.Worker{})
	d := e.dispatch(t, "po-js-6", jspeer.ScenarioNotCancelable)
	d = e.waitFor(t, d.ID, "the dispatched task", dispatched)
	e.cancel(t, d.ID)
	e.waitForEvent(t, d.ID, ledger.EventTypeCancelRefused)
	// The follow-up observation records the task still working.
	d = e.waitFor(t, d.ID, "the task still working", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "working" })
	if d.ObligationState != "held" || d.HoldState != "active" || d.TaskStatus != "working" {
		t.Fatalf("after a refused cancel: %+v", d)
	}
	if path := obligationPath(e.events(t, d.ID)); path != "" {
		t.Fatalf("a refused cancel moved the obligation: %s", path)
	}
	e.expectBudget(t, jsHold, 0)
	e.expectIntact(t, d.ID)
}

// TestJSPeerContinueInterruptedTask answers an input_required or
// auth_required task of the JS SDK agent through the API and sees it
// complete; the answer is sent once however often it is repeated, and a
// completed task takes no more.
func TestJSPeerContinueInterruptedTask(t *testing.T) {
	t.Parallel()
	peer := startJSPeer(t) // one peer for both cases, each on its own database
	for _, scenario := range []string{jspeer.ScenarioInputRequired, jspeer.ScenarioAuthRequired} {
		t.Run(scenario, func(t *testing.T) {
			t.Parallel()
			e := newJSEnv(t, peer, apitest.Worker{})
			d := e.dispatch(t, "op-"+scenario, scenario)
			d = e.waitFor(t, d.ID, scenario, func(d httpapi.DelegationBody) bool { return d.TaskStatus == scenario })
			dispatchedV1(t, d)

			var snap delegate.TaskSnapshot
			e.Do(t, http.MethodGet, "/v1/delegations/"+d.ID+"/task", e.orch, nil).Expect(t, http.StatusOK).JSON(t, &snap)
			if snap.State != ledger.TaskStatus(scenario) || snap.StatusMessage == nil || snap.StatusMessage.Text == "" {
				t.Fatalf("snapshot = %+v", snap)
			}
			if scenario == jspeer.ScenarioAuthRequired && !strings.Contains(snap.StatusMessage.Text, "https://consent.example.test/") {
				t.Fatalf("consent URL missing from %q", snap.StatusMessage.Text)
			}

			answer := func(id, text string) *apitest.Response {
				return e.Do(t, http.MethodPost, "/v1/delegations/"+d.ID+"/messages", e.orch, map[string]any{
					"message_id": id, "message": map[string]any{"parts": []any{map[string]any{"text": text}}},
				})
			}
			var first, again httpapi.MessageBody
			answer("a1", "CC-42").Expect(t, http.StatusAccepted).JSON(t, &first)
			answer("a1", "CC-42").Expect(t, http.StatusOK).JSON(t, &again)
			if first.A2AMessageID == "" || again.A2AMessageID != first.A2AMessageID || again.MessageID != "a1" {
				t.Fatalf("repeat answered %+v, first %+v", again, first)
			}

			d = e.waitFor(t, d.ID, "settled", func(d httpapi.DelegationBody) bool { return d.ObligationState == "settled" })
			if d.TaskStatus != "completed" || d.HoldState != "consumed" {
				t.Fatalf("after the answer: %+v", d)
			}
			answer("a2", "CC-42").Problem(t, http.StatusConflict, "task_terminal")

			events := e.events(t, d.ID)
			if n := countEvents(events, ledger.EventTypeMessageSent); n != 1 {
				t.Fatalf("%d messages sent, want 1: %+v", n, events)
			}
			if got, want := obligationPath(events), fmt.Sprintf("%s->%s", ledger.ObligationHeld, ledger.ObligationSettled); got != want {
				t.Fatalf("obligation path %s, want %s", got, want)
			}
			e.expectBudget(t, 0, jsHold)
			e.expectIntact(t, d.ID)
		})
	}
}

// TestJSPeerCompensationModes drives Quittance against the JS SDK agent in
// each of the remote behaviours that are not an immediate answer, one peer
// process for all three, each case on its own database:
//   - a pending receipt, then the final one on the same compensation task:
//     Quittance waits on that task and the obligation is compensated by
//     the one request it sent (one messageId, no new round);
//   - a not_supported receipt: compensation_unconfirmed at once, with the
//     reason, the hold active, no retry;
//   - a task the agent purges on cancel (TaskNotFoundError for the cancel
//     and for every GetTask after it): recorded as remote_task_not_found,
//     never read as canceled or rejected; the obligation stays held.
func TestJSPeerCompensationModes(t *testing.T) {
	t.Parallel()
	const pending = 1500 * time.Millisecond
	peer := startJSPeer(t, jspeer.WithPendingDuration(pending))

	t.Run("pending", func(t *testing.T) {
		t.Parallel()
		e := newJSEnv(t, peer, apitest.Worker{CompensationMaxAttempts: 2})
		d := e.dispatch(t, "po-js-pending", jspeer.ScenarioCompensationPending)
		d = e.waitFor(t, d.ID, "the dispatched task", dispatched)
		// The peer's reversal starts when it receives the request, which is
		// after the cancel: the wait is measured from here, not from the
		// request's event, recorded only after the peer has answered.
		canceled := time.Now()
		e.cancel(t, d.ID)
		d = e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
		if d.TaskStatus != "canceled" || d.HoldState != "returned" || d.Compensation.Attempts != 1 || d.Compensation.LastError != "" {
			t.Fatalf("after a pending compensation: %+v", d)
		}
		if receipt, _ := json.Marshal(d.Compensation.Receipt); !strings.Contains(string(receipt), `"outcome":"compensated"`) {
			t.Fatalf("receipt %s, want the final compensated one", receipt)
		}
		events := e.events(t, d.ID)
		if got, want := obligationPath(events), "held->revocation_pending_compensation,revocation_pending_compensation->compensated"; got != want {
			t.Fatalf("obligation path %s, want %s", got, want)
		}
		if n := countEvents(events, ledger.EventTypeCompensationRequestFailed); n != 0 {
			t.Fatalf("%d failed compensation attempts recorded for a pending receipt: %+v", n, events)
		}
		requested := eventOf(t, events, ledger.EventTypeCompensationRequested)
		var data struct {
			MessageID          string `json:"message_id"`
			Round              int    `json:"round"`
			CompensationTaskID string `json:"compensation_task_id"`
		}
		if err := json.Unmarshal(requested.Data, &data); err != nil {
			t.Fatal(err)
		}
		want := compensation.RequestMessageID(uuid.MustParse(d.ID), 1)
		if data.MessageID != want || data.Round != 1 || data.CompensationTaskID == "" {
			t.Fatalf("compensation_requested %s, want round 1 with messageId %s and the compensation task", requested.Data, want)
		}
		if got := peer.CompensationRequests(d.Remote.TaskID); len(got) != 1 || got[0] != want {
			t.Fatalf("the peer received compensation requests %v, want one with messageId %s", got, want)
		}
		acked := eventOf(t, events, ledger.EventTypeCompensationAcked)
		if wait := acked.At.Sub(canceled); wait < pending-200*time.Millisecond {
			t.Fatalf("compensated %s after the cancel, before the pending reversal (%s) could finish", wait, pending)
		}
		e.verifyEvidence(t, acked.Evidence, compensation.KindAck, d.Remote.TaskID)
		e.expectBudget(t, 0, 0)
		e.expectIntact(t, d.ID)
	})

	t.Run("not_supported", func(t *testing.T) {
		t.Parallel()
		e := newJSEnv(t, peer, apitest.Worker{CompensationMaxAttempts: 5})
		d := e.dispatch(t, "po-js-unsupported", jspeer.ScenarioCompensationNotSupported)
		d = e.waitFor(t, d.ID, "the dispatched task", dispatched)
		e.cancel(t, d.ID)
		d = e.waitFor(t, d.ID, "unconfirmed", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensation_unconfirmed" })
		if d.TaskStatus != "canceled" || d.HoldState != "active" || d.Compensation.Attempts != 1 ||
			!strings.Contains(d.Compensation.LastError, "cannot be reversed") {
			t.Fatalf("after not_supported: %+v", d)
		}
		time.Sleep(500 * time.Millisecond) // several backoffs (at most 200ms): nothing more is sent
		events := e.events(t, d.ID)
		if got, want := obligationPath(events), "held->revocation_pending_compensation,revocation_pending_compensation->compensation_unconfirmed"; got != want {
			t.Fatalf("obligation path %s, want %s", got, want)
		}
		unsupported := eventOf(t, events, ledger.EventTypeCompensationNotSupported)
		if unsupported.ObligationTo != ledger.ObligationCompensationUnconfirmed || !strings.Contains(string(unsupported.Data), "cannot be reversed") {
			t.Fatalf("compensation_not_supported %s -> %s %s, want compensation_unconfirmed with the reason", unsupported.ObligationFrom, unsupported.ObligationTo, unsupported.Data)
		}
		for _, typ := range []ledger.EventType{ledger.EventTypeCompensationRetriesExhausted, ledger.EventTypeCompensationRequestFailed} {
			if n := countEvents(events, typ); n != 0 {
				t.Fatalf("%d %s events after not_supported: %+v", n, typ, events)
			}
		}
		expectRequestedOnce(t, d.ID, events)
		want := compensation.RequestMessageID(uuid.MustParse(d.ID), 1)
		if got := peer.CompensationRequests(d.Remote.TaskID); len(got) != 1 || got[0] != want {
			t.Fatalf("the peer received compensation requests %v, want one with messageId %s", got, want)
		}
		e.expectBudget(t, jsHold, 0)
		e.expectIntact(t, d.ID)
	})

	t.Run("purged", func(t *testing.T) {
		t.Parallel()
		e := newJSEnv(t, peer, apitest.Worker{PollAfter: purgePollAfter})
		d := e.dispatch(t, "po-js-purged", jspeer.ScenarioPurgeOnCancel)
		d = e.waitFor(t, d.ID, "the dispatched task", func(d httpapi.DelegationBody) bool { return dispatched(d) && d.TaskStatus == "working" })
		e.cancel(t, d.ID)
		waitNotFound(t, &a2aEnv{Env: e.Env, orch: e.orch}, d.ID, purgePollAfter)
		if !peer.Purged(d.Remote.TaskID) {
			t.Fatalf("the peer did not purge task %s:\n%s", d.Remote.TaskID, peer.Output())
		}
		d = e.get(t, d.ID)
		if d.ObligationState != "held" || d.HoldState != "active" || d.TaskStatus != "working" || d.CancelRequestedAt == nil {
			t.Fatalf("after TaskNotFoundError for a purged task: %+v", d)
		}
		events := e.events(t, d.ID)
		if path := obligationPath(events); path != "" {
			t.Fatalf("a purged task moved the obligation: %s", path)
		}
		for _, typ := range []ledger.EventType{ledger.EventTypeCancelFailed, ledger.EventTypeCompensationRequested} {
			if n := countEvents(events, typ); n != 0 {
				t.Fatalf("%d %s events for a purged task: %+v", n, typ, events)
			}
		}
		for _, ev := range events {
			if ev.Type == ledger.EventTypeTaskStatusChanged && ledger.TaskStatus(statusOf(t, ev)).Terminal() {
				t.Fatalf("a purged task was read as ended: %s %s", ev.Type, ev.Data)
			}
		}
		e.expectBudget(t, jsHold, 0)
		e.expectIntact(t, d.ID)
	})
}

// notFoundSources returns the source of each remote_task_not_found event.
func notFoundSources(t *testing.T, events []ledger.EventRecord) []string {
	t.Helper()
	var out []string
	for _, ev := range events {
		if ev.Type == ledger.EventTypeRemoteTaskNotFound {
			var data struct {
				Source string `json:"source"`
			}
			if err := json.Unmarshal(ev.Data, &data); err != nil {
				t.Fatal(err)
			}
			out = append(out, data.Source)
		}
	}
	return out
}

// statusOf returns the state a task_status_changed event applied.
func statusOf(t *testing.T, ev ledger.EventRecord) string {
	t.Helper()
	var data struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal(ev.Data, &data); err != nil {
		t.Fatal(err)
	}
	return data.State
}
