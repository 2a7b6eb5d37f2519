package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
)

// TestCLIWriteOffRemoteTask: `quittance delegations write-off-remote-task`
// against the real service, on a delegation whose tracked task completed
// while its agent had created a second task: without --reason or a task id
// it is a usage error; finance is refused (exit 4); a task that is not the
// delegation's is not found (exit 1); on-call's write-off prints the
// delegation and records extra_task_written_off, ending the anomaly; a
// second one is a conflict (exit 3) with a one-line reason.
func TestCLIWriteOffRemoteTask(t *testing.T) {
	t.Parallel()
	e, id, finance := settledWithExtraTask(t, "po-extra")
	anomalies := func() int {
		t.Helper()
		var out struct {
			Anomalies []struct {
				DelegationID string `json:"delegation_id"`
			} `json:"anomalies"`
		}
		if s := e.api(t, http.MethodGet, "/v1/anomalies?kind=extra_task_compensation", e.oncall, nil, &out); s != http.StatusOK {
			t.Fatalf("anomalies: %d", s)
		}
		n := 0
		for _, a := range out.Anomalies {
			if a.DelegationID == id {
				n++
			}
		}
		return n
	}
	if n := anomalies(); n != 1 {
		t.Fatalf("extra_task_compensation anomalies before the write-off: %d, want 1", n)
	}

	cmd := func(token string, args ...string) (string, string, int) {
		t.Helper()
		return e.cli(t, token, append([]string{"delegations", "write-off-remote-task"}, args...)...)
	}
	if _, errOut, code := cmd(e.oncall, id, "kt-dup"); code != exitUsage || !strings.Contains(errOut, "--reason is required") {
		t.Errorf("without --reason: exit %d %q, want 2", code, errOut)
	}
	if _, _, code := cmd(e.oncall, id, "--reason", "x"); code != exitUsage {
		t.Errorf("without a task id: exit %d, want 2", code)
	}
	if _, _, code := cmd(finance, id, "kt-dup", "--reason", "not mine"); code != errkind.ExitAuth {
		t.Errorf("finance: exit %d, want 4", code)
	}
	if _, _, code := cmd(e.oncall, id, "kt-other", "--reason", "x"); code != exitFailure {
		t.Errorf("a task that is not the delegation's: exit %d, want 1", code)
	}
	if n := anomalies(); n != 1 {
		t.Fatalf("refused write-offs ended the anomaly: %d", n)
	}
	out, errOut, code := cmd(e.oncall, id, "kt-dup", "--reason", "Supplier voided the duplicate PO, ticket OPS-9")
	if code != 0 {
		t.Fatalf("write-off: exit %d %s %s", code, out, errOut)
	}
	var printed struct {
		ID              string `json:"id"`
		ObligationState string `json:"obligation_state"`
	}
	if err := json.Unmarshal([]byte(out), &printed); err != nil || printed.ID != id || printed.ObligationState != "settled" {
		t.Fatalf("write-off printed %q (%v)", out, err)
	}
	if n := anomalies(); n != 0 {
		t.Fatalf("extra_task_compensation anomalies after the write-off: %d", n)
	}
	show, _, code := e.cli(t, e.oncall, "delegations", "show", id)
	if code != 0 || !strings.Contains(show, `"extra_task_written_off"`) || !strings.Contains(show, "ticket OPS-9") {
		t.Fatalf("show after the write-off: exit %d\n%s", code, show)
	}
	_, errOut, code = cmd(e.oncall, id, "kt-dup", "--reason", "again")
	if code != exitConflict || !strings.Contains(errOut, "extra_task_not_open") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Errorf("second write-off: exit %d %q, want 3 and one line", code, errOut)
	}
}

