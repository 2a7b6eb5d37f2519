package jose

import (
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

	gojose "github.com/go-jose/go-jose/v4"
)

// Identity holds the ledger's own signing keys: the active one and any
// retired ones still published. Quittance signs what it asks of remote
// orgs, and its checkpoints, with an Ed25519 key, and publishes the public
// keys as a JWK Set (GET /.well-known/jwks.json) so anyone can check who
// signed. Several keys may be loaded for rotation: the first signs, all
// are published, so what a retiring key signed keeps verifying.
type Identity struct {
	ledgerID string
	active   gojose.JSONWebKey
	public   gojose.JSONWebKeySet
}

// LoadIdentity parses the ledger's signing keys: a PEM "PRIVATE KEY"
// (PKCS #8) Ed25519 key, or a JWK Set of private Ed25519 keys, each with a
// kid, the first of which is active. ledgerID is the "iss" of what it signs.
func LoadIdentity(ledgerID string, raw []byte) (*Identity, error) {
	if ledgerID == "" {
		return nil, errors.New("ledger identity: empty ledger id")
	}
	var keys []gojose.JSONWebKey
	if block, _ := pem.Decode(raw); block != nil {
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("ledger identity: parse PEM key: %w", err)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, errors.New("ledger identity: the PEM key is not Ed25519")
		}
		jwk := gojose.JSONWebKey{Key: priv, Algorithm: string(gojose.EdDSA), Use: "sig"}
		pub := jwk.Public()
		tp, err := pub.Thumbprint(crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("ledger identity: thumbprint: %w", err)
		}
		jwk.KeyID = base64.RawURLEncoding.EncodeToString(tp)
		keys = append(keys, jwk)
	} else {
		var set gojose.JSONWebKeySet
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
		k.Algorithm, k.Use = string(gojose.EdDSA), "sig"
		if i == 0 {
			id.active = k
		}
		id.public.Keys = append(id.public.Keys, gojose.JSONWebKey{
			Key: priv.Public(), KeyID: k.KeyID, Algorithm: string(gojose.EdDSA), Use: "sig",
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
	return json.MarshalIndent(gojose.JSONWebKeySet{Keys: []gojose.JSONWebKey{
		{Key: priv, KeyID: kid, Algorithm: string(gojose.EdDSA), Use: "sig"},
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

// Sign returns a compact JWS of payload (EdDSA, "typ" typ, "kid" of the
// active key) and that kid. What the payload says is the caller's.
func (id *Identity) Sign(typ string, payload []byte) (jws, kid string, err error) {
	signer, err := gojose.NewSigner(gojose.SigningKey{Algorithm: gojose.EdDSA, Key: id.active},
		(&gojose.SignerOptions{}).WithType(gojose.ContentType(typ)))
	if err != nil {
		return "", "", fmt.Errorf("sign %s: %w", typ, err)
	}
	sig, err := signer.Sign(payload)
	if err != nil {
		return "", "", fmt.Errorf("sign %s: %w", typ, err)
	}
	jws, err = sig.CompactSerialize()
	return jws, id.active.KeyID, err
}

// VerifySigned verifies a compact JWS an Identity signed against the JWK
// Set it publishes (ledgerJWKS, as JSON): EdDSA only, the kid looked up in
// that set, "typ" exactly typ. It returns the verified payload and the kid
// that signed it; nothing in the payload is checked or trusted here.
func VerifySigned(token string, ledgerJWKS []byte, typ string) (payload []byte, kid string, err error) {
	var set gojose.JSONWebKeySet
	if err := json.Unmarshal(ledgerJWKS, &set); err != nil {
		return nil, "", fmt.Errorf("ledger JWKS: %w", err)
	}
	jws, err := gojose.ParseSignedCompact(token, []gojose.SignatureAlgorithm{gojose.EdDSA})
	if err != nil {
		return nil, "", fmt.Errorf("parse %s: %w", typ, err)
	}
	h := jws.Signatures[0].Protected
	if got, _ := h.ExtraHeaders[gojose.HeaderType].(string); got != typ {
		return nil, "", fmt.Errorf("typ %q is not %s", got, typ)
	}
	keys := set.Key(h.KeyID)
	if len(keys) != 1 {
		return nil, "", fmt.Errorf("kid %q is not in the ledger's JWKS", h.KeyID)
	}
	payload, err = jws.Verify(keys[0])
	if err != nil {
		return nil, "", fmt.Errorf("%s signature: %w", typ, err)
	}
	return payload, h.KeyID, nil
}
