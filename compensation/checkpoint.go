package compensation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger/audit"
)

// CheckpointSigner is the ledger's identity as the ledger's checkpoints
// use it (audit.CheckpointSigner): it signs a checkpoint's payload with
// the key published at /.well-known/jwks.json and verifies a checkpoint
// with the keys it publishes.
type CheckpointSigner struct {
	// Identity is the ledger's own signing key.
	Identity *jose.Identity
}

var _ audit.CheckpointSigner = CheckpointSigner{}

// SignCheckpoint returns a compact JWS (EdDSA, typ audit.CheckpointType,
// kid of the active key) of the checkpoint's payload and that kid.
func (s CheckpointSigner) SignCheckpoint(payload []byte) (jws, kid string, err error) {
	return s.Identity.Sign(audit.CheckpointType, payload)
}

// VerifyCheckpoint verifies a checkpoint with the identity's own keys,
// those it publishes.
func (s CheckpointSigner) VerifyCheckpoint(jws string) (audit.CheckpointPayload, error) {
	p, _, err := VerifyCheckpoint(jws, s.Identity.JWKS(), "")
	return p, err
}

// VerifyCheckpoint verifies a signed checkpoint against the ledger's JWK
// Set (jose.VerifySigned: EdDSA only, kid looked up in the set, typ
// audit.CheckpointType) and, unless ledgerID is empty, checks that it is
// ledgerID's. It returns the signed payload and the kid that signed it.
// Nothing in the checkpoint is trusted before this.
func VerifyCheckpoint(token string, ledgerJWKS []byte, ledgerID string) (audit.CheckpointPayload, string, error) {
	payload, kid, err := jose.VerifySigned(token, ledgerJWKS, audit.CheckpointType)
	if err != nil {
		return audit.CheckpointPayload{}, "", fmt.Errorf("checkpoint: %w", err)
	}
	var p audit.CheckpointPayload
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return audit.CheckpointPayload{}, "", fmt.Errorf("checkpoint payload: %w", err)
	}
	switch {
	case ledgerID != "" && p.LedgerID != ledgerID:
		return audit.CheckpointPayload{}, "", fmt.Errorf("checkpoint of ledger %q, not %q", p.LedgerID, ledgerID)
	case p.ID < 1 || p.At.IsZero():
		return audit.CheckpointPayload{}, "", errors.New("checkpoint without an id or a time")
	}
	return p, kid, nil
}
