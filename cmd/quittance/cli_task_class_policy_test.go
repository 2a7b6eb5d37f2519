package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
)

// TestCLITaskClassPolicy: on-call sets which task classes a tenant may use
// with an org; the change waits for a second on-call person (the requester
// approving it: exit 4) and shows nowhere until then; approved, list and
// show print it. Bad input exits 2 on one line before any request, and a
// policy never set is exit 1 (not_found).
func TestCLITaskClassPolicy(t *testing.T) {
	t.Parallel()
	e := startService(t)
	if _, _, code := e.cli(t, e.oncall, "orgs", "register", "acme-supplies", "--name", "Acme Supplies"); code != 0 {
		t.Fatalf("orgs register: exit %d", code)
	}
	out, errOut, code := e.cli(t, e.oncall, "task-classes", "policy", "set", "acme-supplies", "shop", "--classes", "read_only,procurement")
	if code != 0 {
		t.Fatalf("policy set: exit %d %s", code, errOut)
	}
	var asked struct {
		Classes       []string `json:"classes"`
		PendingChange struct {
			ID     string `json:"id"`
			Kind   string `json:"kind"`
			Status string `json:"status"`
		} `json:"pending_change"`
	}
	if err := json.Unmarshal([]byte(out), &asked); err != nil {
		t.Fatalf("policy set printed %q: %v", out, err)
	}
	if asked.PendingChange.Kind != "task_class_policy_update" || asked.PendingChange.Status != "pending" || len(asked.Classes) != 0 {
		t.Fatalf("policy set by one on-call person: %s", out)
	}
	if _, errOut, code := e.cli(t, e.oncall, "task-classes", "policy", "show", "acme-supplies", "shop"); code != exitFailure || !strings.Contains(errOut, "not_found") {
		t.Fatalf("a policy not approved yet: exit %d %q, want 1 not_found", code, errOut)
	}
	if _, _, code := e.cli(t, e.oncall, "changes", "approve", asked.PendingChange.ID); code != errkind.ExitAuth {
		t.Fatalf("the requester approving: exit %d, want 4", code)
	}
	if _, errOut, code := e.cli(t, e.oncall2, "changes", "approve", asked.PendingChange.ID); code != 0 {
		t.Fatalf("changes approve: exit %d %s", code, errOut)
	}
	out, errOut, code = e.cli(t, e.oncall, "task-classes", "policy", "show", "acme-supplies", "shop")
	if code != 0 || !strings.Contains(out, `"procurement"`) || !strings.Contains(out, `"read_only"`) {
		t.Fatalf("policy show: exit %d %s %s", code, out, errOut)
	}
	out, _, code = e.cli(t, e.oncall, "task-classes", "policy", "list", "acme-supplies")
	if code != 0 || !strings.Contains(out, "TENANT") || !strings.Contains(out, "procurement,read_only") {
		t.Fatalf("policy list: exit %d %q", code, out)
	}
	for _, args := range [][]string{
		{"task-classes", "policy", "set", "acme-supplies", "shop"},
		{"task-classes", "policy", "set", "acme-supplies"},
		{"task-classes", "policy", "list", "acme-supplies", "-o", "xml"},
	} {
		if _, errOut, code := e.cli(t, e.oncall, args...); code != exitUsage || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d %q, want 2 and one line", args, code, errOut)
		}
	}
	if _, errOut, code := e.cli(t, e.oncall, "task-classes", "policy", "set", "acme-supplies", "shop", "--classes", "Not A Class"); code == 0 ||
		!strings.Contains(errOut, "classes") {
		t.Errorf("an invalid class: exit %d %q", code, errOut)
	}
}
