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
	tuneGC(os.Args[1:], os.Getenv)
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

// The garbage collector's settings the service (serve, dev) runs with
// unless the environment sets GOGC or GOMEMLIMIT: a high target, bounded
// by a memory limit (both described in the Go GC guide). The service keeps
// a small live heap (a few tens of MiB) and allocates much per request, so
// at Go's default target of 100 the collector took a sixth of its CPU
// under load. At gcPercent the heap may grow to five times the live one
// between collections, and under the benchmark's load the service spends
// 10–20% less CPU an operation (cmd/quittance-bench/BENCHMARK.md). The
// memory limit bounds what that costs where the live heap is larger (the
// reconciliation reads over a million delegations): near it the collector
// runs as often as it must, whatever the target. There the service peaked
// at 89 MiB of RSS at the default target, 212 MiB at gcPercent alone, and
// 125 MiB with the limit too (RSS is some 25 MiB over the limit: the
// binary and what the runtime does not count), within the 150 MiB the
// benchmark holds it to. The client commands keep Go's defaults: one that
// verifies a large evidence pack may hold more than the limit, and would
// spend its time collecting.
const (
	gcPercent   = 400
	memoryLimit = 100 << 20
)

// tuneGC applies, when args run the service, gcPercent unless getenv has
// GOGC and memoryLimit unless it has GOMEMLIMIT: the runtime has applied
// those already.
func tuneGC(args []string, getenv func(string) string) {
	if len(args) == 0 || (args[0] != "serve" && args[0] != "dev") {
		return
	}
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
}

// run is the whole program, callable from tests: arguments, environment
// and output streams are parameters, never globals.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	root := newRootCommand(getenv, stdout, stderr)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}
