package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
)

// completedWithExtraTask creates a delegation whose org's agent created a
// second task for it (taskID, canceled, found by ListTasks as the A2A
// worker records one) and whose tracked task then completes: the
// obligation settles and the extra task's compensation is required — the
// extra_task_compensation anomaly.
func (w *world) completedWithExtraTask(t *testing.T, op, taskID string) httpapi.DelegationBody {
	t.Helper()
	d := w.CreateDelegation(t, w.orch, apitest.NewCreateRequest(op, orgID, "procurement", budgetID, 5_000, "EUR"))
	if err := w.Store.A2A().InTx(context.Background(), func(tx delegate.Tx) error {
		_, err := tx.ExtraTasks().RecordRemoteTask(context.Background(), uuid.MustParse(d.ID), delegate.RemoteTask{
			TaskID: taskID, Purpose: compensation.PurposeDispatch, FoundBy: "list_tasks", Status: ledger.StatusCanceled,
		}, w.Clock.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	d = w.ReportStatus(t, w.orch, d.ID, "TASK_STATE_COMPLETED", time.Time{})
	if d.ObligationState != string(ledger.ObligationSettled) || w.eventCount(t, d.ID, ledger.EventTypeExtraTaskCompensationRequired) != 1 {
		t.Fatalf("completed with an extra task: %s, %d extra_task_compensation_required", d.ObligationState,
			w.eventCount(t, d.ID, ledger.EventTypeExtraTaskCompensationRequired))
	}
	return d
}

// TestWriteOffExtraTaskFromDelegation: a settled delegation's page lists
// its extra remote task with its compensation open and, for on-call, a
// write-off form; without a reason the form is refused beside the field
// (nothing recorded); with one, the task is written off
// (extra_task_written_off), the anomaly ends and the page shows it
// resolved, with no form; a second write-off, or one without the form's
// CSRF token, is refused. Finance sees the
// task but no form, and its crafted POST gets 403.
func TestWriteOffExtraTaskFromDelegation(t *testing.T) {
	w := newWorld(t)
	d := w.completedWithExtraTask(t, "po-extra", "kt-dup/1")
	self := "/console/delegations/" + d.ID
	post := self + "/remote-tasks/write-off"

	f := w.client(t)
	f.signIn(w.finance)
	f.get(self).contains(t, `id="extra-tasks"`, `<tr data-extra-task="kt-dup/1">`, "open</span> since", "An on-call person can write this task off")
	f.get(self).lacks(t, `data-write-off-task=`)
	before := w.totalEvents(t)
	if res := f.post(self, post, url.Values{"task_id": {"kt-dup/1"}, "extra_reason": {"crafted"}}); res.status != http.StatusForbidden {
		t.Fatalf("finance's crafted write-off: %d", res.status)
	}

	b := w.client(t)
	b.signIn(w.OncallToken)
	b.get("/console/anomalies?kind=extra_task_compensation").contains(t, self)
	b.get(self).contains(t, `data-write-off-task="kt-dup/1"`, `name="task_id" value="kt-dup/1"`, "Write off this task")
	if res := b.do(http.MethodPost, post, url.Values{"task_id": {"kt-dup/1"}, "extra_reason": {"no token"}}); res.status != http.StatusForbidden {
		t.Fatalf("write-off without a CSRF token: %d", res.status)
	}
	bad := b.post(self, post, url.Values{"task_id": {"kt-dup/1"}, "extra_reason": {"  "}})
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("write-off without reason: %d", bad.status)
	}
	bad.contains(t, `name="extra_reason" rows="2" maxlength="2000" aria-invalid="true">  </textarea>`, `<span class="field-error" role="alert">is required`)
	if w.totalEvents(t) != before {
		t.Fatal("refused write-offs recorded events")
	}
	if res := b.post(self, post, url.Values{"task_id": {"kt-other"}, "extra_reason": {"x"}}); res.status != http.StatusNotFound {
		t.Fatalf("write-off of a task that is not the delegation's: %d", res.status)
	}

	res := b.post(self, post, url.Values{"task_id": {"kt-dup/1"}, "extra_reason": {"Bolt voided the duplicate PO, ticket OPS-7"}})
	if res.status != http.StatusSeeOther || !strings.Contains(res.location, "done=extra_task_written_off") || !strings.HasSuffix(res.location, "#extra-tasks") {
		t.Fatalf("write-off: %d %s\n%s", res.status, res.location, res.body)
	}
	if n := w.eventCount(t, d.ID, ledger.EventTypeExtraTaskWrittenOff); n != 1 {
		t.Fatalf("extra_task_written_off events: %d", n)
	}
	after := b.get(res.location)
	after.contains(t, "Extra remote task written off", "written_off", "Bolt voided the duplicate PO, ticket OPS-7")
	after.lacks(t, `data-write-off-task=`)
	b.get("/console/anomalies?kind=extra_task_compensation").lacks(t, self)

	again := b.post(self, post, url.Values{"task_id": {"kt-dup/1"}, "extra_reason": {"again"}})
	if again.status != http.StatusConflict {
		t.Fatalf("second write-off: %d", again.status)
	}
	if got := w.Delegation(t, w.orch, d.ID); got.ObligationState != string(ledger.ObligationSettled) || got.HoldState != "consumed" {
		t.Fatalf("the write-off moved the obligation: %+v", got)
	}
}

// exhaustExtraTask records, as the A2A worker does once a task's requests
// brought no receipt, that the compensation requests about extra task
// taskID of delegation id are exhausted, and gives the org an agent card
// (on a port nothing answers on: no worker runs here, and a redriven
// request job stays queued).
func (w *world) exhaustExtraTask(t *testing.T, id, taskID string) {
	t.Helper()
	if _, err := w.Pool.Exec(t.Context(), `UPDATE delegation_remote_tasks SET compensation_attempts = 8, compensation_last_error = 'receipt failed'
		WHERE delegation_id = $1 AND task_id = $2`, id, taskID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Pool.Exec(t.Context(), `UPDATE remote_orgs SET agent_card_url = 'http://127.0.0.1:9/.well-known/agent-card.json' WHERE id = $1`, orgID); err != nil {
		t.Fatal(err)
	}
}

// TestRedriveExtraTaskFromDelegation: beside an open extra task whose
// org was never asked, on-call sees why its compensation cannot be
// redriven and no form, and a crafted redrive is refused (409), nothing
// recorded. Once its requests are exhausted, on-call gets the redrive
// form beside the write-off; finance does not, and its crafted POST gets
// 403; a blank reason is refused beside the field (422), nothing
// recorded; with one, the redrive records extra_task_compensation_redriven
// and the page then says the requests are being sent again, with no form;
// a second redrive is refused (409).
func TestRedriveExtraTaskFromDelegation(t *testing.T) {
	w := newWorld(t)
	d := w.completedWithExtraTask(t, "po-extra-redrive", "kt-dup/2")
	self := "/console/delegations/" + d.ID
	post := self + "/remote-tasks/redrive"

	b := w.client(t)
	b.signIn(w.OncallToken)
	b.get(self).contains(t, `data-redrive-refused="kt-dup/2"`, "no compensation request about remote task")
	b.get(self).lacks(t, `data-redrive-task=`)
	before := w.totalEvents(t)
	if res := b.post(self, post, url.Values{"task_id": {"kt-dup/2"}, "extra_redrive_reason": {"crafted"}}); res.status != http.StatusConflict {
		t.Fatalf("redrive before any request: %d", res.status)
	}

	w.exhaustExtraTask(t, d.ID, "kt-dup/2")
	f := w.client(t)
	f.signIn(w.finance)
	f.get(self).lacks(t, `data-redrive-task=`, `data-redrive-refused=`)
	if res := f.post(self, post, url.Values{"task_id": {"kt-dup/2"}, "extra_redrive_reason": {"crafted"}}); res.status != http.StatusForbidden {
		t.Fatalf("finance's crafted redrive: %d", res.status)
	}
	b.get(self).contains(t, `data-write-off-task="kt-dup/2"`, `data-redrive-task="kt-dup/2"`, "Its 8 request(s) are exhausted", "Redrive this task's compensation")
	bad := b.post(self, post, url.Values{"task_id": {"kt-dup/2"}, "extra_redrive_reason": {"  "}})
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("redrive without reason: %d", bad.status)
	}
	bad.contains(t, `name="extra_redrive_reason" maxlength="4096" value="  " aria-invalid="true">`, `<span class="field-error" role="alert">is required`)
	if res := b.post(self, post, url.Values{"task_id": {"kt-other"}, "extra_redrive_reason": {"x"}}); res.status != http.StatusNotFound {
		t.Fatalf("redrive of a task that is not the delegation's: %d", res.status)
	}
	if w.totalEvents(t) != before {
		t.Fatal("refused redrives recorded events")
	}

	res := b.post(self, post, url.Values{"task_id": {"kt-dup/2"}, "extra_redrive_reason": {"Bolt fixed its compensation handler, INC-4"}})
	if res.status != http.StatusSeeOther || !strings.Contains(res.location, "done=extra_task_redriven") || !strings.HasSuffix(res.location, "#extra-tasks") {
		t.Fatalf("redrive: %d %s\n%s", res.status, res.location, res.body)
	}
	if n := w.eventCount(t, d.ID, ledger.EventTypeExtraTaskCompensationRedriven); n != 1 {
		t.Fatalf("extra_task_compensation_redriven events: %d", n)
	}
	after := b.get(res.location)
	after.contains(t, "Extra remote task redriven", "extra_task_compensation_redriven", "Bolt fixed its compensation handler, INC-4",
		`data-redrive-refused="kt-dup/2"`, "still being sent", `data-write-off-task="kt-dup/2"`)
	after.lacks(t, `data-redrive-task=`)
	again := b.post(self, post, url.Values{"task_id": {"kt-dup/2"}, "extra_redrive_reason": {"again"}})
	if again.status != http.StatusConflict {
		t.Fatalf("second redrive: %d", again.status)
	}
	again.contains(t, "still being sent")
	if n := w.eventCount(t, d.ID, ledger.EventTypeExtraTaskCompensationRedriven); n != 1 {
		t.Fatalf("extra_task_compensation_redriven events after a refused redrive: %d", n)
	}
	if got := w.Delegation(t, w.orch, d.ID); got.ObligationState != string(ledger.ObligationSettled) || got.HoldState != "consumed" {
		t.Fatalf("the redrive moved the obligation: %+v", got)
	}
}

// TestBrowserRedriveExtraTask drives the redrive form of an extra task in
// headless Chromium: a blank reason comes back beside the field, nothing
// recorded; a reason redrives it (the notice, the event on the timeline),
// and the form gives way to why it cannot be redriven again now. The
// page is kept as a screenshot.
func TestBrowserRedriveExtraTask(t *testing.T) {
	w := newWorld(t)
	d := w.completedWithExtraTask(t, "po-extra-redrive-browser", "kt-dup/3")
	w.exhaustExtraTask(t, d.ID, "kt-dup/3")
	b := &tab{t: t, ctx: browser(t), base: w.URL, dir: screenshotDir(t)}
	b.signIn(w.OncallToken, "#budgets")

	form := `form[data-redrive-task="kt-dup/3"]`
	b.open("/console/delegations/"+d.ID, form)
	before := w.totalEvents(t)
	b.do(chromedp.SendKeys(chromedp.ID("extra-redrive-reason-0"), "   "))
	b.leaveBy(form+" .field-error", chromedp.Click(chromedp.CSS(form+" button")))
	if s := b.text(form + " .field-error"); !strings.Contains(s, "is required") {
		t.Fatalf("field error: %q", s)
	}
	if v := b.eval(`document.getElementById("extra-redrive-reason-0").getAttribute("aria-invalid")`); v != "true" {
		t.Fatalf("aria-invalid = %v", v)
	}
	if w.totalEvents(t) != before {
		t.Fatal("a refused redrive recorded events")
	}
	b.do(chromedp.Clear(chromedp.ID("extra-redrive-reason-0")), chromedp.SendKeys(chromedp.ID("extra-redrive-reason-0"), "Bolt fixed its handler, INC-5"))
	b.leaveBy("p.notice", chromedp.Click(chromedp.CSS(form+" button")))
	if s := b.text("p.notice"); !strings.Contains(s, "Extra remote task redriven") {
		t.Fatalf("notice: %q", s)
	}
	if s := b.text("ol.timeline"); !strings.Contains(s, "extra_task_compensation_redriven") {
		t.Fatalf("timeline after the redrive:\n%s", s)
	}
	if b.present(form) || !b.present(`[data-redrive-refused="kt-dup/3"]`) {
		t.Fatal("after the redrive the page still offers it, or does not say why not")
	}
	b.shot("delegation-extra-task-redriven")
	if n := w.eventCount(t, d.ID, ledger.EventTypeExtraTaskCompensationRedriven); n != 1 {
		t.Fatalf("extra_task_compensation_redriven events: %d", n)
	}
}
