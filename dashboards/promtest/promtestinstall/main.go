// Command promtestinstall makes sure prometheus and promtool are installed,
// installing Debian's prometheus package (as root, with apt-get) when they
// are missing: the same way the Prometheus integration test does, for
// `make check-rules` and CI. It exits 1, saying how to install them, when
// they are missing and it cannot install them.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/quittance/quittance/dashboards/promtest"
)

func main() {
	_, err := promtest.FindBinaries()
	if errors.Is(err, promtest.ErrNotInstalled) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		if err = promtest.InstallBinaries(ctx, log); err == nil {
			_, err = promtest.FindBinaries()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "promtestinstall:", err)
		os.Exit(1)
	}
}
