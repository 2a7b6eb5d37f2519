package ledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// OrgKey is one public key an org had, with the interval it was in force:
// the org's key history. A token the ledger accepted is checked, later,
// against the keys in force when it was accepted — never against the org's
// current keys, so an honest rotation does not break old evidence and a key
// added later does not make forged old evidence pass.
type OrgKey struct {
	// OrgID is the org the key belongs to.
	OrgID string `json:"org_id"`
	// KeyID is the key's "kid".
	KeyID string `json:"kid"`
	// Thumbprint is the key's RFC 7638 JWK thumbprint: SHA-256,
	// base64url without padding.
	Thumbprint string `json:"thumbprint"`
	// JWK is the public key as registered.
	JWK json.RawMessage `json:"jwk"`
	// ValidFrom is when the key came into force.
	ValidFrom time.Time `json:"valid_from"`
	// ValidUntil is when the key stopped being in force; zero while it is.
	ValidUntil time.Time `json:"valid_until,omitzero"`
}

// InForceAt reports whether the key was in force at t: from ValidFrom
// (included) to ValidUntil (excluded).
func (k OrgKey) InForceAt(t time.Time) bool {
	return !t.Before(k.ValidFrom) && (k.ValidUntil.IsZero() || t.Before(k.ValidUntil))
}

// KeysInForceAt returns the keys of history in force at t.
func KeysInForceAt(history []OrgKey, t time.Time) []OrgKey {
	var out []OrgKey
	for _, k := range history {
		if k.InForceAt(t) {
			out = append(out, k)
		}
	}
	return out
}

// KeyRef names a key by kid and thumbprint, as events record it.
type KeyRef struct {
	KeyID      string `json:"kid"`
	Thumbprint string `json:"thumbprint"`
}

// thumbprintMembers are the members RFC 7638 §3.2 hashes, per key type.
var thumbprintMembers = map[string][]string{
	"EC":  {"crv", "kty", "x", "y"},
	"OKP": {"crv", "kty", "x"},
	"RSA": {"e", "kty", "n"},
	"oct": {"k", "kty"},
}

// JWKThumbprint is the RFC 7638 thumbprint of a JWK: the SHA-256 of its
// required members, in lexicographic order with no whitespace, base64url
// without padding. It is the one definition Quittance uses, where keys
// are recorded and where tokens are verified again.
func JWKThumbprint(jwk []byte) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(jwk, &m); err != nil {
		return "", fmt.Errorf("jwk: %w", err)
	}
	var kty string
	if err := json.Unmarshal(m["kty"], &kty); err != nil || kty == "" {
		return "", fmt.Errorf(`jwk: "kty" must be a string`)
	}
	names, ok := thumbprintMembers[kty]
	if !ok {
		return "", fmt.Errorf("jwk: key type %q has no thumbprint", kty)
	}
	var canonical bytes.Buffer
	canonical.WriteByte('{')
	for i, name := range names {
		var v string
		if err := json.Unmarshal(m[name], &v); err != nil || v == "" {
			return "", fmt.Errorf("jwk: member %q must be a string", name)
		}
		if i > 0 {
			canonical.WriteByte(',')
		}
		writeJSONString(&canonical, name)
		canonical.WriteByte(':')
		writeJSONString(&canonical, v)
	}
	canonical.WriteByte('}')
	sum := sha256.Sum256(canonical.Bytes())
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// writeJSONString writes s as a JSON string without HTML escaping (RFC 7638
// §3.3: the member values are used as they are).
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	b.Truncate(b.Len() - 1) // Encode's newline
}

// KeysOfJWKS lists the keys of a JWK Set (already validated by the
// registration rules) with their kid, thumbprint and JWK; the validity
// interval is left for the caller to set.
func KeysOfJWKS(orgID string, raw []byte) ([]OrgKey, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	out := make([]OrgKey, 0, len(set.Keys))
	for i, k := range set.Keys {
		var head struct {
			Kid string `json:"kid"`
		}
		if err := json.Unmarshal(k, &head); err != nil {
			return nil, fmt.Errorf("jwks: key %d: %w", i, err)
		}
		tp, err := JWKThumbprint(k)
		if err != nil {
			return nil, fmt.Errorf("jwks: key %d: %w", i, err)
		}
		out = append(out, OrgKey{OrgID: orgID, KeyID: head.Kid, Thumbprint: tp, JWK: canonicalJSON(k)})
	}
	return out, nil
}

// canonicalJSON re-encodes a JSON value with sorted object members, so two
// registrations of the same key compare equal whatever their spacing.
func canonicalJSON(raw []byte) json.RawMessage {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return raw
	}
	out, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return out
}

// sameKey reports whether two recorded keys are the same registration: the
// same kid and the same JWK (and so the same thumbprint).
func sameKey(a, b OrgKey) bool {
	return a.KeyID == b.KeyID && a.Thumbprint == b.Thumbprint && bytes.Equal(canonicalJSON(a.JWK), canonicalJSON(b.JWK))
}

