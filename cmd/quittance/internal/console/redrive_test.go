package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/quittance/quittance/ledger"
)

// TestRedriveFromDelegationAndBulk: on-call redrives compensation of a
// compensation_unconfirmed obligation from its page, with a reason (none
// is shown beside the field, nothing recorded); a bulk redrive previews
// which selected obligations will be asked again and which cannot, changes
// nothing until confirmed, then records one compensation_redriven event
// for each; finance sees no control and its crafted POSTs get 403.
func TestRedriveFromDelegationAndBulk(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.OncallToken)
	self := "/console/delegations/" + w.big.ID
	b.get(self).contains(t, `id="redrive-compensation"`)
	b.get("/console/delegations/"+w.pending.ID).lacks(t, `id="redrive-compensation"`)

	before := w.totalEvents(t)
	bad := b.post(self, self+"/compensation/redrive", url.Values{"redrive_reason": {" "}})
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("redrive without reason: %d", bad.status)
	}
	bad.contains(t, `name="redrive_reason" value=" " maxlength="4096" aria-describedby="redrive-help" aria-invalid="true"`, "is required")
	if w.totalEvents(t) != before {
		t.Fatal("a refused redrive recorded events")
	}
	res := b.post(self, self+"/compensation/redrive", url.Values{"redrive_reason": {"Bolt's agent was down all weekend; it is back"}})
	if res.status != http.StatusSeeOther || !strings.Contains(res.location, "done=redriven") {
		t.Fatalf("redrive: %d %s\n%s", res.status, res.location, res.body)
	}
	if n := w.eventCount(t, w.big.ID, ledger.EventTypeCompensationRedriven); n != 1 {
		t.Fatalf("compensation_redriven events: %d", n)
	}
	b.get(res.location).contains(t, "Compensation redriven", "compensation_redriven", "Bolt&#39;s agent was down all weekend")
	// Redriving an obligation that is not unconfirmed is refused beside the form.
	if res := b.post(self, "/console/delegations/"+w.pending.ID+"/compensation/redrive", url.Values{"redrive_reason": {"try"}}); res.status != http.StatusConflict {
		t.Fatalf("redrive of an obligation awaiting compensation: %d", res.status)
	}

	// Bulk: preview first, nothing recorded.
	sel := url.Values{"id": {w.big.ID, w.small.ID, w.pending.ID, w.acked.ID}, "kind": {"redrive"}, "back": {"/console/obligations?view=all"}}
	before = w.totalEvents(t)
	if bad := b.post("/console/obligations", "/console/obligations/bulk", sel); bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("bulk redrive without reason: %d", bad.status)
	} else {
		bad.contains(t, "say why compensation is asked for again")
	}
	sel.Set("redrive_reason", "Bolt restored its agent")
	preview := b.post("/console/obligations", "/console/obligations/bulk", sel)
	if preview.status != http.StatusOK {
		t.Fatalf("bulk redrive preview: %d\n%s", preview.status, preview.body)
	}
	preview.contains(t, "2 will be redriven, 2 cannot, 4 selected", "Confirm: redrive 2", "compensation can be redriven only from compensation_unconfirmed")
	if w.totalEvents(t) != before {
		t.Fatal("the bulk preview recorded events")
	}
	// The confirmation posts exactly the previewed rows that change.
	confirm := url.Values{"kind": {"redrive"}, "back": {"/console/obligations?view=all"}, "confirm": {"1"}, "redrive_reason": {"Bolt restored its agent"}}
	for _, m := range hiddenIDs.FindAllStringSubmatch(preview.body, -1) {
		confirm.Add("id", m[1])
	}
	if got := confirm["id"]; len(got) != 2 || !strings.Contains(strings.Join(got, " "), w.big.ID) || !strings.Contains(strings.Join(got, " "), w.small.ID) {
		t.Fatalf("the preview's confirmation posts %v", got)
	}
	done := b.post("/console/obligations", "/console/obligations/bulk", confirm)
	if done.status != http.StatusSeeOther || !strings.HasPrefix(done.location, "/console/obligations?") || !strings.Contains(done.location, "done=bulk_redriven") {
		t.Fatalf("bulk redrive: %d %s\n%s", done.status, done.location, done.body)
	}
	if n := w.totalEvents(t) - before; n != 2 {
		t.Fatalf("bulk redrive recorded %d events, want 2", n)
	}
	if w.eventCount(t, w.big.ID, ledger.EventTypeCompensationRedriven) != 2 || w.eventCount(t, w.small.ID, ledger.EventTypeCompensationRedriven) != 1 {
		t.Fatal("each selected unconfirmed obligation is not redriven once")
	}

	// Finance: no control, crafted POSTs refused.
	f := w.client(t)
	f.signIn(w.finance)
	f.get(self).lacks(t, `id="redrive-compensation"`)
	f.get("/console/obligations").lacks(t, `value="redrive"`)
	before = w.totalEvents(t)
	if res := f.post(self, self+"/compensation/redrive", url.Values{"redrive_reason": {"crafted"}}); res.status != http.StatusForbidden {
		t.Fatalf("finance's crafted redrive: %d", res.status)
	}
	sel.Set("confirm", "1")
	if res := f.post("/console/obligations", "/console/obligations/bulk", sel); res.status != http.StatusForbidden {
		t.Fatalf("finance's crafted bulk redrive: %d", res.status)
	}
	if w.totalEvents(t) != before {
		t.Fatal("finance's crafted redrives recorded events")
	}
}
