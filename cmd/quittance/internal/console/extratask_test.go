package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

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
		_, err := tx.RecordRemoteTask(context.Background(), uuid.MustParse(d.ID), delegate.RemoteTask{
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
