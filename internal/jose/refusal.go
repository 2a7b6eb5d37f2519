package jose

import (
	"fmt"

	"github.com/quittance/quittance/internal/text"
)

// Reason is why Verify or ParseCompact refused a token. Callers map each
// reason to a refusal code of their own.
type Reason string

// The reasons a token is refused for.
const (
	// TooLarge: the token exceeds MaxTokenSize.
	TooLarge Reason = "too_large"
	// Malformed: not a well-formed compact JWS whose header and payload are
	// JSON objects, or a header read two ways.
	Malformed Reason = "malformed"
	// AlgorithmRefused: "alg" is missing or not in AllowedAlgorithms.
	AlgorithmRefused Reason = "algorithm_refused"
	// HeaderRefused: a header that could introduce a key or change how the
	// token is processed (jwk, jku, x5u, x5c, crit, b64), or more than one
	// signature.
	HeaderRefused Reason = "header_refused"
	// TypeMismatch: "typ" is missing or not the one expected.
	TypeMismatch Reason = "type_mismatch"
	// KeyUnknown: "kid" is missing or names none of the keys given.
	KeyUnknown Reason = "key_unknown"
	// KeyUnusable: the key named by "kid" cannot verify this token.
	KeyUnusable Reason = "key_unusable"
	// SignatureInvalid: the signature does not verify with the key.
	SignatureInvalid Reason = "signature_invalid"
)

// Refusal is a refused token: the reason and a detail that is safe to
// return to the token's signer and never contains the token itself.
type Refusal struct {
	// Reason is why the token was refused.
	Reason Reason
	// Detail explains the refusal.
	Detail string
}

// Error returns the reason followed by its detail.
func (r *Refusal) Error() string {
	return "jose: token refused: " + string(r.Reason) + ": " + r.Detail
}

func refuse(reason Reason, detail string) *Refusal {
	return &Refusal{Reason: reason, Detail: detail}
}

func refusef(reason Reason, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Detail: fmt.Sprintf(format, args...)}
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
