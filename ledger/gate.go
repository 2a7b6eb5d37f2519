package ledger

import (
	"slices"
	"time"
)

// TaskClass describes a kind of delegated work.
type TaskClass struct {
	Name string
	// EffectCapable says the work can commit effects at the remote org
	// (create a purchase order, move money) that a cancel does not undo.
	EffectCapable bool
	// GateOn lists the terminal task statuses after which compensation must
	// be confirmed; a subset of {canceled, failed}.
	GateOn []TaskStatus
	// CompensationTimeout is how long compensation is sought before the
	// obligation becomes compensation_unconfirmed (never released).
	CompensationTimeout time.Duration
	UpdatedAt           time.Time
}

// DefaultCompensationTimeout is the compensation timeout of the default
// classes and of classes Quittance does not know.
const DefaultCompensationTimeout = 72 * time.Hour

// DefaultGateOn is the gating statuses of the default classes.
var DefaultGateOn = []TaskStatus{StatusCanceled, StatusFailed}

// UnknownTaskClass is how a class with no registered definition is treated:
// effect-capable, gating on canceled and failed. Failing safe means holding
// money for work that turns out harmless, never releasing it for work that was not.
func UnknownTaskClass(name string) TaskClass {
	return TaskClass{Name: name, EffectCapable: true, GateOn: slices.Clone(DefaultGateOn), CompensationTimeout: DefaultCompensationTimeout}
}

// GateApplies reports whether ending in status requires confirmed
// compensation before the hold may leave "active": the class is
// effect-capable, the org has no shared transaction coordinator, and the
// class gates on that status.
func GateApplies(class TaskClass, org Org, status TaskStatus) bool {
	return class.EffectCapable && !org.SharedCoordinator && slices.Contains(class.GateOn, status)
}
