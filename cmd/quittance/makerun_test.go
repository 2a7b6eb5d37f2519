package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/quittance/quittance/sql/pgtest"
)

// TestMakeRunInterruptExitsZero runs `make run` on a pseudo-terminal, as a
// developer does, and presses Ctrl-C once the service listens: the service
// shuts down cleanly and make, and so the shell, sees exit status 0. Make
// runs as the terminal's session leader in the foreground, the service in
// make's process group, exactly as under an interactive shell.
func TestMakeRunInterruptExitsZero(t *testing.T) {
	t.Parallel()
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("make run needs GNU make: %v", err)
	}
	master, terminal := openPseudoTerminal(t)
	dir := t.TempDir()
	cmd := exec.Command(makeBin, "--no-print-directory", "-C", filepath.Join("..", ".."), "run",
		"QUITTANCE_BIN="+filepath.Join(dir, "quittance"))
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+pgtest.URL(t), "QUITTANCE_ADDR=127.0.0.1:0",
		"QUITTANCE_DATA_DIR="+filepath.Join(dir, ".quittance"), "QUITTANCE_DEMO_AGENT=off")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = terminal, terminal, terminal
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	terminal.Close() // the child holds its own descriptors

	var output strings.Builder
	listening := make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(master)
		seen := false
		for sc.Scan() {
			output.WriteString(sc.Text() + "\n")
			if !seen && strings.HasPrefix(sc.Text(), "Quittance listening on ") {
				seen = true
				close(listening)
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	select {
	case <-listening:
	case err := <-exited:
		<-readDone
		t.Fatalf("make run ended before the service listened: %v\n%s", err, output.String())
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("make run did not start the service within 5 minutes")
	}
	if _, err := master.Write([]byte{0x03}); err != nil { // Ctrl-C, as typed
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		<-readDone
		if err != nil || cmd.ProcessState.ExitCode() != 0 {
			t.Fatalf("make run after Ctrl-C: %v (%s), want exit status 0\n%s", err, cmd.ProcessState, output.String())
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("make run did not end within a minute of Ctrl-C")
	}
}

// openPseudoTerminal opens a pseudo-terminal pair: the master side the test
// types into and reads from, and the terminal the child runs on.
func openPseudoTerminal(t *testing.T) (master, terminal *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pseudo-terminal number: %v", err)
	}
	terminal, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return master, terminal
}
