package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
)

// usageError marks an error in how the command was invoked (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// Exit statuses of the quittance command (errkind holds the table).
const (
	exitFailure  = errkind.ExitFailure
	exitUsage    = errkind.ExitUsage
	exitConflict = errkind.ExitConflict
)

// exitCode maps an error to the command's exit status.
func exitCode(err error) int {
	var usage usageError
	var status statusError
	switch {
	case errors.As(err, &usage):
		return exitUsage
	case errors.As(err, &status):
		return status.exitCode()
	}
	return exitFailure
}

// statusError is an error a client command received from the API.
type statusError interface {
	error
	exitCode() int
}

func newRootCommand(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "quittance",
		Short:         "Quittance: a delegator-side ledger for work delegated over A2A",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		&cobra.Command{
			Use:   "serve",
			Short: "Serve the API on DATABASE_URL (production)",
			Args:  noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return untilStopped(cmd.Context(), stderr, serve(cmd.Context(), getenv, stdout, stderr))
			},
		},
		&cobra.Command{
			Use:   "dev",
			Short: "Serve the API on a private PostgreSQL cluster under QUITTANCE_DATA_DIR",
			Long: "dev runs the service for local work: unless DATABASE_URL is set, it creates (on first run) and starts a " +
				"PostgreSQL cluster under QUITTANCE_DATA_DIR from the machine's PostgreSQL binaries, migrates it, " +
				"and prints an on-call token. Ctrl-C stops the service and the cluster.",
			Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return untilStopped(cmd.Context(), stderr, dev(cmd.Context(), getenv, stdout, stderr))
			},
		},
		&cobra.Command{
			Use:   "migrate",
			Short: "Apply pending migrations to DATABASE_URL and exit",
			Args:  noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return migrate(cmd.Context(), getenv, stderr)
			},
		},
	)
	// Client commands for on-call and finance: they talk to the API at
	// QUITTANCE_URL with QUITTANCE_TOKEN.
	root.AddCommand(
		newObligationsCommand(getenv, stdout),
		newDelegationsCommand(getenv, stdout),
		newWriteOffCommand(getenv, stdout),
		newWriteOffsCommand(getenv, stdout),
		newCompensationCommand(getenv, stdout),
		newBudgetsCommand(getenv, stdout),
		newOrgsCommand(getenv, stdout),
		newSweepCommand(getenv, stdout),
		newTokenCommand(getenv, stdout),
		newPrincipalsCommand(getenv, stdout),
		newCredentialsCommand(getenv, stdout),
		newChangesCommand(getenv, stdout),
		newVerifyChainCommand(getenv, stdout, stderr),
		newCheckpointsCommand(getenv, stdout),
		newEvidencePackCommand(getenv, stdout),
		newVerifyPackCommand(stdout),
		newLedgerKeysCommand(getenv, stdout),
		newRevokedReleasesCommand(getenv, stdout),
		newWebhooksCommand(getenv, stdout),
		newTaskClassesCommand(getenv, stdout),
		newEvidenceCommand(getenv, stdout),
	)
	// A demo supplier's A2A agent, for the local walk-through.
	root.AddCommand(newDemoAgentCommand(getenv, stdout, stderr))
	return root
}

// untilStopped is the result of a command that serves until it is told to
// stop. Once ctx is canceled (SIGINT or SIGTERM), stopping is what was
// asked for: an error on the way out (start-up cut short, say) is reported
// on stderr and the exit is clean. Errors of a command that was not told to
// stop are returned as they are.
func untilStopped(ctx context.Context, stderr io.Writer, err error) error {
	if err != nil && ctx.Err() != nil {
		fmt.Fprintln(stderr, "quittance: stopped before start-up completed:", err)
		return nil
	}
	return err
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("%s takes no arguments", cmd.CommandPath())}
	}
	return nil
}
