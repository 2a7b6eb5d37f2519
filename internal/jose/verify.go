package jose

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	gojose "github.com/go-jose/go-jose/v4"
)

// minRSABits is the smallest RSA modulus accepted for PS256 keys.
const minRSABits = 2048

// allowedAlgorithms is the signature algorithm allow-list. It is never widened at
// run time.
var allowedAlgorithms = []gojose.SignatureAlgorithm{gojose.EdDSA, gojose.ES256, gojose.ES384, gojose.PS256}

// AllowedAlgorithms returns the signature algorithms a token or a registered key
// may use: EdDSA, ES256, ES384 and PS256.
func AllowedAlgorithms() []gojose.SignatureAlgorithm {
	return slices.Clone(allowedAlgorithms)
}

func algorithmAllowed(alg string) bool {
	return slices.Contains(allowedAlgorithms, gojose.SignatureAlgorithm(alg))
}

// refusedHeaders are header members that would let a token bring its own key, point
// at one, or change how the signature is computed. Keys are resolved by "kid" only,
// among the keys given to Verify.
var refusedHeaders = []string{"jwk", "jku", "x5u", "x5c", "crit", "b64"}

// Verified is a token whose header, key and signature Verify checked.
type Verified struct {
	// Payload is the verified payload, exactly as signed.
	Payload []byte
	// KeyID is the "kid" of the key that verified the token.
	KeyID string
	// KeyThumbprint is that key's RFC 7638 thumbprint (Thumbprint).
	KeyThumbprint string
}

// Verify checks a compact JWS against keys — the JWK Set of the one signer
// the token may come from; nil holds no keys — and returns its verified
// payload. The "typ" header must be typ (compared as RFC 7515 §4.1.9 says:
// case and an "application/" prefix aside).
//
// Checks run in a fixed order (size, structure, algorithm, forbidden
// headers, typ, kid, key, signature) so a token gets the same refusal every
// time, and header rules are applied before any key is looked at. A token
// that passes the header rules costs exactly one signature verification,
// whether or not a usable key is found for its kid: without one, the
// signature is checked against a decoy key of the header's alg (see
// GenerateDecoyKeys) before the key's refusal is returned, so the time
// taken does not tell a known kid from an unknown one. Every problem with
// the token is a *Refusal; a plain error means an empty typ, a bug in the
// caller. The payload's claims are the caller's to check.
func Verify(token []byte, typ string, keys *gojose.JSONWebKeySet) (Verified, error) {
	if typ == "" {
		return Verified{}, errors.New("jose: verify: empty typ")
	}
	c, ref := parseCompact(token)
	if ref != nil {
		return Verified{}, ref
	}
	h, ref := checkHeader(c, typ)
	if ref != nil {
		return Verified{}, ref
	}
	key, keyRef := resolveKey(keys, h)
	payload, ref := verifySignature(c, h, key, keyRef)
	if ref != nil {
		return Verified{}, ref
	}
	thumbprint, err := Thumbprint(key)
	if err != nil {
		return Verified{}, refusef(KeyUnusable, "registered key %s has no thumbprint", quoteShort(h.kid))
	}
	return Verified{Payload: payload, KeyID: h.kid, KeyThumbprint: thumbprint}, nil
}

// header is what checkHeader read from a token's header.
type header struct {
	alg gojose.SignatureAlgorithm
	kid string
}

// checkHeader applies the header rules: the algorithm, then every forbidden
// header, "typ" and "kid", before any key is touched.
func checkHeader(c *Compact, typ string) (header, *Refusal) {
	alg, ok := c.Header("alg")
	if !ok || alg == "" {
		return header{}, refuse(AlgorithmRefused, `header "alg" is missing; use one of EdDSA, ES256, ES384, PS256`)
	}
	if !algorithmAllowed(alg) {
		return header{}, refusef(AlgorithmRefused, "algorithm %s is not accepted; use one of EdDSA, ES256, ES384, PS256", quoteShort(alg))
	}
	for _, name := range refusedHeaders {
		if _, present := c.header[name]; present {
			return header{}, refusef(HeaderRefused, "header %q is not accepted; keys are resolved by kid among the org's registered keys only", name)
		}
	}
	got, ok := c.Header("typ")
	if !ok || got == "" {
		return header{}, refusef(TypeMismatch, "header \"typ\" is missing; expected %q", typ)
	}
	if !typeMatches(got, typ) {
		return header{}, refusef(TypeMismatch, "header \"typ\" is %s; expected %q", quoteShort(got), typ)
	}
	kid, ok := c.Header("kid")
	if !ok {
		return header{}, refuse(Malformed, `header "kid" must be a string`)
	}
	if kid == "" {
		return header{}, refuse(KeyUnknown, `header "kid" is missing`)
	}
	return header{alg: gojose.SignatureAlgorithm(alg), kid: kid}, nil
}

