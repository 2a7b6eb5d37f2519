package demoagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/quittance/quittance/compensation/kit"
)

// maxRequestBytes caps a JSON-RPC request body.
const maxRequestBytes = 1 << 20

func (a *Agent) serveRPC(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		writeRPC(w, nil, nil, errRequest("request body unreadable or too large"))
		return
	}
	var req rpcRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeRPC(w, nil, nil, errParse("request is not a JSON-RPC object"))
		return
	}
	if req.JSONRPC != "2.0" || req.Method == "" || !validID(req.ID) {
		writeRPC(w, req.ID, nil, errRequest("not a JSON-RPC 2.0 request"))
		return
	}
	if v := requestedVersion(r); v != "1.0" {
		writeRPC(w, req.ID, nil, errVersion(v))
		return
	}
	if len(bytes.TrimSpace(req.Params)) == 0 || bytes.Equal(bytes.TrimSpace(req.Params), []byte("null")) {
		req.Params = json.RawMessage("{}")
	}
	if slices.Contains(requestedExtensions(r), ExtensionURI) {
		w.Header().Set("A2A-Extensions", ExtensionURI)
	}

	var result any
	switch req.Method {
	case "SendMessage":
		result, err = a.sendMessage(r, req.Params)
	case "SendStreamingMessage":
		a.sendStreamingMessage(w, r, req.ID, req.Params)
		return
	case "GetTask":
		result, err = a.getTask(req.Params)
	case "ListTasks":
		result, err = a.listTasks(req.Params)
	case "CancelTask":
		result, err = a.cancelTask(req.Params)
	case "SubscribeToTask":
		a.subscribeToTask(w, r, req.ID, req.Params)
		return
	case "CreateTaskPushNotificationConfig":
		result, err = a.createPushConfig(req.Params)
	default:
		err = errMethodNotFound(req.Method)
	}
	if err != nil {
		re := asRPCError(err)
		if re.Code == -32603 {
			a.log.Error("rpc failed", slog.String("method", req.Method), slog.Any("error", err))
		}
		writeRPC(w, req.ID, nil, re)
		return
	}
	writeRPC(w, req.ID, result, nil)
}

// requestedVersion returns the A2A version the client asked for, as
// major.minor. A request without one is a v0.3 request (spec §3.6.2).
func requestedVersion(r *http.Request) string {
	v := strings.TrimSpace(r.Header.Get("A2A-Version"))
	if v == "" {
		v = strings.TrimSpace(r.URL.Query().Get("A2A-Version"))
	}
	if v == "" {
		return "0.3"
	}
	if parts := strings.SplitN(v, ".", 3); len(parts) >= 2 {
		return parts[0] + "." + parts[1]
	}
	return v
}

// requestedExtensions returns the extension URIs the request activates.
func requestedExtensions(r *http.Request) []string {
	var out []string
	for _, h := range r.Header.Values("A2A-Extensions") {
		for uri := range strings.SplitSeq(h, ",") {
			if uri = strings.TrimSpace(uri); uri != "" {
				out = append(out, uri)
			}
		}
	}
	return out
}

// validID accepts the JSON-RPC ids the agent answers: strings and numbers.
// Notifications (no id) are not supported.
func validID(id json.RawMessage) bool {
	id = bytes.TrimSpace(id)
	return len(id) > 0 && (id[0] == '"' || id[0] == '-' || (id[0] >= '0' && id[0] <= '9'))
}

func writeRPC(w http.ResponseWriter, id json.RawMessage, result any, rerr *rpcError) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rpcResponse{JSONRPC: "2.0", ID: id, Result: result, Error: rerr})
}

func decodeParams(raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return errParams("params: " + err.Error())
	}
	return nil
}

