package extension_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/extension"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
)

// TestDocWireExamplesAreWhatQuittanceSends: the document's JSON-RPC
// SendMessage and CancelTask examples have exactly the members — the same
// JSON paths — of what Quittance's A2A client sends for a compensation
// request and an atomic cancel, captured on a loopback server, and the
// request activates the extension with the A2A-Extensions header.
func TestDocWireExamplesAreWhatQuittanceSends(t *testing.T) {
	var (
		bodies  [][]byte
		headers []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		bodies, headers = append(bodies, body), append(headers, r.Header.Get("A2A-Extensions"))
		var req struct{ ID json.RawMessage }
		_ = json.Unmarshal(body, &req)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) +
			`,"result":{"task":{"id":"task-7f3a","contextId":"ctx","status":{"state":"TASK_STATE_CANCELED"}},` +
			`"id":"task-7f3a","contextId":"ctx","status":{"state":"TASK_STATE_CANCELED"}}}`))
	}))
	defer srv.Close()
	client := a2a.NewClient(srv.Client(), a2a.AgentInterface{URL: srv.URL, Binding: a2a.BindingJSONRPC, ProtocolVersion: "1.0"})

	raw, err := jose.NewIdentityFile("ledger", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id, err := jose.LoadIdentity("quittance", raw)
	if err != nil {
		t.Fatal(err)
	}
	d := ledger.Delegation{ID: uuid.New(), OrgID: "acme-supplies", TaskStatus: ledger.StatusCanceled}
	d.Remote.TaskID, d.Remote.ContextID = "task-7f3a", "quittance-context-x"
	send, err := delegate.CompensationRequestSend(d, compensation.RequestFor(d), compensation.RequestMessageID(d.ID, 1),
		[]string{d.Remote.TaskID}, id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.SendMessage(t.Context(), send); err != nil {
		t.Fatal(err)
	}
	card := a2a.AgentCard{Extensions: []a2a.AgentExtension{{URI: extension.URI, Params: json.RawMessage(`{"atomicCancel": true}`)}}}
	exts, meta, err := delegate.CancelExtensions(d, card, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CancelTaskWithMetadata(t.Context(), d.Remote.TaskID, exts, meta); err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 2 || headers[0] != extension.URI || headers[1] != extension.URI {
		t.Fatalf("captured %d requests with A2A-Extensions %q", len(bodies), headers)
	}
	examples := docExamples(t)
	for i, method := range []string{"SendMessage", "CancelTask"} {
		sent, shown := jsonPaths(t, bodies[i]), jsonPaths(t, examples[method])
		if !slices.Equal(sent, shown) {
			t.Errorf("%s: Quittance sends the members\n%s\nthe document shows\n%s", method, strings.Join(sent, "\n"), strings.Join(shown, "\n"))
		}
	}
}

// docExamples are the document's JSON-RPC request examples, by method.
func docExamples(t *testing.T) map[string][]byte {
	t.Helper()
	doc, err := extension.Files.ReadFile("v1/README.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	var block []byte
	in := false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		switch line := sc.Text(); {
		case !in && line == "```json":
			in, block = true, nil
		case in && line == "```":
			in = false
			var req struct{ Method string }
			if json.Unmarshal(block, &req) == nil && req.Method != "" {
				out[req.Method] = block
			}
		case in:
			block = append(block, line+"\n"...)
		}
	}
	return out
}

// jsonPaths lists the paths of every leaf of the JSON document b, array
// indexes as [], sorted, each once.
func jsonPaths(t *testing.T, b []byte) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	var out []string
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(e, at+"/"+k)
			}
		case []any:
			for _, e := range x {
				walk(e, at+"/[]")
			}
		default:
			out = append(out, at)
		}
	}
	walk(v, "")
	slices.Sort(out)
	return slices.Compact(out)
}
