package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/ledger"
)

// TestWriteOffThresholdIsAPendingChange: the configured threshold is the
// initial one; one on-call principal's change of it has no effect — a
// write-off just above the old threshold still waits, one at the new
// threshold still executes at once — until a different on-call principal
// approves; the requester cannot approve it; after approval the new
// threshold decides, and the change is an event.
func TestWriteOffThresholdIsAPendingChange(t *testing.T) {
	t.Parallel()
	e := newProdEnv(t)
	_, finance := e.NewPerson(t, e.alice.Token, e.bob.Token, ledger.RoleFinance, "fin")
	get := func() httpapi.WriteOffThresholdBody {
		var b httpapi.WriteOffThresholdBody
		e.Do(t, http.MethodGet, "/admin/v1/write-off-threshold", finance, nil).Expect(t, http.StatusOK).JSON(t, &b)
		return b
	}
	if b := get(); b.ThresholdMinor != threshold || b.Source != "configuration" {
		t.Fatalf("initial threshold: %+v", b)
	}
	writeOff := func(amount int64) string {
		d := e.pending(t, amount)
		var w httpapi.WriteOffBody
		e.Do(t, http.MethodPost, "/admin/v1/delegations/"+d.ID+"/write-offs", e.alice.Token, map[string]any{"reason": "gone"}).
			Expect(t, http.StatusCreated).JSON(t, &w)
		return w.Status
	}

	const raised = 5 * threshold
	e.Do(t, http.MethodPut, "/admin/v1/write-off-threshold", finance, map[string]any{"threshold_minor": raised}).Problem(t, http.StatusForbidden, "forbidden")
	e.Do(t, http.MethodPut, "/admin/v1/write-off-threshold", e.alice.Token, map[string]any{"threshold_minor": -1}).Expect(t, http.StatusUnprocessableEntity)
	var asked httpapi.WriteOffThresholdBody
	e.Do(t, http.MethodPut, "/admin/v1/write-off-threshold", e.alice.Token, map[string]any{"threshold_minor": raised}).
		Expect(t, http.StatusAccepted).JSON(t, &asked)
	if asked.PendingChange == nil || asked.PendingChange.Kind != "write_off_threshold_update" || asked.ThresholdMinor != threshold {
		t.Fatalf("change request: %+v", asked)
	}

	// No effect yet.
	if b := get(); b.ThresholdMinor != threshold || b.Source != "configuration" {
		t.Fatalf("threshold before approval: %+v", b)
	}
	if st := writeOff(threshold + 1); st != "pending_approval" {
		t.Fatalf("a write-off above the old threshold before approval: %s", st)
	}
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+asked.PendingChange.ID+"/approve", e.alice.Token, nil).
		Problem(t, http.StatusForbidden, "self_approval")
	if b := get(); b.ThresholdMinor != threshold {
		t.Fatalf("threshold after a refused self-approval: %+v", b)
	}

	e.Approve(t, e.bob.Token, asked.PendingChange.ID)
	b := get()
	if b.ThresholdMinor != raised || b.Source != "approved_change" || b.UpdatedBy != e.bob.ID || b.PendingChangeID != asked.PendingChange.ID {
		t.Fatalf("threshold after approval: %+v", b)
	}
	if st := writeOff(threshold + 1); st != "executed" {
		t.Errorf("a write-off under the new threshold: %s", st)
	}
	if st := writeOff(raised + 1); st != "pending_approval" {
		t.Errorf("a write-off above the new threshold: %s", st)
	}
	events, err := e.Store.StreamEvents(t.Context(), "write_off_threshold")
	if err != nil || len(events) != 1 || events[0].Type != ledger.EventTypeWriteOffThresholdChanged || events[0].Actor != "principal:"+e.bob.ID {
		t.Fatalf("threshold events: %+v, %v", events, err)
	}

	// Lowering it is a change like any other.
	e.Do(t, http.MethodPut, "/admin/v1/write-off-threshold", e.bob.Token, map[string]any{"threshold_minor": 0}).
		Expect(t, http.StatusAccepted).JSON(t, &asked)
	if st := writeOff(1); st != "executed" {
		t.Errorf("a small write-off before the lowering is approved: %s", st)
	}
	e.Approve(t, e.alice.Token, asked.PendingChange.ID)
	if st := writeOff(1); st != "pending_approval" {
		t.Errorf("a small write-off after the threshold became 0: %s", st)
	}
}
