//go:build failpoints

package failpoint

import "os"

// Enabled reports whether failpoints are compiled into this binary (the
// failpoints build tag).
const Enabled = true

// armed is the failpoint named by EnvVar when the process started.
var armed = os.Getenv(EnvVar)

// Inject kills the process with SIGKILL when name is the armed failpoint:
// no deferred function, no shutdown hook and no buffered write runs, as when
// the machine loses power or the kernel's OOM killer strikes. It returns at
// once otherwise.
func Inject(name string) {
	if armed == "" || name != armed {
		return
	}
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill() // SIGKILL on Unix
	}
	select {} // never run past the point while the signal is delivered
}
