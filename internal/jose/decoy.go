package jose

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"sync"

	gojose "github.com/go-jose/go-jose/v4"
)

// GenerateDecoyKeys makes the decoy keys now, once per process, so that
// no request pays for them: the first token that needed one would take
// longer than any other. Services that verify tokens call it at start-up.
func GenerateDecoyKeys() { decoyKeys() }

// decoyKeys are public keys, one for each allowed algorithm, that the
// process generates once and whose private halves it throws away: nothing
// verifies with them. Verify checks the signature of a token that passed
// the header rules against the decoy of its alg when it has no usable key
// for it — an unknown kid, or no keys at all, as a caller passes for a
// signer it does not know or no longer trusts — so that such a token costs
// the one signature verification a token with a known key costs, and the
// time taken does not tell which signers and kids exist. The RSA decoy has
// the smallest modulus accepted (minRSABits): a larger RSA key costs more
// to verify with than the decoy does.
var decoyKeys = sync.OnceValue(func() map[gojose.SignatureAlgorithm]any {
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(fmt.Sprintf("jose: generate Ed25519 decoy key: %v", err))
	}
	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(fmt.Sprintf("jose: generate P-256 decoy key: %v", err))
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		panic(fmt.Sprintf("jose: generate P-384 decoy key: %v", err))
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, minRSABits)
	if err != nil {
		panic(fmt.Sprintf("jose: generate RSA decoy key: %v", err))
	}
	return map[gojose.SignatureAlgorithm]any{
		gojose.EdDSA: ed.Public(), gojose.ES256: p256.Public(), gojose.ES384: p384.Public(), gojose.PS256: rsaKey.Public(),
	}
})
