package console_test

import (
	"crypto/ed25519"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/demoagent"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
)

// These tests cover console actions that the page and browser tests do
// not reach: bulk snooze, identity revocation, webhook redrive, finance on
// the write-offs page, the refusal of a bulk write-off, the overview's
// deadlines, and a delegation's snapshot and linked delegations.

// section is the part of a page from the element with the given id to the
// end of its section.
func (p page) section(t *testing.T, id string) string {
	t.Helper()
	_, rest, ok := strings.Cut(p.body, `id="`+id+`"`)
	if !ok {
		t.Fatalf("page (status %d) has no element %q:\n%s", p.status, id, p.body)
	}
	s, _, _ := strings.Cut(rest, "</section>")
	return s
}

// TestBulkSnooze: a bulk snooze previews exactly the selected entries and
// records nothing; confirmed, it records one case_snoozed event each, the
// entries leave the needs-action queue, and the holds do not move. A date
// that is missing or not a date is shown beside the field, nothing recorded.
func TestBulkSnooze(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.OncallToken)
	budget := w.Budget(t, budgetID)
	before := w.totalEvents(t)
	for _, until := range []string{"", "next week"} {
		bad := b.post("/console/obligations", "/console/obligations/bulk", url.Values{
			"id": {w.big.ID, w.small.ID}, "kind": {"snooze"}, "until": {until}, "back": {"/console/obligations"},
		})
		if bad.status != http.StatusUnprocessableEntity {
			t.Fatalf("bulk snooze until %q: %d", until, bad.status)
		}
		if until == "" {
			bad.contains(t, "choose the date the entries come back")
		} else {
			bad.contains(t, "use a date such as")
		}
	}
	sel := url.Values{
		"id": {w.big.ID, w.small.ID, w.pending.ID}, "kind": {"snooze"}, "until": {"2026-06-01"},
		"reason": {"Bolt's ERP migration; they answer after it"}, "back": {"/console/obligations"},
	}
	preview := b.post("/console/obligations", "/console/obligations/bulk", sel)
	if preview.status != http.StatusOK {
		t.Fatalf("bulk snooze preview: %d\n%s", preview.status, preview.body)
	}
	preview.contains(t, "3 will change", "Confirm: change 3", w.big.ID, w.small.ID, w.pending.ID)
	if w.totalEvents(t) != before {
		t.Fatal("refused bulk snoozes or the preview recorded events")
	}
	b.get("/console/obligations").contains(t, w.big.ID, w.small.ID, w.pending.ID)

	sel.Set("confirm", "1")
	done := b.post("/console/obligations", "/console/obligations/bulk", sel)
	if done.status != http.StatusSeeOther || !strings.Contains(done.location, "done=bulk") {
		t.Fatalf("bulk snooze: %d %s\n%s", done.status, done.location, done.body)
	}
	if n := w.totalEvents(t) - before; n != 3 {
		t.Fatalf("bulk snooze recorded %d events, want 3", n)
	}
	for _, d := range []httpapi.DelegationBody{w.big, w.small, w.pending} {
		if n := w.eventCount(t, d.ID, ledger.EventTypeCaseSnoozed); n != 1 {
			t.Fatalf("%s: %d case_snoozed events", d.ID, n)
		}
		now := w.Delegation(t, w.orch, d.ID)
		if now.HoldState != d.HoldState || now.ObligationState != d.ObligationState || now.Hold != d.Hold {
			t.Fatalf("snoozing moved the obligation: before %+v, after %+v", d, now)
		}
	}
	if after := w.Budget(t, budgetID); after != budget {
		t.Fatalf("snoozing changed the budget: before %+v, after %+v", budget, after)
	}
	queue := b.get("/console/obligations")
	queue.lacks(t, w.big.ID, w.small.ID, w.pending.ID)
	b.get("/console/obligations?snoozed=only").contains(t, w.big.ID, w.small.ID, w.pending.ID, "2026-06-01")
	b.get("/console/").contains(t, "2,500.00 EUR", "400.00 EUR", `<td class="tenants">acme, globex</td>`)
}

