package compensation

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	gojose "github.com/go-jose/go-jose/v4"
	josejson "github.com/go-jose/go-jose/v4/json"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
)

// ClockSkew is the leeway allowed between the remote org's clock and ours when
// checking iat, nbf and exp.
const ClockSkew = 60 * time.Second

// MaxTokenLifetime is the longest validity window (exp - iat) a token may claim.
const MaxTokenLifetime = 10 * time.Minute

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
	// CodeTokenTooLarge means the token exceeds jose.MaxTokenSize.
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
	// TokenID is the unverified "jti" claim; empty when it is absent or
	// no string (verification then refuses the token).
	TokenID string
}

// PeekToken parses a compact JWS without verifying it. It enforces
// jose.MaxTokenSize and the compact structure (jose.ParseCompact) and returns the
// issuer, subject and key id so that the caller can load the delegation by (iss,
// sub) and the issuing org's JWK Set before calling Verify. It refuses a token
// without "iss" or "sub" with CodeTokenClaimsMissing. Every error it returns is a
// *RefusalError.
func PeekToken(token []byte) (Peek, error) {
	p, err := jose.ParseCompact(token)
	if err != nil {
		return Peek{}, leafRefusal(err)
	}
	iss, ref := claimString(p, "iss")
	if ref != nil {
		return Peek{}, ref
	}
	sub, ref := claimString(p, "sub")
	if ref != nil {
		return Peek{}, ref
	}
	kid, ok := p.Header("kid")
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
	jti, _ := p.Claim("jti")
	return Peek{Issuer: iss, Subject: sub, KeyID: kid, TokenID: jti}, nil
}

// claimString returns a string claim, refusing a claim that is present but not a
// string.
func claimString(p *jose.Compact, name string) (string, *RefusalError) {
	s, ok := p.Claim(name)
	if !ok {
		return "", refusef(CodeTokenMalformed, "claim %q must be a string", name)
	}
	return s, nil
}

// leafRefusal turns a refusal of the JOSE leaf into the *RefusalError of its
// code, with the same detail; any other error is returned as it is.
func leafRefusal(err error) error {
	var r *jose.Refusal
	if !errors.As(err, &r) {
		return err
	}
	return &RefusalError{Code: refusalCode(r.Reason), Detail: r.Detail}
}

