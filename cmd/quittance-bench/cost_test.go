package main

import (
	"os"
	"slices"
	"testing"
	"time"
)

// readProcStat reads this process's parent and CPU time as the kernel
// reports them, in the unit the meter assumes (USER_HZ ticks).
func TestReadProcStat(t *testing.T) {
	before, err := readProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before.ppid != os.Getppid() {
		t.Errorf("ppid %d, want %d", before.ppid, os.Getppid())
	}
	self0, err := selfCPU()
	if err != nil {
		t.Fatal(err)
	}
	// Spin until getrusage has seen 200ms of CPU (or 10s have passed).
	var self1 time.Duration
	for t0 := time.Now(); self1-self0 < 200*time.Millisecond && time.Since(t0) < 10*time.Second; {
		for x := range 1_000_000 {
			_ = x * x
		}
		if self1, err = selfCPU(); err != nil {
			t.Fatal(err)
		}
	}
	after, err := readProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self1, err = selfCPU(); err != nil {
		t.Fatal(err)
	}
	got, want := after.own-before.own, self1-self0
	if want < 100*time.Millisecond {
		t.Skipf("the busy loop got only %s of CPU in 10s: the machine is too busy to compare", want)
	}
	if d := got - want; d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Errorf("/proc/self/stat says %s of CPU, getrusage %s", got, want)
	}
}

// A window's figures per operation and per lifecycle, and "—" for what
// was not measured: pgbench has no service, and without
// pg_stat_statements there are no statement counts.
func TestWindowCostCells(t *testing.T) {
	c := windowCost{Ops: 1000, PG: 460 * time.Millisecond, Load: 110 * time.Millisecond, WAL: 600_000,
		Statements: 7000, Nested: 0, Commits: 1000}
	if got, want := c.cells(1), []string{"460", "—", "110", "570", "600", "7.0", "0.0", "1.00"}; !slices.Equal(got, want) {
		t.Errorf("per operation: %q, want %q", got, want)
	}
	c.Service, c.Statements, c.Nested = 830*time.Millisecond, -1, -1
	if got, want := c.cells(3), []string{"1380", "2490", "330", "4200", "1800", "—", "—", "3.00"}; !slices.Equal(got, want) {
		t.Errorf("per lifecycle: %q, want %q", got, want)
	}
	if (windowCost{}).measured() {
		t.Error("a window of no operations counts as measured")
	}
}
