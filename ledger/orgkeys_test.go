package ledger_test

import (
	"testing"
	"time"

	"github.com/quittance/quittance/ledger"
)

// TestJWKThumbprintRFC7638: the example of RFC 7638 §3.1, whatever the
// member order, spacing and extra members of the JWK.
func TestJWKThumbprintRFC7638(t *testing.T) {
	t.Parallel()
	n := "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"
	for _, jwk := range []string{
		`{"kty":"RSA","n":"` + n + `","e":"AQAB","alg":"RS256","kid":"2011-04-29"}`,
		`{ "kid": "other", "e": "AQAB", "n": "` + n + `", "kty": "RSA" }`,
	} {
		got, err := ledger.JWKThumbprint([]byte(jwk))
		if err != nil || got != "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs" {
			t.Errorf("JWKThumbprint = %q, %v", got, err)
		}
	}
	for _, bad := range []string{`{}`, `{"kty":"OKP","crv":"Ed25519"}`, `{"kty":"XYZ"}`, `not json`} {
		if _, err := ledger.JWKThumbprint([]byte(bad)); err == nil {
			t.Errorf("JWKThumbprint(%s) succeeded", bad)
		}
	}
}

// TestKeysInForceAt: a key is in force from valid_from (included) to
// valid_until (excluded), or on while it has none.
func TestKeysInForceAt(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	history := []ledger.OrgKey{
		{KeyID: "a", ValidFrom: t0, ValidUntil: t0.Add(2 * time.Hour)},
		{KeyID: "b", ValidFrom: t0.Add(time.Hour)},
	}
	for _, c := range []struct {
		at   time.Duration
		want string
	}{{-time.Second, ""}, {0, "a"}, {90 * time.Minute, "ab"}, {2 * time.Hour, "b"}, {48 * time.Hour, "b"}} {
		got := ""
		for _, k := range ledger.KeysInForceAt(history, t0.Add(c.at)) {
			got += k.KeyID
		}
		if got != c.want {
			t.Errorf("at t0%+v: %q, want %q", c.at, got, c.want)
		}
	}
}
