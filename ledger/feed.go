package ledger

import (
	"context"

	"github.com/google/uuid"
)

// FeedEvent is an event with its commit-ordered position in the feed of all
// events. Positions increase in the order transactions committed, which
// may differ from the order of Seq (taken at insert): a reader that resumes
// after a position misses nothing committed later.
type FeedEvent struct {
	// Position is the event's place in commit order.
	Position int64
	// Event is the event.
	Event Event
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
	// FeedEvents returns events after q.AfterPosition, in commit order.
	FeedEvents(ctx context.Context, q FeedQuery) ([]FeedEvent, error)
	// FeedPosition returns the position of the event with sequence seq.
	FeedPosition(ctx context.Context, seq int64) (int64, error)
	// FeedHead returns the highest position committed so far.
	FeedHead(ctx context.Context) (int64, error)
	// FeedWake returns a channel that receives a value whenever new events
	// may have been committed (by any replica), and a function that stops
	// it. Readers must still poll now and then: a wake-up is a hint, never
	// a guarantee.
	FeedWake() (<-chan struct{}, func())
}
