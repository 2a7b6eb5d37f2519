package extension_test

import (
	"bytes"
	"encoding/json"
	"os"
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

// TestURIMapsToThisDirectory: the URI Quittance sends is the one the
// document states, and every schema's $id is its file's URI.
func TestURIMapsToThisDirectory(t *testing.T) {
	if compensation.ExtensionURI != extension.URI {
		t.Fatalf("compensation.ExtensionURI %q, the document's %q", compensation.ExtensionURI, extension.URI)
	}
	schemas, problems := extension.CheckDocument()
	for _, p := range problems {
		t.Error(p)
	}
	if len(schemas) != 7 {
		t.Errorf("schemas %v, want 7", schemas)
	}
}

// TestDocExamplesValidate: every JSON example of the document validates,
// at the JSON pointers its marker names, against the schemas it names,
// and every jws or requestJws in it against the token schemas.
func TestDocExamplesValidate(t *testing.T) {
	examples, err := extension.Examples()
	if err != nil {
		t.Fatal(err)
	}
	for i, ex := range examples {
		n := i + 1
		if ex.Marker == "" {
			t.Errorf("JSON example %d has no <!-- example: … --> marker before it", n)
			continue
		}
		checkExample(t, n, ex.Marker, []byte(ex.JSON))
	}
	if len(examples) < 10 {
		t.Errorf("%d JSON examples found, want at least 10", len(examples))
	}
}

func checkExample(t *testing.T, n int, marker string, block []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(block, &v); err != nil {
		t.Errorf("example %d is not JSON: %v", n, err)
		return
	}
	for _, target := range strings.Split(marker, ";") {
		schema, pointer, _ := strings.Cut(strings.TrimSpace(target), " ")
		at, ok := resolve(v, pointer)
		if !ok {
			t.Errorf("example %d: no %s", n, pointer)
			continue
		}
		if err := extension.ValidateValue(schema, at); err != nil {
			t.Errorf("example %d at %q: %v", n, pointer, err)
		}
	}
	walk(v, func(key string, s string) {
		schema := map[string]string{"jws": extension.SchemaReceiptToken, "requestJws": extension.SchemaRequestToken}[key]
		if schema != "" {
			if err := extension.ValidateToken(schema, s); err != nil {
				t.Errorf("example %d, %s: %v", n, key, err)
			}
		}
	})
}

// resolve is the value at the RFC 6901 JSON pointer p of v.
func resolve(v any, p string) (any, bool) {
	if p == "" {
		return v, true
	}
	for _, tok := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return nil, false
			}
		case []any:
			i := -1
			for j := range x {
				if tok == strings.TrimSpace(jsonInt(j)) {
					i = j
				}
			}
			if i < 0 {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func jsonInt(i int) string { b, _ := json.Marshal(i); return string(b) }

// walk calls f with every string member of v and its key.
func walk(v any, f func(key, s string)) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok {
				f(k, s)
			}
			walk(e, f)
		}
	case []any:
		for _, e := range x {
			walk(e, f)
		}
	}
}

