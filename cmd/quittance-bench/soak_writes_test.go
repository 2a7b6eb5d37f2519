package main

import (
	"strings"
	"testing"
)

// TestParseFlushCounts reads the write coalescer's histogram as the
// service's /metrics writes it.
func TestParseFlushCounts(t *testing.T) {
	page := `# HELP quittance_write_batch_size Operations carried by each flush.
# TYPE quittance_write_batch_size histogram
quittance_write_batch_size_bucket{le="1"} 7
quittance_write_batch_size_bucket{le="2"} 9
quittance_write_batch_size_bucket{le="+Inf"} 12
quittance_write_batch_size_sum 40
quittance_write_batch_size_count 12
quittance_write_queue_full_total 0
`
	c, ok, err := parseFlushCounts(strings.NewReader(page))
	if err != nil || !ok {
		t.Fatalf("parse: %v, %v", ok, err)
	}
	if want := (flushCounts{flushes: 12, ops: 40, several: 5}); c != want {
		t.Errorf("got %+v, want %+v", c, want)
	}
	if _, ok, err := parseFlushCounts(strings.NewReader("quittance_write_queue_full_total 0\n")); ok || err != nil {
		t.Errorf("a page without the histogram: ok %v, err %v", ok, err)
	}
	w := newFlushWatch(1)
	w.note(0, c)
	w.note(0, flushCounts{flushes: 3, ops: 3}) // the replica restarted: its counters start again
	if got, _ := w.total(); got != (flushCounts{flushes: 15, ops: 43, several: 5}) {
		t.Errorf("after a restart: %+v", got)
	}
	w.note(0, flushCounts{flushes: 4, ops: 5, several: 1})
	if got, _ := w.total(); got != (flushCounts{flushes: 16, ops: 45, several: 6}) {
		t.Errorf("after a later reading: %+v", got)
	}
}
