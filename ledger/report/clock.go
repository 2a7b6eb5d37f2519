package report

import (
	"time"

	"github.com/quittance/quittance/ledger"
)

// storedClock is the clock of a report service (Reports, Cases,
// Overview), embedded so each has Now.
type storedClock struct {
	clock ledger.Clock
}

// newStoredClock is c, or the system clock when c is nil.
func newStoredClock(c ledger.Clock) storedClock {
	if c == nil {
		c = ledger.SystemClock{}
	}
	return storedClock{clock: c}
}

// Now is the clock's time at PostgreSQL's precision (ledger.StoredTime).
func (c storedClock) Now() time.Time { return ledger.StoredTime(c.clock.Now()) }
