package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/compensation/extension"
)

// The compensation extension's published schemas
// (compensation/extension/v1/README.md) hold on the wire: every receipt a
// peer returned that Quittance recorded (checkStoredReceipt, on every
// delegation the interop tests wait for), and every message and cancel
// Quittance sends the a2a-go peers (checkExtensionWire, on their JSON-RPC
// bodies as they arrive).

// checkStoredReceipt validates d's compensation receipt, as the agent
// returned it, and its jws, against the extension's schemas. A receipt
// recorded for a token posted over HTTP is not the extension's and is
// left alone.
func checkStoredReceipt(t *testing.T, d httpapi.DelegationBody) {
	t.Helper()
	if d.Compensation == nil || d.Compensation.Receipt == nil {
		return
	}
	raw, err := json.Marshal(d.Compensation.Receipt)
	if err != nil {
		t.Fatal(err)
	}
	var posted struct {
		TokenSHA256 string `json:"token_sha256"`
	}
	if json.Unmarshal(raw, &posted) == nil && posted.TokenSHA256 != "" {
		return // a token posted over HTTP (compensation.Receipt), not an A2A receipt
	}
	if err := extension.Validate(extension.SchemaReceipt, raw); err != nil {
		t.Errorf("delegation %s: the receipt %s breaks the extension's schema: %v", d.ID, raw, err)
	}
	var r struct {
		JWS string `json:"jws"`
	}
	if json.Unmarshal(raw, &r) == nil && r.JWS != "" {
		if err := extension.ValidateToken(extension.SchemaReceiptToken, r.JWS); err != nil {
			t.Errorf("delegation %s: the receipt's jws: %v", d.ID, err)
		}
	}
}

// checkExtensionWire wraps a peer's JSON-RPC handler: the extension's
// member of every message's and cancel's metadata, and every
// compensationRequest data part, Quittance sent it must hold to the
// schemas.
func checkExtensionWire(t *testing.T, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		for _, problem := range extensionWireProblems(body) {
			t.Errorf("Quittance sent %s: %s", body, problem)
		}
		next.ServeHTTP(w, r)
	})
}

// extensionWireProblems is what of a JSON-RPC request body breaks the
// extension's schemas.
func extensionWireProblems(body []byte) []string {
	var req struct {
		Params struct {
			Message *struct {
				Parts    []struct{ Data json.RawMessage }
				Metadata map[string]json.RawMessage
			}
			Metadata map[string]json.RawMessage
		}
	}
	if json.Unmarshal(body, &req) != nil {
		return nil // not ours to judge: the peer answers it
	}
	var problems []string
	check := func(schema string, doc json.RawMessage) {
		if err := extension.Validate(schema, doc); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if m, ok := req.Params.Metadata[extension.URI]; ok {
		check(extension.SchemaMetadata, m)
	}
	if msg := req.Params.Message; msg != nil {
		if m, ok := msg.Metadata[extension.URI]; ok {
			check(extension.SchemaMetadata, m)
		}
		for _, p := range msg.Parts {
			var data map[string]json.RawMessage
			if json.Unmarshal(p.Data, &data) == nil && data["compensationRequest"] != nil {
				check(extension.SchemaRequest, p.Data)
			}
		}
	}
	return problems
}

// TestExtensionWireProblems: the wire check finds a request that breaks
// the schemas, and lets through one that keeps them and bodies not about
// the extension.
func TestExtensionWireProblems(t *testing.T) {
	const key = "qc_0123456789abcdef0123456789abcdef"
	good := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m",
		"parts":[{"kind":"data","data":{"compensationRequest":{"taskId":"t","idempotencyKey":"` + key + `","reason":"task_canceled"}}}],
		"metadata":{"https://quittance.dev/a2a/compensation/v1":{"taskId":"t","idempotencyKey":"` + key + `","reason":"task_canceled"}}}}}`
	for body, want := range map[string]int{
		good: 0,
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"t"}}`:                                                             0,
		`{"params":{"message":{"parts":[{"data":{"compensationRequest":{"taskId":"t","reason":"task_canceled"}}}]}}}`:                   1,
		`{"params":{"id":"t","metadata":{"https://quittance.dev/a2a/compensation/v1":{"idempotencyKey":"k","reason":"x"}}}}`:            1,
		`{"params":{"message":{"parts":[],"metadata":{"https://quittance.dev/a2a/compensation/v1":{"idempotencyKey":"` + key + `"}}}}}`: 0,
	} {
		if got := extensionWireProblems([]byte(body)); len(got) != want {
			t.Errorf("%s: problems %v, want %d", body, got, want)
		}
	}
}
