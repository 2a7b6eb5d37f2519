package compensation

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// The ledger's own identity. Quittance signs what it asks of remote orgs —
// compensation requests — with an Ed25519 key, and publishes the public
// keys as a JWK Set (GET /.well-known/jwks.json) so a remote org can check
// who asked. Several keys may be loaded for rotation: the first signs, all
// are published, so tokens signed by a retiring key keep verifying until
// they expire.

// TypeCompensationRequest is the "typ" header of a signed compensation
// request, so the token can never be taken for another kind.
const TypeCompensationRequest = "compensation-request+jwt"

// RequestTokenLifetime is how long a signed compensation request is valid.
const RequestTokenLifetime = 10 * time.Minute

// Identity holds the ledger's signing keys: the active one and any retired
// ones still published.
type Identity struct {
	ledgerID string
	active   jose.JSONWebKey
	public   jose.JSONWebKeySet
}

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

// LoadIdentity parses the ledger's signing keys: a PEM "PRIVATE KEY"
// (PKCS #8) Ed25519 key, or a JWK Set of private Ed25519 keys, each with a
// kid, the first of which is active. ledgerID is the "iss" of what it signs.
func LoadIdentity(ledgerID string, raw []byte) (*Identity, error) {
	if ledgerID == "" {
		return nil, errors.New("ledger identity: empty ledger id")
	}
	var keys []jose.JSONWebKey
	if block, _ := pem.Decode(raw); block != nil {
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("ledger identity: parse PEM key: %w", err)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, errors.New("ledger identity: the PEM key is not Ed25519")
		}
		jwk := jose.JSONWebKey{Key: priv, Algorithm: string(jose.EdDSA), Use: "sig"}
		pub := jwk.Public()
		tp, err := pub.Thumbprint(crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("ledger identity: thumbprint: %w", err)
		}
		jwk.KeyID = base64.RawURLEncoding.EncodeToString(tp)
		keys = append(keys, jwk)
	} else {
		var set jose.JSONWebKeySet
		if err := json.Unmarshal(raw, &set); err != nil {
			return nil, fmt.Errorf("ledger identity: neither a PEM key nor a JWK Set: %w", err)
		}
		keys = set.Keys
	}
	if len(keys) == 0 {
		return nil, errors.New("ledger identity: no keys")
	}
	id := &Identity{ledgerID: ledgerID}
	seen := map[string]bool{}
	for i, k := range keys {
		priv, ok := k.Key.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("ledger identity: key %d is not a private Ed25519 key", i)
		}
		if k.KeyID == "" || seen[k.KeyID] {
			return nil, fmt.Errorf("ledger identity: key %d needs a unique kid", i)
		}
		seen[k.KeyID] = true
		k.Algorithm, k.Use = string(jose.EdDSA), "sig"
		if i == 0 {
			id.active = k
		}
		id.public.Keys = append(id.public.Keys, jose.JSONWebKey{
			Key: priv.Public(), KeyID: k.KeyID, Algorithm: string(jose.EdDSA), Use: "sig",
		})
	}
	return id, nil
}

// NewIdentityFile returns the content of a new key file: a JWK Set holding
// one fresh private Ed25519 key, with a kid made of prefix and the date.
func NewIdentityFile(prefix string, now time.Time) ([]byte, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	kid := fmt.Sprintf("%s-%s-%s", prefix, now.UTC().Format("20060102"), rand.Text()[:6])
	return json.MarshalIndent(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: priv, KeyID: kid, Algorithm: string(jose.EdDSA), Use: "sig"},
	}}, "", "  ")
}

