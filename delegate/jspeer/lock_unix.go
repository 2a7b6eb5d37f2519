//go:build unix

package jspeer

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock on path, creating it, and
// returns the function that releases it. Test binaries of several packages
// run in parallel; the lock makes one of them install and the others wait.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
