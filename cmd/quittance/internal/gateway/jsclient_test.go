package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, node, script)
		cmd.Env = append(os.Environ(), "NODE_MODULES="+modules, "LEDGER_EXT="+gateway.ExtensionURI, "ORCH_TOKEN="+e.acme,
			"BINDING="+binding, "GATEWAY_URL="+e.orgBase(orgID)+"/", "BUDGET_ID=ops", "MESSAGE_ID="+msgID, "OTHER_TASK="+string(theirs.ID))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("%s: the JS orchestrator failed: %v\n%s\n%s", binding, err, out, stderr.String())
		}
		steps := map[string]map[string]any{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			var step map[string]any
			if err := json.Unmarshal(sc.Bytes(), &step); err != nil {
				t.Fatalf("%s: %q: %v", binding, sc.Text(), err)
			}
			steps[step["step"].(string)] = step
		}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("%s: "+format+"\noutput:\n%s", append(append([]any{binding}, args...), out)...)
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
