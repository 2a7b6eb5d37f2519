package jose_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/internal/jose"
)

// detached signs payload with s under header and returns the protected
// header and the signature of the detached JWS.
func detached(t *testing.T, s *compensationtest.Signer, header map[string]any, payload []byte) (string, string) {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(s.SignRaw(h, payload), ".")
	return parts[0], parts[2]
}

// TestVerifyDetached: a detached signature verifies over its payload with
// the key its kid names, and nothing else does: another payload, another
// key under the same kid, an algorithm off the allow-list, a header that
// brings its own key. A jku is returned for the caller to rule on.
func TestVerifyDetached(t *testing.T) {
	t.Parallel()
	signer := compensationtest.NewEd25519Signer(t, "card-1")
	forger := compensationtest.NewEd25519Signer(t, "card-1")
	keys, err := jose.ParseOrgJWKS(signer.JWKS())
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"name":"Supplier"}`)
	head := map[string]any{"alg": "EdDSA", "kid": "card-1", "typ": "JOSE", "jku": "https://keys.example/jwks"}
	p, s := detached(t, signer, head, payload)
	v, err := jose.VerifyDetached(p, s, payload, keys)
	if err != nil || v.KeyID != "card-1" || v.KeyThumbprint == "" {
		t.Fatalf("VerifyDetached = %+v, %v", v, err)
	}
	if h, err := jose.ParseDetachedHeader(p); err != nil || h.JKU != "https://keys.example/jwks" || h.KeyID != "card-1" {
		t.Fatalf("ParseDetachedHeader = %+v, %v", h, err)
	}
	_, err = jose.VerifyDetached(p, s, []byte(`{"name":"Other"}`), keys)
	requireReason(t, err, jose.SignatureInvalid, p+"."+s)
	fp, fs := detached(t, forger, head, payload)
	_, err = jose.VerifyDetached(fp, fs, payload, keys)
	requireReason(t, err, jose.SignatureInvalid, fp+"."+fs)
	op, os := detached(t, signer, map[string]any{"alg": "EdDSA", "kid": "card-2"}, payload)
	_, err = jose.VerifyDetached(op, os, payload, keys)
	requireReason(t, err, jose.KeyUnknown, op+"."+os)
	for name, h := range map[string]map[string]any{
		"none":    {"alg": "none", "kid": "card-1"},
		"HS256":   {"alg": "HS256", "kid": "card-1"},
		"jwk":     {"alg": "EdDSA", "kid": "card-1", "jwk": map[string]any{"kty": "OKP"}},
		"crit":    {"alg": "EdDSA", "kid": "card-1", "crit": []string{"b64"}, "b64": false},
		"no kid":  {"alg": "EdDSA"},
		"jku num": {"alg": "EdDSA", "kid": "card-1", "jku": 7},
	} {
		hp, hs := detached(t, signer, h, payload)
		_, err := jose.VerifyDetached(hp, hs, payload, keys)
		if err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}
