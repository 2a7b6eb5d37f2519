package compensation_test

import (
	"crypto"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	gojose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/internal/jose"
)

const (
	testOrg    = "org-b"
	testLedger = "ledger-a"
	testTask   = "task-123"
	testIdem   = "idem-7f3a"
)

var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	ack  = string(compensation.KindAck)
	decl = string(compensation.KindDeclaration)
)

// testBundle holds one org's signers and registered keys.
type testBundle struct {
	ed    *compensationtest.Signer // registered, EdDSA
	es256 *compensationtest.Signer // registered, ES256
	es384 *compensationtest.Signer // registered, ES384
	ps256 *compensationtest.Signer // registered, PS256
	other *compensationtest.Signer // another org's key, kid "other-1"
	clash *compensationtest.Signer // another org's key reusing the kid "ed-1"
	keys  *gojose.JSONWebKeySet
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{
		ed:    compensationtest.NewEd25519Signer(t, "ed-1"),
		es256: compensationtest.NewES256Signer(t, "es256-1"),
		es384: compensationtest.NewES384Signer(t, "es384-1"),
		ps256: compensationtest.NewPS256Signer(t, "ps256-1"),
		other: compensationtest.NewEd25519Signer(t, "other-1"),
		clash: compensationtest.NewEd25519Signer(t, "ed-1"),
	}
	b.keys = mustParseJWKS(t, compensationtest.JWKS(
		b.ed.PublicJWK(), b.es256.PublicJWK(), b.es384.PublicJWK(), b.ps256.PublicJWK()))
	return b
}

func mustParseJWKS(t *testing.T, raw []byte) *gojose.JSONWebKeySet {
	t.Helper()
	set, err := jose.ParseOrgJWKS(raw)
	if err != nil {
		t.Fatalf("ParseOrgJWKS: %v", err)
	}
	return set
}

func ackClaims() map[string]any {
	return compensationtest.AckClaims(testOrg, testLedger, testTask, testIdem, testNow)
}

func declClaims() map[string]any {
	return compensationtest.DeclarationClaims(testOrg, testLedger, testTask, testNow)
}

// with returns a copy of claims with the given members set; a nil value deletes the
// member.
func with(claims map[string]any, kv ...any) map[string]any {
	out := make(map[string]any, len(claims))
	for k, v := range claims {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		name := kv[i].(string)
		if kv[i+1] == nil {
			delete(out, name)
		} else {
			out[name] = kv[i+1]
		}
	}
	return out
}

func verifyInput(token string, kind compensation.TokenKind, keys *gojose.JSONWebKeySet) compensation.VerifyInput {
	return compensation.VerifyInput{
		Token:    []byte(token),
		Kind:     kind,
		OrgID:    testOrg,
		Keys:     keys,
		LedgerID: testLedger,
		Now:      testNow,
	}
}

