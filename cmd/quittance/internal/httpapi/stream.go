package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
)

// Replayable event streams. GET /v1/events (a tenant's delegations for an
// orchestrator, everything for finance and on-call) and GET
// /v1/delegations/{id}/events serve, with stream=true or Accept:
// text/event-stream, the durable events table as Server-Sent Events: each
// event's SSE id is its seq, and Last-Event-ID (or after=<seq>) resumes
// exactly after it, on any replica and across restarts: nothing is held in
// process memory but a wake-up signal.
//
// Ordering. seq is a bigserial taken at insert, so two transactions can
// commit out of seq order; a reader that resumed "after seq N" would miss a
// lower seq committed after it read N. Streams are therefore served in the
// feed's order, which follows commit order, and an event is served only
// once no transaction that could still commit an event before it is open
// (migration 00009; no writer waits for another): a reader that saw an
// event will never find a new one before it. Last-Event-ID carries the seq
// (what clients see and store), which is mapped back to its feed position
// to resume; ids are unique but, across delegations, not necessarily
// increasing. Within one delegation, appends are serialized, so its stream
// is in seq order. An event that commits while an older writing
// transaction is open is served when that transaction ends.
//
// Wake-ups come from LISTEN/NOTIFY (the store notifies after each commit
// that appended events, and wakes its own readers when events that waited
// become readable), and the table is polled every StreamConfig.Poll anyway;
// the streams of one scope share those reads (streamhub.go). A comment line
// is sent every StreamConfig.Heartbeat so proxies keep idle streams open.

// StreamConfig tunes the event streams. Zero values take the defaults.
type StreamConfig struct {
	// Heartbeat is how long a stream may be idle before a comment line is
	// sent (default 15s).
	Heartbeat time.Duration
	// Poll is how often the table is read without a wake-up (default 2s).
	Poll time.Duration
	// Batch is how many events are read at a time (default 100).
	Batch int
	// MaxPerPrincipal is how many streams one principal may have open on
	// this replica (default 8); MaxOpen how many the replica serves in all
	// (default 256). Past either, a stream is refused with 429.
	MaxPerPrincipal int
	MaxOpen         int
	// Done, when closed, ends every open stream (graceful shutdown).
	Done <-chan struct{}
}

func (c StreamConfig) withDefaults() StreamConfig {
	if c.Heartbeat <= 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.Poll <= 0 {
		c.Poll = 2 * time.Second
	}
	if c.Batch <= 0 {
		c.Batch = 100
	}
	if c.MaxPerPrincipal <= 0 {
		c.MaxPerPrincipal = 8
	}
	if c.MaxOpen <= 0 {
		c.MaxOpen = 256
	}
	return c
}

// registerStreams is the route of the event feed; its streamed form is
// served by routeStreams.
func (s *Server) registerStreams() {
	if s.feed == nil {
		return
	}
	huma.Register(s.api, huma.Operation{
		OperationID: "list-events", Method: http.MethodGet, Path: "/v1/events", Tags: []string{"events"},
		Summary: "Events in commit order (a tenant's for orchestrators, all for finance and on-call)",
		Description: "A page of events in commit order. With stream=true (or Accept: text/event-stream) a replayable Server-Sent Events stream: " +
			"each event's id is its seq; reconnect with Last-Event-ID (or after=<seq>) to resume with no gap and no duplicate. " +
			"A principal may have QUITTANCE_STREAM_MAX_PER_PRINCIPAL streams open on a replica, which serves QUITTANCE_STREAM_MAX_OPEN in all; past either, 429 too_many_streams with Retry-After.",
		Security: bearerAuth,
	}, s.listEvents)
}

type feedInput struct {
	Stream bool   `query:"stream" doc:"true: serve a replayable Server-Sent Events stream (id = the event's seq; resume with Last-Event-ID or after)."`
	After  string `query:"after" doc:"Return events committed after the event with this seq; 'now' for new events only."`
	Limit  int    `query:"limit" minimum:"1" maximum:"500" default:"100"`
}

type feedOutput struct {
	Body struct {
		Events []EventRecord `json:"events"`
		// NextAfter is the after of the next page.
		NextAfter string `json:"next_after,omitempty" doc:"Pass as after to read on; absent when there were no events."`
		// HeldBack says more events are committed but not yet servable.
		HeldBack bool `json:"held_back,omitempty" doc:"true: events committed after this page's last one wait for an older transaction to end; read again shortly to have everything committed so far."`
	}
}

// listEvents serves GET /v1/events: events in commit order (a tenant's for
// orchestrators, all for finance and on-call).
func (s *Server) listEvents(ctx context.Context, in *feedInput) (*feedOutput, error) {
	q, err := s.feedScope(ctx, principal(ctx), uuid.Nil)
	if err != nil {
		return nil, err
	}
	if q.AfterPosition, err = s.resumePosition(ctx, in.After); err != nil {
		return nil, err
	}
	q.Limit = in.Limit
	page, err := s.feed.FeedEvents(ctx, q)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	events := page.Events
	out := &feedOutput{}
	out.Body.HeldBack = page.HeldBack
	out.Body.Events = make([]EventRecord, len(events))
	for i, fe := range events {
		out.Body.Events[i] = eventRecord(fe.Event)
	}
	if n := len(events); n > 0 {
		out.Body.NextAfter = strconv.FormatInt(events[n-1].Event.Seq, 10)
	}
	return out, nil
}

