package gateway

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
)

// A task's history is the conversation on it, from what Quittance records:
// the messages it sent (the dispatched message and each answer to an
// interruption, as the orchestrator gave them: their parts and metadata,
// never the ledger extension's entry, which is not sent; a failed answer
// is left out, the remote never took it) with the messageId they were
// sent with, and the remote's status messages as Quittance observed them
// (each task_status_changed event that carries one, as text: the events
// keep a status message's text), in the order they were queued or
// observed. The current status's message is also the status's own, whole.

// withHistory sets t's history, the last length messages of it when length
// is set (none for 0), as A2A's historyLength asks.
func (h *handler) withHistory(ctx context.Context, c call, d ledger.Delegation, t *a2a.Task, length *int) error {
	if length != nil && *length <= 0 {
		return nil
	}
	sent, err := h.g.cfg.Orchestrator.SentMessages(ctx, c.p, d.ID)
	if err != nil {
		return h.fail(ctx, err)
	}
	events, err := h.g.cfg.Ledger.DelegationEvents(ctx, c.p, d.ID)
	if err != nil {
		return h.fail(ctx, err)
	}
	type entry struct {
		at  time.Time
		msg *a2a.Message
	}
	var all []entry
	for _, m := range sent {
		if msg := sentMessage(m, t); msg != nil {
			all = append(all, entry{m.At, msg})
		}
	}
	for _, ev := range events {
		if msg := statusMessage(ev, t); msg != nil {
			all = append(all, entry{ev.At, msg})
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	if length != nil && len(all) > *length {
		all = all[len(all)-*length:]
	}
	t.History = make([]*a2a.Message, len(all))
	for i, e := range all {
		t.History[i] = e.msg
	}
	return nil
}

// sentMessage is a message Quittance sent on t, as a user message; nil
// for one the remote never took (failed) or that does not decode.
func sentMessage(m delegate.SentMessage, t *a2a.Task) *a2a.Message {
	if m.Status == delegate.MessageFailed {
		return nil
	}
	var body struct {
		Parts    a2a.ContentParts `json:"parts"`
		Metadata map[string]any   `json:"metadata"`
	}
	if err := json.Unmarshal(m.Message, &body); err != nil {
		return nil
	}
	return &a2a.Message{
		ID: m.A2AMessageID, Role: a2a.MessageRoleUser, Parts: body.Parts, Metadata: body.Metadata,
		TaskID: t.ID, ContextID: t.ContextID,
	}
}

// statusMessage is the status message an observed status carried, as an
// agent message; nil for an event that is not an observed status with a
// message. Its id names the event (status-<delegation id>-<seq>).
func statusMessage(ev ledger.Event, t *a2a.Task) *a2a.Message {
	if ev.Type != ledger.EventTypeTaskStatusChanged {
		return nil
	}
	var obs ledger.TaskObservation
	if err := json.Unmarshal(ev.Data, &obs); err != nil || obs.Message == "" {
		return nil
	}
	return &a2a.Message{
		ID: "status-" + ev.DelegationID.String() + "-" + strconv.FormatInt(ev.Seq, 10), Role: a2a.MessageRoleAgent,
		Parts: a2a.ContentParts{a2a.NewTextPart(obs.Message)}, TaskID: t.ID, ContextID: t.ContextID,
	}
}

// historyKey carries in a call's context how much history the tasks it
// answers carry (historyFor): SendMessage's configuration's and GetTask's
// historyLength, all of it when unset; ListTasks' only when set. Streams
// carry none.
type historyKey struct{}

// historyFor marks ctx's answers as carrying history: the last *length
// messages, or all of it for nil.
func historyFor(ctx context.Context, length *int) context.Context {
	return context.WithValue(ctx, historyKey{}, history{length: length})
}

type history struct{ length *int }

// sendHistory is historyFor with a SendMessage's configuration, unless
// ctx already says (a streamed message's answer is not told: no history).
func sendHistory(ctx context.Context, cfg *a2a.SendMessageConfig) context.Context {
	if _, set := historyOf(ctx); set {
		return ctx
	}
	if cfg == nil {
		return historyFor(ctx, nil)
	}
	return historyFor(ctx, cfg.HistoryLength)
}

// historyOf is the history ctx's answers carry; ok false for none.
func historyOf(ctx context.Context) (length *int, ok bool) {
	h, ok := ctx.Value(historyKey{}).(history)
	return h.length, ok
}
