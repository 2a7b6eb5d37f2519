package compensation_test

import (
	"crypto/ed25519"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/compensation"
	// The leaf under another name here: the example above, which
	// SIGNING.md shows as it is, names go-jose jose.
	leaf "github.com/quittance/quittance/internal/jose"
)

// signAck is the remote org's side as compensation/SIGNING.md shows it in
// Go: a compact JWS made with go-jose v4.
func signAck(priv ed25519.PrivateKey, kid, org, ledgerID, taskID, idemKey, receiptID, jti string) (string, error) {
	signer, err := jose.NewSigner(
		jose.SigningKey{Algorithm: jose.EdDSA, Key: priv},
		(&jose.SignerOptions{}).
			WithHeader(jose.HeaderKey("kid"), kid).
			WithType("compensation-ack+jwt"), // "no-compensation-required+jwt" for a declaration
	)
	if err != nil {
		return "", err
	}
	now := time.Now()
	claims, err := json.Marshal(map[string]any{
		"iss": org, "aud": ledgerID, "sub": taskID, "jti": jti,
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
		"idempotency_key": idemKey, "receipt_id": receiptID, // acks only
	})
	if err != nil {
		return "", err
	}
	jws, err := signer.Sign(claims)
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}

// TestDocumentedSigningVerifies keeps SIGNING.md's Go recipe honest:
// a token made exactly that way verifies against the org's registered key.
func TestDocumentedSigningVerifies(t *testing.T) {
	t.Parallel()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: pub, KeyID: "acme-2026-01", Use: "sig", Algorithm: "EdDSA"}}})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := leaf.ParseOrgJWKS(jwks)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	token, err := signAck(priv, "acme-2026-01", "acme", "quittance", "task-8c1f", "qc_3f1d", "rcpt-991", "a4b1c6d0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := compensation.Verify(compensation.VerifyInput{
		Token: []byte(token), Kind: compensation.KindAck, OrgID: "acme", Keys: keys, LedgerID: "quittance", Now: now,
	})
	if err != nil {
		t.Fatalf("the documented token does not verify: %v", err)
	}
	if c.IdempotencyKey != "qc_3f1d" || c.ReceiptID != "rcpt-991" || c.Subject != "task-8c1f" {
		t.Fatalf("claims %+v", c)
	}
}

// TestSigningDocShowsTheTestedCode fails when SIGNING.md's signAck is no
// longer the one TestDocumentedSigningVerifies checks.
func TestSigningDocShowsTheTestedCode(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("signing_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(src), "func signAck(")
	end := strings.Index(string(src)[start:], "\n}\n")
	if start < 0 || end < 0 {
		t.Fatal("signAck not found in signing_example_test.go")
	}
	fn := string(src)[start : start+end+3]
	doc, err := os.ReadFile("SIGNING.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), fn) {
		t.Errorf("SIGNING.md does not show signAck as signing_example_test.go has it:\n%s", fn)
	}
}
