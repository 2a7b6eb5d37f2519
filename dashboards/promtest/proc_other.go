//go:build !linux

package promtest

import "os/exec"

// setDeathSignal does nothing where the kernel has no parent-death signal;
// the test's cleanup stops Prometheus.
func setDeathSignal(*exec.Cmd) {}
