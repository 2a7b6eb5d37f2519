package interop

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/internal/jose"
)

// TestQuittanceVerifiesTheKitsCardSignature: a card signed with the kit's
// SignCard verifies as Quittance verifies a card it fetches (the JCS
// payload of the card as served, the detached signature, the org's
// registered keys), for every key type the kit signs with; the same card
// against another org's keys, or with one member changed after signing, is
// refused. A second signature keeps the first.
func TestQuittanceVerifiesTheKitsCardSignature(t *testing.T) {
	card := []byte(`{"name":"Acme supplier","url":"https://agent.acme.example/a2a","version":"1.2.0",` +
		`"capabilities":{"extensions":[{"uri":"https://quittance.dev/a2a/compensation/v1","required":false,"params":{"atomicCancel":true}}]},` +
		`"skills":[{"id":"po","name":"Purchase orders","description":"Places and voids purchase orders","tags":["procurement"]}],` +
		`"defaultInputModes":["text/plain"],"defaultOutputModes":["application/json"]}`)
	for _, alg := range []string{"EdDSA", "ES256", "ES384", "PS256"} {
		t.Run(alg, func(t *testing.T) {
			s, registered := newSignerAlg(t, "acme-card-1", alg)
			_, other := newSignerAlg(t, "acme-card-1", alg)
			signed, err := s.SignCard(card)
			if err != nil {
				t.Fatal(err)
			}
			sigs := cardSignatures(t, signed)
			if len(sigs) != 1 {
				t.Fatalf("%d signatures, want 1", len(sigs))
			}
			if err := verifyCard(signed, sigs[0], registered); err != nil {
				t.Fatalf("the kit's card signature is refused: %v", err)
			}
			if err := verifyCard(signed, sigs[0], other); err == nil {
				t.Fatal("the card verified against another key of the same kid")
			}
			changed := []byte(strings.Replace(string(signed), `"atomicCancel":true`, `"atomicCancel":false`, 1))
			if err := verifyCard(changed, sigs[0], registered); err == nil {
				t.Fatal("a card whose params changed after signing verified")
			}
			twice, err := s.SignCard(signed)
			if err != nil {
				t.Fatal(err)
			}
			if sigs := cardSignatures(t, twice); len(sigs) != 2 || verifyCard(twice, sigs[0], registered) != nil || verifyCard(twice, sigs[1], registered) != nil {
				t.Fatalf("signed twice: %d signatures, not both verifying", len(sigs))
			}
		})
	}
	s, _ := newSigner(t, "acme-card-2")
	if _, err := s.SignCard([]byte(`not json`)); err == nil {
		t.Fatal("a card that is not JSON was signed")
	}
}

// cardSignatures reads a served card's "signatures".
func cardSignatures(t *testing.T, card []byte) []a2a.CardSignature {
	t.Helper()
	var w struct {
		Signatures []a2a.CardSignature `json:"signatures"`
	}
	if err := json.Unmarshal(card, &w); err != nil {
		t.Fatal(err)
	}
	return w.Signatures
}

// verifyCard verifies sig over card as Quittance does, with the org's
// registered JWK Set jwks.
func verifyCard(card []byte, sig a2a.CardSignature, jwks []byte) error {
	payload, err := a2a.CardSigningPayload(card)
	if err != nil {
		return err
	}
	keys, err := jose.ParseOrgJWKS(jwks)
	if err != nil {
		return err
	}
	_, err = jose.VerifyDetached(sig.Protected, sig.Signature, payload, keys)
	return err
}
