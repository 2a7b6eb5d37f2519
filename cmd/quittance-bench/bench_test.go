package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The benchmark and the soak are tools people run by hand, rarely; these
// tests run every part of each at a tiny scale so a change that breaks
// one (a new approval step, a renamed endpoint) fails the suite instead
// of the next person's `make bench`. Their figures mean nothing.

func TestBenchRunsEveryPart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	md := filepath.Join(t.TempDir(), "bench.md")
	err := run(ctx, []string{"bench", "-markdown", md,
		"-duration", "2s", "-warmup", "500ms", "-clients", "2", "-budgets", "4", "-many-scale", "2", "-replicas", "2", "-batch-size", "10",
		"-scale-delegations", "2000", "-scale-open", "100", "-scale-requests", "3", "-scale-chunk", "1000",
		"-sweep-due", "100", "-sweep-replicas", "2", "-service-env", "GOGC=400",
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"one hot budget", "Replicas: 2 service processes",
		"obligations, first page", "console: obligations page", "CSV export #3", "Deadline sweep: 100 obligations",
		"0 moved twice", "Cost per operation", "Cost per lifecycle", "Batch endpoints",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	// Every lifecycle run says how many operations a flush carried.
	if n := len(regexp.MustCompile(`write coalescer: [1-9][0-9]* flushes carried [1-9][0-9]* operations`).FindAllString(stderr.String(), -1)); n != 4 {
		t.Errorf("%d lifecycle runs printed their flushes, want 4:\n%s", n, stderr.String())
	}
	// The reads ran on the data set as its vacuum left it: a step that
	// wrote its active holds after that vacuum (and before the reads)
	// would make the summary's index-only scan fetch them from the heap.
	if want := "before the reads: the active holds' index-only scan made 0 heap fetches for 100 rows"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
	doc, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	statements := !strings.Contains(stderr.String(), "pg_stat_statements is not installed")
	checkCostTables(t, string(doc), statements)
}

// checkCostTables checks that the Markdown cost tables have a row for
// each anchor and lifecycle run of the tiny bench (two anchors, four
// lifecycle runs: one replica and two, the batch endpoints, the hot budget) and that every figure measured is there and positive:
// all but the service's for pgbench and the nested statements (pgbench
// has none), and the statements only when pg_stat_statements is installed.
func checkCostTables(t *testing.T, doc string, statements bool) {
	t.Helper()
	perOp := tableRows(doc, "Cost per operation")
	if len(perOp) != 6 {
		t.Fatalf("%d rows in the cost per operation table, want 6:\n%s", len(perOp), doc)
	}
	// Columns: clients, case, side, ops, PG, service, load generator,
	// total, WAL, statements, nested, commits.
	for _, row := range perOp {
		anchor := strings.HasPrefix(row[2], "pgbench")
		for i, cell := range row[3:] {
			col := i + 3
			skip := col == 10 || col == 5 && anchor || col == 9 && !statements
			if v, err := strconv.ParseFloat(cell, 64); !skip && (err != nil || v <= 0) {
				t.Errorf("cost per operation, %s, column %d: %q is not a positive figure", row[2], col, cell)
			}
		}
		if anchor && row[5] != "—" {
			t.Errorf("pgbench has a service CPU time: %q", row[5])
		}
	}
	perLifecycle := tableRows(doc, "Cost per lifecycle")
	if len(perLifecycle) != 4 {
		t.Fatalf("%d rows in the cost per lifecycle table, want 4:\n%s", len(perLifecycle), doc)
	}
	for _, row := range perLifecycle {
		if pg := row[3]; !regexp.MustCompile(`^[1-9][0-9]* / [1-9][0-9]*$`).MatchString(pg) {
			t.Errorf("cost per lifecycle, %s: PostgreSQL CPU %q is not two positive figures", row[2], pg)
		}
	}
}

// tableRows are the cells of the body rows of the first Markdown table
// after the paragraph that starts with title.
func tableRows(doc, title string) [][]string {
	_, rest, _ := strings.Cut(doc, "\n"+title)
	var rows [][]string
	started := false
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			if started {
				break
			}
			continue
		}
		started = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cells[0] == "clients" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		rows = append(rows, cells)
	}
	return rows
}

// TestServiceEnvFlag: -service-env collects NAME=value settings, in
// order, and refuses anything else.
func TestServiceEnvFlag(t *testing.T) {
	t.Parallel()
	cfg, err := parseBenchFlags([]string{"-service-env", "GOGC=200", "-service-env", "QUITTANCE_WRITE_FLUSHERS=1"}, io.Discard)
	if err != nil || !slices.Equal(cfg.ServiceEnv, []string{"GOGC=200", "QUITTANCE_WRITE_FLUSHERS=1"}) {
		t.Errorf("parsed %q, %v", cfg.ServiceEnv, err)
	}
	for _, bad := range []string{"GOGC", "=200"} {
		if _, err := parseBenchFlags([]string{"-service-env", bad}, io.Discard); err == nil {
			t.Errorf("-service-env %q was accepted", bad)
		}
	}
}

func TestSoakRunsEveryPart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"soak",
		"-duration", "8s", "-clients", "2", "-replicas", "2", "-kill-every", "3s", "-pg-every", "6s", "-drain", "2m",
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("soak: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"violations: 0", "SIGKILLs of a replica", "acknowledged delegations checked", "write coalescer: "} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
}
