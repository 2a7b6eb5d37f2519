// Package failpoint lets crash tests stop the process dead at named points
// in the code, to prove that what was committed before the point survives
// and that a client's retry after a restart is reconciled by its
// idempotency key.
//
// A failpoint is one call, failpoint.Inject("name"), placed where a crash
// is most dangerous (after a commit, before the answer; between verifying
// evidence and applying it; between claiming an outbound call and making
// it; between two sweep batches). Built with the build tag "failpoints",
// Inject SIGKILLs the process when the environment variable
// QUITTANCE_FAILPOINT names that point; without the tag, Inject is an empty
// function that the compiler removes, so production binaries carry no
// failpoint at all.
//
// The package must never do anything but that: it has no dependencies, no
// state and no other behaviour, and nothing may depend on whether a
// failpoint is compiled in.
package failpoint

// EnvVar names the environment variable that arms a failpoint in a binary
// built with the failpoints tag: its value is the name of the point at which
// the process kills itself.
const EnvVar = "QUITTANCE_FAILPOINT"
