package compensation

import (
	"sync"

	"github.com/quittance/quittance/internal/jose"
)

// signatureChecks counts, per token text, the signature checks jose.Verify
// made, decoys included. The hook is installed before any test runs and
// never changed, so parallel tests may read the counts.
var signatureChecks struct {
	sync.Mutex
	n map[string]int
}

func init() {
	signatureChecks.n = map[string]int{}
	jose.TestHookSignatureCheck = func(token string) {
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
