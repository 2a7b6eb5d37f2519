package jose_test

import (
	"crypto"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	gojose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/internal/jose"
)

// testTyp is the "typ" the tokens of these tests carry: the leaf does not
// care what it means.
const testTyp = "test-token+jwt"

func claims() map[string]any {
	return map[string]any{"iss": "signer", "sub": "thing", "n": 1}
}

// requireReason asserts err is a *jose.Refusal for reason whose detail
// does not echo the token.
func requireReason(t *testing.T, err error, reason jose.Reason, token string) {
	t.Helper()
	var r *jose.Refusal
	if !errors.As(err, &r) {
		t.Fatalf("error = %v (%T), want a *Refusal for %s", err, err, reason)
	}
	if r.Reason != reason {
		t.Fatalf("reason = %s (detail %q), want %s", r.Reason, r.Detail, reason)
	}
	if r.Detail == "" {
		t.Errorf("refusal %s has no detail", reason)
	}
	for _, part := range strings.Split(token, ".") {
		if len(part) >= 16 && strings.Contains(r.Detail, part) {
			t.Errorf("detail %q echoes part of the token", r.Detail)
		}
	}
}

// TestVerifyReasons: each rule of the leaf refuses with its reason, in the
// documented order (header rules before any key is looked at).
func TestVerifyReasons(t *testing.T) {
	t.Parallel()
	ed := compensationtest.NewEd25519Signer(t, "ed-1")
	es := compensationtest.NewES256Signer(t, "es-1")
	other := compensationtest.NewEd25519Signer(t, "ed-1") // another signer reusing the kid
	keys := &gojose.JSONWebKeySet{Keys: []gojose.JSONWebKey{ed.PublicJWK(), es.PublicJWK()}}
	valid := ed.Sign(t, testTyp, claims())
	parts := strings.Split(valid, ".")
	withUse := &gojose.JSONWebKeySet{Keys: []gojose.JSONWebKey{{Key: ed.PublicJWK().Key, KeyID: "ed-1", Use: "enc"}}}

	tests := []struct {
		name   string
		token  string
		keys   *gojose.JSONWebKeySet // nil: keys
		reason jose.Reason
	}{
		{"too large", strings.Repeat("A", jose.MaxTokenSize+1), nil, jose.TooLarge},
		{"empty", "", nil, jose.Malformed},
		{"two parts", parts[0] + "." + parts[1], nil, jose.Malformed},
		{"JSON serialization", `{"protected":"x"}`, nil, jose.Malformed},
		{"padded", parts[0] + "=." + parts[1] + "." + parts[2], nil, jose.Malformed},
		{"duplicate claim", ed.SignRaw([]byte(`{"alg":"EdDSA","kid":"ed-1","typ":"`+testTyp+`"}`), []byte(`{"a":1,"a":2}`)), nil, jose.Malformed},
		{"alg none", compensationtest.NoneToken(claims(), compensationtest.WithHeader("typ", testTyp), compensationtest.WithHeader("kid", "ed-1")), nil, jose.AlgorithmRefused},
		{"alg HS256", compensationtest.HS256Token([]byte("k"), claims(), compensationtest.WithHeader("typ", testTyp), compensationtest.WithHeader("kid", "ed-1")), nil, jose.AlgorithmRefused},
		{"jku before an unknown kid", ed.Sign(t, testTyp, claims(), compensationtest.WithHeader("jku", "https://x/"), compensationtest.WithHeader("kid", "nope")), nil, jose.HeaderRefused},
		{"typ missing", ed.Sign(t, "", claims()), nil, jose.TypeMismatch},
		{"typ other", ed.Sign(t, "JWT", claims()), nil, jose.TypeMismatch},
		{"kid not a string", ed.Sign(t, testTyp, claims(), compensationtest.WithHeader("kid", 1)), nil, jose.Malformed},
		{"kid missing", ed.Sign(t, testTyp, claims(), compensationtest.WithoutHeader("kid")), nil, jose.KeyUnknown},
		{"kid unknown", ed.Sign(t, testTyp, claims(), compensationtest.WithHeader("kid", "ed-2")), nil, jose.KeyUnknown},
		{"no keys", valid, &gojose.JSONWebKeySet{}, jose.KeyUnknown},
		{"key of another use", valid, withUse, jose.KeyUnusable},
		{"key of another alg", ed.Sign(t, testTyp, claims(), compensationtest.WithHeader("kid", "es-1")), nil, jose.KeyUnusable},
		{"another signer's key under the kid", other.Sign(t, testTyp, claims()), nil, jose.SignatureInvalid},
		{"empty signature", parts[0] + "." + parts[1] + ".", nil, jose.SignatureInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := tc.keys
			if k == nil {
				k = keys
			}
			v, err := jose.Verify([]byte(tc.token), testTyp, k)
			if err == nil {
				t.Fatalf("Verify accepted the token: %+v", v)
			}
			requireReason(t, err, tc.reason, tc.token)
		})
	}
}

