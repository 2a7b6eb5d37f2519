package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// TestV03PartsRoundTrip: every kind of 1.0 part an org's agent may answer
// goes to 0.3 and back unchanged — a data value that is not an object
// through 0.3's {"value": …} wrapping — and 0.3's JSON is what 0.3 says.
func TestV03PartsRoundTrip(t *testing.T) {
	t.Parallel()
	pdf := a2a.NewFileURLPart("https://supplier.example/invoice.pdf", "application/pdf")
	pdf.Filename = "invoice.pdf"
	raw := a2a.NewRawPart([]byte{0, 1, 2, 250})
	raw.MediaType, raw.Filename = "application/octet-stream", "blob.bin"
	text := a2a.NewTextPart("Purchase order PO-1 confirmed")
	text.Metadata = map[string]any{"lang": "en"}
	in := a2a.ContentParts{
		text,
		a2a.NewDataPart(map[string]any{"po": "PO-1", "lines": []any{"a", "b"}}),
		a2a.NewDataPart([]any{float64(1), float64(2)}),
		a2a.NewDataPart("a bare string"),
		pdf, raw,
	}
	wire, err := json.Marshal(v03Parts(in))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"kind":"text","text":"Purchase order PO-1 confirmed","metadata":{"lang":"en"}},` +
		`{"kind":"data","data":{"lines":["a","b"],"po":"PO-1"}},` +
		`{"kind":"data","data":{"value":[1,2]},"metadata":{"data_part_compat":true}},` +
		`{"kind":"data","data":{"value":"a bare string"},"metadata":{"data_part_compat":true}},` +
		`{"kind":"file","file":{"name":"invoice.pdf","mimeType":"application/pdf","uri":"https://supplier.example/invoice.pdf"}},` +
		`{"kind":"file","file":{"name":"blob.bin","mimeType":"application/octet-stream","bytes":"AAEC+g=="}}]`
	if string(wire) != want {
		t.Fatalf("0.3 parts\n got %s\nwant %s", wire, want)
	}
	var back []v03Part
	if err := json.Unmarshal(wire, &back); err != nil {
		t.Fatal(err)
	}
	out, err := v1Parts(back)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) {
		t.Fatalf("back to 1.0:\n got %s\nwant %s", dump(out), dump(in))
	}
}

func dump(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestV03PartsRefused: a part 0.3 does not define is InvalidParams naming
// it, not dropped.
func TestV03PartsRefused(t *testing.T) {
	t.Parallel()
	for _, part := range []string{
		`{"kind":"image","url":"x"}`,
		`{"kind":"text"}`,
		`{"kind":"file","file":{"name":"x"}}`,
		`{"kind":"file","file":{"uri":"https://a.example/x","bytes":"AA=="}}`,
		`{"kind":"file","file":{"bytes":"not base64!"}}`,
	} {
		var p v03Part
		if err := json.Unmarshal([]byte(part), &p); err != nil {
			t.Fatal(err)
		}
		_, err := v1Parts([]v03Part{{Kind: "text", Text: new(string)}, p})
		if !errors.Is(err, a2a.ErrInvalidParams) || err.Error()[:16] != "message.parts[1]" {
			t.Errorf("%s: %v, want InvalidParams naming message.parts[1]", part, err)
		}
	}
}

// TestV03Errors: each error the handler gives has its 0.3 code, the
// message the 1.0 bindings give, and an object as data; an error of no
// A2A kind says nothing of itself.
func TestV03Errors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		code int
	}{
		{a2a.NewError(a2a.ErrTaskNotFound, "task not found"), -32001},
		{a2a.NewError(a2a.ErrTaskNotCancelable, "the task is canceled"), -32002},
		{a2a.ErrPushNotificationNotSupported, -32003},
		{a2a.ErrUnsupportedOperation, -32004},
		{a2a.ErrUnsupportedContentType, -32005},
		{a2a.ErrInvalidAgentResponse, -32006},
		{a2a.ErrExtendedCardNotConfigured, -32007},
		{a2a.NewError(a2a.ErrExtensionSupportRequired, "needs the ledger").WithErrorInfoMeta(map[string]string{"extension": ExtensionURI}), -32602},
		{a2a.NewError(a2a.ErrInvalidParams, "insufficient funds").WithErrorInfoMeta(map[string]string{"problem_code": "insufficient_funds"}), -32602},
		{a2a.NewError(a2a.ErrInternalError, "try again"), -32603},
		{a2a.ErrMethodNotFound, -32601},
	} {
		e := v03ErrorOf(c.err)
		if e.Code != c.code || e.Message != c.err.Error() || e.Data["error"] != c.err.Error() || e.Data["reason"] != a2a.ErrorReason(c.err) {
			t.Errorf("%v: %+v, want code %d", c.err, e, c.code)
		}
		var ae *a2a.Error
		if errors.As(c.err, &ae) {
			meta, _ := ae.ErrorInfo().Value["metadata"].(map[string]string)
			for k, v := range meta {
				if e.Data[k] != v {
					t.Errorf("%v: data %+v lacks %s", c.err, e.Data, k)
				}
			}
		}
	}
	if e := v03ErrorOf(fmt.Errorf("pq: connection refused")); e.Code != -32603 || e.Message != "internal error" || e.Data != nil {
		t.Fatalf("an error of no A2A kind: %+v", e)
	}
}
