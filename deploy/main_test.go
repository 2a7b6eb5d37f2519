package deploy_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when one leaves a goroutine running.
// This module cannot import the main module's internal/leaktest, so it
// calls goleak directly.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
