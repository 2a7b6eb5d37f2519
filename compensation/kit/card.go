package kit

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/go-jose/go-jose/v4"
	"github.com/gowebpki/jcs"
)

// SignCard returns the agent card card (JSON, as the agent serves it)
// with one A2A 1.0 signature of the org's key added to its "signatures":
// a detached JWS over the RFC 8785 (JCS) canonical form of the card
// without "signatures", its protected header naming the algorithm and the
// key's kid. Serve the result exactly as returned: Quittance verifies the
// signature over the card it fetches, canonicalized the same way, with the
// keys registered for the org (delegate/A2A.md, "Signed agent cards").
// Signatures already on the card are kept.
func (s *Signer) SignCard(card []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(card, &m); err != nil {
		return nil, fmt.Errorf("kit: agent card: %w", err)
	}
	var sigs []cardSignature
	if raw, ok := m["signatures"]; ok {
		if err := json.Unmarshal(raw, &sigs); err != nil {
			return nil, fmt.Errorf("kit: agent card signatures: %w", err)
		}
		delete(m, "signatures")
	}
	unsigned, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	payload, err := jcs.Transform(unsigned)
	if err != nil {
		return nil, fmt.Errorf("kit: agent card canonical form: %w", err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: s.alg, Key: s.cfg.Key},
		(&jose.SignerOptions{}).WithHeader(jose.HeaderKey("kid"), s.cfg.KeyID).WithType("JOSE"))
	if err != nil {
		return nil, fmt.Errorf("kit: %w", err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return nil, fmt.Errorf("kit: sign agent card: %w", err)
	}
	detached, err := jws.DetachedCompactSerialize()
	if err != nil {
		return nil, err
	}
	protected, signature, _ := strings.Cut(detached, "..")
	sigs = append(sigs, cardSignature{Protected: protected, Signature: signature})
	if m["signatures"], err = json.Marshal(sigs); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// cardSignature is an A2A 1.0 AgentCardSignature.
type cardSignature struct {
	Protected string          `json:"protected"`
	Signature string          `json:"signature"`
	Header    json.RawMessage `json:"header,omitempty"`
}