// requireRefusal asserts err is a *RefusalError with code whose detail does not
// echo the token.
func requireRefusal(t *testing.T, err error, code, token string) {
	t.Helper()
	var ref *compensation.RefusalError
	if !errors.As(err, &ref) {
		t.Fatalf("error = %v (%T), want *RefusalError with code %s", err, err, code)
	}
	if ref.Code != code {
		t.Fatalf("code = %s (detail %q), want %s", ref.Code, ref.Detail, code)
	}
	if ref.Detail == "" {
		t.Errorf("refusal %s has no detail", code)
	}
	for _, part := range strings.Split(token, ".") {
		if len(part) >= 16 && strings.Contains(ref.Detail, part) {
			t.Errorf("detail %q echoes part of the token", ref.Detail)
		}
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// flip returns token with the byte at i replaced by a different base64url
// character.
func flip(token string, i int) string {
	b := []byte(token)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

func TestVerifyRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	edPub := []byte(b.ed.PublicJWK().Key.(ed25519.PublicKey))
	edJWK, err := json.Marshal(b.ed.PublicJWK())
	if err != nil {
		t.Fatal(err)
	}
	var edJWKMap map[string]any
	if err := json.Unmarshal(edJWK, &edJWKMap); err != nil {
		t.Fatal(err)
	}

	// JWK Sets that ParseOrgJWKS would refuse, built directly to prove that
	// Verify does not rely on registration alone.
	withUse := func(s *compensationtest.Signer, use string) *gojose.JSONWebKeySet {
		k := s.PublicJWK()
		k.Use = use
		return &gojose.JSONWebKeySet{Keys: []gojose.JSONWebKey{k}}
	}
	withAlg := func(s *compensationtest.Signer, alg string) *gojose.JSONWebKeySet {
		k := s.PublicJWK()
		k.Algorithm = alg
		return &gojose.JSONWebKeySet{Keys: []gojose.JSONWebKey{k}}
	}
	private := &gojose.JSONWebKeySet{Keys: []gojose.JSONWebKey{b.ed.PrivateJWK()}}
	duplicated := &gojose.JSONWebKeySet{Keys: []gojose.JSONWebKey{b.ed.PublicJWK(), b.clash.PublicJWK()}}

	validAck := b.ed.Sign(t, ack, ackClaims())
	validParts := strings.Split(validAck, ".")

	tests := []struct {
		name  string
		kind  compensation.TokenKind
		token string
		keys  *gojose.JSONWebKeySet // nil: the org's registered keys
		code  string
	}{
		// Size and structure.
		{name: "oversize", token: b.ed.Sign(t, ack, with(ackClaims(), "pad", strings.Repeat("x", jose.MaxTokenSize))), code: compensation.CodeTokenTooLarge},
		{name: "oversize garbage", token: strings.Repeat("A", jose.MaxTokenSize+1), code: compensation.CodeTokenTooLarge},
		{name: "empty", token: "", code: compensation.CodeTokenMalformed},
		{name: "garbage", token: "this is not a token", code: compensation.CodeTokenMalformed},
		{name: "garbage base64url", token: "Zm9v", code: compensation.CodeTokenMalformed},
		{name: "two dots", token: "a.b", code: compensation.CodeTokenMalformed},
		{name: "one dot only", token: validParts[0] + "." + validParts[1], code: compensation.CodeTokenMalformed},
		{name: "four parts", token: validAck + ".AAAA", code: compensation.CodeTokenMalformed},
		{name: "JSON serialization", token: `{"payload":"` + validParts[1] + `","protected":"` + validParts[0] + `","signature":"` + validParts[2] + `"}`, code: compensation.CodeTokenMalformed},
		{name: "padded base64", token: validParts[0] + "=." + validParts[1] + "." + validParts[2], code: compensation.CodeTokenMalformed},
		{name: "standard base64 alphabet", token: strings.ReplaceAll(validAck, "-", "+") + "+", code: compensation.CodeTokenMalformed},
		{name: "embedded newline", token: validParts[0] + "\n." + validParts[1] + "." + validParts[2], code: compensation.CodeTokenMalformed},
		{name: "header not JSON", token: b64("nope") + "." + validParts[1] + "." + validParts[2], code: compensation.CodeTokenMalformed},
		{name: "header JSON array", token: b64(`["alg"]`) + "." + validParts[1] + "." + validParts[2], code: compensation.CodeTokenMalformed},
		{name: "payload not an object", token: b.ed.Sign(t, ack, nil), code: compensation.CodeTokenMalformed},
		{name: "duplicate header member", token: b64(`{"alg":"none","alg":"EdDSA","kid":"ed-1","typ":"compensation-ack+jwt"}`) + "." + validParts[1] + "." + validParts[2], code: compensation.CodeTokenMalformed},
		{name: "duplicate claim", token: b.ed.SignRaw([]byte(`{"alg":"EdDSA","kid":"ed-1","typ":"compensation-ack+jwt"}`), []byte(`{"iss":"org-c","iss":"org-b"}`)), code: compensation.CodeTokenMalformed},
		{name: "claim of wrong type", token: b.ed.Sign(t, ack, with(ackClaims(), "exp", "tomorrow")), code: compensation.CodeTokenMalformed},
		{name: "exp before iat", token: b.ed.Sign(t, ack, with(ackClaims(), "exp", testNow.Add(-time.Second).Unix())), code: compensation.CodeTokenMalformed},

		// Algorithm allow-list.
		{name: "alg none", token: compensationtest.NoneToken(ackClaims(), compensationtest.WithHeader("typ", ack), compensationtest.WithHeader("kid", "ed-1")), code: compensation.CodeTokenAlgorithmRefused},
		{name: "alg none with a signature", token: b.ed.Sign(t, ack, ackClaims(), compensationtest.WithHeader("alg", "none")), code: compensation.CodeTokenAlgorithmRefused},
		{name: "HS256 keyed with the org public key", token: compensationtest.HS256Token(edPub, ackClaims(), compensationtest.WithHeader("typ", ack), compensationtest.WithHeader("kid", "ed-1")), code: compensation.CodeTokenAlgorithmRefused},
		{name: "RS256 by a registered RSA key", token: b.ps256.Sign(t, ack, ackClaims(), compensationtest.WithHeader("alg", "RS256")), code: compensation.CodeTokenAlgorithmRefused},
		{name: "ES512", token: b.es384.Sign(t, ack, ackClaims(), compensationtest.WithHeader("alg", "ES512")), code: compensation.CodeTokenAlgorithmRefused},
		{name: "alg lower case", token: b.ed.Sign(t, ack, ackClaims(), compensationtest.WithHeader("alg", "eddsa")), code: compensation.CodeTokenAlgorithmRefused},
		{name: "alg missing", token: b.ed.Sign(t, ack, ackClaims(), compensationtest.WithoutHeader("alg")), code: compensation.CodeTokenAlgorithmRefused},
		{name: "alg not a string", token: b.ed.Sign(t, ack, ackClaims(), compensationtest.WithHeader("alg", []string{"EdDSA"})), code: compensation.CodeTokenAlgorithmRefused},

		// Headers that bring or point at keys, or change processing.
		{name: "jwk header", token: b.other.Sign(t, ack, ackClaims(), compensationtest.WithHeader("jwk", edJWKMap)), code: compensation.CodeTokenHeaderRefused},
		{name: "jku header", token: b.ed.Sign(t, ack, ackClaims(), compensationtest.WithHeader("jku", "https://evil.example/jwks.json")), code: compensation.CodeTokenHeaderRefused},
		{name: "x5u header", token: b.ed.Sign(t, ack, ackClaims(), compensationtest.WithHeader("x5u", "https://evil.example/cert.pem")), code: compensation.CodeTokenHeaderRefused},
		{name: "x5c header", token: b.ed.Sign(t, ack, ackClaims(), compensationtest.WithHeader("x5c", []string{"MIIB"})), code: compensation.CodeTokenHeaderRefused},
		{name: "crit header", token: b.ed.Sign(t, ack, ackClaims(), compensationtest.WithHeader("crit", []string{"exp"}), compensationtest.WithHeader("exp", 1)), code: compensation.CodeTokenHeaderRefused},
		{name: "b64 header", token: b.ed.Sign(t, ack, ackClaims(), compensationtest.WithHeader("b64", false)), code: compensation.CodeTokenHeaderRefused},
		{name: "header rules before keys", token: b.ed.Sign(t, ack, ackClaims(), compensationtest.WithHeader("jku", "https://evil.example/"), compensationtest.WithHeader("kid", "nope")), code: compensation.CodeTokenHeaderRefused},

		// Explicit typing.
		{name: "ack presented as declaration", kind: compensation.KindDeclaration, token: validAck, code: compensation.CodeTokenTypeMismatch},
		{name: "declaration presented as ack", kind: compensation.KindAck, token: b.ed.Sign(t, decl, ackClaims()), code: compensation.CodeTokenTypeMismatch},
		{name: "missing typ", token: b.ed.Sign(t, "", ackClaims()), code: compensation.CodeTokenTypeMismatch},
		{name: "typ JWT", token: b.ed.Sign(t, "JWT", ackClaims()), code: compensation.CodeTokenTypeMismatch},
		{name: "typ not a string", token: b.ed.Sign(t, ack, ackClaims(), compensationtest.WithHeader("typ", 1)), code: compensation.CodeTokenTypeMismatch},

		// Key resolution among the org's keys only.
		{name: "key of another org", token: b.other.Sign(t, ack, ackClaims()), code: compensation.CodeTokenKeyUnknown},
		{name: "unknown kid", token: b.ed.Sign(t, ack, ackClaims(), compensationtest.WithHeader("kid", "ed-2")), code: compensation.CodeTokenKeyUnknown},
		{name: "missing kid", token: b.ed.Sign(t, ack, ackClaims(), compensationtest.WithoutHeader("kid")), code: compensation.CodeTokenKeyUnknown},
		{name: "empty kid", token: b.ed.Sign(t, ack, ackClaims(), compensationtest.WithHeader("kid", "")), code: compensation.CodeTokenKeyUnknown},
		{name: "org with no keys", token: validAck, keys: &gojose.JSONWebKeySet{}, code: compensation.CodeTokenKeyUnknown},
		{name: "key of another org reusing a registered kid", token: b.clash.Sign(t, ack, ackClaims()), code: compensation.CodeTokenSignatureInvalid},

		// Key usability.
		{name: "key with use enc", token: validAck, keys: withUse(b.ed, "enc"), code: compensation.CodeTokenKeyUnusable},
		{name: "key without use", token: validAck, keys: withUse(b.ed, ""), code: compensation.CodeTokenKeyUnusable},
		{name: "private key in JWKS", token: validAck, keys: private, code: compensation.CodeTokenKeyUnusable},
		{name: "alg mismatch between key and header", token: b.es256.Sign(t, ack, ackClaims()), keys: withAlg(b.es256, "ES384"), code: compensation.CodeTokenKeyUnusable},
		{name: "key type does not match alg", token: b.ed.Sign(t, ack, ackClaims(), compensationtest.WithHeader("alg", "ES256")), keys: withAlg(b.ed, ""), code: compensation.CodeTokenKeyUnusable},
		{name: "ambiguous kid", token: validAck, keys: duplicated, code: compensation.CodeTokenKeyUnusable},

		// Signature.
		{name: "tampered payload", token: validParts[0] + "." + b64(`{"iss":"org-b","aud":"ledger-a","sub":"task-999","jti":"x","iat":1772366400,"exp":1772366700,"idempotency_key":"k","receipt_id":"r"}`) + "." + validParts[2], code: compensation.CodeTokenSignatureInvalid},
		{name: "tampered signature", token: flip(validAck, len(validAck)-10), code: compensation.CodeTokenSignatureInvalid},
		{name: "empty signature", token: validParts[0] + "." + validParts[1] + ".", code: compensation.CodeTokenSignatureInvalid},
		{name: "signature of another token", token: validParts[0] + "." + validParts[1] + "." + strings.Split(b.ed.Sign(t, ack, ackClaims()), ".")[2], code: compensation.CodeTokenSignatureInvalid},

		// Claims.
		{name: "wrong iss", token: b.ed.Sign(t, ack, with(ackClaims(), "iss", "org-c")), code: compensation.CodeTokenIssuerMismatch},
		{name: "missing iss", token: b.ed.Sign(t, ack, with(ackClaims(), "iss", nil)), code: compensation.CodeTokenIssuerMismatch},
		{name: "wrong aud", token: b.ed.Sign(t, ack, with(ackClaims(), "aud", "ledger-z")), code: compensation.CodeTokenAudienceMismatch},
		{name: "aud array without ledger", token: b.ed.Sign(t, ack, with(ackClaims(), "aud", []string{"ledger-y", "ledger-z"})), code: compensation.CodeTokenAudienceMismatch},
		{name: "missing aud", token: b.ed.Sign(t, ack, with(ackClaims(), "aud", nil)), code: compensation.CodeTokenAudienceMismatch},
		{name: "missing exp", token: b.ed.Sign(t, ack, with(ackClaims(), "exp", nil)), code: compensation.CodeTokenClaimsMissing},
		{name: "missing iat", token: b.ed.Sign(t, ack, with(ackClaims(), "iat", nil)), code: compensation.CodeTokenClaimsMissing},
		{name: "missing jti", token: b.ed.Sign(t, ack, with(ackClaims(), "jti", nil)), code: compensation.CodeTokenClaimsMissing},
		{name: "empty jti", token: b.ed.Sign(t, ack, with(ackClaims(), "jti", "")), code: compensation.CodeTokenClaimsMissing},
		{name: "missing sub", token: b.ed.Sign(t, ack, with(ackClaims(), "sub", nil)), code: compensation.CodeTokenClaimsMissing},
		{name: "ack missing idempotency_key", token: b.ed.Sign(t, ack, with(ackClaims(), "idempotency_key", nil)), code: compensation.CodeTokenClaimsMissing},
		{name: "ack missing receipt_id", token: b.ed.Sign(t, ack, with(ackClaims(), "receipt_id", nil)), code: compensation.CodeTokenClaimsMissing},
		{name: "claim names are case-sensitive", token: b.ed.Sign(t, ack, with(ackClaims(), "exp", nil, "EXP", testNow.Add(time.Minute).Unix())), code: compensation.CodeTokenClaimsMissing},

		// Time.
		{name: "expired", token: b.ed.Sign(t, ack, with(ackClaims(), "iat", testNow.Add(-5*time.Minute).Unix(), "exp", testNow.Add(-compensation.ClockSkew-time.Second).Unix())), code: compensation.CodeTokenExpired},
		{name: "not yet valid iat", token: b.ed.Sign(t, ack, with(ackClaims(), "iat", testNow.Add(compensation.ClockSkew+time.Second).Unix(), "exp", testNow.Add(5*time.Minute).Unix())), code: compensation.CodeTokenNotYetValid},
		{name: "not yet valid nbf", token: b.ed.Sign(t, ack, with(ackClaims(), "nbf", testNow.Add(2*time.Minute).Unix())), code: compensation.CodeTokenNotYetValid},
		{name: "lifetime over 10 minutes", token: b.ed.Sign(t, ack, with(ackClaims(), "exp", testNow.Add(compensation.MaxTokenLifetime+time.Second).Unix())), code: compensation.CodeTokenLifetimeTooLong},
		{name: "lifetime of a year", token: b.ed.Sign(t, ack, with(ackClaims(), "iat", testNow.Add(-time.Minute).Unix(), "exp", testNow.AddDate(1, 0, 0).Unix())), code: compensation.CodeTokenLifetimeTooLong},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kind := tc.kind
			if kind == "" {
				kind = compensation.KindAck
			}
			keys := tc.keys
			if keys == nil {
				keys = b.keys
			}
			claims, err := compensation.Verify(verifyInput(tc.token, kind, keys))
			if err == nil {
				t.Fatalf("Verify accepted the token: %+v", claims)
			}
			requireRefusal(t, err, tc.code, tc.token)
			if claims != (compensation.Claims{}) {
				t.Errorf("refused token returned claims %+v", claims)
			}
		})
	}
}

