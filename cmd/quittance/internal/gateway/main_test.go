package gateway_test

import (
	"testing"

	"github.com/quittance/quittance/internal/leaktest"
)

// TestMain fails the package's tests when they leave goroutines running
// (internal/leaktest says which are expected).
func TestMain(m *testing.M) { leaktest.Main(m) }