// TestOutcomesAreWhatQuittanceAccepts: the outcome schema lists exactly
// the outcomes compensation.ParseRemoteReceipt accepts.
func TestOutcomesAreWhatQuittanceAccepts(t *testing.T) {
	b, _ := extension.Files.ReadFile("v1/" + extension.SchemaOutcome)
	var s struct {
		Enum []string `json:"enum"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, o := range append(s.Enum, "unknown", "compensation_failed") {
		_, err := compensation.ParseRemoteReceipt([]byte(`{"outcome": "` + o + `", "taskId": "t"}`))
		valid := extension.ValidateValue(extension.SchemaOutcome, o) == nil
		if (err == nil) != valid {
			t.Errorf("outcome %q: Quittance accepts it: %v; the schema: %v", o, err == nil, valid)
		}
	}
}

// TestRequestsQuittanceSends: the compensation requests the worker sends
// (delegate.CompensationRequestSend) and the cancel metadata for an
// atomicCancel agent (delegate.CancelExtensions) hold to the schemas, signed and unsigned, with and
// without extra tasks, for the delegation's task and an extra one.
func TestRequestsQuittanceSends(t *testing.T) {
	raw, err := jose.NewIdentityFile("ledger", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id, err := jose.LoadIdentity("quittance", raw)
	if err != nil {
		t.Fatal(err)
	}
	d := ledger.Delegation{ID: uuid.New(), OrgID: "acme", TaskStatus: ledger.StatusCanceled}
	d.Remote.TaskID, d.Remote.ContextID = "task-1", "ctx-1"
	plain := compensation.RequestFor(d)
	extra := compensation.RequestFor(d)
	extra.ExtraTaskIDs = []string{"task-2", "task-3"}
	for _, signer := range []*jose.Identity{id, nil} {
		for _, req := range []compensation.CompensationRequest{plain, extra, compensation.ExtraTaskRequest(d, "task-2")} {
			send, err := delegate.CompensationRequestSend(d, req, compensation.RequestMessageID(d.ID, 1), []string{req.TaskID}, signer, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if err := extension.Validate(extension.SchemaRequest, send.Message.Parts[0].Data); err != nil {
				t.Error(err)
			}
			checkMetadata(t, send.Message.Metadata, signer != nil)
		}
		card := a2a.AgentCard{Extensions: []a2a.AgentExtension{{URI: extension.URI, Params: json.RawMessage(`{"atomicCancel": true}`)}}}
		exts, meta, err := delegate.CancelExtensions(d, card, signer, time.Now())
		if err != nil || len(exts) != 1 || exts[0] != extension.URI {
			t.Fatalf("cancel extensions %v, %v", exts, err)
		}
		checkMetadata(t, meta, signer != nil)
	}
}

// checkMetadata validates the extension's member of metadata, and its
// requestJws, which signed says must be there.
func checkMetadata(t *testing.T, metadata json.RawMessage, signed bool) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(metadata, &m); err != nil {
		t.Fatal(err)
	}
	if err := extension.Validate(extension.SchemaMetadata, m[extension.URI]); err != nil {
		t.Error(err)
	}
	var ext struct {
		RequestJWS string `json:"requestJws"`
	}
	_ = json.Unmarshal(m[extension.URI], &ext)
	if (ext.RequestJWS != "") != signed {
		t.Errorf("requestJws %q, want one: %v", ext.RequestJWS, signed)
	}
	if signed {
		if err := extension.ValidateToken(extension.SchemaRequestToken, ext.RequestJWS); err != nil {
			t.Error(err)
		}
	}
}

// TestSchemasRefuse: what Quittance refuses or cannot read, the schemas
// refuse too.
func TestSchemasRefuse(t *testing.T) {
	const jws = "eyJh.eyJi.c2ln"
	for _, c := range []struct{ schema, doc string }{
		{extension.SchemaReceipt, `{"outcome": "compensated"}`},
		{extension.SchemaReceipt, `{"outcome": "unknown", "taskId": "t"}`},
		{extension.SchemaReceipt, `{"outcome": "failed", "taskId": "t", "reversedAmountMinor": 5}`},
		{extension.SchemaReceipt, `{"outcome": "compensated", "taskId": "t", "reversedAmountMinor": -1}`},
		{extension.SchemaReceipt, `{"outcome": "compensated", "taskId": "t", "reversedAmountMinor": 1.5}`},
		{extension.SchemaReceipt, `{"outcome": "no_effects", "taskId": "t"}`},
		{extension.SchemaReceipt, `{"outcome": "compensated", "taskId": "t", "jws": "not a jws"}`},
		{extension.SchemaRequest, `{"compensationRequest": {"taskId": "t", "reason": "task_canceled"}}`},
		{extension.SchemaMetadata, `{"taskId": "t", "idempotencyKey": "qc_0123456789abcdef0123456789abcdef"}`},
		{extension.SchemaCard, `{"uri": "https://quittance.dev/a2a/compensation/v2"}`},
		{extension.SchemaCard, `{"uri": "https://quittance.dev/a2a/compensation/v1", "params": {"atomicCancel": "yes"}}`},
		{extension.SchemaReceiptToken, `{"header": {"alg": "HS256", "kid": "k", "typ": "compensation-ack+jwt"}, "claims": {}}`},
		{extension.SchemaReceiptToken, `{"header": {"alg": "EdDSA", "kid": "k", "typ": "compensation-ack+jwt", "jku": "https://x"},
			"claims": {"iss": "o", "aud": "q", "sub": "t", "jti": "j", "iat": 1, "exp": 2, "idempotency_key": "k", "receipt_id": "r"}}`},
		{extension.SchemaReceiptToken, `{"header": {"alg": "EdDSA", "kid": "k", "typ": "compensation-ack+jwt"},
			"claims": {"iss": "o", "aud": "q", "sub": "t", "jti": "j", "iat": 1, "exp": 2, "receipt_id": "r"}}`},
		{extension.SchemaReceiptToken, `{"header": {"alg": "EdDSA", "kid": "k", "typ": "no-compensation-required+jwt"},
			"claims": {"iss": "o", "aud": "q", "sub": "t", "jti": "j", "iat": 1, "exp": 2, "reversed_amount_minor": 1}}`},
	} {
		if err := extension.Validate(c.schema, []byte(c.doc)); err == nil {
			t.Errorf("%s accepts %s", c.schema, c.doc)
		}
	}
	if err := extension.Validate(extension.SchemaReceipt, []byte(`{"outcome": "no_effects", "taskId": "t", "jws": "`+jws+`"}`)); err != nil {
		t.Errorf("a signed no_effects receipt: %v", err)
	}
}

// TestReadmeLinksTheSpec: the repository's map links the document.
func TestReadmeLinksTheSpec(t *testing.T) {
	for _, f := range []string{"../../README.md", "../../delegate/A2A.md", "../SIGNING.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("compensation/extension/v1/README.md")) && !bytes.Contains(b, []byte("extension/v1/README.md")) {
			t.Errorf("%s does not link the extension's specification", f)
		}
	}
}
