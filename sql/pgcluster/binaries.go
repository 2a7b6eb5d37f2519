package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
)

// ErrNotInstalled is returned, wrapped in an error that says how to install
// them, when the PostgreSQL server binaries cannot be found.
var ErrNotInstalled = errors.New("PostgreSQL server binaries (initdb, postgres) not found")

// installHint tells a person how to get the binaries.
const installHint = "install them with `apt-get install -y postgresql` on Debian/Ubuntu " +
	"(as root, or with sudo), `brew install postgresql` on macOS, " +
	"or put the directory that holds initdb and postgres on PATH"

// debianBinGlob is where Debian and Ubuntu install the server binaries, one
// directory per major version.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// FindBinaries returns the directory that holds the initdb and postgres
// executables. It looks on PATH first, then in /usr/lib/postgresql/*/bin,
// newest major version first. If none is found, the error wraps
// ErrNotInstalled and says how to install PostgreSQL.
func FindBinaries() (dir string, err error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		if d := filepath.Dir(p); hasBinaries(d) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob(debianBinGlob)
	slices.SortFunc(dirs, func(a, b string) int {
		return versionOf(b) - versionOf(a)
	})
	for _, d := range dirs {
		if hasBinaries(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w on PATH or in %s; %s", ErrNotInstalled, debianBinGlob, installHint)
}

// versionOf returns the major version in a path like
// /usr/lib/postgresql/15/bin, or 0.
func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// hasBinaries reports whether dir holds the executables a cluster needs.
func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// InstallBinaries installs the PostgreSQL server package (AptInstall of
// postgresql). Where that cannot be done it installs nothing and returns
// an error wrapping ErrNotInstalled that says how to install PostgreSQL.
// Callers decide whether installing is appropriate; nothing in this
// package calls it.
func InstallBinaries(ctx context.Context, log *slog.Logger) error {
	err := AptInstall(ctx, log, "postgresql")
	if errors.Is(err, ErrAptUnavailable) {
		return fmt.Errorf("%w and %v; %s", ErrNotInstalled, err, installHint)
	}
	return err
}
