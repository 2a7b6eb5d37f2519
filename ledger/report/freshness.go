package report

import (
	"context"
	"sync"
	"time"
)

// Freshness says where a read that tolerates lag was served from and how
// old its data was (ledger/DESIGN.md §7, reads from the standby).
type Freshness struct {
	// Standby is true when the read was served by the read database
	// (QUITTANCE_READ_DATABASE_URL), false when by the primary.
	Standby bool
	// Age is the standby's replay lag when the read began: zero when it had
	// replayed everything it received, and always zero on the primary.
	Age time.Duration
}

// readState is what one request carries about its reads: whether it asked
// for the primary, and where its reads were last served from.
type readState struct {
	strong bool

	mu     sync.Mutex
	f      Freshness
	served bool
}

type readKey struct{}

// WithRead returns ctx set up for the reads of one request: strong asks
// that every read be served by the primary (consistency=strong), and the
// store records in it where each read was served (RecordFreshness), for
// the request's answer to say (ReadFreshness).
func WithRead(ctx context.Context, strong bool) context.Context {
	return context.WithValue(ctx, readKey{}, &readState{strong: strong})
}

// StrongRead reports whether ctx's request asked for the primary.
func StrongRead(ctx context.Context) bool {
	s, _ := ctx.Value(readKey{}).(*readState)
	return s != nil && s.strong
}

// RecordFreshness records where a read of ctx's request was served from. A
// request whose reads were served from both keeps the oldest: an answer is
// as old as the oldest data in it.
func RecordFreshness(ctx context.Context, f Freshness) {
	s, _ := ctx.Value(readKey{}).(*readState)
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.served || f.Standby && (!s.f.Standby || f.Age > s.f.Age) {
		s.f, s.served = f, true
	}
}

// ReadFreshness returns where ctx's request's reads were served from; ok is
// false when none was recorded (no read that tolerates lag, or no WithRead).
func ReadFreshness(ctx context.Context) (f Freshness, ok bool) {
	s, _ := ctx.Value(readKey{}).(*readState)
	if s == nil {
		return Freshness{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f, s.served
}