func TestVerifyAccepts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	signers := map[string]*compensationtest.Signer{
		"EdDSA": b.ed, "ES256": b.es256, "ES384": b.es384, "PS256": b.ps256,
	}
	for alg, s := range signers {
		t.Run(alg+" ack", func(t *testing.T) {
			t.Parallel()
			c := ackClaims()
			token := s.Sign(t, ack, c)
			got, err := compensation.Verify(verifyInput(token, compensation.KindAck, b.keys))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			jwk := s.PublicJWK()
			thumb, err := jwk.Thumbprint(crypto.SHA256)
			if err != nil {
				t.Fatal(err)
			}
			want := compensation.Claims{
				Kind:           compensation.KindAck,
				KeyID:          jwk.KeyID,
				KeyThumbprint:  base64.RawURLEncoding.EncodeToString(thumb),
				Issuer:         testOrg,
				Audience:       testLedger,
				Subject:        testTask,
				JTI:            c["jti"].(string),
				IssuedAt:       time.Unix(testNow.Unix(), 0),
				Expiry:         time.Unix(testNow.Add(5*time.Minute).Unix(), 0),
				IdempotencyKey: testIdem,
				ReceiptID:      c["receipt_id"].(string),
			}
			if got != want {
				t.Fatalf("claims = %+v\nwant %+v", got, want)
			}
		})
		t.Run(alg+" declaration", func(t *testing.T) {
			t.Parallel()
			c := declClaims()
			token := s.Sign(t, decl, c)
			got, err := compensation.Verify(verifyInput(token, compensation.KindDeclaration, b.keys))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if got.Kind != compensation.KindDeclaration || got.Subject != testTask || got.JTI != c["jti"] {
				t.Fatalf("claims = %+v", got)
			}
			if got.IdempotencyKey != "" || got.ReceiptID != "" {
				t.Fatalf("declaration has ack fields: %+v", got)
			}
		})
	}

	variants := []struct {
		name  string
		token string
	}{
		{name: "aud array containing the ledger", token: b.ed.Sign(t, ack, with(ackClaims(), "aud", []string{"ledger-z", testLedger}))},
		{name: "typ with application prefix", token: b.ed.Sign(t, "application/compensation-ack+jwt", ackClaims())},
		{name: "typ in other case", token: b.ed.Sign(t, "Compensation-Ack+JWT", ackClaims())},
		{name: "iat within clock skew", token: b.ed.Sign(t, ack, with(ackClaims(), "iat", testNow.Add(compensation.ClockSkew).Unix(), "exp", testNow.Add(5*time.Minute).Unix()))},
		{name: "exp within clock skew", token: b.ed.Sign(t, ack, with(ackClaims(), "iat", testNow.Add(-5*time.Minute).Unix(), "exp", testNow.Add(-compensation.ClockSkew).Unix()))},
		{name: "lifetime exactly 10 minutes", token: b.ed.Sign(t, ack, with(ackClaims(), "exp", testNow.Add(compensation.MaxTokenLifetime).Unix()))},
		{name: "trailing newline", token: b.ed.Sign(t, ack, ackClaims()) + "\r\n"},
		{name: "unknown extra header and claim", token: b.ed.Sign(t, ack, with(ackClaims(), "note", "ok"), compensationtest.WithHeader("x-trace", "abc"))},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			if _, err := compensation.Verify(verifyInput(v.token, compensation.KindAck, b.keys)); err != nil {
				t.Fatalf("Verify: %v", err)
			}
		})
	}
}