// TestCLIRedriveRemoteTask: `quittance delegations redrive-remote-task`
// against the real service, on a delegation whose tracked task completed
// while its agent had created a second task: without --reason or a task id
// it is a usage error; before any request about the task was sent it is a
// conflict (exit 3, redrive_not_allowed, one line); once its requests are
// exhausted finance is refused (exit 4), a task that is not the
// delegation's is not found (exit 1), and on-call's redrive prints the
// delegation and records extra_task_compensation_redriven with the reason;
// a second one while the redriven requests are being sent is a conflict
// (exit 3) with a one-line reason.
func TestCLIRedriveRemoteTask(t *testing.T) {
	t.Parallel()
	e, id, finance := settledWithExtraTask(t, "po-redrive-extra")
	ctx := context.Background()
	cmd := func(token string, args ...string) (string, string, int) {
		t.Helper()
		return e.cli(t, token, append([]string{"delegations", "redrive-remote-task"}, args...)...)
	}
	oneLine := func(s string) bool { return strings.Count(strings.TrimSpace(s), "\n") == 0 }
	if _, errOut, code := cmd(e.oncall, id, "kt-dup"); code != exitUsage || !strings.Contains(errOut, "--reason is required") {
		t.Errorf("without --reason: exit %d %q, want 2", code, errOut)
	}
	if _, _, code := cmd(e.oncall, id, "--reason", "x"); code != exitUsage {
		t.Errorf("without a task id: exit %d, want 2", code)
	}
	// The org has no agent card: nobody was asked, nothing is exhausted.
	if _, errOut, code := cmd(e.oncall, id, "kt-dup", "--reason", "ask again"); code != exitConflict || !strings.Contains(errOut, "redrive_not_allowed") || !oneLine(errOut) {
		t.Errorf("before any request: exit %d %q, want 3 and one line", code, errOut)
	}

	// The requests were exhausted (as the worker records it), and the org
	// has an agent card (a port nothing answers on: the redriven requests
	// keep being retried).
	if err := e.exec(ctx, `UPDATE delegation_remote_tasks SET compensation_attempts = 8, compensation_last_error = 'receipt failed'
		WHERE delegation_id = $1 AND task_id = 'kt-dup'`, id); err != nil {
		t.Fatal(err)
	}
	if err := e.exec(ctx, `UPDATE remote_orgs SET agent_card_url = 'http://127.0.0.1:9/.well-known/agent-card.json' WHERE id = $1`, "supplier"); err != nil {
		t.Fatal(err)
	}
	if _, _, code := cmd(finance, id, "kt-dup", "--reason", "not mine"); code != errkind.ExitAuth {
		t.Errorf("finance: exit %d, want 4", code)
	}
	if _, _, code := cmd(e.oncall, id, "kt-other", "--reason", "x"); code != exitFailure {
		t.Errorf("a task that is not the delegation's: exit %d, want 1", code)
	}
	out, errOut, code := cmd(e.oncall, id, "kt-dup", "--reason", "Supplier fixed its handler, ticket OPS-21")
	if code != 0 {
		t.Fatalf("redrive: exit %d %s %s", code, out, errOut)
	}
	var printed struct {
		ID              string `json:"id"`
		ObligationState string `json:"obligation_state"`
	}
	if err := json.Unmarshal([]byte(out), &printed); err != nil || printed.ID != id || printed.ObligationState != "settled" {
		t.Fatalf("redrive printed %q (%v)", out, err)
	}
	show, _, code := e.cli(t, e.oncall, "delegations", "show", id)
	if code != 0 || !strings.Contains(show, `"extra_task_compensation_redriven"`) || !strings.Contains(show, "ticket OPS-21") {
		t.Fatalf("show after the redrive: exit %d\n%s", code, show)
	}
	_, errOut, code = cmd(e.oncall, id, "kt-dup", "--reason", "again")
	if code != exitConflict || !strings.Contains(errOut, "redrive_not_allowed") || !oneLine(errOut) {
		t.Errorf("second redrive while the requests are sent: exit %d %q, want 3 and one line", code, errOut)
	}
	if n := strings.Count(show, `"extra_task_compensation_redriven"`); n != 1 {
		t.Errorf("%d extra_task_compensation_redriven events, want 1", n)
	}
}

// settledWithExtraTask starts the service and settles a delegation (of
// business operation op) whose agent had created a second task, kt-dup:
// its compensation is required. It returns the service, the delegation's
// id and a finance token.
func settledWithExtraTask(t *testing.T, op string) (e *cliEnv, id, finance string) {
	t.Helper()
	e = startService(t)
	e.putBudget(t, "ops", 1_000_000, "acme")
	if s := e.api(t, http.MethodPut, "/admin/v1/orgs/supplier", e.oncall, map[string]any{"name": "Supplier"}, nil); s >= 300 {
		t.Fatalf("put org: %d", s)
	}
	orch := e.newToken(t, "--role", "orchestrator", "--tenant", "acme", "--name", "orch")
	finance = e.newToken(t, "--role", "finance", "--name", "fin")
	d := e.createDelegation(t, orch, op)
	// The second task, as the A2A worker records one it finds by ListTasks.
	if err := e.exec(context.Background(), `INSERT INTO delegation_remote_tasks (delegation_id, task_id, purpose, found_by, status, found_at, updated_at)
		VALUES ($1, 'kt-dup', 'dispatch', 'list_tasks', 'canceled', now(), now())`, d.ID); err != nil {
		t.Fatal(err)
	}
	if s := e.api(t, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", orch, map[string]any{"state": "completed"}, &d); s != http.StatusOK || d.ObligationState != "settled" {
		t.Fatalf("report completed: %d, %s", s, d.ObligationState)
	}
	return e, d.ID, finance
}
