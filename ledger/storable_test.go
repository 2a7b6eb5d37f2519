package ledger_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/quittance/quittance/ledger"
)

func TestStorableText(t *testing.T) {
	for in, want := range map[string]string{
		"plain":         "plain",
		"":              "",
		"a\x00b":        "a\uFFFDb",
		"bad \xff\xfe":  "bad \uFFFD\uFFFD",
		"cut \xe2\x9c":  "cut \uFFFD\uFFFD",
		"ok ✓ \u2028 é": "ok ✓ \u2028 é",
	} {
		got, changed := ledger.StorableText(in)
		if got != want || changed != (in != want) {
			t.Errorf("StorableText(%q) = %q, %v; want %q", in, got, changed, want)
		}
	}
}

func TestStorableJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// Nothing to change: returned as given, formatting and all.
		{`{"b": 1e2, "a": -0}`, `{"b": 1e2, "a": -0}`},
		{`"\ud83d\ude00"`, `"\ud83d\ude00"`},
		{`"\\ud800"`, `"\\ud800"`}, // an escaped backslash, not an escape
		{`1e999`, `1e999`},
		// Changed: canonical form.
		{`{"b":"\u0000","a":1}`, `{"a":1,"b":"` + "\uFFFD" + `"}`},
		{`["\ud800"]`, `["` + "\uFFFD" + `"]`},
		{`["\udc00\ud800"]`, `["` + "\uFFFD\uFFFD" + `"]`},
		{`[1e1001]`, `["1e1001"]`},
		{`[1e-1001]`, `["1e-1001"]`},
		{`[0e-1001]`, `["0e-1001"]`},
		{`[0e99999]`, `[0e99999]`}, // zero: nothing before the point, changed nothing
		{"[\"\xff\"]", `["` + "\uFFFD" + `"]`},
		{`{"k\u0000":1,"k\ufffd":2}`, `{"k` + "\uFFFD" + `":2}`},
	} {
		got, changed, err := ledger.StorableJSON([]byte(tc.in))
		if err != nil || string(got) != tc.want || changed != (tc.in != tc.want) {
			t.Errorf("StorableJSON(%s) = %s, %v, %v; want %s", tc.in, got, changed, err, tc.want)
		}
	}
	if _, _, err := ledger.StorableJSON([]byte(`{"a":`)); err == nil {
		t.Error("StorableJSON accepted a truncated object")
	}
}

// FuzzStorableJSON: whatever JSON goes in, what comes out is valid UTF-8
// JSON with no NUL, no unpaired surrogate escape and no number beyond the
// bound; cleaning it again changes nothing; and its canonical form is a
// fixed point, so the data an event is hashed over is the data stored.
func FuzzStorableJSON(f *testing.F) {
	for _, s := range []string{`{"a":1e2,"b":-0,"c":1.0}`, `"\u0000"`, `["\ud800"]`, `{"x":1e999999}`, `{"a":1,"a":2}`, "\"\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		out, cleaned, err := ledger.StorableJSON(raw)
		if err != nil {
			t.Fatalf("StorableJSON(%q): %v", raw, err)
		}
		if !utf8.Valid(out) || strings.Contains(string(out), `\u0000`) {
			t.Fatalf("StorableJSON(%q) = %q: not storable", raw, out)
		}
		again, changed, err := ledger.StorableJSON(out)
		if err != nil || changed || string(again) != string(out) {
			t.Fatalf("cleaning %q again: %q, %v, %v", out, again, changed, err)
		}
		c1, err := ledger.CanonicalJSON(out)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ledger.CanonicalJSON(c1)
		if err != nil || string(c1) != string(c2) {
			t.Fatalf("CanonicalJSON not idempotent: %q then %q (%v)", c1, c2, err)
		}
		// An appended event's data is c1, with the raw data beside it in
		// an object that had to change, and its hash is ComputeHash's.
		e, err := ledger.HashedEvent(ledger.Event{Stream: "s", Data: raw})
		if err != nil {
			t.Fatalf("HashedEvent(%q): %v", raw, err)
		}
		if rawKept := cleaned && strings.HasPrefix(string(c1), "{"); !rawKept && string(e.Data) != string(c1) {
			t.Fatalf("HashedEvent(%q) data %q, want %q", raw, e.Data, c1)
		}
		if h, err := e.ComputeHash(); err != nil || !bytes.Equal(h, e.Hash) {
			t.Fatalf("HashedEvent(%q) hash %x, ComputeHash %x (%v)", raw, e.Hash, h, err)
		}
	})
}

func TestStorableEventKeepsRawData(t *testing.T) {
	e, err := ledger.StorableEvent(ledger.Event{Stream: "s", Actor: "a\x00", Data: json.RawMessage(`{"m":"x\u0000","n":1e2}`)})
	if err != nil {
		t.Fatal(err)
	}
	if e.Actor != "a\uFFFD" || string(e.Data) != `{"m":"x`+"\uFFFD"+`","n":1e2,"raw_data_base64":"eyJtIjoieFx1MDAwMCIsIm4iOjFlMn0="}` {
		t.Fatalf("StorableEvent: actor %q data %s", e.Actor, e.Data)
	}
	clean, err := ledger.StorableEvent(ledger.Event{Data: json.RawMessage(`{"b": 1e2, "a": [1.0]}`)})
	if err != nil || string(clean.Data) != `{"a":[1.0],"b":1e2}` {
		t.Fatalf("StorableEvent of clean data: %s, %v", clean.Data, err)
	}
}