// refusalCode is the refusal code of each reason the JOSE leaf refuses a
// token for.
func refusalCode(r jose.Reason) string {
	switch r {
	case jose.TooLarge:
		return CodeTokenTooLarge
	case jose.Malformed:
		return CodeTokenMalformed
	case jose.AlgorithmRefused:
		return CodeTokenAlgorithmRefused
	case jose.HeaderRefused:
		return CodeTokenHeaderRefused
	case jose.TypeMismatch:
		return CodeTokenTypeMismatch
	case jose.KeyUnknown:
		return CodeTokenKeyUnknown
	case jose.KeyUnusable:
		return CodeTokenKeyUnusable
	case jose.SignatureInvalid:
		return CodeTokenSignatureInvalid
	}
	return CodeTokenMalformed // a reason the leaf added since: still a refusal
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
	Keys *gojose.JSONWebKeySet
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
	// KeyThumbprint is that key's RFC 7638 thumbprint (jose.Thumbprint),
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
// all done by jose.Verify; then iss, aud, required claims, time) so a token gets
// the same code every time. A token that passes the header rules costs exactly
// one signature verification, whether or not a usable key is found for its kid
// (jose.Verify checks it against a decoy key when there is none). A plain error
// is returned only when the input itself is unusable (an unknown Kind, an empty
// OrgID or LedgerID, a zero Now), which is a bug in the caller.
//
// Verify does not know the delegation: the caller must check that Claims.Subject
// is the delegation's remote task id, compare IdempotencyKey with the delegation's
// key, and reject a replayed (Issuer, JTI) in the transaction that records the
// evidence.
func Verify(in VerifyInput) (Claims, error) {
	if err := in.check(); err != nil {
		return Claims{}, err
	}
	v, err := jose.Verify(in.Token, string(in.Kind), in.Keys)
	if err != nil {
		return Claims{}, leafRefusal(err)
	}
	p, ref := decodeClaims(v.Payload, in.Kind)
	if ref == nil {
		ref = p.check(in)
	}
	if ref != nil {
		return Claims{}, ref
	}
	return Claims{
		KeyID:          v.KeyID,
		KeyThumbprint:  v.KeyThumbprint,
		Kind:           in.Kind,
		Issuer:         p.std.Issuer,
		Audience:       in.LedgerID,
		Subject:        p.std.Subject,
		JTI:            p.std.ID,
		IssuedAt:       p.std.IssuedAt.Time(),
		Expiry:         p.std.Expiry.Time(),
		IdempotencyKey: p.extra.IdempotencyKey,
		ReceiptID:      p.extra.ReceiptID,

		ReversedAmountMinor: p.amount.ReversedAmountMinor,
	}, nil
}

// check returns an error when the input is unusable: a bug in the caller.
func (in VerifyInput) check() error {
	switch {
	case !in.Kind.Valid():
		return fmt.Errorf("compensation: verify: unknown token kind %q", in.Kind)
	case in.OrgID == "":
		return errors.New("compensation: verify: empty org id")
	case in.LedgerID == "":
		return errors.New("compensation: verify: empty ledger id")
	case in.Now.IsZero():
		return errors.New("compensation: verify: zero time")
	}
	return nil
}

// payloadClaims are the claims of a verified payload, as decoded.
type payloadClaims struct {
	std    jwt.Claims
	extra  ackClaims
	amount amountClaims
}

// decodeClaims reads the claims of a verified payload of a token of kind,
// refusing claims of the wrong types and an amount where none belongs.
func decodeClaims(payload []byte, kind TokenKind) (payloadClaims, *RefusalError) {
	var p payloadClaims
	if err := josejson.Unmarshal(payload, &p.std); err != nil {
		return p, Refuse(CodeTokenMalformed, "registered claims have the wrong types (iss, sub, jti must be strings; aud a string or array of strings; exp, iat, nbf numbers)")
	}
	if err := josejson.Unmarshal(payload, &p.extra); err != nil {
		return p, Refuse(CodeTokenMalformed, "claims idempotency_key and receipt_id must be strings")
	}
	if err := josejson.Unmarshal(payload, &p.amount); err != nil || (p.amount.ReversedAmountMinor != nil && *p.amount.ReversedAmountMinor < 0) {
		return p, Refuse(CodeTokenAmountInvalid, "claim reversed_amount_minor must be a non-negative integer number of minor units")
	}
	if p.amount.ReversedAmountMinor != nil && kind != KindAck {
		return p, Refuse(CodeTokenAmountInvalid, "claim reversed_amount_minor belongs to a compensation ack, not a declaration")
	}
	return p, nil
}

// check applies the claim rules in order: iss, aud, the required claims,
// then time.
func (p payloadClaims) check(in VerifyInput) *RefusalError {
	if p.std.Issuer != in.OrgID {
		return Refuse(CodeTokenIssuerMismatch, "claim iss is not the org that owns the delegation")
	}
	if !slices.Contains(p.std.Audience, in.LedgerID) {
		return refusef(CodeTokenAudienceMismatch, "claim aud does not contain this ledger's id %q", in.LedgerID)
	}
	if missing := p.missing(in.Kind); len(missing) > 0 {
		return refusef(CodeTokenClaimsMissing, "missing required claims: %s", strings.Join(missing, ", "))
	}
	return checkTimes(p.std, in.Now)
}

// missing lists the required claims of a token of kind that are absent or
// empty.
func (p payloadClaims) missing(kind TokenKind) []string {
	var missing []string
	if p.std.Expiry == nil {
		missing = append(missing, "exp")
	}
	if p.std.IssuedAt == nil {
		missing = append(missing, "iat")
	}
	if p.std.ID == "" {
		missing = append(missing, "jti")
	}
	if p.std.Subject == "" {
		missing = append(missing, "sub")
	}
	if kind == KindAck {
		if p.extra.IdempotencyKey == "" {
			missing = append(missing, "idempotency_key")
		}
		if p.extra.ReceiptID == "" {
			missing = append(missing, "receipt_id")
		}
	}
	return missing
}

// checkTimes checks exp, iat and nbf at now, allowing ClockSkew, and the
// token's lifetime. exp and iat are present.
func checkTimes(std jwt.Claims, now time.Time) *RefusalError {
	exp, iat := std.Expiry.Time(), std.IssuedAt.Time()
	if exp.Before(iat) {
		return Refuse(CodeTokenMalformed, "claim exp is before iat")
	}
	if now.After(exp.Add(ClockSkew)) {
		return Refuse(CodeTokenExpired, "token has expired")
	}
	latest := now.Add(ClockSkew)
	if iat.After(latest) {
		return Refuse(CodeTokenNotYetValid, "claim iat is in the future")
	}
	if std.NotBefore != nil && std.NotBefore.Time().After(latest) {
		return Refuse(CodeTokenNotYetValid, "claim nbf is in the future")
	}
	if exp.Sub(iat) > MaxTokenLifetime {
		return refusef(CodeTokenLifetimeTooLong, "exp - iat must not exceed %s", MaxTokenLifetime)
	}
	return nil
}