// recordOrgKeys brings the org's key history in line with the keys it is
// registered with from now on: a key no longer registered stops being in
// force at now, a newly registered one starts at now. It returns what was
// added and removed, for the org_updated event.
func recordOrgKeys(ctx context.Context, tx Tx, orgID string, jwks []byte, now time.Time) (added, removed []KeyRef, err error) {
	next, err := KeysOfJWKS(orgID, jwks)
	if err != nil {
		return nil, nil, fmt.Errorf("org %s keys: %w", orgID, err)
	}
	history, err := tx.Admin().OrgKeys(ctx, orgID)
	if err != nil {
		return nil, nil, err
	}
	var current []OrgKey // the keys not yet ended
	for _, k := range history {
		if k.ValidUntil.IsZero() {
			current = append(current, k)
		}
	}
	for _, k := range current {
		if slices.ContainsFunc(next, func(n OrgKey) bool { return sameKey(k, n) }) {
			continue
		}
		if err := tx.Admin().EndOrgKey(ctx, k, now); err != nil {
			return nil, nil, err
		}
		removed = append(removed, KeyRef{KeyID: k.KeyID, Thumbprint: k.Thumbprint})
	}
	for _, n := range next {
		if slices.ContainsFunc(current, func(k OrgKey) bool { return sameKey(k, n) }) {
			continue
		}
		n.ValidFrom = now
		if err := tx.Admin().InsertOrgKey(ctx, n); err != nil {
			return nil, nil, err
		}
		added = append(added, KeyRef{KeyID: n.KeyID, Thumbprint: n.Thumbprint})
	}
	return added, removed, nil
}

// OrgKeyHistory returns every key the org ever had, oldest first, to
// on-call and finance.
func (s *Service) OrgKeyHistory(ctx context.Context, p Principal, orgID string) ([]OrgKey, error) {
	if err := Authorize(p, ActionReadConfiguration); err != nil {
		return nil, err
	}
	if _, err := s.store.Org(ctx, orgID); err != nil {
		return nil, err
	}
	return s.store.OrgKeys(ctx, orgID)
}

// orgKeyEvent is what an event of an org's stream records about its keys.
type orgKeyEvent struct {
	KeysAdded   []KeyRef `json:"keys_added"`
	KeysRemoved []KeyRef `json:"keys_removed"`
}

// CheckOrgKeys checks an org's key history against the org's stream, in
// stream order: every key must have been added by an event of the stream at
// its valid_from (keys_added of an org_updated or org_keys_fetched event),
// and it ends where the stream first removes it after that (keys_removed),
// so a key row added or backdated behind the service's back, or kept in
// force past its removal, is a problem. With complete, history is the org's
// whole history, and every key the stream adds or removes must be in it
// too; without, it is a part (an evidence pack's keys).
//
// The one exception is an org registered with keys before the key history
// existed (registeredBeforeKeyHistory): a key in force from its first
// event's time is taken as one that event registered.
func CheckOrgKeys(history []OrgKey, stream []Event, complete bool) []string {
	// Times are compared to the microsecond, as PostgreSQL keeps them.
	type at struct {
		ref KeyRef
		t   int64 // Unix microseconds
	}
	var problems []string
	parsed := make([]orgKeyEvent, len(stream))
	added := map[at]bool{}
	for i, e := range stream {
		if err := json.Unmarshal(e.Data, &parsed[i]); err != nil && len(e.Data) > 0 {
			problems = append(problems, fmt.Sprintf("event %d: data does not parse: %v", e.StreamSeq, err))
		}
		for _, k := range parsed[i].KeysAdded {
			added[at{k, e.At.UnixMicro()}] = true
		}
	}
	legacy := registeredBeforeKeyHistory(stream)
	inHistory := map[at]bool{}
	endedInHistory := map[at]bool{}
	for _, k := range history {
		ref := KeyRef{KeyID: k.KeyID, Thumbprint: k.Thumbprint}
		from := k.ValidFrom.UTC().Truncate(time.Microsecond)
		inHistory[at{ref, from.UnixMicro()}] = true
		if !added[at{ref, from.UnixMicro()}] && !(legacy && from.UnixMicro() == stream[0].At.UnixMicro()) {
			problems = append(problems, fmt.Sprintf("key %s (thumbprint %s) is in force from %s, but no event of the org's stream added it then",
				k.KeyID, k.Thumbprint, from.Format(time.RFC3339Nano)))
			continue
		}
		// Where the stream first removes it after it came into force.
		var end time.Time
		for i, e := range stream {
			if e.At.UnixMicro() > from.UnixMicro() && slices.Contains(parsed[i].KeysRemoved, ref) {
				end = e.At.UTC().Truncate(time.Microsecond)
				break
			}
		}
		switch until := k.ValidUntil.UTC().Truncate(time.Microsecond); {
		case end.IsZero() && !until.IsZero():
			problems = append(problems, fmt.Sprintf("key %s (thumbprint %s) ends at %s, but no event of the org's stream removed it",
				k.KeyID, k.Thumbprint, until.Format(time.RFC3339Nano)))
		case !end.IsZero() && until.UnixMicro() != end.UnixMicro():
			got := "never"
			if !until.IsZero() {
				got = until.Format(time.RFC3339Nano)
			}
			problems = append(problems, fmt.Sprintf("key %s (thumbprint %s) ends %s, but the org's stream removed it at %s",
				k.KeyID, k.Thumbprint, got, end.Format(time.RFC3339Nano)))
		case !end.IsZero():
			endedInHistory[at{ref, end.UnixMicro()}] = true
		}
	}
	if complete {
		for i, e := range stream {
			t := e.At.UnixMicro()
			for _, k := range parsed[i].KeysAdded {
				if !inHistory[at{k, t}] {
					problems = append(problems, fmt.Sprintf("event %d added key %s (thumbprint %s), which the key history does not hold from then",
						e.StreamSeq, k.KeyID, k.Thumbprint))
				}
			}
			for _, k := range parsed[i].KeysRemoved {
				if !endedInHistory[at{k, t}] {
					problems = append(problems, fmt.Sprintf("event %d removed key %s (thumbprint %s), which the key history does not end then",
						e.StreamSeq, k.KeyID, k.Thumbprint))
				}
			}
		}
	}
	return problems
}