func TestVerifyKeyFromParsedJWKS(t *testing.T) {
	t.Parallel()
	// The usual flow: the org's JWKS as an admin registered it, stored as JSON,
	// parsed again, then used to verify.
	s := compensationtest.NewES256Signer(t, "2026-03")
	keys := mustParseJWKS(t, s.JWKS())
	token := s.Sign(t, decl, declClaims())
	if _, err := compensation.Verify(verifyInput(token, compensation.KindDeclaration, keys)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	// Presented on a delegation owned by another org (with these keys, as if
	// both orgs had registered the same key), the token still fails on iss.
	in := verifyInput(token, compensation.KindDeclaration, keys)
	in.OrgID = "org-c"
	_, err := compensation.Verify(in)
	requireRefusal(t, err, compensation.CodeTokenIssuerMismatch, token)
}

func TestVerifyInvalidInput(t *testing.T) {
	t.Parallel()
	s := compensationtest.NewEd25519Signer(t, "k")
	keys := mustParseJWKS(t, s.JWKS())
	token := s.Sign(t, ack, ackClaims())
	tests := map[string]func(*compensation.VerifyInput){
		"unknown kind": func(in *compensation.VerifyInput) { in.Kind = "JWT" },
		"empty org":    func(in *compensation.VerifyInput) { in.OrgID = "" },
		"empty ledger": func(in *compensation.VerifyInput) { in.LedgerID = "" },
		"zero now":     func(in *compensation.VerifyInput) { in.Now = time.Time{} },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := verifyInput(token, compensation.KindAck, keys)
			mutate(&in)
			_, err := compensation.Verify(in)
			var ref *compensation.RefusalError
			if err == nil || errors.As(err, &ref) {
				t.Fatalf("error = %v, want a plain error for a caller bug", err)
			}
		})
	}
}

