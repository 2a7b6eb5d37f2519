package compensation

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	gojose "github.com/go-jose/go-jose/v4"
	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/audit"
)

// AcceptedToken is a signed ack or declaration the ledger accepted, as it
// is verified again later (by verify-chain, or offline from an evidence
// pack).
type AcceptedToken struct {
	// Token is the token as stored on the event.
	Token []byte
	// Kind is the kind of token the ledger accepted it as.
	Kind TokenKind
	// OrgID is the org that owns the delegation.
	OrgID string
	// LedgerID is the ledger's id, the token's "aud".
	LedgerID string
	// AcceptedAt is when the ledger accepted the token
	// (audit.StoredToken.AcceptedAt).
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
	set := &gojose.JSONWebKeySet{Keys: make([]gojose.JSONWebKey, len(inForce))}
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

// TokenOwner is the delegation whose stored tokens VerifyStoredTokens
// verifies, as its own events record it.
type TokenOwner struct {
	// DelegationID is its id, from which its compensation idempotency key
	// and its extra tasks' keys derive.
	DelegationID uuid.UUID
	// OrgID is its org (every token's "iss"), RemoteTaskID its remote task
	// (the "sub" of every token but an extra task's receipt's).
	OrgID, RemoteTaskID string
	// LedgerID is the ledger's id, every token's "aud".
	LedgerID string
	// History is the org's key history (all of it, or at least the keys in
	// force when each token was accepted).
	History []ledger.OrgKey
	// Slack is how long before its event a token may have been accepted
	// (audit.StoredTokens): the event-time slack.
	Slack time.Duration
}

// VerifiedToken is a stored token and what verifying it again found.
type VerifiedToken struct {
	audit.StoredToken
	// Claims and Key are its claims and the key that verified it, when Err
	// is nil.
	Claims Claims
	Key    ledger.OrgKey
	// Err says why it does not verify.
	Err error
}

// VerifyStoredTokens verifies every signed token stored on events (the
// owner's stream, in stream order) as the ledger accepted it
// (audit.StoredTokens): as the kind it was accepted as, against the org's
// keys in force when it was accepted, by the key the event records
// (VerifyAccepted), about the task it was accepted for (the delegation's
// remote task, or the extra task an extra task's receipt answers), with
// the event's jti and token_sha256 the token's and an ack's
// idempotency_key the one that task's compensation carries (none is
// required of an atomic receipt, which answers no request). It is the one
// way a stored token is verified again: verify-chain, verify-pack and the
// console's timeline call it, so none of them can pass a token another
// would refuse, or refuse one another passes.
func VerifyStoredTokens(owner TokenOwner, events []ledger.Event) []VerifiedToken {
	stored := audit.StoredTokens(events, owner.Slack)
	out := make([]VerifiedToken, len(stored))
	for i, st := range stored {
		out[i] = VerifiedToken{StoredToken: st}
		out[i].Claims, out[i].Key, out[i].Err = verifyStoredToken(owner, st)
	}
	return out
}

func verifyStoredToken(owner TokenOwner, st audit.StoredToken) (Claims, ledger.OrgKey, error) {
	if st.Problem != "" {
		return Claims{}, ledger.OrgKey{}, errors.New(st.Problem)
	}
	claims, key, err := VerifyAccepted(AcceptedToken{
		Token: []byte(st.Event.Evidence), Kind: TokenKind(st.Kind), OrgID: owner.OrgID, LedgerID: owner.LedgerID,
		AcceptedAt: st.AcceptedAt, History: owner.History, Recorded: st.Recorded,
	})
	if err != nil {
		return Claims{}, ledger.OrgKey{}, err
	}
	d := ledger.Delegation{ID: owner.DelegationID}
	task, idempotencyKey := owner.RemoteTaskID, ledger.CompensationKey(d)
	if st.ExtraTaskID != "" {
		task, idempotencyKey = st.ExtraTaskID, ExtraTaskKey(d, st.ExtraTaskID)
		if claims.Subject != task {
			return Claims{}, ledger.OrgKey{}, fmt.Errorf("sub %q is not the extra task %q the event answers", claims.Subject, task)
		}
	} else if claims.Subject != task {
		return Claims{}, ledger.OrgKey{}, fmt.Errorf("sub %q is not the delegation's remote task %q", claims.Subject, task)
	}
	sum := sha256.Sum256([]byte(st.Event.Evidence))
	if st.SHA256 != "" && st.SHA256 != hex.EncodeToString(sum[:]) {
		return Claims{}, ledger.OrgKey{}, errors.New("the event's token_sha256 is not the stored token's")
	}
	if st.JTI != "" && st.JTI != claims.JTI {
		return Claims{}, ledger.OrgKey{}, fmt.Errorf("the event's jti %q is not the token's %q", st.JTI, claims.JTI)
	}
	if claims.Kind == KindAck && st.Channel != ledger.ChannelAtomicCancel && claims.IdempotencyKey != idempotencyKey {
		if st.ExtraTaskID != "" {
			return Claims{}, ledger.OrgKey{}, errors.New("the ack's idempotency_key is not the extra task's")
		}
		return Claims{}, ledger.OrgKey{}, errors.New("the ack's idempotency_key is not the delegation's")
	}
	return claims, key, nil
}