// TestBulkWriteOffRefused: write-offs are never bulk; a crafted bulk POST
// asking for one is refused beside the field and records nothing.
func TestBulkWriteOffRefused(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.OncallToken)
	before := w.totalEvents(t)
	for _, confirm := range []string{"", "1"} {
		res := b.post("/console/obligations", "/console/obligations/bulk", url.Values{
			"id": {w.big.ID, w.small.ID}, "kind": {"write_off"}, "reason": {"bulk loss"}, "confirm": {confirm},
			"back": {"/console/obligations"},
		})
		if res.status != http.StatusUnprocessableEntity {
			t.Fatalf("bulk write-off (confirm %q): %d\n%s", confirm, res.status, res.body)
		}
		res.contains(t, "choose assign, snooze or redrive")
	}
	if w.totalEvents(t) != before {
		t.Fatal("a refused bulk write-off recorded events")
	}
	list, err := w.Compensation.WriteOffs(t.Context(), ledger.Principal{Role: ledger.RoleFinance}, compensation.WriteOffFilter{})
	if err != nil || len(list) != 0 {
		t.Fatalf("write-offs after a refused bulk write-off: %v %v", list, err)
	}
}

// TestRevokeIdentityFromConsole: a blank reason is shown beside the field
// with nothing recorded; finance's crafted POST gets 403; with a reason the
// org's identity is revoked and every open obligation with it (held,
// awaiting compensation, unconfirmed) is escalated, one identity_revoked
// event each, holds intact (ledger/DESIGN.md §3), while the compensated one
// stays as it is.
func TestRevokeIdentityFromConsole(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.OncallToken)
	self := "/console/orgs/" + orgID
	b.get(self).contains(t, `action="/console/orgs/`+orgID+`/revoke-identity"`)
	before := w.totalEvents(t)
	bad := b.post(self, self+"/revoke-identity", url.Values{"reason": {"   "}})
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("revoke without a reason: %d", bad.status)
	}
	if form := bad.section(t, "revoke"); !strings.Contains(form, `aria-invalid="true"`) || !strings.Contains(form, "is required") {
		t.Fatalf("the revoke form does not show the error beside the reason:\n%s", form)
	}

	f := w.client(t)
	f.signIn(w.finance)
	f.get(self).lacks(t, "/revoke-identity")
	if res := f.post(self, self+"/revoke-identity", url.Values{"reason": {"crafted"}}); res.status != http.StatusForbidden {
		t.Fatalf("finance's crafted revoke: %d", res.status)
	}
	if w.totalEvents(t) != before {
		t.Fatal("refused revocations recorded events")
	}
	if o, err := w.Ledger.GetOrg(t.Context(), ledger.Principal{Role: ledger.RoleFinance}, orgID); err != nil || o.IdentityRevoked() {
		t.Fatalf("after refused revocations the org is %+v (%v)", o, err)
	}

	budget := w.Budget(t, budgetID)
	res := b.post(self, self+"/revoke-identity", url.Values{"reason": {"Bolt's signing key leaked"}})
	if res.status != http.StatusSeeOther || !strings.Contains(res.location, "done=revoked") {
		t.Fatalf("revoke: %d %s\n%s", res.status, res.location, res.body)
	}
	b.get(res.location).contains(t, "Agent identity revoked", "Bolt&#39;s signing key leaked")
	b.get(self).lacks(t, "/revoke-identity")
	page := b.get("/console/obligations?view=all&org=" + orgID + "&limit=200")
	ids := delegationLinks.FindAllStringSubmatch(page.body, -1)
	if len(ids) != 7 {
		t.Fatalf("org %s has %d obligations on the page, want 7", orgID, len(ids))
	}
	escalated := 0
	for _, m := range ids {
		d := w.Delegation(t, w.orch, m[1])
		if m[1] == w.acked.ID {
			if d.ObligationState != string(ledger.ObligationCompensated) || w.eventCount(t, d.ID, ledger.EventTypeIdentityRevoked) != 0 {
				t.Fatalf("the compensated obligation after revocation: %+v", d)
			}
			continue
		}
		if d.ObligationState != string(ledger.ObligationEscalated) || d.HoldState != "active" || w.eventCount(t, d.ID, ledger.EventTypeIdentityRevoked) != 1 {
			t.Fatalf("an open obligation after revocation: %s/%s", d.ObligationState, d.HoldState)
		}
		escalated++
	}
	if escalated != 6 {
		t.Fatalf("%d obligations escalated, want 6", escalated)
	}
	if after := w.Budget(t, budgetID); after != budget {
		t.Fatalf("revocation moved money: before %+v, after %+v", budget, after)
	}
	b.get("/console/obligations?state=escalated").contains(t, w.big.ID, w.pending.ID)
	// Twice is a conflict, shown beside the form.
	if again := b.post(self, self+"/revoke-identity", url.Values{"reason": {"again"}}); again.status != http.StatusConflict {
		t.Fatalf("a second revocation: %d", again.status)
	}
}

