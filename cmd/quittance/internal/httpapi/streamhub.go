package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/telemetry"
	"github.com/quittance/quittance/internal/panics"
	"github.com/quittance/quittance/ledger/report"
)

// Open event streams are bounded, and they share their reads.
//
// Each stream holds a connection open and is woken on every commit, so a
// credential that opens streams without end could take the database pool
// and the process with it: streamLimits caps the streams open per
// principal and in the process (429 too_many_streams beyond either).
//
// Streams of one scope (one tenant's events, everything, or one
// delegation's) read the same rows: a scopeHub, one per scope in use, does
// the reading for all of them. On a wake-up (a commit's notification, the
// poll, or a stream asking) it reads once per position its waiting
// streams are at, and hands each page to every stream at that position.
// Streams that are caught up share one position, so one commit costs one
// read per scope, not one per stream; a stream that resumes from an older
// position is read for alone until it catches up. Nothing but the
// positions is held in memory: each stream still resumes by
// Last-Event-ID, on any replica.

// streamRetryAfter is the Retry-After of a stream refused by a cap: streams
// end when their clients go, so a slot may free at any time.
const streamRetryAfter = 5 * time.Second

// The caps' label values in quittance_event_streams_refused_total.
const (
	streamCapPrincipal = "principal"
	streamCapProcess   = "process"
)

// streamLimits counts the open event streams, per principal and in all.
type streamLimits struct {
	perPrincipal, perProcess int

	mu    sync.Mutex
	open  map[uuid.UUID]int
	total int
}

func newStreamLimits(perPrincipal, perProcess int) *streamLimits {
	return &streamLimits{perPrincipal: perPrincipal, perProcess: perProcess, open: map[uuid.UUID]int{}}
}

// acquire takes a slot for a stream of principal id; refused names the cap
// that is reached ("" when the slot was taken), and release gives the slot
// back.
func (l *streamLimits) acquire(id uuid.UUID) (release func(), refused string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open[id] >= l.perPrincipal:
		return nil, streamCapPrincipal
	case l.total >= l.perProcess:
		return nil, streamCapProcess
	}
	l.open[id]++
	l.total++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.open[id]--; l.open[id] == 0 {
				delete(l.open, id)
			}
			l.total--
		})
	}, ""
}

// tooManyStreamsProblem is the answer to a stream over a cap.
func tooManyStreamsProblem(refused string) *Problem {
	detail := "this credential's principal has as many event streams open as it may; close one, or retry after " +
		strconv.Itoa(int(streamRetryAfter.Seconds())) + "s"
	if refused == streamCapProcess {
		detail = "this replica serves as many event streams as it may; retry after " +
			strconv.Itoa(int(streamRetryAfter.Seconds())) + "s, or on another replica"
	}
	return newProblem(http.StatusTooManyRequests, "too_many_streams", detail)
}

// streamHubWorker names the hubs in quittance_background_panics_total.
const streamHubWorker = "event_stream_hub"

// scopeKey names a stream scope: the FeedQuery without its position.
type scopeKey struct {
	tenant     string
	delegation uuid.UUID
}

// streamHubs are the scope hubs in use.
type streamHubs struct {
	feed    report.Feed
	poll    time.Duration
	batch   int
	log     *slog.Logger
	metrics *telemetry.Metrics

	mu   sync.Mutex
	hubs map[scopeKey]*scopeHub
}

// scopeHub reads the events of one scope for every stream of it. Its
// goroutine runs while any stream uses it.
type scopeHub struct {
	hubs    *streamHubs
	key     scopeKey
	members int // guarded by hubs.mu
	poke    chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}

	mu      sync.Mutex
	waiting map[*streamSub]bool
	// round counts the hub's reading rounds; a stream served by an older
	// round than the current one may have missed the wake-up that started
	// it, and asks for a read of its own.
	round uint64
}

