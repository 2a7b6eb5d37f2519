package compensation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/ledger"
)

var _ ledger.CheckpointSigner = (*Identity)(nil)

// SignCheckpoint implements ledger.CheckpointSigner: a compact JWS (EdDSA,
// typ ledger.CheckpointType, kid of the active key) of the checkpoint's
// payload, signed with the key published at /.well-known/jwks.json.
func (id *Identity) SignCheckpoint(payload []byte) (jws, kid string, err error) {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: id.active},
		(&jose.SignerOptions{}).WithType(ledger.CheckpointType))
	if err != nil {
		return "", "", fmt.Errorf("sign checkpoint: %w", err)
	}
	sig, err := signer.Sign(payload)
	if err != nil {
		return "", "", fmt.Errorf("sign checkpoint: %w", err)
	}
	jws, err = sig.CompactSerialize()
	return jws, id.active.KeyID, err
}

// VerifyCheckpoint implements ledger.CheckpointSigner: it verifies a
// checkpoint with the identity's own keys, those it publishes.
func (id *Identity) VerifyCheckpoint(jws string) (ledger.CheckpointPayload, error) {
	p, _, err := VerifyCheckpoint(jws, id.JWKS(), "")
	return p, err
}

// VerifyCheckpoint verifies a signed checkpoint against the ledger's JWK
// Set (EdDSA only, kid looked up in the set, typ ledger.CheckpointType) and,
// unless ledgerID is empty, checks that it is ledgerID's. It returns the signed payload and the kid
// that signed it. Nothing in the checkpoint is trusted before this.
func VerifyCheckpoint(token string, ledgerJWKS []byte, ledgerID string) (ledger.CheckpointPayload, string, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(ledgerJWKS, &set); err != nil {
		return ledger.CheckpointPayload{}, "", fmt.Errorf("ledger JWKS: %w", err)
	}
	jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return ledger.CheckpointPayload{}, "", fmt.Errorf("parse checkpoint: %w", err)
	}
	h := jws.Signatures[0].Protected
	if typ, _ := h.ExtraHeaders[jose.HeaderType].(string); typ != ledger.CheckpointType {
		return ledger.CheckpointPayload{}, "", fmt.Errorf("checkpoint typ %q is not %s", typ, ledger.CheckpointType)
	}
	keys := set.Key(h.KeyID)
	if len(keys) != 1 {
		return ledger.CheckpointPayload{}, "", fmt.Errorf("kid %q is not in the ledger's JWKS", h.KeyID)
	}
	payload, err := jws.Verify(keys[0])
	if err != nil {
		return ledger.CheckpointPayload{}, "", fmt.Errorf("checkpoint signature: %w", err)
	}
	var p ledger.CheckpointPayload
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return ledger.CheckpointPayload{}, "", fmt.Errorf("checkpoint payload: %w", err)
	}
	switch {
	case ledgerID != "" && p.LedgerID != ledgerID:
		return ledger.CheckpointPayload{}, "", fmt.Errorf("checkpoint of ledger %q, not %q", p.LedgerID, ledgerID)
	case p.ID < 1 || p.At.IsZero():
		return ledger.CheckpointPayload{}, "", errors.New("checkpoint without an id or a time")
	}
	return p, h.KeyID, nil
}