// feedScope is what the principal may read: one delegation it may see, its
// tenant's delegations (orchestrators), or everything (finance, on-call).
func (s *Server) feedScope(ctx context.Context, p ledger.Principal, delegation uuid.UUID) (report.FeedQuery, error) {
	var q report.FeedQuery
	if delegation != uuid.Nil {
		if _, err := s.ledger.GetDelegation(ctx, p, delegation); err != nil {
			return q, s.fail(ctx, err)
		}
		q.DelegationID = delegation
		return q, nil
	}
	switch {
	case p.Permits(ledger.ActionReadAllEvents):
	case p.Permits(ledger.ActionReadTenantEvents):
		q.Tenant = p.Tenant
	default:
		return q, s.fail(ctx, ledger.ErrForbidden)
	}
	return q, nil
}

// resumePosition maps a Last-Event-ID or after value (an event's seq, or
// "now") to the feed position to read after.
func (s *Server) resumePosition(ctx context.Context, v string) (int64, error) {
	v = strings.TrimSpace(v)
	switch v {
	case "":
		return 0, nil
	case "now":
		pos, err := s.feed.FeedHead(ctx)
		if err != nil {
			return 0, s.fail(ctx, err)
		}
		return pos, nil
	}
	seq, err := strconv.ParseInt(v, 10, 64)
	if err != nil || seq < 0 {
		return 0, newProblem(http.StatusBadRequest, "invalid_last_event_id", "Last-Event-ID and after must be an event seq or 'now'")
	}
	if seq == 0 {
		return 0, nil
	}
	pos, err := s.feed.FeedPosition(ctx, seq)
	if errors.Is(err, ledger.ErrNotFound) {
		return 0, newProblem(http.StatusBadRequest, "invalid_last_event_id", "no event has this seq")
	}
	if err != nil {
		return 0, s.fail(ctx, err)
	}
	return pos, nil
}

