package compensation

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/ledger"
)

// AcceptedToken is a signed ack or declaration the ledger accepted, as it
// is verified again later (by verify-chain, or offline from an evidence
// pack).
type AcceptedToken struct {
	// Token is the token as stored on the event.
	Token []byte
	// Kind is the kind of evidence the event says it is.
	Kind TokenKind
	// OrgID is the org that owns the delegation.
	OrgID string
	// LedgerID is the ledger's id, the token's "aud".
	LedgerID string
	// AcceptedAt is when the ledger accepted the token: the event's time.
	AcceptedAt time.Time
	// History is the org's key history (all of it, or at least the keys in
	// force at AcceptedAt).
	History []ledger.OrgKey
	// Recorded is the key the event says verified the token; empty on
	// events recorded before the ledger named the key.
	Recorded ledger.KeyRef
}

// VerifyAccepted verifies an accepted token against the org's keys in force
// when it was accepted — never its current keys — and returns its claims
// and the key that verified it. Each key's thumbprint is computed again
// from its JWK and must equal the one recorded, and when the event names
// the key that verified the token at acceptance, it must be that key.
func VerifyAccepted(in AcceptedToken) (Claims, ledger.OrgKey, error) {
	inForce := ledger.KeysInForceAt(in.History, in.AcceptedAt)
	if len(inForce) == 0 {
		return Claims{}, ledger.OrgKey{}, fmt.Errorf("org %s had no keys in force at %s", in.OrgID, in.AcceptedAt.Format(time.RFC3339Nano))
	}
	set := &jose.JSONWebKeySet{Keys: make([]jose.JSONWebKey, len(inForce))}
	for i, k := range inForce {
		tp, err := ledger.JWKThumbprint(k.JWK)
		if err != nil {
			return Claims{}, ledger.OrgKey{}, fmt.Errorf("key %s: %w", k.KeyID, err)
		}
		if tp != k.Thumbprint {
			return Claims{}, ledger.OrgKey{}, fmt.Errorf("key %s: thumbprint %s is not its JWK's (%s)", k.KeyID, k.Thumbprint, tp)
		}
		if err := set.Keys[i].UnmarshalJSON(k.JWK); err != nil {
			return Claims{}, ledger.OrgKey{}, fmt.Errorf("key %s: %w", k.KeyID, err)
		}
		if set.Keys[i].KeyID != k.KeyID {
			return Claims{}, ledger.OrgKey{}, fmt.Errorf("key %s: its JWK has kid %q", k.KeyID, set.Keys[i].KeyID)
		}
	}
	claims, err := Verify(VerifyInput{Token: in.Token, Kind: in.Kind, OrgID: in.OrgID, Keys: set, LedgerID: in.LedgerID, Now: in.AcceptedAt})
	if err != nil {
		return Claims{}, ledger.OrgKey{}, err
	}
	var used ledger.OrgKey
	for _, k := range inForce {
		if k.KeyID == claims.KeyID {
			used = k
		}
	}
	if in.Recorded.Thumbprint != "" && (in.Recorded.Thumbprint != used.Thumbprint || in.Recorded.KeyID != used.KeyID) {
		return Claims{}, ledger.OrgKey{}, fmt.Errorf("verified by key %s (%s), but the event records key %s (%s)",
			used.KeyID, used.Thumbprint, in.Recorded.KeyID, in.Recorded.Thumbprint)
	}
	return claims, used, nil
}

// VerifyStoredEvent verifies the signed token stored on e, an event of the
// delegation of (orgID, remoteTaskID), as the ledger accepted it: against
// the org's keys in force at the event's time (VerifyAccepted, with the key
// the event records), for the kind of evidence the event says it is, and
// about that delegation's task (its "sub"). It returns the token's claims
// and the key that verified it. It is the one way a stored token is
// verified again: verify-chain, verify-pack and the console's timeline call
// it, so none of them can pass a token another would refuse.
func VerifyStoredEvent(orgID, remoteTaskID, ledgerID string, e ledger.Event, history []ledger.OrgKey) (Claims, ledger.OrgKey, error) {
	var data struct {
		Kind          string `json:"kind"`
		KeyID         string `json:"kid"`
		KeyThumbprint string `json:"key_thumbprint"`
	}
	_ = json.Unmarshal(e.Data, &data)
	kind := TokenKind(data.Kind)
	switch e.Type {
	case ledger.EventTypeCompensationAcked:
		kind = KindAck
	case ledger.EventTypeNoCompensationDeclared:
		kind = KindDeclaration
	}
	if !kind.Valid() {
		return Claims{}, ledger.OrgKey{}, errors.New("the event does not say which kind of token it stores")
	}
	claims, key, err := VerifyAccepted(AcceptedToken{
		Token: []byte(e.Evidence), Kind: kind, OrgID: orgID, LedgerID: ledgerID, AcceptedAt: e.At, History: history,
		Recorded: ledger.KeyRef{KeyID: data.KeyID, Thumbprint: data.KeyThumbprint},
	})
	if err != nil {
		return Claims{}, ledger.OrgKey{}, err
	}
	if claims.Subject != remoteTaskID {
		return Claims{}, ledger.OrgKey{}, fmt.Errorf("sub %q is not the delegation's remote task %q", claims.Subject, remoteTaskID)
	}
	return claims, key, nil
}