// TestVerifyAccepts: a token of every allowed algorithm verifies, its
// payload comes back as signed, and its key is named by kid and RFC 7638
// thumbprint; "typ" is compared as RFC 7515 §4.1.9 says.
func TestVerifyAccepts(t *testing.T) {
	t.Parallel()
	signers := []*compensationtest.Signer{
		compensationtest.NewEd25519Signer(t, "k-eddsa"),
		compensationtest.NewES256Signer(t, "k-es256"),
		compensationtest.NewES384Signer(t, "k-es384"),
		compensationtest.NewPS256Signer(t, "k-ps256"),
	}
	var jwks []gojose.JSONWebKey
	for _, s := range signers {
		jwks = append(jwks, s.PublicJWK())
	}
	keys, err := jose.ParseOrgJWKS(compensationtest.JWKS(jwks...))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range signers {
		for _, typ := range []string{testTyp, "application/" + testTyp, strings.ToUpper(testTyp)} {
			token := s.Sign(t, typ, claims())
			v, err := jose.Verify([]byte(token+"\r\n"), testTyp, keys)
			if err != nil {
				t.Fatalf("%s, typ %s: %v", s.Algorithm(), typ, err)
			}
			payload, _ := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[1])
			jwk := s.PublicJWK()
			sum, err := jwk.Thumbprint(crypto.SHA256)
			if err != nil {
				t.Fatal(err)
			}
			if string(v.Payload) != string(payload) || v.KeyID != s.KeyID() || v.KeyThumbprint != base64.RawURLEncoding.EncodeToString(sum) {
				t.Errorf("%s: verified %+v", s.Algorithm(), v)
			}
		}
	}
	if _, err := jose.Verify([]byte(signers[0].Sign(t, testTyp, claims())), "", keys); err == nil || errors.As(err, new(*jose.Refusal)) {
		t.Errorf("an empty typ: %v, want a plain error", err)
	}
}

// TestParseCompact: the unverified header and claims, and a member that is
// present but not a string.
func TestParseCompact(t *testing.T) {
	t.Parallel()
	s := compensationtest.NewEd25519Signer(t, "peek-1")
	c, err := jose.ParseCompact([]byte(s.Sign(t, testTyp, map[string]any{"iss": "a", "n": 1})))
	if err != nil {
		t.Fatal(err)
	}
	if kid, ok := c.Header("kid"); kid != "peek-1" || !ok {
		t.Errorf("kid = %q, %v", kid, ok)
	}
	if iss, ok := c.Claim("iss"); iss != "a" || !ok {
		t.Errorf("iss = %q, %v", iss, ok)
	}
	if sub, ok := c.Claim("sub"); sub != "" || !ok {
		t.Errorf("missing sub = %q, %v", sub, ok)
	}
	if _, ok := c.Claim("n"); ok {
		t.Error("a number read as a string")
	}
	_, err = jose.ParseCompact([]byte("a.b"))
	requireReason(t, err, jose.Malformed, "a.b")
}
