//go:build !failpoints

package failpoint_test

import (
	"testing"

	"github.com/quittance/quittance/ledger/failpoint"
)

// Without the build tag an armed failpoint must not fire: production
// binaries are built without it.
func TestInjectWithoutTagDoesNothing(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "after-hold-commit")
	if failpoint.Enabled {
		t.Fatal("failpoints are enabled without the failpoints build tag")
	}
	failpoint.Inject("after-hold-commit") // the test process survives
}
