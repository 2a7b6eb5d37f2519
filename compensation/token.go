package compensation

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejson "github.com/go-jose/go-jose/v4/json"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/quittance/quittance/internal/text"
	"github.com/quittance/quittance/ledger"
)

// MaxTokenSize is the largest token, in bytes, that PeekToken and Verify accept. It
// matches the request body limit for application/jose evidence.
const MaxTokenSize = 16 << 10

// ClockSkew is the leeway allowed between the remote org's clock and ours when
// checking iat, nbf and exp.
const ClockSkew = 60 * time.Second

// MaxTokenLifetime is the longest validity window (exp - iat) a token may claim.
const MaxTokenLifetime = 10 * time.Minute

// minRSABits is the smallest RSA modulus accepted for PS256 keys.
const minRSABits = 2048

// TokenKind is the explicit JWS "typ" header that tells an ack from a declaration.
type TokenKind string

const (
	// KindAck is the "typ" of a compensation ack: the remote org reversed the
	// effects of the task.
	KindAck TokenKind = ledger.TokenKindAck
	// KindDeclaration is the "typ" of a signed declaration that no compensation is
	// required because no effects were committed.
	KindDeclaration TokenKind = ledger.TokenKindDeclaration
)

// Valid reports whether k is one of the token kinds this package defines.
func (k TokenKind) Valid() bool {
	return k == KindAck || k == KindDeclaration
}

// Refusal codes carried by RefusalError.Code. They are stable: clients and
// dashboards may match on them.
const (
	// CodeTokenTooLarge means the token exceeds MaxTokenSize.
	CodeTokenTooLarge = "token_too_large"
	// CodeTokenMalformed means the token is not a well-formed compact JWS whose
	// header and payload are JSON objects, or its claims have the wrong types.
	CodeTokenMalformed = "token_malformed"
	// CodeTokenAlgorithmRefused means the "alg" header is missing or not one of
	// EdDSA, ES256, ES384 and PS256.
	CodeTokenAlgorithmRefused = "token_algorithm_refused"
	// CodeTokenHeaderRefused means the token carries a header that could
	// introduce its own key or change how it is processed (jwk, jku, x5u, x5c,
	// crit, b64), or more than one signature.
	CodeTokenHeaderRefused = "token_header_refused"
	// CodeTokenTypeMismatch means the "typ" header is missing or names another
	// kind of token than the endpoint expects.
	CodeTokenTypeMismatch = "token_type_mismatch"
	// CodeTokenKeyUnknown means the "kid" header is missing or names no key
	// registered for the issuing org.
	CodeTokenKeyUnknown = "token_key_unknown"
	// CodeTokenKeyUnusable means the registered key named by "kid" cannot verify
	// this token: not a public signing key, or not of the header's algorithm.
	CodeTokenKeyUnusable = "token_key_unusable"
	// CodeTokenSignatureInvalid means the signature does not verify with the
	// registered key.
	CodeTokenSignatureInvalid = "token_signature_invalid"
	// CodeTokenIssuerMismatch means the "iss" claim is not the org whose key
	// signed the token.
	CodeTokenIssuerMismatch = "token_issuer_mismatch"
	// CodeTokenAudienceMismatch means the "aud" claim does not name this ledger.
	CodeTokenAudienceMismatch = "token_audience_mismatch"
	// CodeTokenClaimsMissing means a required claim is absent or empty.
	CodeTokenClaimsMissing = "token_claims_missing"
	// CodeTokenExpired means "exp" has passed, beyond ClockSkew.
	CodeTokenExpired = "token_expired"
	// CodeTokenNotYetValid means "iat" or "nbf" lies in the future, beyond
	// ClockSkew.
	CodeTokenNotYetValid = "token_not_yet_valid"
	// CodeTokenLifetimeTooLong means exp - iat exceeds MaxTokenLifetime.
	CodeTokenLifetimeTooLong = "token_lifetime_too_long"

	// CodeTokenAmountInvalid means an ack's reversed_amount_minor is not a
	// non-negative integer, is more than the delegation's hold, or is on a
	// declaration. More than the hold is checked by the caller
	// (CheckReversedAmount).
	CodeTokenAmountInvalid = "token_amount_invalid"

	// CodeTokenIdempotencyKeyMismatch means an ack's idempotency_key is not the
	// delegation's compensation idempotency key. The caller checks it.
	CodeTokenIdempotencyKeyMismatch = "token_idempotency_key_mismatch"
	// CodeTokenReplayed means the (iss, jti) pair was already used. The caller
	// checks it in the transaction that records the evidence.
	CodeTokenReplayed = "token_replayed"
	// CodeTokenOrgRevoked means the issuing org's identity has been revoked, so
	// its signature no longer proves anything. The caller checks it.
	CodeTokenOrgRevoked = "token_org_revoked"
	// CodeTokenDelegationUnknown means no delegation matches the token's
	// (iss, sub). The caller checks it.
	CodeTokenDelegationUnknown = "token_delegation_unknown"
	// CodeTokenOrgUnknown means the token's iss names no registered org.
	// The caller checks it.
	CodeTokenOrgUnknown = "token_org_unknown"
	// CodeTokenIdempotencyKeyRequired means a verified token names a task
	// that delegations of more than one tenant record, and carries no
	// idempotency_key to tell which one it is about. The caller checks it.
	CodeTokenIdempotencyKeyRequired = "token_idempotency_key_required"

	// CodeTokenRefused is what the public evidence endpoints answer for
	// every refusal decided before the token verified and matched a
	// delegation, whatever its reason (one of the codes above): the same
	// answer whether the org, the task or the delegation exists or is
	// revoked. The reason is counted and logged, never told.
	CodeTokenRefused = "token_refused"
)

