package demoagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/quittance/quittance/internal/backoff"
)

// PurchaseOrder is a purchase order a procurement task committed in the
// supplier's (pretend) ERP. Canceling the task does not reverse it; only a
// compensation request does.
type PurchaseOrder struct {
	// ID is the purchase order number.
	ID string
	// TaskID is the A2A task that committed it.
	TaskID string
	// Request is the text of the procurement request.
	Request string
	// Reversed reports whether a compensation reversed it.
	Reversed bool
	// CommittedAt is when the task committed it.
	CommittedAt time.Time
	// ReversedAt is when it was reversed; zero while it stands.
	ReversedAt time.Time
}

type purchase struct{ PurchaseOrder }

// PurchaseOrder returns the purchase order committed by a task, if the task
// got that far.
func (a *Agent) PurchaseOrder(taskID string) (PurchaseOrder, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.orders[taskID]
	if !ok {
		return PurchaseOrder{}, false
	}
	return p.PurchaseOrder, true
}

// task is a task the agent holds. Every field is guarded by Agent.mu.
type task struct {
	id        string
	contextID string
	status    taskStatus
	artifacts []artifact
	history   []message
	timer     *time.Timer

	pushConfigs []pushConfig
	pushQueue   []queuedPush
	pushing     bool

	subs map[chan streamResponse]struct{}
	// settled is closed when the task reaches a terminal or interrupted
	// state, which ends a blocking SendMessage.
	settled chan struct{}
}

type queuedPush struct {
	cfg pushConfig
	ev  streamResponse
}

// subBuffer is how many events a slow subscriber may fall behind before
// its stream is closed.
const subBuffer = 64

func (t *task) snapshot() *taskJSON {
	out := &taskJSON{ID: t.id, ContextID: t.contextID, Status: t.status}
	out.Artifacts = append(out.Artifacts, t.artifacts...)
	out.History = append(out.History, t.history...)
	return out
}

// newTask registers a task in the submitted state. The caller holds a.mu.
func (a *Agent) newTask(contextID string, msg message, push *pushConfig) *task {
	t := &task{
		id: newID("task-"), contextID: contextID,
		subs: map[chan streamResponse]struct{}{}, settled: make(chan struct{}),
	}
	msg.TaskID, msg.ContextID = t.id, contextID
	t.history = []message{msg}
	a.tasks[t.id] = t
	a.order = append(a.order, t.id)
	a.byMessageID[msg.MessageID] = t.id
	if push != nil {
		pc := *push
		pc.TaskID = t.id
		if pc.ID == "" {
			pc.ID = newID("push-")
		}
		t.pushConfigs = append(t.pushConfigs, pc)
	}
	a.setStatus(t, stateSubmitted, "")
	return t
}

// setStatus moves a task to a state, with an optional agent message, and
// tells subscribers and push endpoints. The caller holds a.mu.
func (a *Agent) setStatus(t *task, state, text string) {
	t.status = taskStatus{State: state, Timestamp: a.cfg.Now().UTC().Format(time.RFC3339Nano)}
	if text != "" {
		t.status.Message = &message{
			MessageID: newID("msg-"), ContextID: t.contextID, TaskID: t.id, Role: "ROLE_AGENT",
			Parts: []part{textPart(text)},
		}
	}
	ev := streamResponse{StatusUpdate: &statusUpdate{TaskID: t.id, ContextID: t.contextID, Status: t.status}}
	a.publish(t, ev)
	for _, pc := range t.pushConfigs {
		a.enqueuePush(t, pc, ev)
	}
	if terminal(state) || interrupted(state) {
		select {
		case <-t.settled:
		default:
			close(t.settled)
		}
	}
	if terminal(state) {
		for ch := range t.subs {
			close(ch)
		}
		clear(t.subs)
		if t.timer != nil {
			t.timer.Stop()
		}
	}
	a.log.Info("task status", slog.String("task_id", t.id), slog.String("state", state))
}

// addArtifact attaches an artifact to a task and tells subscribers. The
// caller holds a.mu.
func (a *Agent) addArtifact(t *task, art artifact) {
	t.artifacts = append(t.artifacts, art)
	a.publish(t, streamResponse{ArtifactUpdate: &artifactUpdate{
		TaskID: t.id, ContextID: t.contextID, Artifact: art, LastChunk: true,
	}})
}

// publish sends an event to the task's subscribers, closing the stream of
// any subscriber too far behind. The caller holds a.mu.
func (a *Agent) publish(t *task, ev streamResponse) {
	for ch := range t.subs {
		select {
		case ch <- ev:
		default:
			close(ch)
			delete(t.subs, ch)
		}
	}
}

// subscribe registers a subscriber to a task's events. The caller holds
// a.mu.
func (a *Agent) subscribe(t *task) chan streamResponse {
	ch := make(chan streamResponse, subBuffer)
	t.subs[ch] = struct{}{}
	return ch
}

// unsubscribe removes a subscriber if it is still registered.
func (a *Agent) unsubscribe(t *task, ch chan streamResponse) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := t.subs[ch]; ok {
		delete(t.subs, ch)
		close(ch)
	}
}

