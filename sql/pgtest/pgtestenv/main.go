package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/quittance/quittance/sql/pgcluster"
	"github.com/quittance/quittance/sql/pgtest/internal/scratch"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run starts the cluster, runs the command and returns the exit code.
func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("pgtestenv", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "use (and keep) this data directory instead of a new temporary one")
	verbose := fs.Bool("v", false, "log the cluster's lifecycle")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: pgtestenv [-dir DATADIR] [-v] command [args...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// Catch signals before anything starts so that none is lost; they go to
	// the command once it runs.
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(signals)

	keepDir := *dir != ""
	if !keepDir {
		var err error
		if *dir, err = scratch.NewDir(); err != nil {
			fmt.Fprintf(stderr, "pgtestenv: %v\n", err)
			return 1
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	c, err := pgcluster.Start(ctx, pgcluster.Config{DataDir: *dir, Fast: true, Log: log})
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "pgtestenv: %v\n", err)
		if !keepDir {
			_ = os.RemoveAll(*dir)
		}
		return 1
	}

	code := runCommand(fs.Args(), c, signals, stderr)

	if err := c.Stop(context.Background()); err != nil {
		fmt.Fprintf(stderr, "pgtestenv: %v\n", err)
	}
	switch {
	case keepDir:
	case scratch.Kept(c.DataDir()):
		fmt.Fprintf(stderr, "pgtestenv: kept %s because a failed test kept its database there; remove it with: rm -rf %s\n",
			c.DataDir(), c.DataDir())
	default:
		if err := os.RemoveAll(c.DataDir()); err != nil {
			fmt.Fprintf(stderr, "pgtestenv: %v\n", err)
		}
	}
	return code
}

// runCommand runs args with the cluster's variables set, passing on
// signals, and returns its exit code.
func runCommand(args []string, c *pgcluster.Cluster, signals <-chan os.Signal, stderr io.Writer) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		scratch.EnvDatabaseURL+"="+c.URL("postgres"),
		scratch.EnvClusterDir+"="+c.DataDir(),
	)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "pgtestenv: %v\n", err)
		return 127
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case sig := <-signals:
			_ = cmd.Process.Signal(sig)
		case err := <-done:
			return exitCode(err, stderr)
		}
	}
}

// exitCode turns the command's result into pgtestenv's exit code, using the
// shell's 128+N convention for a command killed by signal N.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		fmt.Fprintf(stderr, "pgtestenv: %v\n", err)
		return 1
	}
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return exitErr.ExitCode()
}
