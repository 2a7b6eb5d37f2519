package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/ledger"
)

// defaultPoll is how often a stream reads its task when the gateway has no
// event streams to be woken by (Config.Streams nil).
const defaultPoll = time.Second

// SubscribeToTask streams one of the caller's tasks: the task as it stands,
// then a status update each time its status or the ledger's view of it
// changes and an artifact update each time an artifact appears or changes,
// until the task is interrupted, or terminal with its obligation ended
// (GATEWAY.md, "Streams"). A client that lost its stream subscribes again
// and starts from the task as it then stands.
func (h *handler) SubscribeToTask(ctx context.Context, req *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		c, d, err := h.beginTask(ctx, req.Tenant, req.ID)
		if err != nil {
			yield(nil, err)
			return
		}
		if d.TaskStatus.Terminal() && d.ObligationState.Terminal() {
			// Nothing more will move: the task alone, with no slot taken.
			if task, err := h.task(ctx, c, d); err != nil {
				yield(nil, err)
			} else {
				yield(task, nil)
			}
			return
		}
		w, err := h.openStream(c)
		if err != nil {
			yield(nil, err)
			return
		}
		defer w.close()
		h.follow(ctx, c, w, d.ID, false, yield)
	}
}

// SendStreamingMessage is SendMessage (a new task, or an answer to an
// interrupted one) followed by the task's stream, as SubscribeToTask; an
// answer's stream does not end at the interruption it answers, which
// stands until the org's agent took the answer. The stream's slot is taken
// first: a stream over the caps is refused before the message is sent.
func (h *handler) SendStreamingMessage(ctx context.Context, req *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		c, err := h.begin(ctx, req.Tenant)
		if err != nil {
			yield(nil, err)
			return
		}
		w, err := h.openStream(c)
		if err != nil {
			yield(nil, err)
			return
		}
		defer w.close()
		none := 0
		res, err := h.SendMessage(historyFor(ctx, &none), req)
		if err != nil {
			yield(nil, err)
			return
		}
		did, _ := uuid.Parse(string(res.(*a2a.Task).ID))
		h.follow(ctx, c, w, did, req.Message.TaskID != "", yield)
	}
}

// taskWatch is a stream's slot among the event streams and its wake-ups
// (httpapi.DelegationWatch; without event streams, nothing but the poll),
// and when it last read its task and checked its credential.
type taskWatch struct {
	w    *httpapi.DelegationWatch
	poll time.Duration
	// tick paces the poll and the credential checks.
	tick                *time.Ticker
	lastRead, lastCheck time.Time
}

func newTaskWatch(w *httpapi.DelegationWatch, poll time.Duration) *taskWatch {
	now := time.Now()
	return &taskWatch{w: w, poll: poll, tick: time.NewTicker(min(poll, httpapi.StreamRecheck)), lastRead: now, lastCheck: now}
}

// openStream takes a stream slot of c's principal: over the event
// streams' caps it is the A2A refusal that says so (streamRefusal).
func (h *handler) openStream(c call) (*taskWatch, error) {
	if h.g.cfg.Streams == nil {
		return newTaskWatch(nil, defaultPoll), nil
	}
	w, err := h.g.cfg.Streams.OpenSlot(c.p)
	var refused *httpapi.StreamRefusedError
	if errors.As(err, &refused) {
		return nil, streamRefusal(refused)
	}
	if err != nil {
		return nil, err
	}
	return newTaskWatch(w, h.g.cfg.Streams.Poll()), nil
}

// streamRefusal is the A2A error of a stream over a cap. A2A has no code
// for exhausted resources: it is JSON-RPC's implementation-defined server
// error (-32000, a2a.ErrServerError), with the API's problem code
// (too_many_streams), the cap and the seconds to wait in the ErrorInfo's
// metadata, as a ledger refusal carries its problem.
func streamRefusal(e *httpapi.StreamRefusedError) error {
	retry := strconv.Itoa(int(e.RetryAfter.Seconds()))
	return a2a.NewError(a2a.ErrServerError, e.Detail).
		WithErrorInfoMeta(map[string]string{"problem_code": "too_many_streams", "problem_status": "429", "cap": e.Cap, "retry_after": retry}).
		WithDetails(map[string]any{"code": "too_many_streams", "status": 429, "detail": e.Detail, "cap": e.Cap, "retry_after": retry})
}

// watch starts the wake-ups of delegation id.
func (t *taskWatch) watch(ctx context.Context, id uuid.UUID) error {
	if t.w == nil {
		return nil
	}
	return t.w.Watch(ctx, id)
}

// errCredentialChanged ends a stream whose credential no longer holds, as
// the API's event streams end.
var errCredentialChanged = a2a.NewError(a2a.ErrUnauthenticated,
	"the stream's credential no longer holds (revoked, expired, or its principal disabled or changed)")

// next blocks until the task is to be read again: its delegation had
// events, or the poll interval passed since the last read. Every
// httpapi.StreamRecheck it calls check, and ends the stream with
// errCredentialChanged when it says no. Any other error ends the stream
// too: the context's end, the process stopping its streams, a failed read.
func (t *taskWatch) next(ctx context.Context, check func() bool) error {
	for {
		woke, err := t.wait(ctx)
		if err != nil {
			return err
		}
		now := time.Now()
		if now.Sub(t.lastCheck) >= httpapi.StreamRecheck {
			t.lastCheck = now
			if !check() {
				return errCredentialChanged
			}
		}
		if woke || now.Sub(t.lastRead) >= t.poll {
			t.lastRead = now
			return nil
		}
	}
}

