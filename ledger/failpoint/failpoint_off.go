//go:build !failpoints

package failpoint

// Enabled reports whether failpoints are compiled into this binary (the
// failpoints build tag).
const Enabled = false

// Inject does nothing: without the failpoints build tag no failpoint
// exists, whatever the environment says.
func Inject(string) {}
