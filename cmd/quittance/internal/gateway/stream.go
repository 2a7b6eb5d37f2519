package gateway

import (
	"context"
	"encoding/json"
	"iter"
	"reflect"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/quittance/quittance/ledger"
)

// defaultPoll is how often a stream reads its task when Config.Poll is
// zero.
const defaultPoll = time.Second

// SubscribeToTask streams one of the caller's tasks: the task as it stands,
// then a status update each time its status or the ledger's view of it
// changes and an artifact update each time an artifact appears or changes,
// until the task is terminal or interrupted (GATEWAY.md, "Streams").
// A client that lost its stream subscribes again and starts from the task
// as it then stands.
func (h *handler) SubscribeToTask(ctx context.Context, req *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		c, err := h.begin(ctx, req.Tenant)
		if err != nil {
			yield(nil, err)
			return
		}
		d, err := h.delegation(ctx, c, req.ID)
		if err != nil {
			yield(nil, err)
			return
		}
		h.follow(ctx, c, d, false, yield)
	}
}

// SendStreamingMessage is SendMessage (a new task, or an answer to an
// interrupted one) followed by the task's stream, as SubscribeToTask; an
// answer's stream does not end at the interruption it answers, which
// stands until the org's agent took the answer.
func (h *handler) SendStreamingMessage(ctx context.Context, req *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		res, err := h.SendMessage(ctx, req)
		if err != nil {
			yield(nil, err)
			return
		}
		c, _ := callOf(ctx)
		d, err := h.delegation(ctx, c, res.(*a2a.Task).ID)
		if err != nil {
			yield(nil, err)
			return
		}
		h.follow(ctx, c, d, req.Message.TaskID != "", yield)
	}
}

// follow yields d's task, then reads it every poll interval and yields
// what changed, until the task is terminal or interrupted (with answering,
// interrupted other than it first was), the client goes away or yield
// declines.
func (h *handler) follow(ctx context.Context, c call, d ledger.Delegation, answering bool, yield func(a2a.Event, error) bool) {
	task, err := h.task(ctx, c, d)
	if err != nil {
		yield(nil, err)
		return
	}
	// An answer's stream ends at an interruption only once the task moved
	// on from the one it answers: it worked since, or it asks something
	// else (a status re-observed with another timestamp, message id or no
	// message is the same question).
	first, resumed := task.Status, false
	ended := func(st a2a.TaskStatus) bool {
		if !ends(st.State) {
			resumed = true
		}
		asks := statusText(st)
		return st.State.Terminal() || (ends(st.State) && (!answering || resumed || st.State != first.State || (asks != "" && asks != statusText(first))))
	}
	if !yield(task, nil) || ended(task.Status) {
		return
	}
	poll := h.g.cfg.Poll
	if poll <= 0 {
		poll = defaultPoll
	}
	last := task
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		d, err := h.g.cfg.Ledger.GetDelegation(ctx, c.p, d.ID)
		if err != nil {
			yield(nil, h.fail(ctx, err))
			return
		}
		now, err := h.task(ctx, c, d)
		if err != nil {
			yield(nil, err)
			return
		}
		for _, ev := range changes(last, now) {
			if !yield(ev, nil) {
				return
			}
		}
		last = now
		if ended(now.Status) {
			return
		}
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
