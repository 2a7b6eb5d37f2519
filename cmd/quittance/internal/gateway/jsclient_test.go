package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/gateway"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/delegate/jspeer"
)

// TestGatewayJSClient: an orchestrator on @a2a-js/sdk's client
// (examples/js/orchestrator.mjs, in node), over each binding, resolves the
// gateway's card and delegates a purchase order to the demo supplier
// through it: one task for a send and its resend, the supplier's task as
// observed, a cancel answered with the obligation held, compensated on
// the supplier's receipt; a message without the ledger's data refused as
// the extension requires, another tenant's task refused word for word as
// an unknown one. It skips without node and npm (jspeer.Modules).
func TestGatewayJSClient(t *testing.T) {
	t.Parallel()
	node, modules := jspeer.Modules(t)
	script, err := filepath.Abs("examples/js/orchestrator.mjs")
	if err != nil {
		t.Fatal(err)
	}
	e := newGatewayEnv(t)
	theirs := send(t, e.client(t, e.globex, orgID, a2a.TransportProtocolJSONRPC), ledgerMessage(uuid.NewString(), "Order 2 chairs", 1_000))
	for _, binding := range []string{"JSONRPC", "HTTP+JSON"} {
		msgID := "po-js-" + uuid.NewString()
		steps := runJS(t, node, script, "NODE_MODULES="+modules, "LEDGER_EXT="+gateway.ExtensionURI, "ORCH_TOKEN="+e.acme,
			"BINDING="+binding, "GATEWAY_URL="+e.orgBase(orgID)+"/", "BUDGET_ID=ops", "MESSAGE_ID="+msgID, "OTHER_TASK="+string(theirs.ID))
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("%s: "+format+"\nsteps: %v", append(append([]any{binding}, args...), steps)...)
		}
		ledgerOf := func(step string) map[string]any {
			m, _ := steps[step]["ledger"].(map[string]any)
			return m
		}
		id, _ := steps["sent"]["id"].(string)
		if _, err := uuid.Parse(id); err != nil || steps["resent"]["id"] != id || ledgerOf("sent")["obligation_state"] != "held" {
			fail("the send and the resend")
		}
		if ledgerOf("working")["remote_task_id"] == nil || !strings.Contains(steps["working"]["status"].(string), "Purchase order PO-") {
			fail("the working task")
		}
		if l := ledgerOf("cancel"); l["obligation_state"] != "held" || l["cancel_requested_at"] == nil {
			fail("the cancel's answer")
		}
		if l := ledgerOf("compensated"); steps["compensated"]["state"] != "TASK_STATE_CANCELED" || l["hold"].(map[string]any)["state"] != "returned" {
			fail("after the receipt")
		}
		if steps["no_extension"]["error"] != "ExtensionSupportRequired" || !strings.Contains(steps["no_extension"]["message"].(string), gateway.ExtensionURI) {
			fail("a message without the ledger's data")
		}
		if steps["unknown"]["error"] != "TaskNotFound" || steps["other_tenant"]["error"] != "TaskNotFound" ||
			steps["unknown"]["message"] != steps["other_tenant"]["message"] {
			fail("an unknown task and another tenant's")
		}
		var page struct {
			Delegations []httpapi.DelegationBody `json:"delegations"`
		}
		e.Do(t, http.MethodGet, "/v1/delegations?org_id="+orgID+"&limit=500", e.acme, nil).Expect(t, http.StatusOK).JSON(t, &page)
		n := 0
		for _, d := range page.Delegations {
			if d.BusinessOperationID == msgID {
				n++
			}
		}
		if n != 1 {
			fail("%d delegations for the message, want 1", n)
		}
	}
}