func TestPeekToken(t *testing.T) {
	t.Parallel()
	s := compensationtest.NewEd25519Signer(t, "peek-1")

	t.Run("reads iss sub kid jti without verifying", func(t *testing.T) {
		t.Parallel()
		// Signed by a key nobody registered: Peek does not care.
		claims := with(ackClaims(), "jti", "peek-jti-1")
		token := s.Sign(t, ack, claims)
		got, err := compensation.PeekToken([]byte(token))
		if err != nil {
			t.Fatalf("PeekToken: %v", err)
		}
		want := compensation.Peek{Issuer: testOrg, Subject: testTask, KeyID: "peek-1", TokenID: "peek-jti-1"}
		if got != want {
			t.Fatalf("Peek = %+v, want %+v", got, want)
		}
	})
	t.Run("a jti missing or no string is left to Verify", func(t *testing.T) {
		t.Parallel()
		for _, jti := range []any{nil, 42} {
			got, err := compensation.PeekToken([]byte(s.Sign(t, ack, with(ackClaims(), "jti", jti))))
			if err != nil || got.TokenID != "" || got.Issuer != testOrg {
				t.Fatalf("jti %v: PeekToken = %+v, %v", jti, got, err)
			}
		}
	})
	t.Run("missing kid is left to Verify", func(t *testing.T) {
		t.Parallel()
		token := s.Sign(t, ack, ackClaims(), compensationtest.WithoutHeader("kid"))
		got, err := compensation.PeekToken([]byte(token))
		if err != nil || got.KeyID != "" || got.Issuer != testOrg {
			t.Fatalf("PeekToken = %+v, %v", got, err)
		}
	})

	valid := s.Sign(t, ack, ackClaims())
	refusals := []struct {
		name, token, code string
	}{
		{"oversize", strings.Repeat("A", jose.MaxTokenSize+1), compensation.CodeTokenTooLarge},
		{"garbage", "garbage", compensation.CodeTokenMalformed},
		{"two dots", "a.b", compensation.CodeTokenMalformed},
		{"JSON serialization", `{"protected":"x","payload":"y","signature":"z"}`, compensation.CodeTokenMalformed},
		{"payload not JSON", strings.Split(valid, ".")[0] + "." + b64("hello") + ".AAAA", compensation.CodeTokenMalformed},
		{"iss not a string", s.Sign(t, ack, with(ackClaims(), "iss", 7)), compensation.CodeTokenMalformed},
		{"missing iss", s.Sign(t, ack, with(ackClaims(), "iss", nil)), compensation.CodeTokenClaimsMissing},
		{"missing sub", s.Sign(t, ack, with(ackClaims(), "sub", nil)), compensation.CodeTokenClaimsMissing},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := compensation.PeekToken([]byte(tc.token))
			requireRefusal(t, err, tc.code, tc.token)
		})
	}
}