// RefusalError is returned when a token is refused. Code is one of the Code*
// constants; Detail explains the refusal in terms that are safe to return to the
// remote org and never contains the token itself.
type RefusalError struct {
	// Code is the stable, machine-readable reason for the refusal.
	Code string
	// Detail is a human-readable explanation, safe to show to the remote org.
	Detail string
}

// Error returns the refusal code followed by its detail.
func (e *RefusalError) Error() string {
	if e.Detail == "" {
		return "token refused: " + e.Code
	}
	return "token refused: " + e.Code + ": " + e.Detail
}

// Refuse returns a RefusalError with the given code and detail. Callers that check
// evidence outside this package (idempotency keys, replays, revoked orgs) use it so
// that every refusal has the same shape.
func Refuse(code, detail string) *RefusalError {
	return &RefusalError{Code: code, Detail: detail}
}

func refusef(code, format string, args ...any) *RefusalError {
	return &RefusalError{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// allowedAlgorithms is the signature algorithm allow-list. It is never widened at
// run time.
var allowedAlgorithms = []jose.SignatureAlgorithm{jose.EdDSA, jose.ES256, jose.ES384, jose.PS256}

// AllowedAlgorithms returns the signature algorithms a token or a registered key
// may use: EdDSA, ES256, ES384 and PS256.
func AllowedAlgorithms() []jose.SignatureAlgorithm {
	return slices.Clone(allowedAlgorithms)
}

func algorithmAllowed(alg string) bool {
	return slices.Contains(allowedAlgorithms, jose.SignatureAlgorithm(alg))
}

// refusedHeaders are header members that would let a token bring its own key, point
// at one, or change how the signature is computed. Keys are resolved by "kid" only,
// among the keys registered for the issuing org.
var refusedHeaders = []string{"jwk", "jku", "x5u", "x5c", "crit", "b64"}

// Peek is what PeekToken reads from a token before it is verified. None of it is
// trusted: it only tells the caller which delegation and which org's keys to verify
// the token against.
type Peek struct {
	// Issuer is the unverified "iss" claim: the remote org id.
	Issuer string
	// Subject is the unverified "sub" claim: the remote A2A task id.
	Subject string
	// KeyID is the unverified "kid" header; it may be empty.
	KeyID string
}

// PeekToken parses a compact JWS without verifying it. It enforces MaxTokenSize and
// the compact structure (three base64url parts, a JSON object header and payload
// with no duplicate members) and returns the issuer, subject and key id so that the
// caller can load the delegation by (iss, sub) and the issuing org's JWK Set before
// calling Verify. It refuses a token without "iss" or "sub" with
// CodeTokenClaimsMissing. Every error it returns is a *RefusalError.
func PeekToken(token []byte) (Peek, error) {
	p, ref := parseCompact(token)
	if ref != nil {
		return Peek{}, ref
	}
	iss, ref := claimString(p.claims, "iss")
	if ref != nil {
		return Peek{}, ref
	}
	sub, ref := claimString(p.claims, "sub")
	if ref != nil {
		return Peek{}, ref
	}
	kid, ok := headerString(p.header, "kid")
	if !ok {
		return Peek{}, Refuse(CodeTokenMalformed, `header "kid" must be a string`)
	}
	var missing []string
	if iss == "" {
		missing = append(missing, "iss")
	}
	if sub == "" {
		missing = append(missing, "sub")
	}
	if len(missing) > 0 {
		return Peek{}, refusef(CodeTokenClaimsMissing, "missing required claims: %s", strings.Join(missing, ", "))
	}
	return Peek{Issuer: iss, Subject: sub, KeyID: kid}, nil
}

// VerifyInput is what Verify checks a token against.
type VerifyInput struct {
	// Token is the compact JWS as received.
	Token []byte
	// Kind is the kind of token the endpoint expects; the "typ" header must match.
	Kind TokenKind
	// OrgID is the id of the org that owns the delegation; "iss" must equal it.
	OrgID string
	// Keys is the JWK Set registered for OrgID, and only that org's keys. A nil
	// set holds no keys.
	Keys *jose.JSONWebKeySet
	// LedgerID is this ledger's id; "aud" must contain it.
	LedgerID string
	// Now is the time the token is checked at.
	Now time.Time
}

// Claims are the verified contents of an ack or a declaration.
type Claims struct {
	// Kind is the verified "typ" of the token.
	Kind TokenKind
	// Issuer is the "iss" claim: the remote org id.
	Issuer string
	// Audience is the ledger id found in "aud".
	Audience string
	// Subject is the "sub" claim: the remote A2A task id.
	Subject string
	// JTI is the "jti" claim; the caller rejects a repeat per issuer.
	JTI string
	// IssuedAt is the "iat" claim.
	IssuedAt time.Time
	// Expiry is the "exp" claim.
	Expiry time.Time
	// KeyID is the "kid" of the registered key that verified the token.
	KeyID string
	// KeyThumbprint is that key's RFC 7638 thumbprint (ledger.JWKThumbprint),
	// recorded with the evidence so it can be checked later against the
	// org's key history.
	KeyThumbprint string
	// IdempotencyKey is the "idempotency_key" claim of an ack; the caller checks
	// it against the delegation. It may be empty for a declaration.
	IdempotencyKey string
	// ReceiptID is the "receipt_id" claim of an ack. It may be empty for a
	// declaration.
	ReceiptID string
	// ReversedAmountMinor is the optional "reversed_amount_minor" claim of
	// an ack: how much of the hold the remote reversed, a non-negative
	// integer; nil when absent (the whole hold). The caller checks it
	// against the hold (CheckReversedAmount).
	ReversedAmountMinor *int64
}

// ackClaims are the private claims of an ack, read alongside jwt.Claims.
type ackClaims struct {
	IdempotencyKey string `json:"idempotency_key"`
	ReceiptID      string `json:"receipt_id"`
}

// amountClaims is the optional amount claim of an ack, read on its own so a
// wrong type gets its own refusal detail. An integer is required: 1.5,
// 1e2 and "100" do not decode into int64.
type amountClaims struct {
	ReversedAmountMinor *int64 `json:"reversed_amount_minor"`
}

// Verify checks a signed ack or declaration against the JWK Set registered for the
// org that owns the delegation and returns its verified claims.
//
// Every problem with the token is reported as a *RefusalError; checks run in a
// fixed order (size, structure, algorithm, forbidden headers, typ, key, signature,
// iss, aud, required claims, time) so a token gets the same code every time, and
// header rules are applied before any key is looked at. A token that passes the
// header rules costs exactly one signature verification, whether or not a usable
// key is found for its kid: without one, the signature is checked against a decoy
// key of the header's alg (decoyKeys) before the key's refusal is returned, so the
// time taken does not tell a known kid from an unknown one. A plain error is returned
// only when the input itself is unusable (an unknown Kind, an empty OrgID or
// LedgerID, a zero Now), which is a bug in the caller.
//
// Verify does not know the delegation: the caller must check that Claims.Subject
// is the delegation's remote task id, compare IdempotencyKey with the delegation's
// key, and reject a replayed (Issuer, JTI) in the transaction that records the
// evidence.
func Verify(in VerifyInput) (Claims, error) {
	switch {
	case !in.Kind.Valid():
		return Claims{}, fmt.Errorf("compensation: verify: unknown token kind %q", in.Kind)
	case in.OrgID == "":
		return Claims{}, errors.New("compensation: verify: empty org id")
	case in.LedgerID == "":
		return Claims{}, errors.New("compensation: verify: empty ledger id")
	case in.Now.IsZero():
		return Claims{}, errors.New("compensation: verify: zero time")
	}

	p, ref := parseCompact(in.Token)
	if ref != nil {
		return Claims{}, ref
	}

	// Algorithm, then every header rule, before any key is touched.
	alg, ok := headerString(p.header, "alg")
	if !ok || alg == "" {
		return Claims{}, Refuse(CodeTokenAlgorithmRefused, `header "alg" is missing; use one of EdDSA, ES256, ES384, PS256`)
	}
	if !algorithmAllowed(alg) {
		return Claims{}, refusef(CodeTokenAlgorithmRefused, "algorithm %s is not accepted; use one of EdDSA, ES256, ES384, PS256", quoteShort(alg))
	}
	for _, name := range refusedHeaders {
		if _, present := p.header[name]; present {
			return Claims{}, refusef(CodeTokenHeaderRefused, "header %q is not accepted; keys are resolved by kid among the org's registered keys only", name)
		}
	}
	typ, ok := headerString(p.header, "typ")
	if !ok || typ == "" {
		return Claims{}, refusef(CodeTokenTypeMismatch, "header \"typ\" is missing; expected %q", string(in.Kind))
	}
	if !typeMatches(typ, in.Kind) {
		return Claims{}, refusef(CodeTokenTypeMismatch, "header \"typ\" is %s; expected %q", quoteShort(typ), string(in.Kind))
	}
	kid, ok := headerString(p.header, "kid")
	if !ok {
		return Claims{}, Refuse(CodeTokenMalformed, `header "kid" must be a string`)
	}
	if kid == "" {
		return Claims{}, Refuse(CodeTokenKeyUnknown, `header "kid" is missing`)
	}

	// The key: resolved by kid among the org's registered keys, nowhere else.
	// A refusal found here is returned only after the signature was checked
	// against a decoy key (see decoyKeys), so that the work done does not
	// tell a known kid from an unknown one.
	var (
		key    jose.JSONWebKey
		keyRef *RefusalError
	)
	var matches []jose.JSONWebKey
	if in.Keys != nil {
		matches = in.Keys.Key(kid)
	}
	switch len(matches) {
	case 0:
		keyRef = refusef(CodeTokenKeyUnknown, "kid %s is not a registered key of the issuing org", quoteShort(kid))
	case 1:
		key = matches[0]
		if reason := keyUnusable(key, jose.SignatureAlgorithm(alg)); reason != "" {
			keyRef = refusef(CodeTokenKeyUnusable, "registered key %s cannot verify this token: %s", quoteShort(kid), reason)
		}
	default:
		keyRef = refusef(CodeTokenKeyUnusable, "kid %s names more than one registered key", quoteShort(kid))
	}
	verifyKey := key.Key
	if keyRef != nil {
		verifyKey = decoyKeys()[jose.SignatureAlgorithm(alg)]
	}
	// refuse returns the key's refusal, which comes first, or else r.
	refuse := func(r *RefusalError) (Claims, error) {
		if keyRef != nil {
			return Claims{}, keyRef
		}
		return Claims{}, r
	}

	// The signature, through go-jose with the same explicit allow-list.
	jws, err := jose.ParseSignedCompact(p.text, allowedAlgorithms)
	if err != nil {
		return refuse(Refuse(CodeTokenMalformed, "token is not a valid compact JWS"))
	}
	if len(jws.Signatures) != 1 {
		return refuse(Refuse(CodeTokenHeaderRefused, "exactly one signature is required"))
	}
	if h := jws.Signatures[0].Header; string(h.Algorithm) != alg || h.KeyID != kid {
		// The JOSE library read the header differently from us; refuse rather
		// than guess which reading the signer meant.
		return refuse(Refuse(CodeTokenMalformed, "token header is ambiguous"))
	}
	payload, err := checkSignature(p.text, jws, verifyKey)
	if keyRef != nil {
		return Claims{}, keyRef
	}
	if err != nil {
		return Claims{}, Refuse(CodeTokenSignatureInvalid, "signature does not verify with the registered key")
	}
	if !bytes.Equal(payload, p.payload) {
		return Claims{}, Refuse(CodeTokenMalformed, "token payload is ambiguous")
	}

	// Claims, read only from the verified payload.
	var std jwt.Claims
	var extra ackClaims
	if err := josejson.Unmarshal(payload, &std); err != nil {
		return Claims{}, Refuse(CodeTokenMalformed, "registered claims have the wrong types (iss, sub, jti must be strings; aud a string or array of strings; exp, iat, nbf numbers)")
	}
	if err := josejson.Unmarshal(payload, &extra); err != nil {
		return Claims{}, Refuse(CodeTokenMalformed, "claims idempotency_key and receipt_id must be strings")
	}
	var amount amountClaims
	if err := josejson.Unmarshal(payload, &amount); err != nil || (amount.ReversedAmountMinor != nil && *amount.ReversedAmountMinor < 0) {
		return Claims{}, Refuse(CodeTokenAmountInvalid, "claim reversed_amount_minor must be a non-negative integer number of minor units")
	}
	if amount.ReversedAmountMinor != nil && in.Kind != KindAck {
		return Claims{}, Refuse(CodeTokenAmountInvalid, "claim reversed_amount_minor belongs to a compensation ack, not a declaration")
	}

	if std.Issuer != in.OrgID {
		return Claims{}, Refuse(CodeTokenIssuerMismatch, "claim iss is not the org that owns the delegation")
	}
	if !slices.Contains(std.Audience, in.LedgerID) {
		return Claims{}, refusef(CodeTokenAudienceMismatch, "claim aud does not contain this ledger's id %q", in.LedgerID)
	}

	var missing []string
	if std.Expiry == nil {
		missing = append(missing, "exp")
	}
	if std.IssuedAt == nil {
		missing = append(missing, "iat")
	}
	if std.ID == "" {
		missing = append(missing, "jti")
	}
	if std.Subject == "" {
		missing = append(missing, "sub")
	}
	if in.Kind == KindAck {
		if extra.IdempotencyKey == "" {
			missing = append(missing, "idempotency_key")
		}
		if extra.ReceiptID == "" {
			missing = append(missing, "receipt_id")
		}
	}
	if len(missing) > 0 {
		return Claims{}, refusef(CodeTokenClaimsMissing, "missing required claims: %s", strings.Join(missing, ", "))
	}

	exp, iat := std.Expiry.Time(), std.IssuedAt.Time()
	if exp.Before(iat) {
		return Claims{}, Refuse(CodeTokenMalformed, "claim exp is before iat")
	}
	if in.Now.After(exp.Add(ClockSkew)) {
		return Claims{}, Refuse(CodeTokenExpired, "token has expired")
	}
	latest := in.Now.Add(ClockSkew)
	if iat.After(latest) {
		return Claims{}, Refuse(CodeTokenNotYetValid, "claim iat is in the future")
	}
	if std.NotBefore != nil && std.NotBefore.Time().After(latest) {
		return Claims{}, Refuse(CodeTokenNotYetValid, "claim nbf is in the future")
	}
	if exp.Sub(iat) > MaxTokenLifetime {
		return Claims{}, refusef(CodeTokenLifetimeTooLong, "exp - iat must not exceed %s", MaxTokenLifetime)
	}

	thumbprint, err := keyThumbprint(key)
	if err != nil {
		return Claims{}, refusef(CodeTokenKeyUnusable, "registered key %s has no thumbprint", quoteShort(kid))
	}
	return Claims{
		KeyID:          kid,
		KeyThumbprint:  thumbprint,
		Kind:           in.Kind,
		Issuer:         std.Issuer,
		Audience:       in.LedgerID,
		Subject:        std.Subject,
		JTI:            std.ID,
		IssuedAt:       iat,
		Expiry:         exp,
		IdempotencyKey: extra.IdempotencyKey,
		ReceiptID:      extra.ReceiptID,

		ReversedAmountMinor: amount.ReversedAmountMinor,
	}, nil
}

// decoyKeys are public keys, one for each allowed algorithm, that the
// process generates once (NewService does it at start-up, so no request
// pays for it) and whose private halves it throws away: nothing verifies
// with them. Verify checks the signature of a token that passed the header
// rules against the decoy of its alg when it has no usable key for it —
// an unknown kid, an org that has no usable keys, and, through
// Service.Submit, an iss naming no registered org or a revoked one — so
// that such a token costs the one signature verification a token with a
// known key costs, and the time taken does not tell which orgs and kids
// exist. The RSA decoy has the smallest modulus accepted (minRSABits): an
// org's larger RSA key costs more to verify with than the decoy does.
var decoyKeys = sync.OnceValue(func() map[jose.SignatureAlgorithm]any {
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(fmt.Sprintf("compensation: generate Ed25519 decoy key: %v", err))
	}
	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(fmt.Sprintf("compensation: generate P-256 decoy key: %v", err))
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		panic(fmt.Sprintf("compensation: generate P-384 decoy key: %v", err))
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, minRSABits)
	if err != nil {
		panic(fmt.Sprintf("compensation: generate RSA decoy key: %v", err))
	}
	return map[jose.SignatureAlgorithm]any{
		jose.EdDSA: ed.Public(), jose.ES256: p256.Public(), jose.ES384: p384.Public(), jose.PS256: rsaKey.Public(),
	}
})

