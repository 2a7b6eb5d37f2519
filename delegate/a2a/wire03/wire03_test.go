package wire03

import (
	"encoding/json"
	"testing"
)

// TestPartsSameWireEitherMetadata: a part says the same in JSON whether
// its metadata (and data) is the client's, unparsed, or the gateway's,
// parsed — what lets the two sides share one set of objects.
func TestPartsSameWireEitherMetadata(t *testing.T) {
	t.Parallel()
	rawMeta, mapMeta := json.RawMessage(`{"lang":"en"}`), map[string]any{"lang": "en"}
	for _, c := range []struct {
		raw  Part[json.RawMessage]
		obj  Part[map[string]any]
		want string
	}{
		{TextPart("hi", rawMeta), TextPart("hi", mapMeta), `{"kind":"text","text":"hi","metadata":{"lang":"en"}}`},
		{TextPart("", json.RawMessage(nil)), TextPart("", map[string]any(nil)), `{"kind":"text","text":""}`},
		{
			DataPart(json.RawMessage(`{"po":"PO-1"}`), json.RawMessage(nil)), DataPart(map[string]any{"po": "PO-1"}, map[string]any(nil)),
			`{"kind":"data","data":{"po":"PO-1"}}`,
		},
		{
			BytesPart("b.bin", "application/octet-stream", []byte{0, 1, 2, 250}, rawMeta),
			BytesPart("b.bin", "application/octet-stream", []byte{0, 1, 2, 250}, mapMeta),
			`{"kind":"file","file":{"name":"b.bin","mimeType":"application/octet-stream","bytes":"AAEC+g=="},"metadata":{"lang":"en"}}`,
		},
		{
			URIPart("", "application/pdf", "https://x.example/f.pdf", json.RawMessage(nil)),
			URIPart("", "application/pdf", "https://x.example/f.pdf", map[string]any(nil)),
			`{"kind":"file","file":{"mimeType":"application/pdf","uri":"https://x.example/f.pdf"}}`,
		},
	} {
		for _, p := range []any{c.raw, c.obj} {
			got, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("%T:\n got %s\nwant %s", p, got, c.want)
			}
		}
	}
}
