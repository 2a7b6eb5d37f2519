package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	gojose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/internal/text"
	"github.com/quittance/quittance/ledger"
)

// ErrAgentCardNotUsed reports an org's agent card Quittance does not send
// to (ledger/DESIGN.md §4.1): none of its signatures verifies, it is
// unsigned where the org requires a signed card, or its signing key or
// compensation params changed and wait for on-call's approval. Nothing
// was sent to its interfaces; the job that needed it is retried.
var ErrAgentCardNotUsed = errors.New("agent card not used")

// checkCard verifies card's signatures (A2A.md, "Signed agent cards") and
// has the ledger record the result and decide whether the card is used.
// It returns what the check observed.
func (w *Worker) checkCard(ctx context.Context, org ledger.Org, card a2a.AgentCard) (ledger.CardObservation, error) {
	obs := w.verifyCard(ctx, org, card)
	check, err := w.cfg.ObserveAgentCard(ctx, org.ID, obs)
	if err != nil {
		return ledger.CardObservation{}, err
	}
	if !check.Used {
		return ledger.CardObservation{}, fmt.Errorf("%w: org %s's card is %s: %s", ErrAgentCardNotUsed, org.ID, check.State(), check.Reason)
	}
	return obs, nil
}

// verifyCard checks the card's signatures in turn until one verifies.
func (w *Worker) verifyCard(ctx context.Context, org ledger.Org, card a2a.AgentCard) ledger.CardObservation {
	obs := ledger.CardObservation{Signed: len(card.Signatures) > 0}
	if ext, ok := card.Extension(compensation.ExtensionURI); ok {
		obs.CompensationParams = ext.Params
		if len(obs.CompensationParams) == 0 {
			obs.CompensationParams = json.RawMessage(`{}`)
		}
	}
	var reasons []string
	for i, sig := range card.Signatures {
		v, err := w.verifyCardSignature(ctx, org, sig, card.SignedPayload)
		if err == nil {
			obs.Verified, obs.KeyID, obs.Thumbprint = true, v.KeyID, v.KeyThumbprint
			return obs
		}
		reasons = append(reasons, fmt.Sprintf("signature %d: %v", i+1, err))
	}
	obs.Reason = text.Truncate(strings.Join(reasons, "; "), 1000)
	return obs
}

// verifyCardSignature verifies one signature with the key its kid names:
// among the org's registered keys in force, or, when its protected header
// has a jku, among the keys served there — only where the jku's host is
// one of the org's card_jku_hosts. A kid none of the keys in force of an
// org registered by JWKS URL has makes the URL be fetched at once, as for
// a receipt (Config.RefreshOrgKeysForKid, rate-limited per org).
func (w *Worker) verifyCardSignature(ctx context.Context, org ledger.Org, sig a2a.CardSignature, payload []byte) (jose.Verified, error) {
	h, err := jose.ParseDetachedHeader(sig.Protected)
	if err != nil {
		return jose.Verified{}, err
	}
	keys, err := w.cardKeys(ctx, org, h.JKU)
	if err != nil {
		return jose.Verified{}, err
	}
	v, err := jose.VerifyDetached(sig.Protected, sig.Signature, payload, keys)
	var r *jose.Refusal
	if err == nil || h.JKU != "" || org.JWKSURL == "" || w.cfg.RefreshOrgKeysForKid == nil ||
		!errors.As(err, &r) || r.Reason != jose.KeyUnknown || !w.cfg.RefreshOrgKeysForKid(ctx, org.ID, h.KeyID) {
		return v, err
	}
	if org, err = w.store.Org(ctx, org.ID); err != nil {
		return jose.Verified{}, err
	}
	if keys, err = w.cardKeys(ctx, org, ""); err != nil {
		return jose.Verified{}, err
	}
	return jose.VerifyDetached(sig.Protected, sig.Signature, payload, keys)
}

// cardKeys returns the keys a card signature may be verified with.
func (w *Worker) cardKeys(ctx context.Context, org ledger.Org, jku string) (*gojose.JSONWebKeySet, error) {
	raw := []byte(org.KeySet())
	if jku != "" {
		u, err := url.Parse(jku)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			return nil, fmt.Errorf("jku %q is not an http(s) URL", text.Truncate(jku, 200))
		}
		host := u.Hostname()
		if !slices.ContainsFunc(org.CardJKUHosts, func(h string) bool { return strings.EqualFold(h, host) }) {
			return nil, fmt.Errorf("jku host %q is not one of the org's card_jku_hosts", text.Truncate(host, 200))
		}
		if w.cfg.FetchJWKS == nil {
			return nil, errors.New("jku keys are not fetched by this service")
		}
		if raw, err = w.cfg.FetchJWKS(ctx, jku); err != nil {
			return nil, fmt.Errorf("fetch jku: %w", err)
		}
	}
	if len(raw) == 0 {
		return nil, nil // no keys: every kid is unknown
	}
	return jose.ParseOrgJWKS(raw)
}