// testHookSignatureCheck, when set (by the package's tests, before any
// test runs), is told the compact text of every token whose signature
// checkSignature checks.
var testHookSignatureCheck func(token string)

// checkSignature verifies jws, whose compact text is token, with key. It
// is the one place a token's signature is checked, decoys included.
func checkSignature(token string, jws *jose.JSONWebSignature, key any) ([]byte, error) {
	if testHookSignatureCheck != nil {
		testHookSignatureCheck(token)
	}
	return jws.Verify(key)
}

// keyThumbprint is the RFC 7638 thumbprint of a parsed key, computed by
// the one definition the key history uses.
func keyThumbprint(key jose.JSONWebKey) (string, error) {
	raw, err := key.MarshalJSON()
	if err != nil {
		return "", err
	}
	return ledger.JWKThumbprint(raw)
}

// typeMatches compares a "typ" header with the expected kind. Following RFC 7515
// §4.1.9 the comparison ignores case and an "application/" prefix.
func typeMatches(typ string, kind TokenKind) bool {
	t := strings.ToLower(typ)
	t = strings.TrimPrefix(t, "application/")
	return t == string(kind)
}

// keyUnusable returns why key cannot verify a signature made with alg, or "" when
// it can.
func keyUnusable(key jose.JSONWebKey, alg jose.SignatureAlgorithm) string {
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
func keyFitsAlgorithm(pub any, alg jose.SignatureAlgorithm) bool {
	switch alg {
	case jose.EdDSA:
		k, ok := pub.(ed25519.PublicKey)
		return ok && len(k) == ed25519.PublicKeySize
	case jose.ES256:
		k, ok := pub.(*ecdsa.PublicKey)
		return ok && k.Curve == elliptic.P256()
	case jose.ES384:
		k, ok := pub.(*ecdsa.PublicKey)
		return ok && k.Curve == elliptic.P384()
	case jose.PS256:
		k, ok := pub.(*rsa.PublicKey)
		return ok && k.N != nil && k.N.BitLen() >= minRSABits
	default:
		return false
	}
}

// compact is a structurally valid compact JWS, not yet verified.
type compact struct {
	text    string
	header  map[string]json.RawMessage
	payload []byte
	claims  map[string]json.RawMessage
}

// parseCompact checks size and structure: exactly three base64url parts in
// canonical unpadded form, a header and a payload that are JSON objects without
// duplicate members. The signature part may be empty here; it fails verification.
func parseCompact(token []byte) (*compact, *RefusalError) {
	if len(token) > MaxTokenSize {
		return nil, refusef(CodeTokenTooLarge, "token exceeds %d bytes", MaxTokenSize)
	}
	text := strings.Trim(string(token), " \t\r\n")
	if text == "" {
		return nil, Refuse(CodeTokenMalformed, "token is empty")
	}
	if text[0] == '{' {
		return nil, Refuse(CodeTokenMalformed, "JWS JSON serialization is not accepted; send the compact serialization")
	}
	for i := 0; i < len(text); i++ {
		if !isCompactChar(text[i]) {
			return nil, Refuse(CodeTokenMalformed, "token contains characters outside the base64url alphabet")
		}
	}
	parts := strings.Split(text, ".")
	if len(parts) != 3 {
		return nil, Refuse(CodeTokenMalformed, "a compact JWS has exactly three dot-separated parts")
	}
	if parts[0] == "" || parts[1] == "" {
		return nil, Refuse(CodeTokenMalformed, "token header or payload is empty")
	}
	headerJSON, err := b64.DecodeString(parts[0])
	if err != nil {
		return nil, Refuse(CodeTokenMalformed, "token header is not canonical unpadded base64url")
	}
	payload, err := b64.DecodeString(parts[1])
	if err != nil {
		return nil, Refuse(CodeTokenMalformed, "token payload is not canonical unpadded base64url")
	}
	if _, err := b64.DecodeString(parts[2]); err != nil {
		return nil, Refuse(CodeTokenMalformed, "token signature is not canonical unpadded base64url")
	}
	header, err := decodeObject(headerJSON)
	if err != nil {
		return nil, refusef(CodeTokenMalformed, "token header is not a JSON object: %v", err)
	}
	claims, err := decodeObject(payload)
	if err != nil {
		return nil, refusef(CodeTokenMalformed, "token payload is not a JSON object: %v", err)
	}
	return &compact{text: text, header: header, payload: payload, claims: claims}, nil
}

// b64 decodes base64url without padding and refuses non-zero trailing bits, so a
// token has exactly one textual form.
var b64 = base64.RawURLEncoding.Strict()

func isCompactChar(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

var (
	errNotObject       = errors.New("not an object")
	errDuplicateMember = errors.New("duplicate member")
	errTrailingData    = errors.New("trailing data")
)

// decodeObject decodes a JSON object, keeping member names exactly as written, and
// refuses duplicate member names at any depth: two readers of a duplicated member
// may disagree on its value.
func decodeObject(data []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := checkValue(dec, 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errTrailingData
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return nil, errNotObject
	}
	return obj, nil
}

// maxJSONDepth bounds nesting in headers and claims.
const maxJSONDepth = 32

// checkValue reads one JSON value from dec and refuses duplicate object members.
// At depth 0 the value must be an object.
func checkValue(dec *json.Decoder, depth int) error {
	if depth > maxJSONDepth {
		return errors.New("nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return errors.New("invalid JSON")
	}
	delim, isDelim := tok.(json.Delim)
	if depth == 0 && (!isDelim || delim != '{') {
		return errNotObject
	}
	if !isDelim {
		return nil
	}
	switch delim {
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			nameTok, err := dec.Token()
			if err != nil {
				return errors.New("invalid JSON")
			}
			name, _ := nameTok.(string)
			if seen[name] {
				return errDuplicateMember
			}
			seen[name] = true
			if err := checkValue(dec, depth+1); err != nil {
				return err
			}
		}
	case '[':
		for dec.More() {
			if err := checkValue(dec, depth+1); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // closing delimiter
		return errors.New("invalid JSON")
	}
	return nil
}

// headerString returns a string header member; ok is false when the member is
// present but not a string. A missing member is "", true.
func headerString(h map[string]json.RawMessage, name string) (string, bool) {
	raw, present := h[name]
	if !present {
		return "", true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// claimString returns a string claim, refusing a claim that is present but not a
// string.
func claimString(c map[string]json.RawMessage, name string) (string, *RefusalError) {
	s, ok := headerString(c, name)
	if !ok {
		return "", refusef(CodeTokenMalformed, "claim %q must be a string", name)
	}
	return s, nil
}

// quoteShort quotes an untrusted value for a refusal detail, truncated so that a
// remote cannot make us echo large inputs.
func quoteShort(s string) string {
	const limit = 64
	if len(s) > limit {
		s = text.Truncate(s, limit) + "..."
	}
	return fmt.Sprintf("%q", s)
}
