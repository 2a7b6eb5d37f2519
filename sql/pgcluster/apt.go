package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// ErrAptUnavailable is returned by AptInstall when packages cannot be
// installed here: the process is not root, or there is no apt-get.
var ErrAptUnavailable = errors.New("cannot be installed automatically (needs root and apt-get)")

// aptLockFile serializes AptInstall across processes: `make test` runs
// test packages in parallel, several of which may install a package at
// once on a fresh machine, and apt-get fails at once when another holds
// dpkg's lock.
const aptLockFile = "/var/lock/quittance-apt.lock"

// aptLockTimeout is how long apt-get waits for dpkg's lock held by a
// process outside Quittance (an unattended upgrade, a person).
const aptLockTimeout = 10 * time.Minute

// AptInstall installs Debian packages, without their recommended ones,
// with apt-get, refreshing the package lists once if the first attempt
// fails. It is the one way the project installs what its commands and
// tests need (PostgreSQL, Prometheus, Chromium). It returns
// ErrAptUnavailable unless the process runs as root on a system with
// apt-get. Concurrent calls, in any process, take turns.
func AptInstall(ctx context.Context, log *slog.Logger, packages ...string) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	aptGet, err := exec.LookPath("apt-get")
	if err != nil || os.Geteuid() != 0 {
		return ErrAptUnavailable
	}
	unlock, err := lockApt(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	install := append([]string{"install", "-y", "--no-install-recommends"}, packages...)
	log.InfoContext(ctx, "installing "+strings.Join(packages, " "), "command", "apt-get "+strings.Join(install, " "))
	if err := runApt(ctx, aptGet, install...); err == nil {
		return nil
	}
	log.InfoContext(ctx, "refreshing package lists", "command", "apt-get update")
	if err := runApt(ctx, aptGet, "update"); err != nil {
		return err
	}
	return runApt(ctx, aptGet, install...)
}

// lockApt takes aptLockFile's exclusive lock, waiting until ctx ends. The
// lock ends with the process, however it ends.
func lockApt(ctx context.Context) (unlock func(), err error) {
	f, err := os.OpenFile(aptLockFile, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", aptLockFile, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", aptLockFile, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for another package installation: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// runApt runs apt-get without prompts, waiting for dpkg's lock, and
// returns its output on failure.
func runApt(ctx context.Context, aptGet string, args ...string) error {
	args = append([]string{"-o", fmt.Sprintf("DPkg::Lock::Timeout=%d", int(aptLockTimeout.Seconds()))}, args...)
	cmd := exec.CommandContext(ctx, aptGet, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, tail(out.String(), 2000))
	}
	return nil
}

// tail returns at most the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