// LoadOrCreateIdentityFile loads the key file at path; when it does not
// exist and create is set, it first writes a new one (mode 0600).
func LoadOrCreateIdentityFile(ledgerID, path string, create bool, now time.Time) (*Identity, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && create {
		if raw, err = NewIdentityFile(ledgerID, now); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			return nil, fmt.Errorf("write ledger signing key: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("read ledger signing key: %w", err)
	}
	return LoadIdentity(ledgerID, raw)
}

// LedgerID returns the ledger id the identity signs as.
func (id *Identity) LedgerID() string { return id.ledgerID }

// ActiveKeyID returns the kid of the key that signs.
func (id *Identity) ActiveKeyID() string { return id.active.KeyID }

// JWKS returns the public JWK Set of every loaded key, as JSON.
func (id *Identity) JWKS() []byte {
	b, err := json.Marshal(id.public)
	if err != nil {
		panic(fmt.Sprintf("encode ledger JWKS: %v", err))
	}
	return b
}

// SignCompensationRequest returns a compact JWS (EdDSA, typ
// compensation-request+jwt, kid of the active key) of a compensation
// request: iss = the ledger id, aud = the org id, sub = the task id,
// idempotency_key, message_id, a fresh jti, iat and exp (iat +
// RequestTokenLifetime).
func (id *Identity) SignCompensationRequest(c RequestClaims) (string, error) {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: id.active},
		(&jose.SignerOptions{}).WithType(TypeCompensationRequest))
	if err != nil {
		return "", fmt.Errorf("sign compensation request: %w", err)
	}
	payload, err := json.Marshal(signedRequestClaims{
		Issuer: id.ledgerID, Audience: c.OrgID, Subject: c.TaskID, JTI: rand.Text(),
		IssuedAt: c.Now.Unix(), Expiry: c.Now.Add(RequestTokenLifetime).Unix(),
		IdempotencyKey: c.IdempotencyKey, MessageID: c.MessageID,
	})
	if err != nil {
		return "", err
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("sign compensation request: %w", err)
	}
	return jws.CompactSerialize()
}

// VerifyCompensationRequest is what a remote org does with a signed
// compensation request: verify it against the ledger's published JWK Set
// (EdDSA only, kid looked up in that set, typ compensation-request+jwt),
// and check iss (the ledger id the org knows), aud (the org's own id) and
// the time window. It returns the verified claims.
func VerifyCompensationRequest(token string, ledgerJWKS []byte, ledgerID, orgID string, now time.Time) (RequestClaims, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(ledgerJWKS, &set); err != nil {
		return RequestClaims{}, fmt.Errorf("ledger JWKS: %w", err)
	}
	jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return RequestClaims{}, fmt.Errorf("parse compensation request token: %w", err)
	}
	h := jws.Signatures[0].Protected
	if typ, _ := h.ExtraHeaders[jose.HeaderType].(string); typ != TypeCompensationRequest {
		return RequestClaims{}, fmt.Errorf("token typ %q is not %s", typ, TypeCompensationRequest)
	}
	keys := set.Key(h.KeyID)
	if len(keys) != 1 {
		return RequestClaims{}, fmt.Errorf("kid %q is not in the ledger's JWKS", h.KeyID)
	}
	payload, err := jws.Verify(keys[0])
	if err != nil {
		return RequestClaims{}, fmt.Errorf("compensation request signature: %w", err)
	}
	var c signedRequestClaims
	dec := json.NewDecoder(bytes.NewReader(payload))
	if err := dec.Decode(&c); err != nil {
		return RequestClaims{}, fmt.Errorf("compensation request claims: %w", err)
	}
	switch {
	case c.Issuer != ledgerID:
		return RequestClaims{}, fmt.Errorf("iss %q is not the ledger %q", c.Issuer, ledgerID)
	case c.Audience != orgID:
		return RequestClaims{}, fmt.Errorf("aud %q is not this org %q", c.Audience, orgID)
	case c.JTI == "" || c.Subject == "" || c.IdempotencyKey == "":
		return RequestClaims{}, errors.New("jti, sub and idempotency_key are required")
	case now.Unix() > c.Expiry+int64(ClockSkew/time.Second) || now.Unix() < c.IssuedAt-int64(ClockSkew/time.Second):
		return RequestClaims{}, errors.New("the token is expired or not yet valid")
	}
	return RequestClaims{OrgID: c.Audience, TaskID: c.Subject, IdempotencyKey: c.IdempotencyKey, MessageID: c.MessageID, Now: time.Unix(c.IssuedAt, 0)}, nil
}
