package report

import (
	"context"

	"github.com/quittance/quittance/ledger"

	"github.com/google/uuid"
)

// FeedEvent is an event with its position in the feed of all events. The
// feed is in the order transactions committed, which may differ from the
// order of Seq (taken at insert), and a reader that resumes after an
// event's position misses nothing committed later. A position names its
// event's place in that order; positions are not ordered by their numbers.
type FeedEvent struct {
	// Position identifies the event's place in the feed.
	Position int64
	// Event is the event.
	Event ledger.Event
}

// FeedPage is a page of the feed.
type FeedPage struct {
	// Events are the page's events, in the feed's order.
	Events []FeedEvent
	// HeldBack says that events committed after the page's last one wait
	// for an older transaction to end before they may be served: a reader
	// that wants everything committed so far must read again shortly.
	HeldBack bool
}

// FeedQuery selects a page of the feed.
type FeedQuery struct {
	// AfterPosition returns only events positioned after it (0: from the start).
	AfterPosition int64
	// Tenant, if set, returns only the tenant's delegations' events.
	Tenant string
	// DelegationID, if set, returns only that delegation's events.
	DelegationID uuid.UUID
	// Limit bounds the page.
	Limit int
}

// Feed reads the durable, commit-ordered feed of events, for replayable
// streams. Error contract: an unknown seq is ErrNotFound (wrapped).
type Feed interface {
	// FeedEvents returns events after q.AfterPosition, in the feed's order:
	// those that are final, that is, before which no event can be added
	// any more.
	FeedEvents(ctx context.Context, q FeedQuery) (FeedPage, error)
	// FeedPosition returns the position of the event with sequence seq.
	FeedPosition(ctx context.Context, seq int64) (int64, error)
	// FeedHead returns the position of the last event FeedEvents would
	// return now (0 when none), to read only events not yet readable.
	FeedHead(ctx context.Context) (int64, error)
	// FeedWake returns a channel that receives a value whenever new events
	// may have been committed (by any replica), and a function that stops
	// it. Readers must still poll now and then: a wake-up is a hint, never
	// a guarantee.
	FeedWake() (<-chan struct{}, func())
}
