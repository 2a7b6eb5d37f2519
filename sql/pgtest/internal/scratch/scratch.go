package scratch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// EnvDatabaseURL names the variable holding the URL of the maintenance
// database of the server tests use.
const EnvDatabaseURL = "QUITTANCE_TEST_DATABASE_URL"

// EnvClusterDir names the variable holding the data directory of the
// throwaway cluster behind EnvDatabaseURL, when pgtestenv started it.
const EnvClusterDir = "QUITTANCE_TEST_CLUSTER_DIR"

// prefix starts the name of every directory this package creates.
const prefix = "quittance-pgtest-"

// keepFile marks a directory that must survive its owner.
const keepFile = "KEEP"

// NewDir creates a directory for a cluster under os.TempDir, named after
// the calling process. It first removes directories left by dead processes.
func NewDir() (string, error) {
	Sweep()
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-*", prefix, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("create directory for test cluster: %w", err)
	}
	return dir, nil
}

// Sweep removes the directories of processes that no longer exist, except
// the ones marked with Keep. Errors are ignored: sweeping is best effort.
func Sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	for _, dir := range dirs {
		pidText, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(dir), prefix), "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || alive(pid) || Kept(dir) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

// Keep marks dir so that neither Sweep nor pgtestenv removes it.
func Keep(dir string) error {
	return os.WriteFile(filepath.Join(dir, keepFile),
		[]byte("a failed test kept a database in this cluster\n"), 0o644)
}

// Kept reports whether Keep marked dir.
func Kept(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, keepFile))
	return !errors.Is(err, fs.ErrNotExist)
}

// alive reports whether a process with this pid exists.
func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}
