// Package scratch manages the temporary directories that hold throwaway
// PostgreSQL clusters for tests, shared by sql/pgtest and its pgtestenv
// program.
//
// Each directory is named after the process that owns it, so a later run
// can remove the directories of processes that died without cleaning up.
// It must never remove a directory whose owner still runs or that a failed
// test asked to keep, and never touches anything outside os.TempDir.
package scratch