// streamSub is one stream's place in its hub.
type streamSub struct {
	pos   int64 // guarded by scopeHub.mu while waiting
	pages chan streamPage
}

// streamPage is what a hub read for a stream: events after its position
// (never none), or the read's error.
type streamPage struct {
	events []report.FeedEvent
	// full says the page holds as many events as were asked for: more may
	// follow at once.
	full  bool
	round uint64
	err   error
}

// join adds a stream to its scope's hub, starting the hub if it is the
// scope's first.
func (hs *streamHubs) join(scope report.FeedQuery) (*scopeHub, *streamSub) {
	key := scopeKey{tenant: scope.Tenant, delegation: scope.DelegationID}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h := hs.hubs[key]
	if h == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h = &scopeHub{hubs: hs, key: key, poke: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{}), waiting: map[*streamSub]bool{}}
		hs.hubs[key] = h
		go h.run(ctx)
	}
	h.members++
	return h, &streamSub{pages: make(chan streamPage, 1)}
}

// leave removes a stream from its hub; the last one stops the hub and
// waits for it.
func (h *scopeHub) leave(sub *streamSub) {
	h.mu.Lock()
	delete(h.waiting, sub)
	h.mu.Unlock()
	hs := h.hubs
	hs.mu.Lock()
	h.members--
	last := h.members == 0
	if last {
		delete(hs.hubs, h.key)
	}
	hs.mu.Unlock()
	if last {
		h.cancel()
		<-h.done
	}
}

// wait puts a stream at pos among those the hub reads for. A stream that
// has been served by an older round than the current one (or, with round
// 0, one that has not been served yet) may have missed a wake-up, and has
// the hub read at once.
func (h *scopeHub) wait(sub *streamSub, pos int64, round uint64) {
	h.mu.Lock()
	sub.pos = pos
	h.waiting[sub] = true
	stale := round == 0 || round < h.round
	h.mu.Unlock()
	if stale {
		h.wake()
	}
}

// wake makes the hub read now.
func (h *scopeHub) wake() {
	select {
	case h.poke <- struct{}{}:
	default:
	}
}

// run reads for the hub's waiting streams on every wake-up, until ctx ends.
func (h *scopeHub) run(ctx context.Context) {
	defer close(h.done)
	wake, stop := h.hubs.feed.FeedWake()
	defer stop()
	poll := time.NewTicker(h.hubs.poll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-poll.C:
		case <-h.poke:
		}
		// A panic in a round is logged and counted; the streams wait for
		// the next wake-up or poll.
		if p, ok := panics.As(panics.Recover(func() error { h.readRound(ctx); return nil })); ok {
			panics.Log(h.hubs.log, streamHubWorker, p)
			h.hubs.metrics.Panic(streamHubWorker)
		}
	}
}

// readRound reads once per position the waiting streams are at, and hands
// each non-empty page (or an error) to the streams at that position.
func (h *scopeHub) readRound(ctx context.Context) {
	h.mu.Lock()
	h.round++
	round := h.round
	positions := map[int64]bool{}
	for sub := range h.waiting {
		positions[sub.pos] = true
	}
	h.mu.Unlock()
	for pos := range positions {
		q := report.FeedQuery{Tenant: h.key.tenant, DelegationID: h.key.delegation, AfterPosition: pos, Limit: h.hubs.batch}
		page, err := h.hubs.feed.FeedEvents(ctx, q)
		h.hubs.metrics.EventStreamRead()
		if ctx.Err() != nil {
			return
		}
		if err == nil && len(page.Events) == 0 {
			continue
		}
		p := streamPage{events: page.Events, full: len(page.Events) == q.Limit, round: round, err: err}
		h.mu.Lock()
		for sub := range h.waiting {
			if sub.pos == pos {
				delete(h.waiting, sub)
				sub.pages <- p // never blocks: a waiting stream's channel is empty
			}
		}
		h.mu.Unlock()
	}
}