// routeStreams sends stream requests of the event listings to the SSE
// handler and everything else to next. The JSON listings stay huma
// operations on the same paths.
func (s *Server) routeStreams(next http.Handler) http.Handler {
	if s.feed == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && wantsStream(r) {
			if r.URL.Path == "/v1/events" {
				s.serveStream(w, r, "")
				return
			}
			if rest, ok := strings.CutPrefix(r.URL.Path, "/v1/delegations/"); ok {
				if id, ok := strings.CutSuffix(rest, "/events"); ok && id != "" && !strings.Contains(id, "/") {
					s.serveStream(w, r, id)
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

func wantsStream(r *http.Request) bool {
	if v := r.URL.Query().Get("stream"); v != "" {
		b, err := strconv.ParseBool(v)
		return err == nil && b
	}
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// streamRecheck is how often an open event stream checks its credential.
const streamRecheck = time.Second

// serveStream serves one SSE stream until the client goes away or the
// server shuts down.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, delegation string) {
	r.Pattern = "GET /v1/events (stream)"
	if delegation != "" {
		r.Pattern = "GET /v1/delegations/{id}/events (stream)"
	}
	req, ok := s.openStream(w, r, delegation)
	if !ok {
		return
	}
	release, refused := s.streamLimits.acquire(req.p.ID)
	if refused != "" {
		s.metrics.EventStreamRefused(refused)
		w.Header().Set("Retry-After", strconv.Itoa(int(streamRetryAfter.Seconds())))
		s.writeHTTPProblem(w, r, apiRealm, tooManyStreamsProblem(refused))
		return
	}
	defer release()
	s.metrics.EventStreamsOpen(1)
	defer s.metrics.EventStreamsOpen(-1)
	hub, sub := s.streamHubs.join(req.q)
	defer hub.leave(sub)

	es := &eventStream{w: w, rc: http.NewResponseController(w), req: req, hub: hub, sub: sub}
	if !es.start() {
		return
	}
	s.pump(r.Context(), es)
}

// streamRequest is what an event stream was opened with: the credential,
// the principal it authenticated as, and the feed query the stream reads.
type streamRequest struct {
	secret string
	p      ledger.Principal
	q      report.FeedQuery
}

// openStream authenticates a stream request, charges it to its principal
// and decides its scope and resume position; on a refusal it writes the
// problem and reports false.
func (s *Server) openStream(w http.ResponseWriter, r *http.Request, delegation string) (streamRequest, bool) {
	ctx := r.Context()
	fail := func(err error) (streamRequest, bool) {
		s.writeHTTPProblem(w, r, apiRealm, err)
		return streamRequest{}, false
	}
	secret := BearerSecret(r.Header.Get("Authorization"))
	p, err := s.access.Authenticate(ctx, secret)
	if err != nil {
		return fail(err)
	}
	if !s.chargePrincipal(ctx, p, w.Header().Set, func(pr *Problem) { s.writeHTTPProblem(w, r, apiRealm, pr) }) {
		return streamRequest{}, false
	}
	var id uuid.UUID
	if delegation != "" {
		if id, err = parseID(delegation); err != nil {
			return fail(err)
		}
	}
	q, err := s.feedScope(ctx, p, id)
	if err != nil {
		return fail(err)
	}
	resume := r.Header.Get("Last-Event-ID")
	if resume == "" {
		resume = r.URL.Query().Get("after")
	}
	if q.AfterPosition, err = s.resumePosition(ctx, resume); err != nil {
		return fail(err)
	}
	return streamRequest{secret: secret, p: p, q: q}, true
}

// eventStream is one open SSE stream: the connection it writes to, what
// it was opened with, and its subscription to its scope's hub.
type eventStream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	req streamRequest
	hub *scopeHub
	sub *streamSub
}

// start writes the stream's headers and preamble; false means the client
// is gone.
func (es *eventStream) start() bool {
	_ = es.rc.SetWriteDeadline(time.Time{})
	h := es.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	es.w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(es.w, "retry: 2000\n: stream of quittance events\n\n"); err != nil {
		return false
	}
	_ = es.rc.Flush()
	return true
}

// writePage writes a page's events and asks the hub for the next; false
// ends the stream.
func (es *eventStream) writePage(page streamPage) bool {
	for _, fe := range page.events {
		data, err := json.Marshal(eventRecord(fe.Event))
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(es.w, "id: %d\ndata: %s\n\n", fe.Event.Seq, data); err != nil {
			return false
		}
		es.req.q.AfterPosition = fe.Position
	}
	if err := es.rc.Flush(); err != nil {
		return false
	}
	round := page.round
	if page.full {
		round = 0 // more may follow at once
	}
	es.hub.wait(es.sub, es.req.q.AfterPosition, round)
	return true
}

// comment writes an SSE comment line; false means the client is gone.
func (es *eventStream) comment(text string) bool {
	if _, err := fmt.Fprint(es.w, ": "+text+"\n\n"); err != nil {
		return false
	}
	return es.rc.Flush() == nil
}

// pump hands the stream its pages, heartbeats and credential checks until
// the client goes away, the server shuts down, a write fails or the
// credential no longer holds.
func (s *Server) pump(ctx context.Context, es *eventStream) {
	idle := time.NewTimer(s.stream.Heartbeat)
	defer idle.Stop()
	// The credential is checked again every second, whatever the stream is
	// doing (catching up on a backlog, it is handed page after page without
	// waiting): a revoked or expired credential, a disabled principal, or
	// one whose role or tenant is no longer the one the stream's scope was
	// decided for ends the stream.
	recheck := time.NewTicker(streamRecheck)
	defer recheck.Stop()
	es.hub.wait(es.sub, es.req.q.AfterPosition, 0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stream.Done:
			return
		case page := <-es.sub.pages:
			if page.err != nil {
				if ctx.Err() == nil {
					s.log.ErrorContext(ctx, "event stream read failed", slog.Any("error", page.err))
				}
				return
			}
			if !es.writePage(page) {
				return
			}
			idle.Reset(s.stream.Heartbeat)
		case <-recheck.C:
			if !s.streamStillAuthorized(ctx, es.req.secret, es.req.p) {
				es.comment("credential no longer valid")
				return
			}
		case <-idle.C:
			if !es.comment("heartbeat") {
				return
			}
			idle.Reset(s.stream.Heartbeat)
		}
	}
}

// streamStillAuthorized reports whether secret still authenticates, as a
// principal with the role and tenant opened had: what the open stream's
// scope was decided from. A database fault is not a refusal: the stream's
// next read fails too, and ends it.
func (s *Server) streamStillAuthorized(ctx context.Context, secret string, opened ledger.Principal) bool {
	return StillAuthorized(ctx, s.access, secret, opened)
}

// The bearer realms a 401 names: the API's, and the push receiver's (whose
// tokens are the per-delegation push tokens, not API tokens).
const (
	apiRealm  = "quittance"
	pushRealm = "quittance-push"
)

// writeHTTPProblem maps err through the one problem mapping and writes it,
// for handlers served outside huma; a 401 names realm.
func (s *Server) writeHTTPProblem(w http.ResponseWriter, r *http.Request, realm string, err error) {
	p, ok := problemFor(r.Context(), s.log, err).(*Problem)
	if !ok {
		p = newProblem(http.StatusInternalServerError, "internal", "an internal error occurred; it has been logged")
	}
	if p.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
	}
	for k, vs := range p.GetHeaders() {
		w.Header()[k] = vs // Retry-After of a 503
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = jsonEncode(w, p)
}
