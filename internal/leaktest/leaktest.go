// Package leaktest is the goroutine-leak check every test package runs
// from its TestMain: after the package's tests pass, no goroutine they
// started may still run, so a shutdown or revocation path that forgets one
// fails the suite. It is for tests only; no other code may import it.
package leaktest

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// ignored are the goroutines that outlive a package's tests by design, each
// with why.
var ignored = []goleak.Option{
	// Without pgtestenv, sql/pgtest starts one throwaway PostgreSQL cluster
	// per test binary and never stops it: it dies with the binary (a parent
	// death signal), and this goroutine waits for it until then.
	goleak.IgnoreAnyFunction("github.com/quittance/quittance/sql/pgcluster.(*Cluster).startLocked.func1"),
}

// Main runs the package's tests and then, if they passed, fails the run when
// goroutines other than the ignored ones (and extra) are still running.
// Connections that net/http's default transport keeps open for reuse are
// closed first: they belong to the process, not to a test.
func Main(m *testing.M, extra ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		http.DefaultClient.CloseIdleConnections()
		if err := goleak.Find(append(append([]goleak.Option{}, ignored...), extra...)...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines still running after the tests passed: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
