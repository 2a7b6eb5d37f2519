package jose_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	gojose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/internal/jose"
)

// jwkMap returns a key's JWK as a JSON object that a test can edit.
func jwkMap(t *testing.T, k gojose.JSONWebKey) map[string]any {
	t.Helper()
	raw, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func setJSON(t *testing.T, keys ...map[string]any) []byte {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestParseOrgJWKS(t *testing.T) {
	t.Parallel()
	ed := compensationtest.NewEd25519Signer(t, "ed-1")
	es256 := compensationtest.NewES256Signer(t, "es256-1")
	es384 := compensationtest.NewES384Signer(t, "es384-1")
	ps256 := compensationtest.NewPS256Signer(t, "ps256-1")

	t.Run("accepts every allowed key type", func(t *testing.T) {
		t.Parallel()
		raw := compensationtest.JWKS(ed.PublicJWK(), es256.PublicJWK(), es384.PublicJWK(), ps256.PublicJWK())
		set, err := jose.ParseOrgJWKS(raw)
		if err != nil {
			t.Fatalf("ParseOrgJWKS: %v", err)
		}
		if len(set.Keys) != 4 {
			t.Fatalf("got %d keys, want 4", len(set.Keys))
		}
		for _, kid := range []string{"ed-1", "es256-1", "es384-1", "ps256-1"} {
			if got := set.Key(kid); len(got) != 1 || !got[0].IsPublic() {
				t.Errorf("key %s: %+v", kid, got)
			}
		}
	})
	t.Run("accepts a key without alg", func(t *testing.T) {
		t.Parallel()
		m := jwkMap(t, es256.PublicJWK())
		delete(m, "alg")
		if _, err := jose.ParseOrgJWKS(setJSON(t, m)); err != nil {
			t.Fatalf("ParseOrgJWKS: %v", err)
		}
	})

	p521, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	edig := func(edit func(m map[string]any)) map[string]any {
		m := jwkMap(t, ed.PublicJWK())
		edit(m)
		return m
	}

	refusals := []struct {
		name    string
		raw     []byte
		mention string // the error must say this, so an admin knows what to fix
	}{
		{"not JSON", []byte("hello"), "JSON"},
		{"JSON array", []byte(`[{"kty":"OKP"}]`), "JSON"},
		{"no keys member", []byte(`{}`), "at least one key"},
		{"empty keys", []byte(`{"keys":[]}`), "at least one key"},
		{"keys not an array", []byte(`{"keys":{}}`), "keys"},
		{"duplicate member", []byte(`{"keys":[],"keys":[]}`), "duplicate"},
		{"too large", []byte(`{"keys":[],"pad":"` + strings.Repeat("x", jose.MaxJWKSSize) + `"}`), "larger"},
		{"private Ed25519 key", compensationtest.JWKS(ed.PrivateJWK()), "private key"},
		{"private EC key", compensationtest.JWKS(es256.PrivateJWK()), "private key"},
		{"private RSA key", compensationtest.JWKS(ps256.PrivateJWK()), "private key"},
		{"private key among public ones", compensationtest.JWKS(es256.PublicJWK(), ed.PrivateJWK()), `"ed-1"`},
		{"symmetric key", []byte(`{"keys":[{"kty":"oct","kid":"h","use":"sig","alg":"HS256","k":"c2VjcmV0"}]}`), "private key"},
		{"missing kid", setJSON(t, edig(func(m map[string]any) { delete(m, "kid") })), "kid"},
		{"empty kid", setJSON(t, edig(func(m map[string]any) { m["kid"] = "" })), "kid"},
		{"duplicate kid", compensationtest.JWKS(ed.PublicJWK(), gojose.JSONWebKey{Key: es256.PublicJWK().Key, KeyID: "ed-1", Use: "sig"}), "share kid"},
		{"use enc", setJSON(t, edig(func(m map[string]any) { m["use"] = "enc" })), "use"},
		{"missing use", setJSON(t, edig(func(m map[string]any) { delete(m, "use") })), "use"},
		{"alg HS256", setJSON(t, edig(func(m map[string]any) { m["alg"] = "HS256" })), "HS256"},
		{"alg RS256", compensationtest.JWKS(gojose.JSONWebKey{Key: ps256.PublicJWK().Key, KeyID: "r", Use: "sig", Algorithm: "RS256"}), "RS256"},
		{"alg none", setJSON(t, edig(func(m map[string]any) { m["alg"] = "none" })), "none"},
		{"alg does not match key type", setJSON(t, edig(func(m map[string]any) { m["alg"] = "ES256" })), "does not match"},
		{"P-256 key labelled ES384", compensationtest.JWKS(gojose.JSONWebKey{Key: es256.PublicJWK().Key, KeyID: "e", Use: "sig", Algorithm: "ES384"}), "does not match"},
		{"P-521 key", compensationtest.JWKS(gojose.JSONWebKey{Key: p521.Public(), KeyID: "p521", Use: "sig"}), "P-521"},
		{"RSA key under 2048 bits", compensationtest.JWKS(gojose.JSONWebKey{Key: rsa1024.Public(), KeyID: "small", Use: "sig"}), "2048"},
		{"unknown kty", []byte(`{"keys":[{"kty":"XYZ","kid":"x","use":"sig"}]}`), "not a valid JWK"},
		{"X25519 key", []byte(`{"keys":[{"kty":"OKP","crv":"X25519","kid":"x","use":"sig","x":"hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo"}]}`), "not a valid JWK"},
		{"bad key material", []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"x","use":"sig","x":"AAAA"}]}`), "not a valid JWK"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			set, err := jose.ParseOrgJWKS(tc.raw)
			if err == nil {
				t.Fatalf("ParseOrgJWKS accepted %s: %+v", tc.raw, set)
			}
			if !errors.Is(err, jose.ErrInvalidJWKS) {
				t.Fatalf("error %v does not wrap ErrInvalidJWKS", err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("error %q does not mention %q", err, tc.mention)
			}
		})
	}

	t.Run("private key error does not echo key material", func(t *testing.T) {
		t.Parallel()
		m := jwkMap(t, ed.PrivateJWK())
		_, err := jose.ParseOrgJWKS(setJSON(t, m))
		if err == nil {
			t.Fatal("private key accepted")
		}
		if d := m["d"].(string); strings.Contains(err.Error(), d) {
			t.Fatalf("error %q echoes the private key", err)
		}
	})
}

// TestKeyCache: an org's set is parsed once while its registered bytes
// stay the same, again when they change, and a set that does not parse is
// an error that replaces nothing.
func TestKeyCache(t *testing.T) {
	t.Parallel()
	var c jose.KeyCache
	first := compensationtest.NewEd25519Signer(t, "k1").JWKS()
	second := compensationtest.NewEd25519Signer(t, "k2").JWKS()
	a, err := c.Keys("org", first)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := c.Keys("org", first); err != nil || again != a {
		t.Fatalf("same bytes parsed again: %v", err)
	}
	b, err := c.Keys("org", second)
	if err != nil || b == a || len(b.Key("k2")) != 1 {
		t.Fatalf("rotated set: %v", err)
	}
	if _, err := c.Keys("org", []byte(`{"keys":5}`)); !errors.Is(err, jose.ErrInvalidJWKS) {
		t.Fatalf("invalid set: %v", err)
	}
	if again, err := c.Keys("org", second); err != nil || again != b {
		t.Fatalf("an invalid set replaced the entry: %v", err)
	}
}
