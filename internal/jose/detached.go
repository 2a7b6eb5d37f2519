package jose

import (
	gojose "github.com/go-jose/go-jose/v4"
)

// DetachedHeader is what the protected header of a detached-payload JWS
// names: its algorithm, its key and, where the signer points at one, the
// JWK Set URL the key is said to be at (jku). Nothing in it is trusted
// until VerifyDetached checked the signature.
type DetachedHeader struct {
	Alg   gojose.SignatureAlgorithm
	KeyID string
	// JKU is the header's "jku", empty when absent: the caller decides
	// whether that URL may be asked for keys at all (delegate/A2A.md).
	JKU string
}

// detachedRefusedHeaders are the members a detached signature may not
// carry: as refusedHeaders, but "jku", which the caller rules on.
var detachedRefusedHeaders = []string{"jwk", "x5u", "x5c", "crit", "b64"}

// ParseDetachedHeader reads the base64url protected header of a detached
// JWS — an A2A agent card signature — and applies the header rules: an
// algorithm of the allow-list, a kid, none of the members that would bring
// a key of their own or change how the signature is computed. "typ", which
// the A2A specification only recommends ("JOSE"), is not checked. Every
// error is a *Refusal.
func ParseDetachedHeader(protected string) (DetachedHeader, error) {
	if len(protected) > MaxTokenSize {
		return DetachedHeader{}, refusef(TooLarge, "protected header exceeds %d bytes", MaxTokenSize)
	}
	raw, err := b64.DecodeString(protected)
	if err != nil {
		return DetachedHeader{}, refuse(Malformed, "protected header is not canonical unpadded base64url")
	}
	h, err := decodeObject(raw)
	if err != nil {
		return DetachedHeader{}, refusef(Malformed, "protected header is not a JSON object: %v", err)
	}
	alg, ok := memberString(h, "alg")
	if !ok || !algorithmAllowed(alg) {
		return DetachedHeader{}, refusef(AlgorithmRefused, "algorithm %s is not accepted; use one of EdDSA, ES256, ES384, PS256", quoteShort(alg))
	}
	for _, name := range detachedRefusedHeaders {
		if _, present := h[name]; present {
			return DetachedHeader{}, refusef(HeaderRefused, "header %q is not accepted", name)
		}
	}
	kid, ok := memberString(h, "kid")
	if !ok || kid == "" {
		return DetachedHeader{}, refuse(KeyUnknown, `header "kid" must be a non-empty string`)
	}
	jku, ok := memberString(h, "jku")
	if !ok {
		return DetachedHeader{}, refuse(Malformed, `header "jku" must be a string`)
	}
	return DetachedHeader{Alg: gojose.SignatureAlgorithm(alg), KeyID: kid, JKU: jku}, nil
}

// VerifyDetached checks the detached-payload JWS protected..signature over
// payload (RFC 7515 Appendix F) with the key its kid names among keys, and
// no other: the header rules of ParseDetachedHeader, then the key (as
// Verify resolves it), then the signature through go-jose with the same
// allow-list. Every problem is a *Refusal.
func VerifyDetached(protected, signature string, payload []byte, keys *gojose.JSONWebKeySet) (Verified, error) {
	h, err := ParseDetachedHeader(protected)
	if err != nil {
		return Verified{}, err
	}
	if _, err := b64.DecodeString(signature); err != nil || signature == "" {
		return Verified{}, refuse(Malformed, "signature is not canonical unpadded base64url")
	}
	key, ref := resolveKey(keys, header{alg: h.Alg, kid: h.KeyID})
	if ref != nil {
		return Verified{}, ref
	}
	text := protected + ".." + signature
	jws, err := gojose.ParseDetached(text, payload, allowedAlgorithms)
	if err != nil || len(jws.Signatures) != 1 {
		return Verified{}, refuse(Malformed, "not a valid detached JWS")
	}
	if sh := jws.Signatures[0].Header; gojose.SignatureAlgorithm(sh.Algorithm) != h.Alg || sh.KeyID != h.KeyID {
		return Verified{}, refuse(Malformed, "signature header is ambiguous")
	}
	if _, err := checkSignature(text, jws, key.Key); err != nil {
		return Verified{}, refuse(SignatureInvalid, "signature does not verify with the key its kid names")
	}
	thumbprint, err := Thumbprint(key)
	if err != nil {
		return Verified{}, refusef(KeyUnusable, "key %s has no thumbprint", quoteShort(h.KeyID))
	}
	return Verified{Payload: payload, KeyID: h.KeyID, KeyThumbprint: thumbprint}, nil
}