func TestRefusalError(t *testing.T) {
	t.Parallel()
	var err error = compensation.Refuse(compensation.CodeTokenReplayed, "jti already used")
	var ref *compensation.RefusalError
	if !errors.As(err, &ref) || ref.Code != "token_replayed" || ref.Detail != "jti already used" {
		t.Fatalf("Refuse = %#v", err)
	}
	if got, want := err.Error(), "token refused: token_replayed: jti already used"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	codes := map[string]string{
		compensation.CodeTokenIdempotencyKeyMismatch: "token_idempotency_key_mismatch",
		compensation.CodeTokenReplayed:               "token_replayed",
		compensation.CodeTokenOrgRevoked:             "token_org_revoked",
		compensation.CodeTokenDelegationUnknown:      "token_delegation_unknown",
	}
	for got, want := range codes {
		if got != want {
			t.Errorf("code %q, want %q", got, want)
		}
	}
}

// fuzzSeed derives the fuzz org's Ed25519 key; the seed corpus under
// testdata/fuzz/FuzzVerify holds tokens signed with it at testNow.
var fuzzSeed = []byte("0123456789abcdef0123456789abcdef")

// FuzzVerify feeds Verify three kinds of input: arbitrary bytes, an arbitrary
// header and payload genuinely signed with the org's registered key, and that signed
// token with one character changed. Verify must never panic, must refuse with a
// *RefusalError, must accept only tokens whose signature verifies independently
// under the org's key, must never accept a token as both kinds, must agree with
// PeekToken on what it accepts, and must never accept a changed token.
func FuzzVerify(f *testing.F) {
	s := compensationtest.NewEd25519SignerFromSeed(f, "fuzz-1", fuzzSeed)
	keys, err := jose.ParseOrgJWKS(s.JWKS())
	if err != nil {
		f.Fatal(err)
	}
	pub := s.PublicJWK().Key.(ed25519.PublicKey)

	ackHeader := []byte(`{"alg":"EdDSA","kid":"fuzz-1","typ":"compensation-ack+jwt"}`)
	ackPayload, err := json.Marshal(ackClaims())
	if err != nil {
		f.Fatal(err)
	}
	valid := s.SignRaw(ackHeader, ackPayload)
	// The acceptance branch below must be reachable.
	if _, err := compensation.Verify(verifyInput(valid, compensation.KindAck, keys)); err != nil {
		f.Fatalf("a valid token does not verify: %v", err)
	}
	f.Add([]byte(valid), ackHeader, ackPayload, uint16(len(valid)-3))
	f.Add([]byte("a.b.c"), []byte(`{"alg":"EdDSA","kid":"fuzz-1","typ":"no-compensation-required+jwt"}`), []byte(`{}`), uint16(0))

	kinds := []compensation.TokenKind{compensation.KindAck, compensation.KindDeclaration}

	// check verifies token as both kinds and returns how many accepted it.
	check := func(t *testing.T, token []byte) int {
		accepted := 0
		for _, kind := range kinds {
			c, err := compensation.Verify(compensation.VerifyInput{
				Token: token, Kind: kind, OrgID: testOrg, Keys: keys, LedgerID: testLedger, Now: testNow,
			})
			if err != nil {
				var ref *compensation.RefusalError
				if !errors.As(err, &ref) || ref.Code == "" {
					t.Fatalf("Verify error %v is not a refusal", err)
				}
				continue
			}
			accepted++
			requireSignedByOrg(t, token, pub)
			requireClaimInvariants(t, c, kind)
			p, err := compensation.PeekToken(token)
			if err != nil || p.Issuer != c.Issuer || p.Subject != c.Subject || p.KeyID != "fuzz-1" {
				t.Fatalf("PeekToken = %+v, %v; disagrees with verified claims %+v", p, err, c)
			}
		}
		if accepted > 1 {
			t.Fatalf("token accepted as both an ack and a declaration")
		}
		return accepted
	}

	f.Fuzz(func(t *testing.T, raw, header, payload []byte, pos uint16) {
		_, _ = compensation.PeekToken(raw)
		check(t, raw)

		signed := s.SignRaw(header, payload)
		_, _ = compensation.PeekToken([]byte(signed))
		check(t, []byte(signed))

		changed := flip(signed, int(pos)%len(signed))
		if n := check(t, []byte(changed)); n != 0 {
			t.Fatalf("a token changed at %d still verifies", int(pos)%len(signed))
		}
	})
}

