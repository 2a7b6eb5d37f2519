package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/telemetry"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/ledger/report"
)

// EventStreams are the event streams' caps and shared reads (streamhub.go),
// built once per process and shared by every kind of stream the process
// serves: the API's SSE event streams and the A2A gateway's task streams
// (cmd/quittance/internal/gateway) count against the same caps, and a task
// stream is woken by its delegation's events through the same hubs, so one
// LISTEN connection and one read per scope serve them all.
type EventStreams struct {
	cfg     StreamConfig
	feed    report.Feed
	limits  *streamLimits
	hubs    *streamHubs
	metrics *telemetry.Metrics
}

// NewEventStreams builds the caps and hubs of cfg (defaults filled in)
// over feed.
func NewEventStreams(feed report.Feed, cfg StreamConfig, log *slog.Logger, metrics *telemetry.Metrics) *EventStreams {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	return &EventStreams{
		cfg: cfg, feed: feed, metrics: metrics,
		limits: newStreamLimits(cfg.MaxPerPrincipal, cfg.MaxOpen),
		hubs:   &streamHubs{feed: feed, poll: cfg.Poll, batch: cfg.Batch, log: log, metrics: metrics, hubs: map[scopeKey]*scopeHub{}},
	}
}

// Poll is how often the event streams read the table without a wake-up.
func (es *EventStreams) Poll() time.Duration { return es.cfg.Poll }

// Heartbeat is how long a stream may be idle before a comment line is sent.
func (es *EventStreams) Heartbeat() time.Duration { return es.cfg.Heartbeat }

// StreamRefusedError is a stream refused by a cap: the principal's
// (Cap "principal") or the process's ("process").
type StreamRefusedError struct {
	Cap string
	// Detail says which cap, and when to retry, as the API's 429
	// too_many_streams does.
	Detail string
	// RetryAfter is when a slot may have freed.
	RetryAfter time.Duration
}

func (e *StreamRefusedError) Error() string { return e.Detail }

// ErrStreamsClosed ends a watch when the process stops serving streams
// (StreamConfig.Done closed: a graceful shutdown).
var ErrStreamsClosed = errors.New("event streams are closed")

// DelegationWatch is one open stream's slot and its wake-ups: a commit of
// an event of its delegation (woken by LISTEN/NOTIFY, or the hub's poll).
type DelegationWatch struct {
	es      *EventStreams
	release func()
	hub     *scopeHub // nil until Watch
	sub     *streamSub
	pos     int64
	once    sync.Once
}

// OpenSlot takes a stream slot of principal p; over a cap it is a
// *StreamRefusedError. A stream takes its slot before it does anything
// else (a streamed message is refused before it is sent). The caller
// closes the watch.
func (es *EventStreams) OpenSlot(p ledger.Principal) (*DelegationWatch, error) {
	release, refused := es.limits.acquire(p.ID)
	if refused != "" {
		es.metrics.EventStreamRefused(refused)
		return nil, &StreamRefusedError{Cap: refused, Detail: tooManyStreamsProblem(refused).Detail, RetryAfter: streamRetryAfter}
	}
	es.metrics.EventStreamsOpen(1)
	return &DelegationWatch{es: es, release: release}, nil
}

// Watch starts watching delegation id's events from the feed's head: call
// it before reading what the stream starts from, so that no change
// committed after that read goes unnoticed. It is called once.
func (w *DelegationWatch) Watch(ctx context.Context, id uuid.UUID) error {
	pos, err := w.es.feed.FeedHead(ctx)
	if err != nil {
		return err
	}
	w.hub, w.sub = w.es.hubs.join(report.FeedQuery{DelegationID: id})
	w.pos = pos
	w.hub.wait(w.sub, pos, 0)
	return nil
}

// Wait blocks until the delegation has new events (true), tick fires
// (false), ctx ends (its error) or the process stops serving streams
// (ErrStreamsClosed); a failed read of the feed is its error. The watch
// goes on waiting for the next events while the caller reads.
func (w *DelegationWatch) Wait(ctx context.Context, tick <-chan time.Time) (bool, error) {
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-w.es.cfg.Done:
		return false, ErrStreamsClosed
	case <-tick:
		return false, nil
	case page := <-w.pages():
		if page.err != nil {
			return false, page.err
		}
		w.pos = page.events[len(page.events)-1].Position
		round := page.round
		if page.full {
			round = 0 // more may follow at once
		}
		w.hub.wait(w.sub, w.pos, round)
		return true, nil
	}
}

// StillAuthorized reports whether secret still authenticates as a
// principal with the access opened had: what an open stream was allowed
// on. A database fault is not a refusal (the stream's next read fails
// too, and ends it). The API's event streams check it every second; so
// do the gateway's task streams.
func StillAuthorized(ctx context.Context, a *access.Service, secret string, opened ledger.Principal) bool {
	p, err := a.Authenticate(ctx, secret)
	if errors.Is(err, ledger.ErrUnauthenticated) {
		return false
	}
	return err != nil || p.SameAccess(opened)
}

// StreamRecheck is how often an open stream checks its credential.
const StreamRecheck = streamRecheck

// Close leaves the hub and gives the slot back; a second Close does
// nothing.
func (w *DelegationWatch) Close() {
	w.once.Do(func() {
		if w.hub != nil {
			w.hub.leave(w.sub)
		}
		w.release()
		w.es.metrics.EventStreamsOpen(-1)
	})
}

// pages is where the hub hands the watch its pages; none before Watch.
func (w *DelegationWatch) pages() <-chan streamPage {
	if w.sub == nil {
		return nil
	}
	return w.sub.pages
}
