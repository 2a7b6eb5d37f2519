package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
)

// TestA2ACompensationKeepsMessageIDAfterUnprovenReply: the first
// compensation request is answered by a reply that does not prove the
// remote did not process it — a JSON-RPC response for another request id,
// or a body over the client's 8 MiB cap — and the resend is answered with
// a receipt. Neither reply starts a new round: the resend carries the same
// messageId, and the receipt compensates.
func TestA2ACompensationKeepsMessageIDAfterUnprovenReply(t *testing.T) {
	t.Parallel()
	for name, reply := range map[string]rawBody{
		"mismatched id": rawBody(`{"jsonrpc":"2.0","id":"not-your-request","result":{"kind":"task","id":"comp-x","contextId":"c","status":{"state":"working"}}}`),
		"body over cap": rawBody(append(append([]byte(`{"jsonrpc":"2.0","id":1,"result":{"kind":"task","id":"comp-x","contextId":"c","status":{"state":"working"},"metadata":{"pad":"`),
			bytes.Repeat([]byte("x"), 8<<20+1)...), `"}}}`...)),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var (
				mu     sync.Mutex
				compID []string
			)
			agent := startRawAgent(t, &rawAgent{handle: func(method string, _ int, params json.RawMessage) (any, *rawRPCError, bool) {
				switch method {
				case "message/send":
					var p struct {
						Message struct {
							MessageID string `json:"messageId"`
							Parts     []struct {
								Data map[string]any `json:"data"`
							} `json:"parts"`
						} `json:"message"`
					}
					_ = json.Unmarshal(params, &p)
					var req map[string]any
					for _, part := range p.Message.Parts {
						if r, ok := part.Data["compensationRequest"].(map[string]any); ok {
							req = r
						}
					}
					if req == nil {
						return workingTask("unproven-1"), nil, false
					}
					mu.Lock()
					compID = append(compID, p.Message.MessageID)
					n := len(compID)
					mu.Unlock()
					if n == 1 {
						return reply, nil, false
					}
					return map[string]any{
						"kind": "task", "id": "comp-1", "contextId": "ctx-unproven-1", "status": map[string]any{"state": "completed"},
						"artifacts": []any{map[string]any{
							"artifactId": compensation.ReceiptArtifactName, "name": compensation.ReceiptArtifactName,
							"parts": []any{map[string]any{"kind": "data", "data": map[string]any{
								"outcome": "compensated", "receiptId": "rcpt-1", "taskId": req["taskId"], "idempotencyKey": req["idempotencyKey"],
							}}},
						}},
					}, nil, false
				case "tasks/cancel":
					return map[string]any{"kind": "task", "id": "unproven-1", "contextId": "ctx-unproven-1", "status": map[string]any{"state": "canceled"}}, nil, false
				}
				return nil, &rawRPCError{Code: -32601, Message: "method not found"}, false
			}})
			e := newA2AEnv(t, apitest.Worker{NoPush: true, CompensationMaxAttempts: 5})
			e.putOrg(t, "unproven", agent.cardURL, http.StatusCreated)
			d := e.dispatch(t, "po-unproven", "unproven")
			e.waitFor(t, d.ID, "dispatch", dispatched)
			e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
			got := e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
			if got.HoldState != "returned" {
				t.Fatalf("after compensation: %+v", got)
			}
			mu.Lock()
			ids := append([]string(nil), compID...)
			mu.Unlock()
			if len(ids) != 2 || ids[0] != ids[1] {
				t.Fatalf("compensation request messageIds %v, want two, the same", ids)
			}
			e.CheckInvariants(t)
		})
	}
}
