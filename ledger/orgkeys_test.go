package ledger_test

import (
	"slices"
	"strings"
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

// TestCheckOrgKeys: a key history agrees with the org's stream when every
// key was added by an event at its valid_from and ends where the stream
// first removes it; a key added, backdated, ended without an event or kept
// in force past its removal does not, nor (for a whole history) a key the
// stream names that the history lacks. An org registered with keys before
// the history existed is accepted from its first event.
func TestCheckOrgKeys(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 123456789, time.UTC)
	t1, t2 := t0.Add(time.Hour), t0.Add(2*time.Hour)
	a := ledger.KeyRef{KeyID: "a", Thumbprint: "tp-a"}
	b := ledger.KeyRef{KeyID: "b", Thumbprint: "tp-b"}
	ev := func(seq int32, typ ledger.EventType, at time.Time, data string) ledger.Event {
		return ledger.Event{Stream: "org:o", StreamSeq: seq, Type: typ, At: at, Data: []byte(data)}
	}
	key := func(r ledger.KeyRef, from, until time.Time) ledger.OrgKey {
		return ledger.OrgKey{OrgID: "o", KeyID: r.KeyID, Thumbprint: r.Thumbprint, ValidFrom: from, ValidUntil: until}
	}
	// a from t0; a rotated out and b in at t1 (fetched); a back at t2.
	stream := []ledger.Event{
		ev(1, ledger.EventTypeOrgUpdated, t0, `{"jwks_registered":true,"keys_added":[{"kid":"a","thumbprint":"tp-a"}]}`),
		ev(2, ledger.EventTypeOrgKeysFetched, t1, `{"keys_added":[{"kid":"b","thumbprint":"tp-b"}],"keys_removed":[{"kid":"a","thumbprint":"tp-a"}]}`),
		ev(3, ledger.EventTypeOrgUpdated, t2, `{"jwks_registered":true,"keys_added":[{"kid":"a","thumbprint":"tp-a"}]}`),
	}
	honest := []ledger.OrgKey{key(a, t0, t1), key(b, t1, time.Time{}), key(a, t2, time.Time{})}
	for _, tc := range []struct {
		name     string
		history  []ledger.OrgKey
		stream   []ledger.Event
		complete bool
		want     string // a problem must contain it; "" for none
	}{
		{"honest", honest, stream, true, ""},
		{"honest, microseconds as stored", []ledger.OrgKey{key(a, t0.Truncate(time.Microsecond), t1), key(b, t1, time.Time{}), key(a, t2, time.Time{})}, stream, true, ""},
		{"a part of it", honest[1:2], stream, false, ""},
		{"a key backdated", []ledger.OrgKey{key(a, t0.Add(-time.Hour), t1), honest[1], honest[2]}, stream, true, "no event of the org's stream added it"},
		{"a key added", append([]ledger.OrgKey{key(ledger.KeyRef{KeyID: "m", Thumbprint: "tp-m"}, t0, time.Time{})}, honest...), stream, true, "key m (thumbprint tp-m)"},
		{"an end dropped", []ledger.OrgKey{key(a, t0, time.Time{}), honest[1], honest[2]}, stream, false, "ends never, but the org's stream removed it"},
		{"an end moved later", []ledger.OrgKey{key(a, t0, t2), honest[1], honest[2]}, stream, false, "removed it at"},
		{"an end no event records", []ledger.OrgKey{honest[0], key(b, t1, t2), honest[2]}, stream, false, "no event of the org's stream removed it"},
		{"a row removed", honest[:2], stream, true, "event 3 added key a"},
		{"a row removed, part", honest[:2], stream, false, ""},
		{"no stream", honest, nil, false, "no event of the org's stream added it"},
		{"before the key history", []ledger.OrgKey{key(a, t0, time.Time{})},
			[]ledger.Event{ev(1, ledger.EventTypeOrgUpdated, t0, `{"jwks_registered":true}`)}, true, ""},
		{"before the key history, a later key", []ledger.OrgKey{key(a, t0, time.Time{}), key(b, t1, time.Time{})},
			[]ledger.Event{ev(1, ledger.EventTypeOrgUpdated, t0, `{"jwks_registered":true}`), ev(2, ledger.EventTypeOrgUpdated, t1, `{"jwks_registered":true}`)}, true, "key b"},
		{"registered without keys", []ledger.OrgKey{key(a, t0, time.Time{})},
			[]ledger.Event{ev(1, ledger.EventTypeOrgUpdated, t0, `{"jwks_registered":false}`)}, true, "key a"},
	} {
		problems := ledger.CheckOrgKeys(tc.history, tc.stream, tc.complete)
		switch {
		case tc.want == "" && len(problems) > 0:
			t.Errorf("%s: %q, want no problem", tc.name, problems)
		case tc.want != "" && !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }):
			t.Errorf("%s: %q, want one containing %q", tc.name, problems, tc.want)
		}
	}
}
