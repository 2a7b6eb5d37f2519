// Command quittance-bench measures Quittance against the PostgreSQL it runs
// on, and soaks it under faults.
//
//	quittance-bench bench [flags]   pgbench vs. the Quittance lifecycle (one and several replicas), data scale
//	quittance-bench soak  [flags]   concurrent lifecycle on one or more replicas under SIGKILLs and PostgreSQL crashes
//	quittance-bench failover [flags] failover to a streaming standby; exports read from it
//
// Both subcommands start a private PostgreSQL cluster from the machine's
// binaries (sql/pgcluster, fsync on) in a temporary directory, build the
// real quittance binary and run `quittance serve` as subprocesses on
// loopback, so what is measured is what is deployed. Everything they start
// is stopped, and the temporary directory removed, when they return (with
// -keep the directory stays, for its logs).
//
// quittance-bench is a tool for engineers: it never talks to anything but
// the loopback interface and the cluster it started, and must never be
// pointed at a database that holds data anyone needs.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var v violationsError
	switch {
	case errors.As(err, &v):
		fmt.Fprintln(os.Stderr, "quittance-bench:", err)
		os.Exit(1)
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "quittance-bench:", err)
		os.Exit(1)
	}
}

// errUsage reports a command line that could not be parsed; the usage has
// been printed already.
var errUsage = errors.New("usage")

// violationsError is the soak's failure: an invariant or another check was violated.
type violationsError struct{ n int }

// Error implements error.
func (e violationsError) Error() string { return fmt.Sprintf("%d violations", e.n) }

const usage = `usage: quittance-bench <command> [flags]

commands:
  bench   pgbench tpcb-like (scale 1 for one hot budget, scale >= clients for
          many budgets) vs. the Quittance lifecycle at 8 and 32 clients; three
          replicas beside one; reconciliation, the console page and the sweep at 10M
          delegations
  failover  a primary and its streaming standby: the time from the primary's
          kill to the first write, the acknowledged answers lost with
          synchronous and asynchronous replication, and the lifecycle's
          throughput beside a CSV export read from the primary or the standby
  soak    concurrent lifecycle on -replicas service processes, with the demo
          agent as the remote, SIGKILLs of random replicas and immediate
          PostgreSQL restarts; checks every invariant, the agent's tasks, the
          webhook deliveries and a reconnecting event stream at the end

Run "quittance-bench <command> -h" for the flags of a command.
`

// run dispatches to a subcommand.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	switch args[0] {
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "soak":
		return runSoak(ctx, args[1:], stdout, stderr)
	case "failover":
		return runFailoverBench(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "unknown command %q\n%s", args[0], usage)
	return errUsage
}
