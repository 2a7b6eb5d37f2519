package kit

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// The "typ" of a receipt's jws.
const (
	TypeAck         = "compensation-ack+jwt"
	TypeDeclaration = "no-compensation-required+jwt"
)

// TokenLifetime is exp - iat of the tokens the Signer makes; Quittance
// accepts at most 10 minutes.
const TokenLifetime = 5 * time.Minute

// SignerConfig is what a Signer needs.
type SignerConfig struct {
	// OrgID is the org's id as registered with the ledger: the tokens' iss.
	OrgID string
	// LedgerID is the ledger's id (its QUITTANCE_LEDGER_ID): the tokens' aud.
	LedgerID string
	// KeyID is the kid of Key in the JWK Set registered for the org.
	KeyID string
	// Key is the org's private key: ed25519.PrivateKey (EdDSA),
	// *ecdsa.PrivateKey on P-256 (ES256) or P-384 (ES384), or
	// *rsa.PrivateKey of at least 2048 bits (PS256).
	Key crypto.Signer
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Signer signs the receipts of one org with one key.
type Signer struct {
	cfg SignerConfig
	alg jose.SignatureAlgorithm
}

// NewSigner checks cfg and returns its Signer.
func NewSigner(cfg SignerConfig) (*Signer, error) {
	if cfg.OrgID == "" || cfg.LedgerID == "" || cfg.KeyID == "" {
		return nil, errors.New("kit: OrgID, LedgerID and KeyID are required")
	}
	alg, err := algorithm(cfg.Key)
	if err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Signer{cfg: cfg, alg: alg}, nil
}

// algorithm is the JWS algorithm Quittance accepts for key.
func algorithm(key crypto.Signer) (jose.SignatureAlgorithm, error) {
	switch k := key.(type) {
	case ed25519.PrivateKey:
		return jose.EdDSA, nil
	case *ecdsa.PrivateKey:
		switch k.Curve {
		case elliptic.P256():
			return jose.ES256, nil
		case elliptic.P384():
			return jose.ES384, nil
		}
		return "", errors.New("kit: an ECDSA key must be on P-256 or P-384")
	case *rsa.PrivateKey:
		if k.N.BitLen() < 2048 {
			return "", errors.New("kit: an RSA key must have at least 2048 bits")
		}
		return jose.PS256, nil
	}
	return "", fmt.Errorf("kit: unsupported key type %T", key)
}

// JWKS is the public JWK Set of the signer's key, to register with the
// ledger (PUT /admin/v1/orgs/{id} "jwks") or serve at the org's JWKS URL.
func (s *Signer) JWKS() ([]byte, error) {
	return json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{
		Key: s.cfg.Key.Public(), KeyID: s.cfg.KeyID, Algorithm: string(s.alg), Use: "sig",
	}}})
}

// Receipt is the receipt of res for req, with a freshly signed jws for
// Compensated (an ack) and NoEffects (a declaration).
func (s *Signer) Receipt(req Request, res Result) (Receipt, error) {
	r := Receipt{
		Outcome: res.Outcome, ReceiptID: res.ReceiptID, TaskID: req.TaskID, IdempotencyKey: req.IdempotencyKey,
		Reason: res.Reason, ReversedAmountMinor: res.ReversedAmountMinor,
	}
	if r.ReceiptID == "" {
		r.ReceiptID = "rcpt-" + req.IdempotencyKey
	}
	switch res.Outcome {
	case Compensated, NoEffects:
	case Pending, Failed, NotSupported:
		if res.ReversedAmountMinor != nil {
			return Receipt{}, errors.New("kit: ReversedAmountMinor belongs to a compensated result")
		}
		return r, nil
	default:
		return Receipt{}, fmt.Errorf("kit: unknown outcome %q", res.Outcome)
	}
	if n := res.ReversedAmountMinor; n != nil && (*n < 0 || res.Outcome != Compensated) {
		return Receipt{}, errors.New("kit: ReversedAmountMinor is a non-negative amount of a compensated result")
	}
	jws, err := s.sign(r)
	if err != nil {
		return Receipt{}, err
	}
	r.JWS = jws
	return r, nil
}

// sign returns the compact JWS of r: an ack for a compensated receipt, a
// declaration for a no_effects one (compensation/SIGNING.md).
func (s *Signer) sign(r Receipt) (string, error) {
	now := s.cfg.Now()
	claims := map[string]any{
		"iss": s.cfg.OrgID, "aud": s.cfg.LedgerID, "sub": string(r.TaskID), "jti": rand.Text(),
		"iat": now.Unix(), "exp": now.Add(TokenLifetime).Unix(),
	}
	typ := TypeDeclaration
	if r.Outcome == Compensated {
		typ = TypeAck
		claims["idempotency_key"], claims["receipt_id"] = r.IdempotencyKey, r.ReceiptID
		if r.ReversedAmountMinor != nil {
			claims["reversed_amount_minor"] = *r.ReversedAmountMinor
		}
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: s.alg, Key: s.cfg.Key},
		(&jose.SignerOptions{}).WithHeader(jose.HeaderKey("kid"), s.cfg.KeyID).WithType(jose.ContentType(typ)))
	if err != nil {
		return "", fmt.Errorf("kit: %w", err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("kit: sign receipt: %w", err)
	}
	return jws.CompactSerialize()
}
