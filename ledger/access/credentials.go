package access

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// HashToken is the stored form of a presented bearer token, and the one
// function that hashes one: the SHA-256 of the token, or, for a joined
// split credential (SplitTokenParts), joinedTokenHash of its first part's
// SHA-256 and its second part. The split form lets the ledger store a
// joined credential's hash at approval from what it kept at the request
// (the first part's hash) and the part it makes then, without ever holding
// both parts.
func HashToken(secret string) []byte {
	if first, second, ok := SplitTokenParts(secret); ok {
		return joinedTokenHash(sha256Of(first), second)
	}
	return sha256Of(secret)
}

func sha256Of(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

// NewTokenSecret returns a fresh bearer token: 256 random bits.
func NewTokenSecret() string { return "qt_" + randomPart() }

func randomPart() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms.
	return base64.RawURLEncoding.EncodeToString(b)
}

// newTokenPart returns a fresh part one or two of a split credential.
func newTokenPart(second bool) string {
	if second {
		return tokenPartTwoPrefix + randomPart()
	}
	return tokenPartOnePrefix + randomPart()
}

// SplitTokenParts splits a joined split credential into its two parts; ok
// is false for any other token (a part alone included).
func SplitTokenParts(token string) (first, second string, ok bool) {
	if len(token) != 2*tokenPartLen || !strings.HasPrefix(token, tokenPartOnePrefix) ||
		!strings.HasPrefix(token[tokenPartLen:], tokenPartTwoPrefix) {
		return "", "", false
	}
	return token[:tokenPartLen], token[tokenPartLen:], true
}

// joinedTokenHash is the stored hash of the split credential whose first
// part hashes to firstHash and whose second part is second.
func joinedTokenHash(firstHash []byte, second string) []byte {
	h := sha256.New()
	h.Write([]byte("quittance split credential\x00"))
	h.Write(firstHash)
	h.Write([]byte(second))
	return h.Sum(nil)
}

// The two parts of a split credential: a credential issued for a person
// other than the one who asks for it is made of two parts, each 256 random
// bits, one for the requester and one for the approver, so that neither
// alone holds a working credential of the new person. The person's token
// is the first part followed by the second, with nothing between
// (ledger/access/PRINCIPALS.md#split-credentials).
const (
	tokenPartOnePrefix = "qtp1_"
	tokenPartTwoPrefix = "qtp2_"
	tokenPartLen       = len(tokenPartOnePrefix) + 43 // 32 bytes, unpadded base64url
)