// requireSignedByOrg checks, without the code under test, that token carries an
// EdDSA signature by pub over its signing input.
func requireSignedByOrg(t *testing.T, token []byte, pub ed25519.PublicKey) {
	t.Helper()
	parts := strings.Split(strings.TrimSpace(string(token)), ".")
	if len(parts) != 3 {
		t.Fatalf("accepted token has %d parts", len(parts))
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig) {
		t.Fatalf("accepted token is not signed by the org's key")
	}
	header, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		t.Fatalf("accepted token has an undecodable header")
	}
	var h map[string]any
	if err := json.Unmarshal(header, &h); err != nil || h["alg"] != "EdDSA" {
		t.Fatalf("accepted token header %s is not an EdDSA header", header)
	}
}

// requireClaimInvariants checks what every accepted token must satisfy.
func requireClaimInvariants(t *testing.T, c compensation.Claims, kind compensation.TokenKind) {
	t.Helper()
	switch {
	case c.Kind != kind:
		t.Fatalf("accepted %s as %s", c.Kind, kind)
	case c.Issuer != testOrg:
		t.Fatalf("accepted iss %q", c.Issuer)
	case c.Audience != testLedger:
		t.Fatalf("accepted aud %q", c.Audience)
	case c.Subject == "" || c.JTI == "":
		t.Fatalf("accepted empty sub or jti: %+v", c)
	case kind == compensation.KindAck && (c.IdempotencyKey == "" || c.ReceiptID == ""):
		t.Fatalf("accepted an ack without idempotency_key or receipt_id: %+v", c)
	case c.Expiry.Sub(c.IssuedAt) > compensation.MaxTokenLifetime || c.Expiry.Before(c.IssuedAt):
		t.Fatalf("accepted lifetime %s", c.Expiry.Sub(c.IssuedAt))
	case c.IssuedAt.After(testNow.Add(compensation.ClockSkew)):
		t.Fatalf("accepted iat %s in the future", c.IssuedAt)
	case testNow.After(c.Expiry.Add(compensation.ClockSkew)):
		t.Fatalf("accepted exp %s in the past", c.Expiry)
	}
}
