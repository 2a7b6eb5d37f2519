package console

import (
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
)

// Key is a public key of an org's JWK Set as the console shows it.
type Key struct {
	KeyID string
	Type  string
	Alg   string
	Use   string
	// Thumbprint is the key's RFC 7638 SHA-256 thumbprint, base64url.
	Thumbprint string
}

// orgKeys lists the keys of a registered JWK Set with their thumbprints.
func orgKeys(raw []byte) ([]Key, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	set, err := compensation.ParseOrgJWKS(raw)
	if err != nil {
		return nil, err
	}
	out := make([]Key, 0, len(set.Keys))
	for _, k := range set.Keys {
		out = append(out, keyOf(k))
	}
	return out, nil
}

func keyOf(k jose.JSONWebKey) Key {
	key := Key{KeyID: k.KeyID, Alg: k.Algorithm, Use: k.Use, Type: keyType(k)}
	if tp, err := k.Thumbprint(crypto.SHA256); err == nil {
		key.Thumbprint = base64.RawURLEncoding.EncodeToString(tp)
	}
	return key
}

func keyType(k jose.JSONWebKey) string {
	var m map[string]any
	if b, err := k.MarshalJSON(); err == nil && json.Unmarshal(b, &m) == nil {
		kty, _ := m["kty"].(string)
		if crv, ok := m["crv"].(string); ok {
			return kty + " " + crv
		}
		return kty
	}
	return ""
}

// Evidence is a stored token of an event, decoded and verified again.
type Evidence struct {
	// Header and Claims are the token's decoded header and payload.
	Header string
	Claims string
	// Kind is the token's typ.
	Kind string
	// Verified is true when the signature and claims verify, as at the
	// time the event was recorded, against the org's registered keys.
	Verified bool
	// Key is the key that verified it.
	Key *Key
	// Problem says why it did not verify.
	Problem string
}

// decodeEvidence decodes a compact JWS for display and verifies it with
// compensation.Verify, as of the time the event recorded it, against the
// org's keys as registered now. (Keys rotated away since then no longer
// verify; the keys in force at the time are kept by another part of the
// ledger once it has key history.)
func decodeEvidence(token string, org ledger.Org, ledgerID string, at time.Time) *Evidence {
	if token == "" {
		return nil
	}
	ev := &Evidence{}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		ev.Problem = "not a compact JWS"
		return ev
	}
	header, err1 := base64.RawURLEncoding.DecodeString(parts[0])
	claims, err2 := base64.RawURLEncoding.DecodeString(parts[1])
	if err1 != nil || err2 != nil {
		ev.Problem = "not base64url"
		return ev
	}
	ev.Header, ev.Claims = prettyJSON(header), prettyJSON(claims)
	var h struct {
		Typ string `json:"typ"`
		Kid string `json:"kid"`
	}
	_ = json.Unmarshal(header, &h)
	ev.Kind = h.Typ
	kind := compensation.TokenKind(h.Typ)
	if !kind.Valid() {
		ev.Problem = "the typ header names no kind of compensation evidence"
		return ev
	}
	set, err := compensation.ParseOrgJWKS(org.KeySet())
	if err != nil || len(org.KeySet()) == 0 {
		ev.Problem = "the org has no usable registered keys"
		return ev
	}
	_, err = compensation.Verify(compensation.VerifyInput{
		Token: []byte(token), Kind: kind, OrgID: org.ID, Keys: set, LedgerID: ledgerID, Now: at,
	})
	var refusal *compensation.RefusalError
	switch {
	case errors.As(err, &refusal):
		ev.Problem = refusal.Code + ": " + refusal.Detail
		return ev
	case err != nil:
		ev.Problem = err.Error()
		return ev
	}
	ev.Verified = true
	for _, k := range set.Key(h.Kid) {
		key := keyOf(k)
		ev.Key = &key
		break
	}
	return ev
}
