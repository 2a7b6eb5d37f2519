package pgcluster

import "syscall"

// setDeathSignal asks the kernel to send sig to the child when the thread
// that started it exits. Go ends a thread only when a goroutine locked to
// it returns, which this package never does.
func setDeathSignal(attr *syscall.SysProcAttr, sig syscall.Signal) {
	attr.Pdeathsig = sig
}