// wait is the watch's next wake-up: true for the delegation's events.
func (t *taskWatch) wait(ctx context.Context) (bool, error) {
	if t.w == nil {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.tick.C:
			return false, nil
		}
	}
	return t.w.Wait(ctx, t.tick.C)
}

func (t *taskWatch) close() {
	t.tick.Stop()
	if t.w != nil {
		t.w.Close()
	}
}

// stillAuthorized is the check of a stream's credential: the bearer token
// of the request that opened it still authenticates as c's principal did
// (httpapi.StillAuthorized), whichever binding or version it came over.
func (h *handler) stillAuthorized(ctx context.Context, c call) func() bool {
	return func() bool { return httpapi.StillAuthorized(ctx, h.g.cfg.Access, c.secret, c.p) }
}

// follow watches delegation id, yields its task, then reads it on each of
// its events (and every poll interval, for what changes without an event:
// streamed artifact chunks) and yields what changed, until the stream ends
// (streamEnds), the client goes away or yield declines. An error once the
// client is gone is not told.
func (h *handler) follow(ctx context.Context, c call, w *taskWatch, id uuid.UUID, answering bool, yield func(a2a.Event, error) bool) {
	fail := func(err error) {
		if ctx.Err() == nil {
			yield(nil, err)
		}
	}
	if err := w.watch(ctx, id); err != nil {
		fail(h.fail(ctx, err))
		return
	}
	// Read after the watch began: a change committed since wakes it.
	d, task, err := h.current(ctx, c, id)
	if err != nil {
		fail(err)
		return
	}
	end := streamEnds(task.Status, answering)
	if !yield(task, nil) || end(task.Status, d.ObligationState) {
		return
	}
	check := h.stillAuthorized(ctx, c)
	for last := task; ; {
		if err := w.next(ctx, check); err != nil {
			// A graceful shutdown ends the stream as a dropped connection
			// does: the client subscribes again.
			var ae *a2a.Error
			switch {
			case errors.As(err, &ae):
				fail(err)
			case !errors.Is(err, httpapi.ErrStreamsClosed):
				fail(h.fail(ctx, err))
			}
			return
		}
		d, now, err := h.current(ctx, c, id)
		if err != nil {
			fail(err)
			return
		}
		for _, ev := range changes(last, now) {
			if !yield(ev, nil) {
				return
			}
		}
		if last = now; end(now.Status, d.ObligationState) {
			return
		}
	}
}

// current is delegation id and its task as they stand.
func (h *handler) current(ctx context.Context, c call, id uuid.UUID) (ledger.Delegation, *a2a.Task, error) {
	d, err := h.g.cfg.Ledger.GetDelegation(ctx, c.p, id)
	if err != nil {
		return d, nil, h.fail(ctx, err)
	}
	t, err := h.task(ctx, c, d)
	return d, t, err
}

// streamEnds is when a stream that began at status first ends: at an
// interruption, as A2A streams do, or at a terminal status once the
// obligation ended too (a terminal task's obligation may still move:
// compensation after a cancel). An answer's stream ends at an interruption
// only once the task moved on from the one it answers: it worked since, or
// it asks something else (a status re-observed with another timestamp,
// message id or no message is the same question).
func streamEnds(first a2a.TaskStatus, answering bool) func(a2a.TaskStatus, ledger.ObligationState) bool {
	resumed := false
	return func(st a2a.TaskStatus, ob ledger.ObligationState) bool {
		if st.State.Terminal() {
			return ob.Terminal()
		}
		if !ends(st.State) {
			resumed = true
			return false
		}
		asks := statusText(st)
		return !answering || resumed || st.State != first.State || (asks != "" && asks != statusText(first))
	}
}

// statusText is the text of a status's message: what an interrupted task
// asks, however its message was observed (ids and timestamps aside).
func statusText(st a2a.TaskStatus) string {
	if st.Message == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range st.Message.Parts {
		b.WriteString(p.Text())
	}
	return b.String()
}

// ends reports whether a stream ends at state: a terminal or interrupted
// task, as A2A streams end.
func ends(state a2a.TaskState) bool {
	return state.Terminal() || state == a2a.TaskStateInputRequired || state == a2a.TaskStateAuthRequired
}

// changes are the updates that take a client from task before to task
// now: each artifact that is new or changed, whole (append false,
// lastChunk when Quittance holds it complete), then a status update when
// the status or the ledger's metadata changed.
func changes(before, now *a2a.Task) []a2a.Event {
	var out []a2a.Event
	seen := map[a2a.ArtifactID]*a2a.Artifact{}
	for _, a := range before.Artifacts {
		seen[a.ID] = a
	}
	for _, a := range now.Artifacts {
		if old, ok := seen[a.ID]; ok && sameJSON(old, a) {
			continue
		}
		out = append(out, &a2a.TaskArtifactUpdateEvent{TaskID: now.ID, ContextID: now.ContextID, Artifact: a, LastChunk: true})
	}
	if !sameJSON(before.Status, now.Status) || !reflect.DeepEqual(before.Metadata, now.Metadata) {
		out = append(out, &a2a.TaskStatusUpdateEvent{TaskID: now.ID, ContextID: now.ContextID, Status: now.Status, Metadata: now.Metadata})
	}
	return out
}

// sameJSON reports whether a and b encode alike.
func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}