// TestFinanceOnWriteOffs: finance sees a pending write-off (who asked, why,
// how much) but no approve or reject form, and its crafted approval and
// rejection get 403 with the write-off still pending.
func TestFinanceOnWriteOffs(t *testing.T) {
	w := newWorld(t)
	a := w.client(t)
	a.signIn(w.OncallToken)
	self := "/console/delegations/" + w.big.ID
	if res := a.post(self, self+"/write-offs", url.Values{"reason": {"Bolt unreachable for 3 days"}}); res.status != http.StatusSeeOther {
		t.Fatalf("request: %d %s", res.status, res.body)
	}
	list, err := w.Compensation.WriteOffs(t.Context(), ledger.Principal{Role: ledger.RoleFinance}, compensation.WriteOffFilter{})
	if err != nil || len(list) != 1 {
		t.Fatalf("write-offs: %v %v", list, err)
	}
	id := list[0].ID.String()

	f := w.client(t)
	f.signIn(w.finance)
	p := f.get("/console/write-offs")
	p.contains(t, "2,500.00 EUR", "Bolt unreachable for 3 days", "On-call decides.")
	p.lacks(t, "/approve\"", "/reject\"", ">Approve<", ">Reject<")
	f.get(self).lacks(t, "/approve\"", "/reject\"")
	before := w.totalEvents(t)
	for _, action := range []string{"approve", "reject"} {
		res := f.post("/console/write-offs", "/console/write-offs/"+id+"/"+action, url.Values{"reason": {"crafted"}})
		if res.status != http.StatusForbidden {
			t.Fatalf("finance's crafted %s: %d", action, res.status)
		}
	}
	if w.totalEvents(t) != before {
		t.Fatal("finance's crafted decisions recorded events")
	}
	list, err = w.Compensation.WriteOffs(t.Context(), ledger.Principal{Role: ledger.RoleFinance}, compensation.WriteOffFilter{})
	if err != nil || len(list) != 1 || list[0].Status != compensation.WriteOffPendingApproval {
		t.Fatalf("after finance's crafted decisions: %+v %v", list, err)
	}
	if d := w.Delegation(t, w.orch, w.big.ID); d.HoldState != "active" {
		t.Fatalf("the hold after finance's crafted approval: %s", d.HoldState)
	}
}

// TestOverviewDeadlinesDueSoon: the overview lists obligations whose
// compensation deadline falls in the next 24 hours, and only those.
func TestOverviewDeadlinesDueSoon(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.finance)
	// pending's deadline is 70 h away.
	due := b.get("/console/").section(t, "due-h")
	if strings.Contains(due, w.pending.ID) || !strings.Contains(due, "No compensation deadline falls in the next 24 hours") {
		t.Fatalf("70 h before the deadline the overview shows:\n%s", due)
	}
	w.Clock.Advance(47 * time.Hour)
	b.signIn(w.finance) // the first session has expired
	due = b.get("/console/").section(t, "due-h")
	if !strings.Contains(due, `href="/console/delegations/`+w.pending.ID+`"`) || !strings.Contains(due, "600.00 EUR") || !strings.Contains(due, "due in 23h") {
		t.Fatalf("23 h before the deadline the overview shows:\n%s", due)
	}
	for _, other := range []string{w.big.ID, w.small.ID, w.acked.ID} {
		if strings.Contains(due, other) {
			t.Fatalf("the due-soon list shows %s, which has no deadline ahead:\n%s", other, due)
		}
	}
}

