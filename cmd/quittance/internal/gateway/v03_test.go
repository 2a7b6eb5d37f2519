package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	a2aclient03 "github.com/a2aproject/a2a-go/a2aclient"

	"github.com/quittance/quittance/cmd/quittance/internal/gateway"
)

// TestGatewayTellsA2A03ClientsTheVersion: the gateway serves A2A 1.0 only
// (GATEWAY.md, "Not served yet"). An orchestrator on a2a-go v0.3.3's
// client that sends it a 0.3 message/send is answered with
// VersionNotSupportedError (-32009) saying so, not a bare
// MethodNotFound, and nothing is held.
func TestGatewayTellsA2A03ClientsTheVersion(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	ctx := context.Background()
	hc := e.httpClient(e.acme)
	rec := &recorder{next: hc.Transport}
	hc.Transport = rec
	c, err := a2aclient03.NewFromEndpoints(ctx,
		[]a2a03.AgentInterface{{URL: e.orgBase(orgID) + gateway.JSONRPCPath, Transport: a2a03.TransportProtocolJSONRPC}},
		a2aclient03.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	msg := a2a03.NewMessage(a2a03.MessageRoleUser, a2a03.TextPart{Text: "Order 40 laptops"})
	msg.Metadata = map[string]any{gateway.ExtensionURI: map[string]any{
		"budget_id": "ops", "task_class": "procurement", "hold": map[string]any{"amount_minor": 50_000, "currency": "EUR"},
	}}
	// a2a-go v0.3.3's client knows no -32009 and reports an internal
	// error; what it was answered is on the wire.
	if _, err = c.SendMessage(ctx, &a2a03.MessageSendParams{Message: msg}); err == nil {
		t.Fatal("a 0.3 message/send was accepted")
	}
	var answer struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rec.last, &answer); err != nil || answer.Error.Code != -32009 || !strings.Contains(answer.Error.Message, "A2A 1.0 only") {
		t.Fatalf("a 0.3 message/send was answered %s (%v)", rec.last, err)
	}
	if held := e.budgetHeld(t); held != 0 {
		t.Fatalf("held %d", held)
	}
}

// recorder keeps the body of the last response.
type recorder struct {
	next http.RoundTripper
	last []byte
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	r.last = body
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}
