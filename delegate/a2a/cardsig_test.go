package a2a

import (
	"errors"
	"testing"
)

// TestCardSigningPayload: what a card's signatures sign is the card
// without "signatures", in RFC 8785 form — members sorted, no whitespace,
// numbers and strings in their canonical spelling — whatever the
// spelling served; a card that is not a JSON object is malformed.
func TestCardSigningPayload(t *testing.T) {
	t.Parallel()
	served := []byte(`{ "version": "1.0", "signatures": [{"protected": "x", "signature": "y"}],
		"name": "Supplier \u00e9", "capabilities": {"streaming": false, "extensions": [{"uri": "u", "params": {"b": 1.50, "a": 1e2}}]} }`)
	got, err := CardSigningPayload(served)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"capabilities":{"extensions":[{"params":{"a":100,"b":1.5},"uri":"u"}],"streaming":false},"name":"Supplier é","version":"1.0"}`
	if string(got) != want {
		t.Fatalf("payload\n got %s\nwant %s", got, want)
	}
	sigs, payload, err := readCardSignatures(served)
	if err != nil || len(sigs) != 1 || sigs[0].Protected != "x" || string(payload) != want {
		t.Fatalf("readCardSignatures = %+v, %s, %v", sigs, payload, err)
	}
	if sigs, payload, err := readCardSignatures([]byte(`{"name":"unsigned"}`)); err != nil || sigs != nil || payload != nil {
		t.Fatalf("unsigned card: %+v, %s, %v", sigs, payload, err)
	}
	for _, bad := range []string{`[]`, `{"name":`, `{"signatures":"x"}`} {
		if _, _, err := readCardSignatures([]byte(bad)); !errors.Is(err, ErrMalformedResponse) {
			t.Errorf("%s: %v, want ErrMalformedResponse", bad, err)
		}
	}
}