// TestWebhookRedriveFromConsole: on-call puts a tenant endpoint's
// dead-lettered deliveries back in the queue and sees how many, and they
// are then delivered; an endpoint without a tenant is shown beside the
// field with nothing changed; finance sees no form and its crafted POST
// gets 403.
func TestWebhookRedriveFromConsole(t *testing.T) {
	var healthy atomic.Bool
	receiver := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		if healthy.Load() {
			rw.WriteHeader(http.StatusNoContent)
			return
		}
		rw.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(receiver.Close)
	e := apitest.New(t, apitest.WithClock(ledger.SystemClock{}), apitest.WithLedgerID(ledgerID),
		apitest.WithWorker(apitest.Worker{Webhooks: true, WebhookMaxAttempts: 1}))
	w := &world{Env: e, orch: e.NewOrchestrator(t, "acme"), finance: e.NewToken(t, ledger.RoleFinance, "", "finance-1")}
	e.Do(t, http.MethodPut, "/v1/webhooks/erp", w.orch, map[string]any{"url": receiver.URL, "event_types": []string{"delegation_created"}}).Expect(t, http.StatusCreated)
	e.PutBudget(t, budgetID, "EUR", 1_000_000)
	e.PutOrg(t, orgID, false)
	for _, op := range []string{"po-1", "po-2"} {
		e.CreateDelegation(t, w.orch, apitest.NewCreateRequest(op, orgID, "procurement", budgetID, 10_000, "EUR"))
	}
	deliveries := func(status string) int {
		var out struct {
			Deliveries []httpapi.DeliveryBody `json:"deliveries"`
		}
		e.Do(t, http.MethodGet, "/v1/webhooks/erp/deliveries?status="+status, w.orch, nil).Expect(t, http.StatusOK).JSON(t, &out)
		return len(out.Deliveries)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("two dead-lettered deliveries", func() bool { return deliveries("dead") == 2 })

	b := w.client(t)
	b.signIn(e.OncallToken)
	bad := b.post("/console/webhooks", "/console/webhooks/redrive", url.Values{"endpoint": {"erp"}})
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("redrive of an endpoint without its tenant: %d\n%s", bad.status, bad.body)
	}
	bad.contains(t, `id="wh-tenant" name="tenant" value=""><span class="field-error" role="alert">is required with endpoint_id</span>`)

	f := w.client(t)
	f.signIn(w.finance)
	f.get("/console/webhooks").lacks(t, `action="/console/webhooks/redrive"`)
	if res := f.post("/console/webhooks", "/console/webhooks/redrive", url.Values{"tenant": {"acme"}}); res.status != http.StatusForbidden {
		t.Fatalf("finance's crafted redrive: %d", res.status)
	}
	if n := deliveries("dead"); n != 2 {
		t.Fatalf("refused redrives left %d dead deliveries, want 2", n)
	}

	healthy.Store(true)
	res := b.post("/console/webhooks", "/console/webhooks/redrive", url.Values{"tenant": {"acme"}, "endpoint": {"erp"}})
	if res.status != http.StatusSeeOther || !strings.Contains(res.location, "n=2") {
		t.Fatalf("redrive: %d %s\n%s", res.status, res.location, res.body)
	}
	b.get(res.location).contains(t, "2 deliveries requeued.")
	waitFor("the redriven deliveries to be delivered", func() bool { return deliveries("delivered") == 2 && deliveries("dead") == 0 })
}

