package a2a

import (
	"encoding/json"
	"fmt"

	"github.com/gowebpki/jcs"
)

// maxCardSignatures caps the signatures of one card read.
const maxCardSignatures = 16

// CardSignature is one AgentCardSignature of a card, as served: a JWS with
// a detached payload, its protected header and signature in base64url. The
// unprotected header is not kept: nothing in it is trusted.
type CardSignature struct {
	Protected string `json:"protected"`
	Signature string `json:"signature"`
}

// CardSigningPayload is what an agent card's signatures sign: the card as
// served without its "signatures" member, in the RFC 8785 (JCS) canonical
// form. Members the signer left at their defaults are kept as served
// (A2A 1.0's canonicalization leaves them unsettled; delegate/A2A.md).
func CardSigningPayload(card []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(card, &m); err != nil {
		return nil, fmt.Errorf("%w: agent card: %w", ErrMalformedResponse, err)
	}
	delete(m, "signatures")
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: agent card: canonical form: %w", ErrMalformedResponse, err)
	}
	return out, nil
}

// readCardSignatures reads the card's "signatures" and, when there are
// any, the payload they sign.
func readCardSignatures(body []byte) ([]CardSignature, []byte, error) {
	var w struct {
		Signatures []CardSignature `json:"signatures"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, nil, fmt.Errorf("%w: agent card signatures: %w", ErrMalformedResponse, err)
	}
	if len(w.Signatures) == 0 {
		return nil, nil, nil
	}
	if len(w.Signatures) > maxCardSignatures {
		return nil, nil, fmt.Errorf("%w: agent card has more than %d signatures", ErrMalformedResponse, maxCardSignatures)
	}
	payload, err := CardSigningPayload(body)
	if err != nil {
		return nil, nil, err
	}
	return w.Signatures, payload, nil
}
