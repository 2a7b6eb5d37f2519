package console

import (
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"

	gojose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/internal/jose"
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
	set, err := jose.ParseOrgJWKS(raw)
	if err != nil {
		return nil, err
	}
	out := make([]Key, 0, len(set.Keys))
	for _, k := range set.Keys {
		out = append(out, keyOf(k))
	}
	return out, nil
}

func keyOf(k gojose.JSONWebKey) Key {
	key := Key{KeyID: k.KeyID, Alg: k.Algorithm, Use: k.Use, Type: keyType(k)}
	if tp, err := k.Thumbprint(crypto.SHA256); err == nil {
		key.Thumbprint = base64.RawURLEncoding.EncodeToString(tp)
	}
	return key
}

func keyType(k gojose.JSONWebKey) string {
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
	// Verified is true when the token verifies as the ledger accepted it
	// (compensation.VerifyStoredTokens): as the kind it was accepted as,
	// against the org's keys in force when it was accepted, by the key the
	// event records, about the task it was accepted for.
	Verified bool
	// Key is the key of the org's key history that verified it.
	Key *Key
	// Problem says why it did not verify.
	Problem string
}

// verifyTimeline verifies every token stored on events, d's stream, with
// compensation.VerifyStoredTokens against the org's key history — the rule
// verify-chain applies, so a key rotated away since the event does not
// make accepted evidence look forged, and a key added since does not make
// a forgery pass. The results are by stream position.
func verifyTimeline(d ledger.Delegation, ledgerID string, events []ledger.Event, history []ledger.OrgKey) map[int32]compensation.VerifiedToken {
	out := map[int32]compensation.VerifiedToken{}
	owner := compensation.TokenOwner{
		DelegationID: d.ID, OrgID: d.OrgID, RemoteTaskID: d.Remote.TaskID, LedgerID: ledgerID, History: history, Slack: ledger.EventTimeSlack,
	}
	for _, v := range compensation.VerifyStoredTokens(owner, events) {
		out[v.Event.StreamSeq] = v
	}
	return out
}

// decodeEvidence decodes the token stored on e for display, with v, what
// verifying it again found (verifyTimeline).
func decodeEvidence(e ledger.Event, v compensation.VerifiedToken) *Evidence {
	if e.Evidence == "" {
		return nil
	}
	ev := &Evidence{}
	parts := strings.Split(e.Evidence, ".")
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
	}
	_ = json.Unmarshal(header, &h)
	ev.Kind = h.Typ
	used, err := v.Key, v.Err
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
	key := Key{KeyID: used.KeyID, Thumbprint: used.Thumbprint}
	var jwk gojose.JSONWebKey
	if jwk.UnmarshalJSON(used.JWK) == nil {
		key.Type, key.Alg, key.Use = keyType(jwk), jwk.Algorithm, jwk.Use
	}
	ev.Key = &key
	return ev
}