// TestDelegationSnapshotAndLinks: a delegation dispatched to the demo
// supplier agent shows the remote task snapshot Quittance observed, with
// its artifacts, and a refinement sent in its context (context_from) is
// linked both ways.
func TestDelegationSnapshotAndLinks(t *testing.T) {
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + l.Addr().String()
	agent, err := demoagent.New(demoagent.Config{LedgerID: ledgerID, Key: key, BaseURL: base, WorkDelay: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	srv := httptest.NewUnstartedServer(agent.Handler())
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)

	// Tasks are polled, not pushed: the agent's push deliveries would
	// outlive the test.
	e := apitest.New(t, apitest.WithClock(ledger.SystemClock{}), apitest.WithLedgerID(ledgerID),
		apitest.WithWorker(apitest.Worker{NoPush: true, PollAfter: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond}))
	w := &world{Env: e, orch: e.NewOrchestrator(t, "acme")}
	e.PutBudget(t, budgetID, "EUR", 1_000_000)
	e.Do(t, http.MethodPut, "/admin/v1/orgs/"+agent.OrgID(), e.OncallToken, map[string]any{
		"name": "Demo supplier", "agent_card_url": agent.CardURL(base), "allowed_hosts": []string{"127.0.0.1"},
		"jwks": json.RawMessage(agent.JWKS()),
	}).Expect(t, http.StatusCreated)
	dispatch := func(op, text, contextFrom string) httpapi.DelegationBody {
		body := map[string]any{
			"business_operation_id": op, "org_id": agent.OrgID(), "task_class": "procurement", "budget_id": budgetID,
			"hold":     map[string]any{"amount_minor": 12_500, "currency": "EUR"},
			"dispatch": map[string]any{"message": map[string]any{"parts": []any{map[string]any{"text": text}}}},
		}
		if contextFrom != "" {
			body["context_from"] = contextFrom
		}
		var d httpapi.DelegationBody
		e.Do(t, http.MethodPost, "/v1/delegations", w.orch, body).Expect(t, http.StatusCreated).JSON(t, &d)
		return d
	}
	snapshot := func(id string, done func(delegate.TaskSnapshot) bool) delegate.TaskSnapshot {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			r := e.Do(t, http.MethodGet, "/v1/delegations/"+id+"/task", w.orch, nil)
			var s delegate.TaskSnapshot
			if r.Status == http.StatusOK {
				r.JSON(t, &s)
				if done(s) {
					return s
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("delegation %s: no such snapshot within 30s (last: %d %s)", id, r.Status, r.Body)
			}
		}
	}
	parent := dispatch("po-pallets", "buy 3 pallets", "")
	snap := snapshot(parent.ID, func(s delegate.TaskSnapshot) bool {
		return s.State == ledger.StatusCompleted && len(s.Artifacts) > 0
	})
	parent = e.Delegation(t, w.orch, parent.ID)
	child := dispatch("po-pallets-refined", "make it 4 pallets", parent.ID)
	snapshot(child.ID, func(s delegate.TaskSnapshot) bool { return s.TaskID != "" })

	b := w.client(t)
	b.signIn(e.OncallToken)
	p := b.get("/console/delegations/" + parent.ID)
	shown := p.section(t, "snap-h")
	raw, _ := json.Marshal(snap.Artifacts)
	var po struct {
		Parts []struct {
			Data struct {
				PurchaseOrder struct {
					ID string `json:"id"`
				} `json:"purchaseOrder"`
			} `json:"data"`
		} `json:"parts"`
	}
	var arts []json.RawMessage
	if err := json.Unmarshal(raw, &arts); err != nil || len(arts) == 0 || json.Unmarshal(arts[0], &po) != nil || len(po.Parts) == 0 || po.Parts[0].Data.PurchaseOrder.ID == "" {
		t.Fatalf("the snapshot's artifact is not a purchase order: %s", raw)
	}
	for _, want := range []string{"State completed", "purchase-order", po.Parts[0].Data.PurchaseOrder.ID, "buy 3 pallets"} {
		if !strings.Contains(shown, want) {
			t.Fatalf("the snapshot section lacks %q:\n%s", want, shown)
		}
	}
	links := p.section(t, "links-h")
	if !strings.Contains(links, "Child (in this context)") || !strings.Contains(links, `href="/console/delegations/`+child.ID+`"`) {
		t.Fatalf("the parent's links:\n%s", links)
	}
	c := b.get("/console/delegations/" + child.ID)
	links = c.section(t, "links-h")
	if !strings.Contains(links, "Parent (sent in its context)") || !strings.Contains(links, `href="/console/delegations/`+parent.ID+`"`) {
		t.Fatalf("the child's links:\n%s", links)
	}
	if got := e.Delegation(t, w.orch, child.ID); got.Remote.ContextID != parent.Remote.ContextID || parent.Remote.ContextID == "" {
		t.Fatalf("the refinement was sent in context %q, the parent's is %q", got.Remote.ContextID, parent.Remote.ContextID)
	}
}
