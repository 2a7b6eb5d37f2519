package compensation

import (
	"sync"

	jose "github.com/go-jose/go-jose/v4"
)

// signatureChecks counts, per token text, the signature checks
// checkSignature made, decoys included. The hook is installed before any
// test runs and never changed, so parallel tests may read the counts.
var signatureChecks struct {
	sync.Mutex
	n map[string]int
}

func init() {
	signatureChecks.n = map[string]int{}
	testHookSignatureCheck = func(token string) {
		signatureChecks.Lock()
		defer signatureChecks.Unlock()
		signatureChecks.n[token]++
	}
}

// SignatureChecks reports how many times token's signature was checked,
// against a registered key or a decoy.
func SignatureChecks(token string) int {
	signatureChecks.Lock()
	defer signatureChecks.Unlock()
	return signatureChecks.n[token]
}

// DecoyKeyFits reports whether the decoy key of alg has the type, curve
// and size alg requires, so checking a signature with it does the work a
// registered key of alg does.
func DecoyKeyFits(alg jose.SignatureAlgorithm) bool {
	return keyFitsAlgorithm(decoyKeys()[alg], alg)
}
