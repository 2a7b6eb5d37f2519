package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
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

// TestWriteOffThresholdPerCurrency: a currency with a threshold of its own
// (configured, or set by an approved change) is decided by it, every other
// currency by the default. JPY's configured threshold is ten times the
// default: a JPY write-off over the default but under it executes at
// once, an EUR one of the same amount waits. An approved change gives EUR
// a threshold of its own below the default: an EUR write-off under the
// default then waits. GET lists the currencies with their sources; the
// default threshold's API and its pending change work as before.
func TestWriteOffThresholdPerCurrency(t *testing.T) {
	t.Parallel()
	e := newProdEnv(t, apitest.WithCurrencyWriteOffThresholds(map[string]int64{"JPY": 10 * threshold}))
	var yen httpapi.BudgetView
	e.Do(t, http.MethodPut, "/admin/v1/budgets/yen", e.alice.Token, map[string]any{"currency": "JPY", "funded_minor": funded, "tenants": []string{"acme"}}).
		Expect(t, http.StatusAccepted).JSON(t, &yen)
	e.Approve(t, e.bob.Token, yen.PendingChange.ID)
	writeOff := func(d httpapi.DelegationBody) string {
		var w httpapi.WriteOffBody
		e.Do(t, http.MethodPost, "/admin/v1/delegations/"+d.ID+"/write-offs", e.alice.Token, map[string]any{"reason": "gone"}).
			Expect(t, http.StatusCreated).JSON(t, &w)
		return w.Status
	}
	if st := writeOff(e.pendingIn(t, "yen", 5*threshold, "JPY")); st != "executed" {
		t.Errorf("a JPY write-off over the default but under JPY's threshold: %s", st)
	}
	if st := writeOff(e.pendingIn(t, "yen", 10*threshold+1, "JPY")); st != "pending_approval" {
		t.Errorf("a JPY write-off over JPY's threshold: %s", st)
	}
	if st := writeOff(e.pending(t, 5*threshold)); st != "pending_approval" {
		t.Errorf("an EUR write-off over the default: %s", st)
	}

	var asked httpapi.WriteOffThresholdBody
	e.Do(t, http.MethodPut, "/admin/v1/write-off-threshold", e.alice.Token, map[string]any{"threshold_minor": threshold / 10, "currency": "eur"}).
		Expect(t, http.StatusUnprocessableEntity)
	e.Do(t, http.MethodPut, "/admin/v1/write-off-threshold", e.alice.Token, map[string]any{"threshold_minor": threshold / 10, "currency": "EUR"}).
		Expect(t, http.StatusAccepted).JSON(t, &asked)
	if asked.PendingChange == nil || asked.PendingChange.Kind != "write_off_threshold_update" || asked.ThresholdMinor != threshold {
		t.Fatalf("EUR threshold request: %+v", asked)
	}
	if st := writeOff(e.pending(t, threshold/2)); st != "executed" {
		t.Errorf("an EUR write-off under the default before the approval: %s", st)
	}
	e.Approve(t, e.bob.Token, asked.PendingChange.ID)
	if st := writeOff(e.pending(t, threshold/2)); st != "pending_approval" {
		t.Errorf("an EUR write-off over EUR's own threshold: %s", st)
	}
	var got httpapi.WriteOffThresholdBody
	e.Do(t, http.MethodGet, "/admin/v1/write-off-threshold", e.alice.Token, nil).Expect(t, http.StatusOK).JSON(t, &got)
	if got.ThresholdMinor != threshold || got.Source != "configuration" || len(got.Currencies) != 2 ||
		got.Currencies[0].Currency != "EUR" || got.Currencies[0].ThresholdMinor != threshold/10 || got.Currencies[0].Source != "approved_change" || got.Currencies[0].UpdatedBy != e.bob.ID ||
		got.Currencies[1].Currency != "JPY" || got.Currencies[1].ThresholdMinor != 10*threshold || got.Currencies[1].Source != "configuration" {
		t.Fatalf("thresholds: %+v", got)
	}
	events, err := e.Store.StreamEvents(t.Context(), "write_off_threshold")
	if err != nil || len(events) != 1 || !strings.Contains(string(events[0].Data), `"currency":"EUR"`) {
		t.Fatalf("threshold events: %+v, %v", events, err)
	}
}

// TestWriteOffRejectionNamesThePrincipal: a rejection records the
// rejecting principal, not the credential it used: the write-off's
// rejected_by_id and the write_off_rejected event's are Bob's principal id,
// which his credential's id is not.
func TestWriteOffRejectionNamesThePrincipal(t *testing.T) {
	t.Parallel()
	e := newProdEnv(t)
	d := e.pending(t, 2*threshold)
	var w httpapi.WriteOffBody
	e.Do(t, http.MethodPost, "/admin/v1/delegations/"+d.ID+"/write-offs", e.alice.Token, map[string]any{"reason": "gone"}).
		Expect(t, http.StatusCreated).JSON(t, &w)
	e.Do(t, http.MethodPost, "/admin/v1/write-offs/"+w.ID+"/reject", e.bob.Token, map[string]any{"reason": "ask the org again"}).
		Expect(t, http.StatusOK).JSON(t, &w)
	cred, err := e.Access.Authenticate(t.Context(), e.bob.Token)
	if err != nil || cred.TokenID.String() == e.bob.ID {
		t.Fatalf("bob's credential %s is his principal %s (%v): the test cannot tell them apart", cred.TokenID, e.bob.ID, err)
	}
	if w.RejectedByID != e.bob.ID || w.RejectedBy != "bob" || w.RequestedByID != e.alice.ID {
		t.Fatalf("rejected write-off: %+v", w)
	}
	var column string
	if err := e.Pool.QueryRow(t.Context(), `SELECT rejected_by_id::text FROM write_offs WHERE id = $1`, w.ID).Scan(&column); err != nil || column != e.bob.ID {
		t.Fatalf("write_offs.rejected_by_id %q, %v; want bob's principal %s", column, err, e.bob.ID)
	}
	events, err := e.Store.StreamEvents(t.Context(), "delegation:"+d.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	if last.Type != ledger.EventTypeWriteOffRejected || !strings.Contains(string(last.Data), `"rejected_by_id":"`+e.bob.ID+`"`) {
		t.Fatalf("last event %s: %s", last.Type, last.Data)
	}
}
