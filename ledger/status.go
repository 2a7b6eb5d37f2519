package ledger

import (
	"fmt"
	"strings"
)

// TaskStatus is the remote A2A task's state as Quittance last observed it. It
// is stored and emitted in the lower-case names below, whatever wire form
// (A2A v1.0 or v0.3) it arrived in.
type TaskStatus string

// The task statuses. StatusUnknown is the state before the first observation.
const (
	StatusUnknown       TaskStatus = "unknown"
	StatusSubmitted     TaskStatus = "submitted"
	StatusWorking       TaskStatus = "working"
	StatusInputRequired TaskStatus = "input_required"
	StatusAuthRequired  TaskStatus = "auth_required"
	StatusCompleted     TaskStatus = "completed"
	StatusFailed        TaskStatus = "failed"
	StatusCanceled      TaskStatus = "canceled"
	StatusRejected      TaskStatus = "rejected"
)

// TaskStatuses lists every task status, in lifecycle order.
var TaskStatuses = []TaskStatus{
	StatusUnknown, StatusSubmitted, StatusWorking, StatusInputRequired, StatusAuthRequired,
	StatusCompleted, StatusFailed, StatusCanceled, StatusRejected,
}

// Terminal reports whether no further status may follow this one.
func (s TaskStatus) Terminal() bool {
	switch s {
	case StatusCompleted, StatusFailed, StatusCanceled, StatusRejected:
		return true
	case StatusUnknown, StatusSubmitted, StatusWorking, StatusInputRequired, StatusAuthRequired:
		return false
	}
	return false
}

// ParseTaskStatus accepts a task state in any of the forms peers send: the
// A2A v1.0 enum name ("TASK_STATE_INPUT_REQUIRED"), the v0.3 name
// ("input-required") or the stored name ("input_required"), in any letter
// case. An empty, unspecified or unrecognised state is an error: a report
// that says nothing must not move anything.
func ParseTaskStatus(raw string) (TaskStatus, error) {
	s := strings.ToLower(strings.TrimSpace(raw))
	s = strings.TrimPrefix(s, "task_state_")
	s = strings.ReplaceAll(s, "-", "_")
	if s == "cancelled" {
		s = string(StatusCanceled)
	}
	for _, known := range TaskStatuses {
		if s == string(known) {
			return known, nil
		}
	}
	return "", fmt.Errorf("%w: %q", ErrUnknownTaskStatus, raw)
}
