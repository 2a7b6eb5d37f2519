//go:build linux

package main

// Crash tests of the A2A gateway: an orchestrator on a2a-go v2's client
// sends a purchase order through the gateway of the failpoint binary,
// which kills itself after the hold committed, or after its worker claimed
// the dispatch and before it sent it; the orchestrator sends the same
// message again (A2A's own retry) to the restarted service, and gets the
// same task, with one hold and, at the org's agent, one message and one
// task.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/demoagent"
	"github.com/quittance/quittance/cmd/quittance/internal/gateway"
	"github.com/quittance/quittance/delegate"
)

// bearerTransport sends a bearer token on fresh connections only, as
// newTestClient does.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return (&http.Transport{DisableKeepAlives: true}).RoundTrip(r)
}

// gatewayClient is an a2a-go v2 JSON-RPC client of the org's gateway on
// the process now serving.
func (e *crashEnv) gatewayClient(t *testing.T) *a2aclient.Client {
	t.Helper()
	hc := &http.Client{Timeout: 15 * time.Second, Transport: bearerTransport{token: e.orch}}
	iface := &a2a.AgentInterface{URL: e.proc.url + "/a2a/orgs/" + faultOrg + gateway.JSONRPCPath, ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: "1.0"}
	c, err := a2aclient.NewFromEndpoints(t.Context(), []*a2a.AgentInterface{iface}, a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

// gatewayOrder is the purchase order, with the ledger extension's data;
// its messageId is its business operation id.
func gatewayOrder(messageID string) *a2a.SendMessageRequest {
	m := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("Order 40 laptops"))
	m.ID = messageID
	m.Metadata = map[string]any{gateway.ExtensionURI: map[string]any{
		"budget_id": faultBudget, "task_class": "procurement",
		"hold": map[string]any{"amount_minor": faultAmount, "currency": "EUR"},
	}}
	return &a2a.SendMessageRequest{Message: m}
}

// newGatewayCrashEnv serves the demo supplier behind a sendCounter and
// starts the failpoint binary with point armed, the supplier registered.
func newGatewayCrashEnv(t *testing.T, point string) (*crashEnv, *sendCounter) {
	t.Helper()
	agent, err := demoagent.New(demoagent.Config{OrgID: faultOrg, LedgerID: faultLedgerID, WorkDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	counter := &sendCounter{next: agent.Handler(), sends: map[string]int{}, tasks: map[string]map[string]bool{}}
	srv := httptest.NewServer(counter)
	t.Cleanup(srv.Close)
	e := newCrashEnv(t, point,
		map[string]any{"agent_card_url": agent.CardURL(srv.URL), "allowed_hosts": []string{"127.0.0.1"}},
		map[string]string{
			"QUITTANCE_EGRESS_ALLOW_HTTP": "true", "QUITTANCE_EGRESS_ALLOW_CIDRS": "127.0.0.1/32",
			"QUITTANCE_A2A_INTERVAL": "100ms", "QUITTANCE_A2A_LEASE": "2s", "QUITTANCE_A2A_STREAMING": "false",
		})
	return e, counter
}

// resendUntilDispatched sends the order again to the restarted service:
// the same task as want (when set), which it then reads until the
// dispatch recorded the remote task; it returns the task id.
func (e *crashEnv) resendUntilDispatched(t *testing.T, op, want string) string {
	t.Helper()
	c := e.gatewayClient(t)
	res, err := c.SendMessage(t.Context(), gatewayOrder(op))
	if err != nil {
		t.Fatalf("the resend: %v", err)
	}
	task := res.(*a2a.Task)
	if want != "" && string(task.ID) != want {
		t.Fatalf("the resend answered task %s, want %s", task.ID, want)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		task, err = c.GetTask(t.Context(), &a2a.GetTaskRequest{ID: task.ID})
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := task.Metadata[gateway.ExtensionURI].(map[string]any); m["remote_task_id"] != nil {
			if task.Status.State != a2a.TaskStateWorking && task.Status.State != a2a.TaskStateSubmitted || m["obligation_state"] != "held" {
				t.Fatalf("after the dispatch: %+v, %+v", task.Status, m)
			}
			return string(task.ID)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dispatch did not happen after the restart: %+v", task.Metadata)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCrashGatewayAfterHoldCommit: killed after the SendMessage's hold
// committed, before it answered; the resend is the same task, and the
// task is dispatched once.
func TestCrashGatewayAfterHoldCommit(t *testing.T) {
	t.Parallel()
	e, counter := newGatewayCrashEnv(t, "after-hold-commit")
	const op = "gw-crash-after-hold-commit"
	if _, err := e.gatewayClient(t).SendMessage(t.Context(), gatewayOrder(op)); err == nil {
		t.Fatal("the send was answered by a process that killed itself after the hold")
	}
	e.expectKilled()
	pool := testPool(t, e.env["DATABASE_URL"])
	var id string
	if err := pool.QueryRow(t.Context(), `SELECT id::text FROM delegations WHERE business_operation_id = $1`, op).Scan(&id); err != nil {
		t.Fatalf("the hold's transaction must have committed: %v", err)
	}
	e.start("")
	e.resendUntilDispatched(t, op, id)
	if sends, tasks := counter.counts(delegate.DispatchMessageID(uuid.MustParse(id))); sends != 1 || tasks != 1 {
		t.Errorf("the remote got %d sends creating %d tasks; want 1 and 1", sends, tasks)
	}
	e.check(op)
}

// TestCrashGatewayBeforeRemoteSend: killed after the worker claimed the
// dispatch of a task sent through the gateway and before it sent it; after
// the restart the resend is the same task, the dispatch resumes with the
// same messageId, and the org's agent sees one message and one task.
func TestCrashGatewayBeforeRemoteSend(t *testing.T) {
	t.Parallel()
	e, counter := newGatewayCrashEnv(t, "before-remote-send")
	const op = "gw-crash-before-remote-send"
	// The worker may kill the process before or after the send was
	// answered: either way the hold and the dispatch job committed
	// together.
	_, _ = e.gatewayClient(t).SendMessage(context.WithoutCancel(t.Context()), gatewayOrder(op))
	e.expectKilled()
	id, attempts := dispatchJob(t, testPool(t, e.env["DATABASE_URL"]), op)
	messageID := delegate.DispatchMessageID(uuid.MustParse(id))
	if sends, _ := counter.counts(messageID); sends != 0 || attempts != 1 {
		t.Fatalf("before the restart: %d sends, job claimed %d times; want 0 and 1", sends, attempts)
	}
	e.start("")
	e.resendUntilDispatched(t, op, id)
	if sends, tasks := counter.counts(messageID); sends != 1 || tasks != 1 {
		t.Errorf("the remote got %d sends creating %d tasks; want 1 and 1", sends, tasks)
	}
	e.check(op)
}
