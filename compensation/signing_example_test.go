package compensation_test

import (
	"crypto/ed25519"
	"encoding/json"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/compensation"
)

// signAck is the remote org's side as README-section.md shows it: a compact
// JWS made with go-jose v4.
func signAck(priv ed25519.PrivateKey, kid, org, ledgerID, taskID, idemKey, receiptID, jti string, now time.Time) (string, error) {
	signer, err := jose.NewSigner(
		jose.SigningKey{Algorithm: jose.EdDSA, Key: priv},
		(&jose.SignerOptions{}).
			WithHeader(jose.HeaderKey("kid"), kid).
			WithType("compensation-ack+jwt"),
	)
	if err != nil {
		return "", err
	}
	claims, err := json.Marshal(map[string]any{
		"iss": org, "aud": ledgerID, "sub": taskID, "jti": jti,
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
		"idempotency_key": idemKey, "receipt_id": receiptID,
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

// TestDocumentedSigningVerifies keeps the README's signing recipe honest:
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
	keys, err := compensation.ParseOrgJWKS(jwks)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	token, err := signAck(priv, "acme-2026-01", "acme", "quittance", "task-8c1f", "qc_3f1d", "rcpt-991", "a4b1c6d0", now)
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
