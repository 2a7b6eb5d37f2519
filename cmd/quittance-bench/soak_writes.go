package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// flushCounts are a replica's write coalescer figures, from its
// quittance_write_batch_size histogram: the flushes (one transaction,
// one commit each), the operations they carried, and the flushes that
// carried more than one.
type flushCounts struct {
	flushes, ops, several int64
}

func (c flushCounts) add(o flushCounts) flushCounts {
	return flushCounts{c.flushes + o.flushes, c.ops + o.ops, c.several + o.several}
}

func (c flushCounts) sub(o flushCounts) flushCounts {
	return flushCounts{c.flushes - o.flushes, c.ops - o.ops, c.several - o.several}
}

// String says how many operations a flush carried.
func (c flushCounts) String() string {
	if c.flushes == 0 {
		return "write coalescer: no flush"
	}
	return fmt.Sprintf("write coalescer: %d flushes carried %d operations (%.2f a flush); %.0f%% of them carried one",
		c.flushes, c.ops, float64(c.ops)/float64(c.flushes), 100*float64(c.flushes-c.several)/float64(c.flushes))
}

// parseFlushCounts reads flushCounts from a /metrics page; ok is false
// when the page has no quittance_write_batch_size.
func parseFlushCounts(r io.Reader) (c flushCounts, ok bool, err error) {
	var ones int64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		name, value, found := strings.Cut(sc.Text(), " ")
		if !found {
			continue
		}
		var dst *int64
		switch name {
		case "quittance_write_batch_size_count":
			dst, ok = &c.flushes, true
		case "quittance_write_batch_size_sum":
			dst = &c.ops
		case `quittance_write_batch_size_bucket{le="1"}`:
			dst = &ones
		default:
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return c, false, fmt.Errorf("metrics: %s %q: %w", name, value, err)
		}
		*dst = int64(f)
	}
	c.several = c.flushes - ones
	return c, ok, sc.Err()
}

// flushWatch follows the replicas' write coalescers through the run. A
// replica's counters start again at zero when it is killed and started
// again, so each process's last reading is kept and added up: the
// figures are at least what the coalescers did (what a process did after
// its last reading before a kill is missed).
type flushWatch struct {
	hc   *http.Client
	mu   sync.Mutex
	last []flushCounts // the current process's last reading, by replica
	done flushCounts   // the processes before
	seen bool          // a /metrics page had the histogram
}

func newFlushWatch(replicas int) *flushWatch {
	return &flushWatch{hc: &http.Client{Timeout: 5 * time.Second}, last: make([]flushCounts, replicas)}
}

// read reads replica i's /metrics at base; a replica that does not answer
// (being killed, starting) is left for the next reading.
func (w *flushWatch) read(ctx context.Context, i int, base string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return
	}
	resp, err := w.hc.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	c, ok, err := parseFlushCounts(resp.Body)
	if err != nil || !ok {
		return
	}
	w.note(i, c)
}

// note notes a reading c of replica i.
func (w *flushWatch) note(i int, c flushCounts) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = true
	if c.flushes < w.last[i].flushes {
		// A new process: the old one's last reading is all it did.
		w.done = w.done.add(w.last[i])
	}
	w.last[i] = c
}

// run reads every replica's figures every interval until ctx ends.
func (w *flushWatch) run(ctx context.Context, urls func() []string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for i, u := range urls() {
			w.read(ctx, i, u)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// total is the figures of every process so far.
func (w *flushWatch) total() (flushCounts, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.done
	for _, l := range w.last {
		c = c.add(l)
	}
	return c, w.seen
}

// String is the soak summary's line.
func (w *flushWatch) String() string {
	c, seen := w.total()
	if !seen {
		return "no replica's /metrics had quittance_write_batch_size"
	}
	mean := 0.0
	if c.flushes > 0 {
		mean = float64(c.ops) / float64(c.flushes)
	}
	return fmt.Sprintf("%d flushes carried %d operations (%.2f a flush); %d carried more than one", c.flushes, c.ops, mean, c.several)
}
