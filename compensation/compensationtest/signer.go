// Package compensationtest mints keys, JWK Sets and signed evidence tokens for
// tests, including deliberately bad tokens for refusal tests. It is for tests only.
package compensationtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Signer holds a remote org's signing key and mints tokens with it.
type Signer struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

// NewEd25519Signer returns a Signer with a fresh Ed25519 key (alg EdDSA).
func NewEd25519Signer(t testing.TB, kid string) *Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("generate Ed25519 key: %v", err)
	}
	return &Signer{kid: kid, alg: jose.EdDSA, priv: priv}
}

// NewEd25519SignerFromSeed returns a Signer with the Ed25519 key derived from a
// 32-byte seed, so that tokens it signs are reproducible (Ed25519 signatures are
// deterministic). It is meant for fuzz seed corpora.
func NewEd25519SignerFromSeed(t testing.TB, kid string, seed []byte) *Signer {
	t.Helper()
	if len(seed) != ed25519.SeedSize {
		t.Fatalf("Ed25519 seed must be %d bytes, got %d", ed25519.SeedSize, len(seed))
	}
	return &Signer{kid: kid, alg: jose.EdDSA, priv: ed25519.NewKeyFromSeed(seed)}
}

// NewES256Signer returns a Signer with a fresh P-256 key (alg ES256).
func NewES256Signer(t testing.TB, kid string) *Signer {
	return newECSigner(t, kid, elliptic.P256(), jose.ES256)
}

// NewES384Signer returns a Signer with a fresh P-384 key (alg ES384).
func NewES384Signer(t testing.TB, kid string) *Signer {
	return newECSigner(t, kid, elliptic.P384(), jose.ES384)
}

func newECSigner(t testing.TB, kid string, curve elliptic.Curve, alg jose.SignatureAlgorithm) *Signer {
	t.Helper()
	priv, err := ecdsa.GenerateKey(curve, rand.Reader)
	if err != nil {
		t.Fatalf("generate %s key: %v", alg, err)
	}
	return &Signer{kid: kid, alg: alg, priv: priv}
}

// NewPS256Signer returns a Signer with a fresh 2048-bit RSA key (alg PS256). Signing
// with the header option WithHeader("alg", "RS256") produces a genuine RS256
// signature with the same key.
func NewPS256Signer(t testing.TB, kid string) *Signer {
	t.Helper()
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("generate RSA key: %v", err)
	}
	return &Signer{kid: kid, alg: jose.PS256, priv: priv}
}

// KeyID returns the kid the Signer puts in its tokens and its JWK.
func (s *Signer) KeyID() string { return s.kid }

// Algorithm returns the algorithm the Signer signs with by default.
func (s *Signer) Algorithm() jose.SignatureAlgorithm { return s.alg }

// PublicJWK returns the public key as a JWK with kid, "use": "sig" and alg set.
func (s *Signer) PublicJWK() jose.JSONWebKey {
	return jose.JSONWebKey{Key: s.priv.Public(), KeyID: s.kid, Algorithm: string(s.alg), Use: "sig"}
}

// PrivateJWK returns the private key as a JWK, for tests that check a private key
// is never accepted where a public one belongs.
func (s *Signer) PrivateJWK() jose.JSONWebKey {
	return jose.JSONWebKey{Key: s.priv, KeyID: s.kid, Algorithm: string(s.alg), Use: "sig"}
}

// JWKS returns the JSON of a JWK Set holding only the Signer's public key.
func (s *Signer) JWKS() []byte {
	return JWKS(s.PublicJWK())
}

// JWKS returns the JSON of a JWK Set holding the given keys. It panics if a key
// cannot be serialized.
func JWKS(keys ...jose.JSONWebKey) []byte {
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
	if err != nil {
		panic(fmt.Sprintf("marshal JWK Set: %v", err))
	}
	return b
}

// Option changes the protected header of a token before it is signed.
type Option func(header map[string]any)

// WithHeader sets a header member, replacing the default if there is one. Use it to
// change "typ" or the "alg" label, or to add refused members such as jwk, jku, x5u,
// x5c, crit or b64.
func WithHeader(name string, value any) Option {
	return func(h map[string]any) { h[name] = value }
}

// WithoutHeader removes a header member, such as "kid" or "typ".
func WithoutHeader(name string) Option {
	return func(h map[string]any) { delete(h, name) }
}