// sendMessage handles SendMessage: a compensation request, or a
// procurement request that creates a task. Without returnImmediately it
// waits until the task is terminal or interrupted (or the client leaves).
func (a *Agent) sendMessage(r *http.Request, raw json.RawMessage) (any, error) {
	var p sendParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	t, err := a.acceptMessage(p)
	if err != nil {
		return nil, err
	}
	if p.Configuration == nil || !p.Configuration.ReturnImmediately {
		select {
		case <-t.settled:
		case <-r.Context().Done():
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return streamResponse{Task: t.snapshot()}, nil
}

// acceptMessage validates the params of a SendMessage or
// SendStreamingMessage request and returns the task it belongs to: the
// task already created for its messageId, a new compensation task, or a
// new procurement task.
func (a *Agent) acceptMessage(p sendParams) (*task, error) {
	m := p.Message
	switch {
	case m == nil:
		return nil, errParams("params.message is required")
	case m.MessageID == "":
		return nil, errParams("message.messageId is required")
	case len(m.Parts) == 0:
		return nil, errParams("message.parts must not be empty")
	}
	var push *pushConfig
	if p.Configuration != nil && p.Configuration.TaskPushNotificationConfig != nil {
		push = p.Configuration.TaskPushNotificationConfig
		if err := validPushConfig(push); err != nil {
			return nil, err
		}
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if id, ok := a.byMessageID[m.MessageID]; ok {
		// A retry of a message already accepted: the same task, once.
		return a.tasks[id], nil
	}
	if m.TaskID != "" {
		t := a.tasks[m.TaskID]
		switch {
		case t == nil:
			return nil, errTaskNotFound(m.TaskID)
		case terminal(t.status.State):
			return nil, errUnsupported("task " + m.TaskID + " is in a terminal state")
		}
		mm := *m
		mm.ContextID = t.contextID
		t.history = append(t.history, mm)
		a.byMessageID[m.MessageID] = t.id
		return t, nil
	}
	if req, ok, err := compensationRequestOf(*m); err != nil {
		return nil, err
	} else if ok {
		return a.compensate(*m, req, push)
	}
	contextID := m.ContextID
	if contextID == "" {
		contextID = newID("ctx-")
	}
	t := a.newTask(contextID, *m, push)
	go a.startWork(t.id)
	return t, nil
}

func (a *Agent) getTask(raw json.RawMessage) (any, error) {
	var p taskIDParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.tasks[p.ID]
	if t == nil {
		return nil, errTaskNotFound(p.ID)
	}
	return t.snapshot(), nil
}

// listTasks handles ListTasks: the tasks of one context (every task when
// contextId is empty), newest first, in pages of pageSize (1 to 100,
// default 50), each with its history, so a client that set the contextId
// can find every task it created there.
func (a *Agent) listTasks(raw json.RawMessage) (any, error) {
	var p listTasksParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	size := p.PageSize
	if size == 0 {
		size = 50
	}
	if size < 1 || size > 100 {
		return nil, errParams("pageSize must be 1 to 100")
	}
	start := 0
	if p.PageToken != "" {
		n, err := strconv.Atoi(p.PageToken)
		if err != nil || n < 0 {
			return nil, errParams("pageToken is not a token this agent issued")
		}
		start = n
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var all []*taskJSON
	for _, id := range slices.Backward(a.order) {
		if t := a.tasks[id]; p.ContextID == "" || t.contextID == p.ContextID {
			all = append(all, t.snapshot())
		}
	}
	out := listTasksResult{Tasks: []*taskJSON{}, PageSize: size, TotalSize: len(all)}
	if start < len(all) {
		end := min(start+size, len(all))
		out.Tasks = all[start:end]
		if end < len(all) {
			out.NextPageToken = strconv.Itoa(end)
		}
	}
	return out, nil
}

// cancelTask handles CancelTask. A canceled task keeps its purchase order:
// the cancel closes the task record, not its effects. With AtomicCancel the
// agent reverses the purchase order as well and says so in a receipt.
func (a *Agent) cancelTask(raw json.RawMessage) (any, error) {
	var p taskIDParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.tasks[p.ID]
	switch {
	case t == nil:
		return nil, errTaskNotFound(p.ID)
	case t.status.State == stateCanceled:
		return t.snapshot(), nil // cancel is idempotent
	case terminal(t.status.State):
		return nil, errTaskNotCancelable(t.id, t.status.State)
	case a.cfg.PurgeOnCancel:
		a.purge(t)
		return nil, errTaskNotFound(t.id)
	}
	po := a.orders[t.id]
	text := "Task canceled before any purchase order was committed."
	if po != nil {
		text = "Task canceled. Purchase order " + po.ID + " was already committed and stands: " +
			"canceling the task does not reverse it; request compensation to reverse it."
	}
	if a.cfg.AtomicCancel {
		key := atomicCancelKey(p.Metadata, t.id)
		rc, err := a.issueReceipt(kit.Request{TaskID: a2a.TaskID(t.id), IdempotencyKey: key})
		if err != nil {
			return nil, err
		}
		a.addArtifact(t, rc.artifact())
		if po != nil {
			text = "Task canceled and purchase order " + po.ID + " reversed."
		}
	}
	a.setStatus(t, stateCanceled, text)
	return t.snapshot(), nil
}

func (a *Agent) createPushConfig(raw json.RawMessage) (any, error) {
	var p pushConfig
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	if p.TaskID == "" {
		return nil, errParams("taskId is required")
	}
	if err := validPushConfig(&p); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.tasks[p.TaskID]
	if t == nil {
		return nil, errTaskNotFound(p.TaskID)
	}
	if p.ID == "" {
		p.ID = newID("push-")
	}
	t.pushConfigs = slices.DeleteFunc(t.pushConfigs, func(c pushConfig) bool { return c.ID == p.ID })
	t.pushConfigs = append(t.pushConfigs, p)
	return p, nil
}

func (a *Agent) sendStreamingMessage(w http.ResponseWriter, r *http.Request, id, raw json.RawMessage) {
	var p sendParams
	err := decodeParams(raw, &p)
	var t *task
	if err == nil {
		t, err = a.acceptMessage(p)
	}
	if err != nil {
		writeRPC(w, id, nil, asRPCError(err))
		return
	}
	a.stream(w, r, id, t, false)
}

func (a *Agent) subscribeToTask(w http.ResponseWriter, r *http.Request, id, raw json.RawMessage) {
	var p taskIDParams
	if err := decodeParams(raw, &p); err != nil {
		writeRPC(w, id, nil, asRPCError(err))
		return
	}
	a.mu.Lock()
	t := a.tasks[p.ID]
	a.mu.Unlock()
	if t == nil {
		writeRPC(w, id, nil, errTaskNotFound(p.ID))
		return
	}
	a.stream(w, r, id, t, true)
}

// stream writes a task's events as server-sent events of JSON-RPC
// responses: the task first, then its updates, until it is terminal (the
// stream ends) or the client leaves. Subscribing to a terminal task is an
// UnsupportedOperation error when refuseTerminal is set.
func (a *Agent) stream(w http.ResponseWriter, r *http.Request, id json.RawMessage, t *task, refuseTerminal bool) {
	a.mu.Lock()
	if refuseTerminal && terminal(t.status.State) {
		a.mu.Unlock()
		writeRPC(w, id, nil, errUnsupported("task "+t.id+" is in a terminal state"))
		return
	}
	first := streamResponse{Task: t.snapshot()}
	var ch chan streamResponse
	if !terminal(t.status.State) {
		ch = a.subscribe(t)
	}
	a.mu.Unlock()
	if ch != nil {
		defer a.unsubscribe(t, ch)
	}

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	write := func(ev streamResponse) error {
		b, err := json.Marshal(rpcResponse{JSONRPC: "2.0", ID: id, Result: ev})
		if err != nil {
			return err
		}
		if _, err := io.WriteString(w, "data: "+string(b)+"\n\n"); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := write(first); err != nil || ch == nil {
		return
	}
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if err := write(ev); err != nil {
				if !errors.Is(err, http.ErrAbortHandler) {
					a.log.Debug("stream write failed", slog.Any("error", err))
				}
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}
