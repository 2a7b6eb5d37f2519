//go:build unix

package pgcluster

import (
	"errors"
	"io/fs"
	"os/exec"
	"syscall"
)

// setProcAttr makes cmd run as u (when not nil), in its own process group so
// that a terminal's Ctrl-C reaches the caller rather than the server, and
// with deathSignal (when not zero) sent to it if the caller dies.
func setProcAttr(cmd *exec.Cmd, u *osUser, deathSignal syscall.Signal) {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if u != nil {
		attr.Credential = &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: []uint32{}}
	}
	if deathSignal != 0 {
		setDeathSignal(attr, deathSignal)
	}
	cmd.SysProcAttr = attr
}

// processAlive reports whether a process with this pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// searchable reports whether u may enter the directory described by fi.
func searchable(fi fs.FileInfo, u *osUser) bool {
	perm := fi.Mode().Perm()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return perm&0o001 != 0
	}
	switch {
	case int(st.Uid) == u.uid:
		return perm&0o100 != 0
	case int(st.Gid) == u.gid:
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}