// purge forgets a task (Config.PurgeOnCancel): its work stops, its streams
// end, and from now on no call finds it. Its purchase order stands. The
// caller holds a.mu.
func (a *Agent) purge(t *task) {
	if t.timer != nil {
		t.timer.Stop()
	}
	for ch := range t.subs {
		close(ch)
	}
	clear(t.subs)
	select {
	case <-t.settled:
	default:
		close(t.settled)
	}
	delete(a.tasks, t.id)
	for msgID, id := range a.byMessageID {
		if id == t.id {
			delete(a.byMessageID, msgID)
		}
	}
	a.purged[t.id] = true
	a.log.Info("task purged", slog.String("task_id", t.id))
}

// Purged reports whether the agent has purged a task (Config.PurgeOnCancel).
func (a *Agent) Purged(taskID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.purged[taskID]
}

// startWork moves a submitted procurement task to working, commits its
// purchase order, and schedules its completion.
func (a *Agent) startWork(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.tasks[id]
	if t == nil || t.status.State != stateSubmitted || a.closed {
		return
	}
	po := &purchase{PurchaseOrder{
		ID: "PO-" + newID("")[:10], TaskID: id, Request: messageText(t.history[0]), CommittedAt: a.cfg.Now(),
	}}
	a.orders[id] = po
	a.setStatus(t, stateWorking, fmt.Sprintf(
		"Purchase order %s committed in the supplier's ERP; waiting for the supplier's confirmation.", po.ID))
	t.timer = time.AfterFunc(a.cfg.WorkDelay, func() { a.completeWork(id) })
}

// completeWork completes a working procurement task with its purchase
// order as the artifact.
func (a *Agent) completeWork(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.tasks[id]
	if t == nil || t.status.State != stateWorking || a.closed {
		return
	}
	po := a.orders[id]
	a.addArtifact(t, artifact{
		ArtifactID: newID("art-"), Name: "purchase-order", Description: "The confirmed purchase order.",
		Parts: []part{dataPart(map[string]any{"purchaseOrder": map[string]any{
			"id": po.ID, "supplier": a.cfg.OrgID, "status": "confirmed", "request": po.Request,
		}})},
	})
	a.setStatus(t, stateCompleted, fmt.Sprintf("Purchase order %s confirmed.", po.ID))
}

// enqueuePush queues a push notification; one goroutine per task delivers
// them in order. The caller holds a.mu.
func (a *Agent) enqueuePush(t *task, pc pushConfig, ev streamResponse) {
	t.pushQueue = append(t.pushQueue, queuedPush{cfg: pc, ev: ev})
	if !t.pushing {
		t.pushing = true
		go a.drainPush(t)
	}
}

func (a *Agent) drainPush(t *task) {
	for {
		a.mu.Lock()
		if len(t.pushQueue) == 0 {
			t.pushing = false
			a.mu.Unlock()
			return
		}
		p := t.pushQueue[0]
		t.pushQueue = t.pushQueue[1:]
		a.mu.Unlock()
		a.deliverPush(p.cfg, p.ev)
	}
}

// pushAttempts and pushBackoff bound the delivery of one notification:
// three attempts, 250ms and then 500ms apart.
const pushAttempts = 3

var pushBackoff = backoff.Exponential{Base: 250 * time.Millisecond, Max: time.Second}

// deliverPush posts a StreamResponse to a push endpoint, retrying a few
// times on failure. Delivery is at least once.
func (a *Agent) deliverPush(pc pushConfig, ev streamResponse) {
	body, err := json.Marshal(ev)
	if err != nil {
		a.log.Error("encode push notification", slog.Any("error", err))
		return
	}
	log := a.log.With(slog.String("task_id", pc.TaskID), slog.String("push_config_id", pc.ID))
	for attempt := 1; attempt <= pushAttempts; attempt++ {
		if attempt > 1 {
			time.Sleep(pushBackoff.Wait(attempt - 1))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := a.postPush(ctx, pc, body)
		cancel()
		if err == nil {
			return
		}
		log.Warn("push notification failed", slog.Int("attempt", attempt), slog.Any("error", err))
	}
}

func (a *Agent) postPush(ctx context.Context, pc pushConfig, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, pc.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/a2a+json")
	switch {
	case pc.Authentication != nil && pc.Authentication.Scheme != "":
		req.Header.Set("Authorization", pc.Authentication.Scheme+" "+pc.Authentication.Credentials)
	case pc.Token != "":
		req.Header.Set("Authorization", "Bearer "+pc.Token)
	}
	if pc.Token != "" {
		req.Header.Set("A2A-Notification-Token", pc.Token)
	}
	resp, err := a.cfg.PushClient.Do(req)
	if err != nil {
		return err
	}
	defer discard(resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("push endpoint answered HTTP %d", resp.StatusCode)
	}
	return nil
}

// validPushConfig checks a push config from a client.
func validPushConfig(pc *pushConfig) error {
	u, err := url.Parse(pc.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errParams("push notification config: url must be an absolute http(s) URL")
	}
	return nil
}

// messageText joins the text parts of a message.
func messageText(m message) string {
	var s string
	for _, p := range m.Parts {
		if p.Text != nil {
			if s != "" {
				s += "\n"
			}
			s += *p.Text
		}
	}
	return s
}
