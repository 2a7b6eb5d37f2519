// Command quittance is the Quittance ledger: one binary that serves the API
// (serve, or dev on an embedded PostgreSQL), applies migrations (migrate),
// and carries the on-call and finance client commands.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

func main() {
	setGCPercent(os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	release := func() {}
	if len(os.Args) > 1 && os.Args[1] == "dev" {
		// Only the development server: a client command in a pipeline must
		// stay in the pipeline's process group.
		release = takeTerminalForeground()
	}
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	release()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quittance:", err)
		os.Exit(exitCode(err))
	}
}

// gcPercent is the garbage collector's target (GOGC) Quittance runs with
// unless the environment sets GOGC. The service keeps a small live heap (a
// few tens of MiB) and allocates a great deal per request, so at Go's
// default of 100 the collector took a sixth of the service's CPU under
// load. At 400 the heap may grow to five times the live one between
// collections: under the benchmark's load the service spends 10–20% less
// CPU an operation, and its peak RSS is 78 MiB instead of 52
// (cmd/quittance-bench/BENCHMARK.md).
const gcPercent = 400

// setGCPercent sets the collector's target to gcPercent unless getenv
// has GOGC, which the runtime has applied already.
func setGCPercent(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

// run is the whole program, callable from tests: arguments, environment
// and output streams are parameters, never globals.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	root := newRootCommand(getenv, stdout, stderr)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}
