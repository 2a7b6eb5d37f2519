package jose

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	gojose "github.com/go-jose/go-jose/v4"
	josejson "github.com/go-jose/go-jose/v4/json"
)

// MaxJWKSSize is the largest JWK Set, in bytes, that ParseOrgJWKS accepts.
const MaxJWKSSize = 64 << 10

// ErrInvalidJWKS is wrapped by every error ParseOrgJWKS returns.
var ErrInvalidJWKS = errors.New("invalid JWK Set")

// privateMembers are JWK members that only private or symmetric keys carry
// (RFC 7518 §6.2.2, §6.3.2, §6.4.1; "priv" for AKP keys).
var privateMembers = []string{"d", "p", "q", "dp", "dq", "qi", "oth", "k", "priv"}

// ParseOrgJWKS parses and validates the JWK Set an admin registers for a remote org.
// The set must hold at least one key; every key must have a non-empty kid unique
// within the set, "use": "sig", and public key material only. A key may carry an
// "alg", which must be one of AllowedAlgorithms and match the key's type; a key
// without one must still be usable with one of them (an Ed25519, P-256 or P-384
// key, or an RSA key of at least 2048 bits). Every error wraps ErrInvalidJWKS and
// says which key is at fault; none of them repeats key material.
func ParseOrgJWKS(raw []byte) (*gojose.JSONWebKeySet, error) {
	if len(raw) > MaxJWKSSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidJWKS, MaxJWKSSize)
	}
	if _, err := decodeObject(raw); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object: %v", ErrInvalidJWKS, err)
	}

	// Look at the raw members first, so a private key is named as such before
	// anything tries to parse it.
	var members struct {
		Keys []map[string]json.RawMessage `json:"keys"`
	}
	if err := josejson.Unmarshal(raw, &members); err != nil {
		return nil, fmt.Errorf("%w: \"keys\" must be an array of JWK objects", ErrInvalidJWKS)
	}
	if len(members.Keys) == 0 {
		return nil, fmt.Errorf("%w: \"keys\" must hold at least one key", ErrInvalidJWKS)
	}
	for i, m := range members.Keys {
		for _, name := range privateMembers {
			if _, ok := m[name]; ok {
				return nil, fmt.Errorf("%w: key %s contains private key material (member %q); register only the public key",
					ErrInvalidJWKS, keyLabel(i, m), name)
			}
		}
	}

	set := &gojose.JSONWebKeySet{Keys: make([]gojose.JSONWebKey, len(members.Keys))}
	seen := make(map[string]int, len(members.Keys))
	for i, m := range members.Keys {
		label := keyLabel(i, m)
		body, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("%w: key %s: %v", ErrInvalidJWKS, label, err)
		}
		k := &set.Keys[i]
		if err := k.UnmarshalJSON(body); err != nil {
			return nil, fmt.Errorf("%w: key %s is not a valid JWK: %v", ErrInvalidJWKS, label, err)
		}
		if err := checkOrgKey(k); err != nil {
			return nil, fmt.Errorf("%w: key %s %v", ErrInvalidJWKS, label, err)
		}
		if j, dup := seen[k.KeyID]; dup {
			return nil, fmt.Errorf("%w: keys %d and %d share kid %q", ErrInvalidJWKS, j, i, k.KeyID)
		}
		seen[k.KeyID] = i
	}
	return set, nil
}

// checkOrgKey validates one parsed key of an org's JWK Set.
func checkOrgKey(k *gojose.JSONWebKey) error {
	if k.KeyID == "" {
		return errors.New(`has no "kid"`)
	}
	if k.Use != "sig" {
		return fmt.Errorf(`has "use" %q; it must be "sig"`, k.Use)
	}
	if !k.Valid() || !k.IsPublic() {
		return errors.New("is not a public key; register only the public key")
	}
	if k.Algorithm != "" {
		alg := gojose.SignatureAlgorithm(k.Algorithm)
		if !algorithmAllowed(k.Algorithm) {
			return fmt.Errorf(`has "alg" %q; it must be one of EdDSA, ES256, ES384, PS256`, k.Algorithm)
		}
		if !keyFitsAlgorithm(k.Key, alg) {
			return fmt.Errorf(`has a key type that does not match its "alg" %q`, k.Algorithm)
		}
		return nil
	}
	for _, alg := range allowedAlgorithms {
		if keyFitsAlgorithm(k.Key, alg) {
			return nil
		}
	}
	return fmt.Errorf("is a %s, usable with none of EdDSA, ES256, ES384, PS256", describeKey(k.Key))
}

// keyLabel names a key in an error message by its index and, when it has one, its
// kid.
func keyLabel(i int, m map[string]json.RawMessage) string {
	var kid string
	if raw, ok := m["kid"]; ok {
		_ = json.Unmarshal(raw, &kid)
	}
	if kid == "" {
		return fmt.Sprintf("%d", i)
	}
	return fmt.Sprintf("%d (kid %s)", i, quoteShort(kid))
}

// describeKey names a public key's type for an error message.
func describeKey(pub any) string {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		return "Ed25519 key"
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P521() {
			return "P-521 key"
		}
		return "EC key"
	case *rsa.PublicKey:
		return fmt.Sprintf("%d-bit RSA key (at least %d bits are required)", k.N.BitLen(), minRSABits)
	default:
		return "key of an unsupported type"
	}
}

// KeyCache remembers each org's parsed JWK Set, so verifying tokens does
// not parse the same registered set again on every request. An entry serves
// only while the org's registered bytes are the ones it was parsed from: a
// rotated set is parsed, and replaces the entry, on its first use. There is
// one entry per org, so the cache is as large as the registry. The zero
// value is ready to use; a KeyCache must not be copied after first use.
type KeyCache struct {
	mu   sync.Mutex
	orgs map[string]parsedKeys
}

type parsedKeys struct {
	raw  []byte
	keys *gojose.JSONWebKeySet
}

// Keys returns the parsed JWK Set registered for orgID as raw
// (ParseOrgJWKS).
func (c *KeyCache) Keys(orgID string, raw []byte) (*gojose.JSONWebKeySet, error) {
	c.mu.Lock()
	e, ok := c.orgs[orgID]
	c.mu.Unlock()
	if ok && bytes.Equal(e.raw, raw) {
		return e.keys, nil
	}
	keys, err := ParseOrgJWKS(raw)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.orgs == nil {
		c.orgs = make(map[string]parsedKeys)
	}
	c.orgs[orgID] = parsedKeys{raw: bytes.Clone(raw), keys: keys}
	c.mu.Unlock()
	return keys, nil
}
