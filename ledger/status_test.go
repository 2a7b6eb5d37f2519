package ledger_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/quittance/quittance/ledger"
)

func TestParseTaskStatusAccepts(t *testing.T) {
	t.Parallel()
	cases := map[string]ledger.TaskStatus{
		// A2A v1.0 enum names.
		"TASK_STATE_SUBMITTED":      ledger.StatusSubmitted,
		"TASK_STATE_WORKING":        ledger.StatusWorking,
		"TASK_STATE_INPUT_REQUIRED": ledger.StatusInputRequired,
		"TASK_STATE_AUTH_REQUIRED":  ledger.StatusAuthRequired,
		"TASK_STATE_COMPLETED":      ledger.StatusCompleted,
		"TASK_STATE_FAILED":         ledger.StatusFailed,
		"TASK_STATE_CANCELED":       ledger.StatusCanceled,
		"TASK_STATE_REJECTED":       ledger.StatusRejected,
		"TASK_STATE_UNKNOWN":        ledger.StatusUnknown,
		// A2A v0.3 names.
		"submitted":      ledger.StatusSubmitted,
		"working":        ledger.StatusWorking,
		"input-required": ledger.StatusInputRequired,
		"auth-required":  ledger.StatusAuthRequired,
		"completed":      ledger.StatusCompleted,
		"failed":         ledger.StatusFailed,
		"canceled":       ledger.StatusCanceled,
		"rejected":       ledger.StatusRejected,
		"unknown":        ledger.StatusUnknown,
		// Stored names.
		"input_required": ledger.StatusInputRequired,
		"auth_required":  ledger.StatusAuthRequired,
		// Case variants, padding and British spelling.
		"Task_State_Canceled":  ledger.StatusCanceled,
		"task_state_working":   ledger.StatusWorking,
		"COMPLETED":            ledger.StatusCompleted,
		"Input-Required":       ledger.StatusInputRequired,
		"AUTH-REQUIRED":        ledger.StatusAuthRequired,
		"  canceled\n":         ledger.StatusCanceled,
		"cancelled":            ledger.StatusCanceled,
		"TASK_STATE_CANCELLED": ledger.StatusCanceled,
	}
	for raw, want := range cases {
		got, err := ledger.ParseTaskStatus(raw)
		if err != nil || got != want {
			t.Errorf("ParseTaskStatus(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	// Every stored name parses to itself.
	for _, s := range ledger.TaskStatuses {
		if got, err := ledger.ParseTaskStatus(string(s)); err != nil || got != s {
			t.Errorf("ParseTaskStatus(%q) = %q, %v", s, got, err)
		}
	}
}

func TestParseTaskStatusRefuses(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"", " ", "TASK_STATE_UNSPECIFIED", "unspecified", "TASK_STATE_", "task_state",
		"done", "cancel", "canceled!", "in progress", "input required", "TASK-STATE-CANCELED",
		"canceled;completed", "\x00", "работает", "TASK_STATE_TASK_STATE_CANCELED",
	} {
		got, err := ledger.ParseTaskStatus(raw)
		if err == nil {
			t.Errorf("ParseTaskStatus(%q) = %q, want an error", raw, got)
			continue
		}
		if !errors.Is(err, ledger.ErrUnknownTaskStatus) {
			t.Errorf("ParseTaskStatus(%q) error %v is not ErrUnknownTaskStatus", raw, err)
		}
		if got != "" {
			t.Errorf("ParseTaskStatus(%q) returned %q with its error", raw, got)
		}
	}
}

func TestTaskStatusTerminal(t *testing.T) {
	t.Parallel()
	terminal := []ledger.TaskStatus{ledger.StatusCompleted, ledger.StatusFailed, ledger.StatusCanceled, ledger.StatusRejected}
	if len(ledger.TaskStatuses) != 9 {
		t.Fatalf("TaskStatuses has %d members, ledger/DESIGN.md §2.1 names 9", len(ledger.TaskStatuses))
	}
	for _, s := range ledger.TaskStatuses {
		if s.Terminal() != slices.Contains(terminal, s) {
			t.Errorf("%s.Terminal() = %v", s, s.Terminal())
		}
		if string(s) != strings.ToLower(string(s)) || strings.Contains(string(s), "-") {
			t.Errorf("stored name %q is not lower-case snake_case", s)
		}
	}
	if ledger.TaskStatus("bogus").Terminal() {
		t.Error("an unknown status counts as terminal")
	}
}

// FuzzParseTaskStatus: never panics; what it accepts is a member of
// TaskStatuses; parsing the stored name again gives the same status.
func FuzzParseTaskStatus(f *testing.F) {
	for _, seed := range []string{"TASK_STATE_CANCELED", "input-required", "auth_required", "", "TASK_STATE_UNSPECIFIED", "Cancelled"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		s, err := ledger.ParseTaskStatus(raw)
		if err != nil {
			if !errors.Is(err, ledger.ErrUnknownTaskStatus) {
				t.Fatalf("ParseTaskStatus(%q): error %v is not ErrUnknownTaskStatus", raw, err)
			}
			if s != "" {
				t.Fatalf("ParseTaskStatus(%q) returned %q with an error", raw, s)
			}
			return
		}
		if !slices.Contains(ledger.TaskStatuses, s) {
			t.Fatalf("ParseTaskStatus(%q) = %q, not a member of TaskStatuses", raw, s)
		}
		again, err := ledger.ParseTaskStatus(string(s))
		if err != nil || again != s {
			t.Fatalf("ParseTaskStatus(%q) = %q, %v; not idempotent on the stored name", s, again, err)
		}
	})
}
