package a2a

import (
	"strings"
	"testing"
)

func TestParseMessageContent(t *testing.T) {
	t.Parallel()
	m, err := ParseMessageContent([]byte(`{"parts":[{"text":"order 12 chairs"},{"data":{"sku":"c-1"}},{"kind":"file","file":{"uri":"https://x.example/spec.pdf","mimeType":"application/pdf"}}],"metadata":{"k":"v"}}`), 4)
	if err != nil {
		t.Fatal(err)
	}
	if m.Role != RoleUser || len(m.Parts) != 3 || m.Parts[0].Text != "order 12 chairs" || string(m.Parts[1].Data) != `{"sku":"c-1"}` ||
		m.Parts[2].URL != "https://x.example/spec.pdf" || m.Parts[2].MediaType != "application/pdf" || string(m.Metadata) != `{"k":"v"}` {
		t.Fatalf("parsed %+v", m)
	}
	for name, tc := range map[string]struct{ raw, problem string }{
		"not an object":       {`[1]`, "not a JSON message object"},
		"trailing data":       {`{"parts":[{"text":"a"}]} {}`, "trailing data"},
		"no parts":            {`{"parts":[]}`, "1 to 2 parts"},
		"too many parts":      {`{"parts":[{"text":"a"},{"text":"b"},{"text":"c"}]}`, "1 to 2 parts"},
		"two contents":        {`{"parts":[{"text":"a","url":"https://x.example/"}]}`, "part 0 must have exactly one"},
		"no content":          {`{"parts":[{"mediaType":"text/plain"}]}`, "part 0 must have exactly one"},
		"metadata not object": {`{"parts":[{"text":"a"}],"metadata":[1]}`, "metadata must be an object"},
		"bad raw bytes":       {`{"parts":[{"raw":"%%%"}]}`, "part bytes"},
	} {
		if _, err := ParseMessageContent([]byte(tc.raw), 2); err == nil || !strings.Contains(err.Error(), tc.problem) {
			t.Errorf("%s: error %v, want one saying %q", name, err, tc.problem)
		}
	}
}