// TestGatewayJSClientStreams: an orchestrator on @a2a-js/sdk's client
// (testdata/interrupted.mjs), over each binding, streams a send to an
// agent that asks for input until the task stops in input_required,
// registers a push config (its receiver is pushed the completed task),
// streams its answer on the task's id to the task's completion (a resend
// is the same answer, delivered once), sees the agent's artifact,
// resubscribes to the ended task (the task alone), and refines it: a new
// task in its context.
func TestGatewayJSClientStreams(t *testing.T) {
	t.Parallel()
	node, modules := jspeer.Modules(t)
	script, err := filepath.Abs("testdata/interrupted.mjs")
	if err != nil {
		t.Fatal(err)
	}
	e := newGatewayEnv(t, apitest.Worker{PollAfter: 100 * time.Millisecond, Webhooks: true})
	peer := e.servePartsDesk(t)
	recv := newPushReceiver(t)
	for _, binding := range []string{"JSONRPC", "HTTP+JSON"} {
		msgID, pushToken := "parts-js-"+uuid.NewString(), "js-"+uuid.NewString()
		recv.expect(pushToken, "")
		steps := runJS(t, node, script, "NODE_MODULES="+modules, "LEDGER_EXT="+gateway.ExtensionURI, "ORCH_TOKEN="+e.acme,
			"BINDING="+binding, "GATEWAY_URL="+e.orgBase("parts-desk")+"/", "BUDGET_ID=ops", "MESSAGE_ID="+msgID,
			"PUSH_URL="+recv.url, "PUSH_TOKEN="+pushToken)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("%s: "+format+"\nsteps: %v", append(append([]any{binding}, args...), steps)...)
		}
		streamed := steps["streamed"]
		if states := fmt.Sprint(streamed["states"]); !strings.HasSuffix(states, "TASK_STATE_INPUT_REQUIRED]") {
			fail("the streamed send went through %s, want it to end in input_required", states)
		}
		if steps["asked"]["question"] != "Which cost center should be charged?" {
			fail("the task's question")
		}
		if steps["answered"]["id"] != streamed["id"] || steps["answered_again"]["id"] != streamed["id"] {
			fail("the answers' replies")
		}
		// (The artifact is on the stream only when Quittance observed it
		// before the completion: the answer's reply may carry the status
		// alone, and the next read of the task brings the artifact.)
		if a := steps["answered"]; !strings.HasSuffix(fmt.Sprint(a["states"]), "TASK_STATE_COMPLETED]") {
			fail("the answer's stream")
		}
		if c := steps["completed"]; c["state"] != "TASK_STATE_COMPLETED" || c["artifact"] != "PO-42 charged to CC-42" ||
			c["obligation"] != "settled" || fmt.Sprint(c["states"]) != "[TASK_STATE_COMPLETED]" {
			fail("the ended task")
		}
		if steps["push"]["task"] != streamed["id"] {
			fail("the push config")
		}
		recv.wait(pushToken, "the completed task", func(p *a2a.Task) bool {
			return string(p.ID) == streamed["id"] && p.Status.State == a2a.TaskStateCompleted
		})
		if steps["refined"]["same_context"] != true || steps["refined"]["id"] == streamed["id"] {
			fail("the refinement")
		}
		var d httpapi.DelegationBody
		e.Do(t, http.MethodGet, "/v1/delegations/"+steps["refined"]["id"].(string), e.acme, nil).Expect(t, http.StatusOK).JSON(t, &d)
		if d.Links == nil || d.Links.ContextFrom != streamed["id"] || len(d.Links.References) != 1 || d.Links.References[0] != streamed["id"] {
			fail("the refinement's links %+v", d.Links)
		}
		// The refinement was canceled: the agent has no task left running
		// when the test ends.
		waitTask(t, e.client(t, e.acme, "parts-desk", a2a.TransportProtocolJSONRPC), a2a.TaskID(d.ID), "the refinement canceled",
			func(task *a2a.Task) bool {
				return task.Status.State == a2a.TaskStateCanceled && meta(t, task)["obligation_state"] == "released"
			})
	}
	peer.mu.Lock()
	defer peer.mu.Unlock()
	if strings.Join(peer.answers, ",") != "CC-42,CC-42" {
		t.Fatalf("the agent got the answers %v: want one per task", peer.answers)
	}
}

// runJS runs a node script with env added to the test's and returns its
// steps: each line it printed, a JSON object, by its "step".
func runJS(t *testing.T, node, script string, env ...string) map[string]map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s failed: %v\n%s\n%s", filepath.Base(script), err, out, stderr.String())
	}
	steps := map[string]map[string]any{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var step map[string]any
		if err := json.Unmarshal(sc.Bytes(), &step); err != nil {
			t.Fatalf("%s printed %q: %v", filepath.Base(script), sc.Text(), err)
		}
		steps[step["step"].(string)] = step
	}
	return steps
}
