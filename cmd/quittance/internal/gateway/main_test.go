package gateway_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/quittance/quittance/internal/leaktest"
)

// TestMain fails the package's tests when they leave goroutines running
// (internal/leaktest says which are expected). Besides those, the demo
// supplier's push deliveries may still be retrying, a few hundred
// milliseconds apart, towards the Quittance of a test that ended: the
// agent's Close does not wait for pushes in flight, and they end by
// themselves once their attempts run out.
func TestMain(m *testing.M) {
	leaktest.Main(m, goleak.IgnoreAnyFunction("github.com/quittance/quittance/cmd/quittance/internal/demoagent.(*Agent).drainPush"))
}