// resolveKey finds the key named by the header's kid among keys, and
// nowhere else. Its refusal is returned by verifySignature only after the
// signature was checked against a decoy key.
func resolveKey(keys *gojose.JSONWebKeySet, h header) (gojose.JSONWebKey, *Refusal) {
	var matches []gojose.JSONWebKey
	if keys != nil {
		matches = keys.Key(h.kid)
	}
	switch len(matches) {
	case 0:
		return gojose.JSONWebKey{}, refusef(KeyUnknown, "kid %s is not a registered key of the issuing org", quoteShort(h.kid))
	case 1:
		if reason := keyUnusable(matches[0], h.alg); reason != "" {
			return gojose.JSONWebKey{}, refusef(KeyUnusable, "registered key %s cannot verify this token: %s", quoteShort(h.kid), reason)
		}
		return matches[0], nil
	default:
		return gojose.JSONWebKey{}, refusef(KeyUnusable, "kid %s names more than one registered key", quoteShort(h.kid))
	}
}

// verifySignature checks the signature through go-jose, with the same
// explicit allow-list, against key or, when keyRef refused the key, the
// decoy key of the header's alg; keyRef then comes before any other
// refusal. It returns the verified payload.
func verifySignature(c *Compact, h header, key gojose.JSONWebKey, keyRef *Refusal) ([]byte, *Refusal) {
	verifyKey := key.Key
	if keyRef != nil {
		verifyKey = decoyKeys()[h.alg]
	}
	first := func(r *Refusal) *Refusal {
		if keyRef != nil {
			return keyRef
		}
		return r
	}
	jws, err := gojose.ParseSignedCompact(c.text, allowedAlgorithms)
	if err != nil {
		return nil, first(refuse(Malformed, "token is not a valid compact JWS"))
	}
	if len(jws.Signatures) != 1 {
		return nil, first(refuse(HeaderRefused, "exactly one signature is required"))
	}
	if sh := jws.Signatures[0].Header; gojose.SignatureAlgorithm(sh.Algorithm) != h.alg || sh.KeyID != h.kid {
		// The JOSE library read the header differently from us; refuse rather
		// than guess which reading the signer meant.
		return nil, first(refuse(Malformed, "token header is ambiguous"))
	}
	payload, err := checkSignature(c.text, jws, verifyKey)
	if keyRef != nil {
		return nil, keyRef
	}
	if err != nil {
		return nil, refuse(SignatureInvalid, "signature does not verify with the registered key")
	}
	if !bytes.Equal(payload, c.payload) {
		return nil, refuse(Malformed, "token payload is ambiguous")
	}
	return payload, nil
}

// TestHookSignatureCheck, when set (by tests, before any test runs, and
// never changed), is told the compact text of every token whose signature
// is checked, against a registered key or a decoy. Nil outside tests.
var TestHookSignatureCheck func(token string)

// checkSignature verifies jws, whose compact text is token, with key. It
// is the one place a token's signature is checked, decoys included.
func checkSignature(token string, jws *gojose.JSONWebSignature, key any) ([]byte, error) {
	if TestHookSignatureCheck != nil {
		TestHookSignatureCheck(token)
	}
	return jws.Verify(key)
}

// Thumbprint is the RFC 7638 SHA-256 thumbprint of a public key, in
// base64url without padding: how the key history names a key.
func Thumbprint(key gojose.JSONWebKey) (string, error) {
	sum, err := key.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(sum), nil
}

// typeMatches compares a "typ" header with the expected one. Following RFC 7515
// §4.1.9 the comparison ignores case and an "application/" prefix.
func typeMatches(typ, want string) bool {
	t := strings.ToLower(typ)
	t = strings.TrimPrefix(t, "application/")
	return t == want
}

// keyUnusable returns why key cannot verify a signature made with alg, or "" when
// it can.
func keyUnusable(key gojose.JSONWebKey, alg gojose.SignatureAlgorithm) string {
	if key.Use != "sig" {
		return `its "use" is not "sig"`
	}
	if !key.Valid() || !key.IsPublic() {
		return "it is not a public key"
	}
	if key.Algorithm != "" && key.Algorithm != string(alg) {
		return fmt.Sprintf("it is registered for %s, not %s", quoteShort(key.Algorithm), alg)
	}
	if !keyFitsAlgorithm(key.Key, alg) {
		return fmt.Sprintf("its key type does not match %s", alg)
	}
	return ""
}

// keyFitsAlgorithm reports whether a public key has the type, curve and size that
// alg requires.
func keyFitsAlgorithm(pub any, alg gojose.SignatureAlgorithm) bool {
	switch alg {
	case gojose.EdDSA:
		k, ok := pub.(ed25519.PublicKey)
		return ok && len(k) == ed25519.PublicKeySize
	case gojose.ES256:
		k, ok := pub.(*ecdsa.PublicKey)
		return ok && k.Curve == elliptic.P256()
	case gojose.ES384:
		k, ok := pub.(*ecdsa.PublicKey)
		return ok && k.Curve == elliptic.P384()
	case gojose.PS256:
		k, ok := pub.(*rsa.PublicKey)
		return ok && k.N != nil && k.N.BitLen() >= minRSABits
	default:
		return false
	}
}
