package main

import (
	"math"
	"runtime/debug"
	"strings"
	"testing"
)

// TestWriteCoalescingConfig: the write coalescer's variables default to
// pgstore.DefaultCoalescing's values and refuse what is not a count of at
// least one.
func TestWriteCoalescingConfig(t *testing.T) {
	t.Parallel()
	load := func(env map[string]string) (config, error) {
		return loadConfig(func(name string) string { return env[name] })
	}
	cfg, err := load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.WriteBatchMax != 64 || cfg.WriteFlushers != 2 || cfg.WriteQueueMax != 4096 {
		t.Errorf("defaults: batch %d, flushers %d, queue %d; want 64, 2, 4096", cfg.WriteBatchMax, cfg.WriteFlushers, cfg.WriteQueueMax)
	}
	cfg, err = load(map[string]string{"QUITTANCE_WRITE_BATCH_MAX": "1", "QUITTANCE_WRITE_FLUSHERS": "8", "QUITTANCE_WRITE_QUEUE_MAX": "10"})
	if err != nil || cfg.WriteBatchMax != 1 || cfg.WriteFlushers != 8 || cfg.WriteQueueMax != 10 {
		t.Errorf("set: %+v, %v", cfg, err)
	}
	for _, name := range []string{"QUITTANCE_WRITE_BATCH_MAX", "QUITTANCE_WRITE_FLUSHERS", "QUITTANCE_WRITE_QUEUE_MAX"} {
		for _, v := range []string{"0", "-3"} {
			_, err := load(map[string]string{name: v})
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%s: %v, want a refusal naming the variable", name, v, err)
			}
		}
		if _, err := load(map[string]string{name: "many"}); err == nil {
			t.Errorf("%s=many was accepted", name)
		}
	}
}

// TestGCSettingsUnlessTheEnvironmentSetsThem: the service (serve, dev)
// runs its collector at gcPercent with memoryLimit, an operator's GOGC or
// GOMEMLIMIT, which the runtime applied before main, is left as it is, and
// a client command keeps Go's defaults.
func TestGCSettingsUnlessTheEnvironmentSetsThem(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	settings := func() (int, int64) {
		percent := debug.SetGCPercent(100)
		debug.SetGCPercent(percent)
		return percent, debug.SetMemoryLimit(-1)
	}
	reset := func() {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
	}
	unset := func(string) string { return "" }
	for _, cmd := range []string{"serve", "dev"} {
		reset()
		tuneGC([]string{cmd}, unset)
		if percent, limit := settings(); percent != gcPercent || limit != memoryLimit {
			t.Fatalf("%s, neither set: target %d, limit %d; want %d, %d", cmd, percent, limit, gcPercent, memoryLimit)
		}
	}
	reset()
	tuneGC([]string{"serve"}, func(k string) string {
		return map[string]string{"GOGC": "100", "GOMEMLIMIT": "off"}[k]
	})
	if percent, limit := settings(); percent != 100 || limit != math.MaxInt64 {
		t.Fatalf("both set: target %d, limit %d; want the operator's 100 and none", percent, limit)
	}
	for _, args := range [][]string{{"verify-pack", "pack.json"}, {}} {
		reset()
		tuneGC(args, unset)
		if percent, limit := settings(); percent != 100 || limit != math.MaxInt64 {
			t.Fatalf("%q: target %d, limit %d; want Go's defaults", args, percent, limit)
		}
	}
}
