package pgcluster_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/quittance/quittance/sql/pgcluster"
)

// TestAptInstallTakesTurns: installs that run at once, as the test
// packages of `make test` do on a fresh machine, all succeed instead of
// failing on dpkg's lock. Without root or apt-get, AptInstall says it
// cannot install and runs nothing.
func TestAptInstallTakesTurns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := exec.LookPath("apt-get"); err != nil || os.Geteuid() != 0 {
		if err := pgcluster.AptInstall(ctx, nil, "postgresql"); !errors.Is(err, pgcluster.ErrAptUnavailable) {
			t.Fatalf("AptInstall without root and apt-get: %v, want ErrAptUnavailable", err)
		}
		return
	}
	// The server package this suite runs on is installed already: each
	// install takes dpkg's lock and finds nothing to do.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = pgcluster.AptInstall(ctx, nil, "postgresql") })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("install %d: %v", i, err)
		}
	}
}
