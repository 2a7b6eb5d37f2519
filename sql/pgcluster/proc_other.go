//go:build !unix

package pgcluster

import (
	"io/fs"
	"os/exec"
	"syscall"
)

// setProcAttr does nothing: running the server as another user and tying
// its life to the caller's are implemented for unix systems only.
func setProcAttr(*exec.Cmd, *osUser, syscall.Signal) {}

// processAlive assumes the process exists, so a postmaster.pid is never
// removed while its server may still run.
func processAlive(int) bool { return true }

// searchable assumes the directory can be entered.
func searchable(fs.FileInfo, *osUser) bool { return true }