// Sign returns a compact JWS of claims with the header {"alg", "kid", "typ": kind}
// after opts are applied; an empty kind omits "typ". The signature is made with the
// Signer's key: an RSA key signs RS256/RS384/RS512 when the "alg" label says so and
// PS256 otherwise; other keys always sign with their own algorithm, whatever the
// label says.
func (s *Signer) Sign(t testing.TB, kind string, claims map[string]any, opts ...Option) string {
	t.Helper()
	header := map[string]any{"alg": string(s.alg), "kid": s.kid}
	if kind != "" {
		header["typ"] = kind
	}
	for _, o := range opts {
		o(header)
	}
	input, err := signingInput(header, claims)
	if err != nil {
		t.Fatalf("encode token: %v", err)
	}
	label, _ := header["alg"].(string)
	sig, err := s.sign([]byte(input), label)
	if err != nil {
		t.Fatalf("sign token: %v", err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// SignRaw signs a caller-supplied protected header and payload, byte for byte, with
// the Signer's own algorithm. It is meant for fuzzing, where the header and payload
// need not be valid JSON.
func (s *Signer) SignRaw(header, payload []byte) string {
	input := base64.RawURLEncoding.EncodeToString(header) + "." + base64.RawURLEncoding.EncodeToString(payload)
	sig, err := s.sign([]byte(input), string(s.alg))
	if err != nil {
		panic(fmt.Sprintf("sign token: %v", err))
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func (s *Signer) sign(input []byte, label string) ([]byte, error) {
	switch k := s.priv.(type) {
	case ed25519.PrivateKey:
		return ed25519.Sign(k, input), nil
	case *ecdsa.PrivateKey:
		h := hashFor(k.Curve.Params().BitSize)
		h.Write(input)
		r, ss, err := ecdsa.Sign(rand.Reader, k, h.Sum(nil))
		if err != nil {
			return nil, err
		}
		size := (k.Curve.Params().BitSize + 7) / 8
		out := make([]byte, 2*size)
		r.FillBytes(out[:size])
		ss.FillBytes(out[size:])
		return out, nil
	case *rsa.PrivateKey:
		var (
			h    hash.Hash
			ch   crypto.Hash
			pkcs bool
		)
		switch label {
		case "RS256":
			h, ch, pkcs = sha256.New(), crypto.SHA256, true
		case "RS384":
			h, ch, pkcs = sha512.New384(), crypto.SHA384, true
		case "RS512":
			h, ch, pkcs = sha512.New(), crypto.SHA512, true
		default:
			h, ch = sha256.New(), crypto.SHA256
		}
		h.Write(input)
		if pkcs {
			return rsa.SignPKCS1v15(rand.Reader, k, ch, h.Sum(nil))
		}
		return rsa.SignPSS(rand.Reader, k, ch, h.Sum(nil), &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
	default:
		return nil, fmt.Errorf("unsupported key type %T", s.priv)
	}
}

func hashFor(bits int) hash.Hash {
	switch {
	case bits <= 256:
		return sha256.New()
	case bits <= 384:
		return sha512.New384()
	default:
		return sha512.New()
	}
}

// NoneToken returns an unsecured JWT ({"alg": "none"}, empty signature) of claims
// after opts are applied to the header. It panics if claims cannot be encoded.
func NoneToken(claims map[string]any, opts ...Option) string {
	header := map[string]any{"alg": "none"}
	for _, o := range opts {
		o(header)
	}
	input, err := signingInput(header, claims)
	if err != nil {
		panic(fmt.Sprintf("encode token: %v", err))
	}
	return input + "."
}

// HS256Token returns a JWT MACed with HMAC-SHA256 under secret (for example the
// org's public key bytes, the classic algorithm-confusion attack), after opts are
// applied to the header. It panics if claims cannot be encoded.
func HS256Token(secret []byte, claims map[string]any, opts ...Option) string {
	header := map[string]any{"alg": "HS256"}
	for _, o := range opts {
		o(header)
	}
	input, err := signingInput(header, claims)
	if err != nil {
		panic(fmt.Sprintf("encode token: %v", err))
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(input))
	return input + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func signingInput(header, claims map[string]any) (string, error) {
	h, err := json.Marshal(header)
	if err != nil {
		return "", err
	}
	c, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c), nil
}

// DeclarationClaims returns the claims of a valid no-compensation-required
// declaration from org about task, addressed to ledger, issued at now and valid for
// five minutes, with a fresh jti.
func DeclarationClaims(org, ledger, task string, now time.Time) map[string]any {
	return map[string]any{
		"iss": org,
		"aud": ledger,
		"sub": task,
		"jti": newJTI(),
		"iat": now.Unix(),
		"exp": now.Add(5 * time.Minute).Unix(),
	}
}

// AckClaims returns the claims of a valid compensation ack: DeclarationClaims plus
// idempotency_key and a fresh receipt_id.
func AckClaims(org, ledger, task, idempotencyKey string, now time.Time) map[string]any {
	c := DeclarationClaims(org, ledger, task, now)
	c["idempotency_key"] = idempotencyKey
	c["receipt_id"] = "rcpt-" + newJTI()
	return c
}

func newJTI() string {
	return rand.Text()
}
