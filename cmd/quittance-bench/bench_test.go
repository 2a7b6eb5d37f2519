package main

import (
	"bytes"
	"context"
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
	err := run(ctx, []string{"bench",
		"-duration", "2s", "-warmup", "500ms", "-clients", "2", "-budgets", "4", "-many-scale", "2", "-replicas", "2",
		"-scale-delegations", "2000", "-scale-open", "100", "-scale-requests", "3", "-scale-chunk", "1000",
		"-sweep-due", "100", "-sweep-replicas", "2",
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"one hot budget", "Replicas: 2 service processes",
		"obligations, first page", "console: obligations page", "CSV export #3", "Deadline sweep: 100 obligations",
		"0 moved twice",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
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
	for _, want := range []string{"violations: 0", "SIGKILLs of a replica", "acknowledged delegations checked"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
}
