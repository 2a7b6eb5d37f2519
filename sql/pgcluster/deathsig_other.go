//go:build unix && !linux

package pgcluster

import "syscall"

// setDeathSignal does nothing: only Linux has a parent-death signal, so
// elsewhere the caller must call Stop.
func setDeathSignal(*syscall.SysProcAttr, syscall.Signal) {}
