package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
)

// TestCLIWriteOffsReject: a write-off above the threshold is rejected by
// the second on-call principal, with a reason; the obligation stays open
// with its hold, the rejection is on the delegation's events, and the
// write-off cannot be approved afterwards. Its requester cannot reject it,
// and bad arguments exit 2 before any request.
func TestCLIWriteOffsReject(t *testing.T) {
	t.Parallel()
	e := startService(t, "QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLD_MINOR=100")
	e.putBudget(t, "ops", 1_000_000, "acme")
	if s := e.api(t, http.MethodPut, "/admin/v1/orgs/supplier", e.oncall, map[string]any{"name": "Supplier"}, nil); s >= 300 {
		t.Fatalf("put org: %d", s)
	}
	orch := e.newToken(t, "--role", "orchestrator", "--tenant", "acme", "--name", "orch")
	id := e.pendingDelegation(t, orch, "reject-1")

	out, errOut, code := e.cli(t, e.oncall, "write-off", id, "--reason", "supplier gone")
	var w struct {
		ID        string `json:"id"`
		Status    string `json:"status"`
		Rejection string `json:"rejection_reason"`
	}
	if err := json.Unmarshal([]byte(out), &w); code != 0 || err != nil || w.Status != "pending_approval" {
		t.Fatalf("write-off: exit %d %s (%v)\n%s", code, errOut, err, out)
	}
	for _, args := range [][]string{
		{"write-offs", "reject", w.ID},
		{"write-offs", "reject", w.ID, "--reason", "  "},
		{"write-offs", "reject", "not-a-uuid", "--reason", "no"},
		{"write-offs", "reject", "--reason", "no"},
	} {
		_, errOut, code := e.cli(t, e.oncall2, args...)
		if code != exitUsage || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", args, code, errOut)
		}
	}
	if _, errOut, code := e.cli(t, e.oncall, "write-offs", "reject", w.ID, "--reason", "changed my mind"); code != errkind.ExitAuth ||
		!strings.Contains(errOut, "self_approval") {
		t.Errorf("the requester rejecting: exit %d %q, want 4 self_approval", code, errOut)
	}
	if _, errOut, code := e.cli(t, e.oncall2, "write-offs", "reject", uuid.NewString(), "--reason", "no"); code != exitFailure ||
		!strings.Contains(errOut, "not_found") {
		t.Errorf("rejecting an unknown write-off: exit %d %q", code, errOut)
	}

	out, errOut, code = e.cli(t, e.oncall2, "write-offs", "reject", w.ID, "--reason", "the supplier answered after all")
	if err := json.Unmarshal([]byte(out), &w); code != 0 || err != nil || w.Status != "rejected" || w.Rejection != "the supplier answered after all" {
		t.Fatalf("write-offs reject: exit %d %s (%v)\n%s", code, errOut, err, out)
	}
	out, _, code = e.cli(t, e.oncall, "delegations", "show", id)
	var shown struct {
		Delegation struct {
			ObligationState string `json:"obligation_state"`
			HoldState       string `json:"hold_state"`
		} `json:"delegation"`
		Events []struct {
			Type string `json:"type"`
		} `json:"events"`
	}
	if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil {
		t.Fatalf("delegations show: exit %d (%v)", code, err)
	}
	if shown.Delegation.ObligationState != "revocation_pending_compensation" || shown.Delegation.HoldState != "active" ||
		shown.Events[len(shown.Events)-1].Type != "write_off_rejected" {
		t.Errorf("after the rejection: %s", out)
	}
	if _, errOut, code := e.cli(t, e.oncall2, "write-offs", "approve", w.ID); code != exitConflict {
		t.Errorf("approving a rejected write-off: exit %d %q, want 3", code, errOut)
	}
	if _, errOut, code := e.cli(t, e.oncall2, "write-offs", "reject", w.ID, "--reason", "again"); code != exitConflict ||
		!strings.Contains(errOut, "write_off_not_pending") {
		t.Errorf("rejecting a rejected write-off: exit %d %q, want 3", code, errOut)
	}
}

// TestCLIWriteOffThresholdPerCurrency: `write-offs threshold set MINOR
// --currency CODE` asks for a currency's own threshold, which applies once
// the other on-call approves; `threshold show` lists it beside the
// default, which is unchanged. A currency that is not an ISO 4217 code is
// refused with one line.
func TestCLIWriteOffThresholdPerCurrency(t *testing.T) {
	t.Parallel()
	e := startService(t, "QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLDS_MINOR=EUR=5000")
	out, errOut, code := e.cli(t, e.oncall, "write-offs", "threshold", "set", "2500000", "--currency", "JPY")
	if code != 0 || !strings.Contains(out, `"kind": "write_off_threshold_update"`) {
		t.Fatalf("threshold set --currency JPY: exit %d %s\n%s", code, errOut, out)
	}
	e.approvePending(t, []byte(out))
	out, errOut, code = e.cli(t, e.oncall, "write-offs", "threshold", "show")
	if code != 0 {
		t.Fatalf("threshold show: exit %d %s", code, errOut)
	}
	var shown struct {
		ThresholdMinor int64 `json:"threshold_minor"`
		Currencies     []struct {
			Currency       string `json:"currency"`
			ThresholdMinor int64  `json:"threshold_minor"`
			Source         string `json:"source"`
		} `json:"currencies"`
	}
	if err := json.Unmarshal([]byte(out), &shown); err != nil || shown.ThresholdMinor != 100000 || len(shown.Currencies) != 2 ||
		shown.Currencies[0].Currency != "EUR" || shown.Currencies[0].ThresholdMinor != 5000 || shown.Currencies[0].Source != "configuration" ||
		shown.Currencies[1].Currency != "JPY" || shown.Currencies[1].ThresholdMinor != 2500000 || shown.Currencies[1].Source != "approved_change" {
		t.Fatalf("threshold show (%v):\n%s", err, out)
	}
	_, errOut, code = e.cli(t, e.oncall, "write-offs", "threshold", "set", "1", "--currency", "yen")
	if code == 0 || strings.Count(errOut, "\n") != 1 {
		t.Errorf("threshold set --currency yen: exit %d, stderr %q", code, errOut)
	}
}
