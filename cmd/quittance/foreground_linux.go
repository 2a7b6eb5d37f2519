package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// takeTerminalForeground moves the process into a process group of its own
// and makes that group the terminal's foreground, as a job-control shell
// does for each job, and returns the function that gives the terminal back.
//
// It matters under `make run`: make execs the service inside make's own
// process group, so Ctrl-C would signal make as well, and GNU make re-raises
// an interrupt it received after its child exits, turning the service's
// clean exit 0 into status 130. With the service in the foreground alone,
// only the service is interrupted; it shuts down and exits 0, and make
// reports that. Nothing changes when stdin is not a terminal, when the
// process is not in the foreground, or when it already leads its group (a
// shell started it directly).
func takeTerminalForeground() (release func()) {
	noop := func() {}
	tty := int(os.Stdin.Fd())
	foreground, err := unix.IoctlGetInt(tty, unix.TIOCGPGRP)
	if err != nil || foreground != unix.Getpgrp() || unix.Getpgrp() == os.Getpid() {
		return noop
	}
	if err := unix.Setpgid(0, 0); err != nil {
		return noop
	}
	if err := setForeground(tty, os.Getpid()); err != nil {
		_ = unix.Setpgid(0, foreground) // back into the parent's group, as started
		return noop
	}
	return func() { _ = setForeground(tty, foreground) }
}

// setForeground makes pgrp the terminal's foreground process group. A
// process outside the foreground that does so is sent SIGTTOU, which
// would stop it; it is ignored for the call.
func setForeground(tty, pgrp int) error {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	return unix.IoctlSetPointerInt(tty, unix.TIOCSPGRP, pgrp)
}
