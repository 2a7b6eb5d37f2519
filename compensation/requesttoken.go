package compensation

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/quittance/quittance/internal/jose"
)

// Signed compensation requests. Quittance signs what it asks of remote
// orgs with its own key (jose.Identity), published at
// GET /.well-known/jwks.json, so a remote org can check who asked
// (delegate/A2A.md, "The ledger's identity and signed compensation
// requests").

// TypeCompensationRequest is the "typ" header of a signed compensation
// request, so the token can never be taken for another kind.
const TypeCompensationRequest = "compensation-request+jwt"

// RequestTokenLifetime is how long a signed compensation request is valid.
const RequestTokenLifetime = 10 * time.Minute

// RequestClaims are the claims of a signed compensation request.
type RequestClaims struct {
	// OrgID is the "aud": the remote org asked to compensate.
	OrgID string
	// TaskID is the "sub": the remote task whose effects are to be compensated.
	TaskID string
	// IdempotencyKey is the delegation's compensation idempotency key.
	IdempotencyKey string
	// MessageID is the A2A messageId of the request the token travels in.
	MessageID string
	// Now is the "iat".
	Now time.Time
}

// signedRequestClaims is the JSON payload of a signed compensation request.
type signedRequestClaims struct {
	Issuer         string `json:"iss"`
	Audience       string `json:"aud"`
	Subject        string `json:"sub"`
	JTI            string `json:"jti"`
	IssuedAt       int64  `json:"iat"`
	Expiry         int64  `json:"exp"`
	IdempotencyKey string `json:"idempotency_key"`
	MessageID      string `json:"message_id,omitempty"`
}

// SignCompensationRequest returns a compact JWS (EdDSA, typ
// compensation-request+jwt, kid of the identity's active key) of a
// compensation request: iss = the ledger id, aud = the org id, sub = the
// task id, idempotency_key, message_id, a fresh jti, iat and exp (iat +
// RequestTokenLifetime).
func SignCompensationRequest(id *jose.Identity, c RequestClaims) (string, error) {
	payload, err := json.Marshal(signedRequestClaims{
		Issuer: id.LedgerID(), Audience: c.OrgID, Subject: c.TaskID, JTI: rand.Text(),
		IssuedAt: c.Now.Unix(), Expiry: c.Now.Add(RequestTokenLifetime).Unix(),
		IdempotencyKey: c.IdempotencyKey, MessageID: c.MessageID,
	})
	if err != nil {
		return "", err
	}
	jws, _, err := id.Sign(TypeCompensationRequest, payload)
	if err != nil {
		return "", fmt.Errorf("sign compensation request: %w", err)
	}
	return jws, nil
}

// VerifyCompensationRequest is what a remote org does with a signed
// compensation request: verify it against the ledger's published JWK Set
// (jose.VerifySigned: EdDSA only, kid looked up in that set, typ
// compensation-request+jwt), and check iss (the ledger id the org knows),
// aud (the org's own id) and the time window. It returns the verified
// claims.
func VerifyCompensationRequest(token string, ledgerJWKS []byte, ledgerID, orgID string, now time.Time) (RequestClaims, error) {
	payload, _, err := jose.VerifySigned(token, ledgerJWKS, TypeCompensationRequest)
	if err != nil {
		return RequestClaims{}, fmt.Errorf("compensation request: %w", err)
	}
	var c signedRequestClaims
	dec := json.NewDecoder(bytes.NewReader(payload))
	if err := dec.Decode(&c); err != nil {
		return RequestClaims{}, fmt.Errorf("compensation request claims: %w", err)
	}
	skew := int64(ClockSkew / time.Second)
	switch {
	case c.Issuer != ledgerID:
		return RequestClaims{}, fmt.Errorf("iss %q is not the ledger %q", c.Issuer, ledgerID)
	case c.Audience != orgID:
		return RequestClaims{}, fmt.Errorf("aud %q is not this org %q", c.Audience, orgID)
	case c.JTI == "" || c.Subject == "" || c.IdempotencyKey == "":
		return RequestClaims{}, errors.New("jti, sub and idempotency_key are required")
	case now.Unix() > c.Expiry+skew || now.Unix() < c.IssuedAt-skew:
		return RequestClaims{}, errors.New("the token is expired or not yet valid")
	}
	return RequestClaims{OrgID: c.Audience, TaskID: c.Subject, IdempotencyKey: c.IdempotencyKey, MessageID: c.MessageID, Now: time.Unix(c.IssuedAt, 0)}, nil
}
