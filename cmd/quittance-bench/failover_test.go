package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestFailoverBenchRunsEveryPart runs quittance-bench failover at a tiny
// scale: one synchronous and one asynchronous failover and the export
// runs from both servers. Its figures mean nothing, but one holds at any
// scale: synchronous replication loses no acknowledged answer.
func TestFailoverBenchRunsEveryPart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"failover", "-trials", "1", "-clients", "2", "-before", "1s", "-after", "500ms",
		"-export-rows", "500", "-export-duration", "1s"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("failover bench: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	sync := bodyRows(out, "### Failover")
	if len(sync) != 2 || sync[0][0] != "synchronous" || sync[1][0] != "asynchronous" {
		t.Fatalf("the failover table has rows %v, want one synchronous and one asynchronous trial:\n%s", sync, out)
	}
	if lost := sync[0][6]; lost != "0" {
		t.Errorf("synchronous replication lost %s acknowledged answers:\n%s", lost, out)
	}
	exports := bodyRows(out, "### Lifecycle throughput beside")
	if len(exports) != 2 || exports[0][0] != "primary" || exports[1][0] != "standby" {
		t.Errorf("the export table has rows %v, want the primary and the standby:\n%s", exports, out)
	}
	if !strings.Contains(stderr.String(), "export from the standby") {
		t.Errorf("no export from the standby:\n%s", stderr.String())
	}
}

// bodyRows are tableRows without the header row.
func bodyRows(doc, title string) [][]string {
	rows := tableRows(doc, title)
	if len(rows) > 0 {
		rows = rows[1:]
	}
	return rows
}
