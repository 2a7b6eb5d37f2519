//go:build linux

package promtest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill Prometheus if the test process dies
// first, so a crashed test never leaves a server behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
