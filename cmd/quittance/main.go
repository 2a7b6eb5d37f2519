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
	"syscall"
)

func main() {
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

// run is the whole program, callable from tests: arguments, environment
// and output streams are parameters, never globals.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	root := newRootCommand(getenv, stdout, stderr)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}
