package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/quittance/quittance/delegate/a2a/wire03"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/webhook"
)

// The A2A 0.3 JSON-RPC face (GATEWAY.md, "A2A 0.3"): a 0.3 request on the
// JSON-RPC endpoint — a method named the 0.3 way, message/send and the
// like — is translated to the 1.0 request, answered by the same handler
// the 1.0 bindings serve, and its answer, events and errors translated
// back. The behaviour is the handler's alone; this face only speaks 0.3.

// v03Version is the protocol version of the 0.3 interface in the card's
// supportedInterfaces; the 0.3 members of the card say "0.3.0", as 0.3
// cards do.
const v03Version a2a.ProtocolVersion = "0.3"

// isV03Method reports whether method is named the A2A 0.3 way
// (message/send, tasks/get, …): 1.0's methods have no "/".
func isV03Method(method string) bool { return strings.Contains(method, "/") }

// serveV03 serves one A2A 0.3 JSON-RPC request, body, as orchestrator p,
// already authenticated; the extension's URI is echoed in
// X-A2A-Extensions when the request activates it.
func (g *Gateway) serveV03(w http.ResponseWriter, r *http.Request, p ledger.Principal, body []byte) {
	var req v03Request
	if err := json.Unmarshal(body, &req); err != nil {
		writeV03(w, nil, nil, a2a.NewError(a2a.ErrParseError, "the request is not a JSON-RPC request"))
		return
	}
	id, ok := v03ID(req.ID)
	if !ok || req.JSONRPC != "2.0" {
		writeV03(w, nil, nil, a2a.NewError(a2a.ErrInvalidRequest, `a JSON-RPC 2.0 request has "jsonrpc":"2.0" and an id that is a string, a number or null`))
		return
	}
	ctx := withCall(r, p, webhook.PushV03)
	for _, h := range []string{"X-A2A-Extensions", "A2A-Extensions"} {
		for _, v := range r.Header.Values(h) {
			for _, uri := range strings.Split(v, ",") {
				if strings.TrimSpace(uri) == ExtensionURI {
					w.Header().Set("X-A2A-Extensions", ExtensionURI)
				}
			}
		}
	}
	h := &handler{g: g}
	switch req.Method {
	case "message/stream":
		send, err := v1SendRequest(req.Params)
		if err != nil {
			streamV03(w, id, errorEvents(err), false)
			return
		}
		streamV03(w, id, h.SendStreamingMessage(ctx, send), send.Message.TaskID != "")
	case "tasks/resubscribe":
		var q v03TaskParams
		if err := decodeV03(req.Params, &q); err != nil {
			streamV03(w, id, errorEvents(err), false)
			return
		}
		streamV03(w, id, h.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: a2a.TaskID(q.ID)}), false)
	default:
		result, err := v03Call(ctx, h, req)
		writeV03(w, id, result, err)
	}
}

// v03ID is a request's id as it is echoed: a string, a number or null
// (nil when absent); ok is false for anything else.
func v03ID(raw json.RawMessage) (any, bool) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, true
	case raw[0] == '"' || raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
		return raw, json.Valid(raw)
	}
	return nil, false
}

// decodeV03 decodes a method's params into v; params that are absent or
// do not decode are InvalidParams.
func decodeV03(params json.RawMessage, v any) error {
	if len(bytes.TrimSpace(params)) == 0 || bytes.Equal(bytes.TrimSpace(params), []byte("null")) {
		return a2a.NewError(a2a.ErrInvalidParams, "params are required")
	}
	if err := json.Unmarshal(params, v); err != nil {
		return a2a.NewError(a2a.ErrInvalidParams, "params do not decode: "+err.Error())
	}
	return nil
}

// v1SendRequest is message/send's and message/stream's MessageSendParams
// as 1.0's SendMessageRequest: blocking false is returnImmediately, the
// push config is 1.0's, flattened.
func v1SendRequest(params json.RawMessage) (*a2a.SendMessageRequest, error) {
	var p v03SendParams
	if err := decodeV03(params, &p); err != nil {
		return nil, err
	}
	msg, err := v1Message(p.Message)
	if err != nil {
		return nil, err
	}
	req := &a2a.SendMessageRequest{Message: msg, Metadata: p.Metadata}
	if c := p.Configuration; c != nil {
		req.Config = &a2a.SendMessageConfig{
			AcceptedOutputModes: c.AcceptedOutputModes, HistoryLength: c.HistoryLength,
			ReturnImmediately: c.Blocking != nil && !*c.Blocking, PushConfig: v1PushConfig("", c.PushNotificationConfig),
		}
	}
	return req, nil
}

// v03Call answers one of the 0.3 methods that are not streams.
func v03Call(ctx context.Context, h *handler, req v03Request) (any, error) {
	var q v03TaskParams
	switch req.Method {
	case "message/send":
		send, err := v1SendRequest(req.Params)
		if err != nil {
			return nil, err
		}
		res, err := h.SendMessage(ctx, send)
		if err != nil {
			return nil, err
		}
		return v03EventOf(res, false), nil
	case "tasks/get", "tasks/cancel":
		if err := decodeV03(req.Params, &q); err != nil {
			return nil, err
		}
		var t *a2a.Task
		var err error
		if req.Method == "tasks/get" {
			t, err = h.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(q.ID), HistoryLength: q.HistoryLength})
		} else {
			t, err = h.CancelTask(ctx, &a2a.CancelTaskRequest{ID: a2a.TaskID(q.ID), Metadata: q.Metadata})
		}
		if err != nil {
			return nil, err
		}
		return v03TaskOf(t), nil
	case "tasks/list":
		return v03List(ctx, h, req.Params)
	case "tasks/pushNotificationConfig/set", "tasks/pushNotificationConfig/get",
		"tasks/pushNotificationConfig/list", "tasks/pushNotificationConfig/delete":
		return v03Push(ctx, h, req)
	case "agent/getAuthenticatedExtendedCard":
		card, err := h.GetExtendedAgentCard(ctx, &a2a.GetExtendedAgentCardRequest{})
		if err != nil {
			return nil, err
		}
		return dualCard(card)
	case "":
		return nil, a2a.NewError(a2a.ErrInvalidRequest, "method is required")
	}
	return nil, a2a.NewError(a2a.ErrMethodNotFound, "method not found: "+req.Method)
}

// v03List answers tasks/list (A2A 0.3.7 and later) with ListTasks.
func v03List(ctx context.Context, h *handler, params json.RawMessage) (any, error) {
	var p wire03.ListParams
	if len(bytes.TrimSpace(params)) > 0 {
		if err := decodeV03(params, &p); err != nil {
			return nil, err
		}
	}
	req := &a2a.ListTasksRequest{
		ContextID: p.ContextID, PageSize: p.PageSize, PageToken: p.PageToken, HistoryLength: p.HistoryLength,
		IncludeArtifacts: p.IncludeArtifacts,
	}
	if p.Status != "" {
		if req.Status = v1State(p.Status); req.Status == a2a.TaskStateUnspecified {
			return nil, a2a.NewError(a2a.ErrInvalidParams, "status is not an A2A task state")
		}
	}
	if p.LastUpdatedAfter != nil {
		at := time.UnixMilli(*p.LastUpdatedAfter).UTC()
		req.StatusTimestampAfter = &at
	}
	res, err := h.ListTasks(ctx, req)
	if err != nil {
		return nil, err
	}
	out := v03ListResult{Tasks: []v03Task{}, TotalSize: res.TotalSize, PageSize: res.PageSize, NextPageToken: res.NextPageToken}
	for _, t := range res.Tasks {
		out.Tasks = append(out.Tasks, v03TaskOf(t))
	}
	return out, nil
}

// v03Push answers the push notification config methods with the 1.0
// handler's: set with CreateTaskPushConfig, the others alike.
func v03Push(ctx context.Context, h *handler, req v03Request) (any, error) {
	if req.Method == "tasks/pushNotificationConfig/set" {
		var p wire03.TaskPushConfig
		if err := decodeV03(req.Params, &p); err != nil {
			return nil, err
		}
		pc, err := h.CreateTaskPushConfig(ctx, v1PushConfig(p.TaskID, &p.PushNotificationConfig))
		if err != nil {
			return nil, err
		}
		return v03PushConfigOf(pc), nil
	}
	var q v03TaskParams
	if err := decodeV03(req.Params, &q); err != nil {
		return nil, err
	}
	switch req.Method {
	case "tasks/pushNotificationConfig/get":
		if q.ConfigID == "" {
			// 0.3 asks for a task's config by the task's id alone: its
			// first, if it has one.
			res, err := h.ListTaskPushConfigs(ctx, &a2a.ListTaskPushConfigRequest{TaskID: a2a.TaskID(q.ID)})
			if err != nil {
				return nil, err
			}
			if len(res.Configs) > 0 {
				return v03PushConfigOf(res.Configs[0]), nil
			}
		}
		pc, err := h.GetTaskPushConfig(ctx, &a2a.GetTaskPushConfigRequest{TaskID: a2a.TaskID(q.ID), ID: q.ConfigID})
		if err != nil {
			return nil, err
		}
		return v03PushConfigOf(pc), nil
	case "tasks/pushNotificationConfig/list":
		res, err := h.ListTaskPushConfigs(ctx, &a2a.ListTaskPushConfigRequest{TaskID: a2a.TaskID(q.ID)})
		if err != nil {
			return nil, err
		}
		out := []wire03.TaskPushConfig{}
		for _, pc := range res.Configs {
			out = append(out, v03PushConfigOf(pc))
		}
		return out, nil
	}
	return nil, h.DeleteTaskPushConfig(ctx, &a2a.DeleteTaskPushConfigRequest{TaskID: a2a.TaskID(q.ID), ID: q.ConfigID})
}

// v03EventOf converts a 1.0 answer or stream event to 0.3's; final is a
// status update's final flag.
func v03EventOf(ev a2a.Event, final bool) any {
	switch e := ev.(type) {
	case *a2a.Task:
		return v03TaskOf(e)
	case *a2a.Message:
		return v03MessageOf(e)
	case *a2a.TaskStatusUpdateEvent:
		return v03StatusUpdate{
			Kind: wire03.KindStatusUpdate, TaskID: string(e.TaskID), ContextID: e.ContextID, Status: v03StatusOf(e.Status),
			Final: final, Metadata: e.Metadata,
		}
	case *a2a.TaskArtifactUpdateEvent:
		return v03ArtifactUpdate{
			Kind: wire03.KindArtifactUpdate, TaskID: string(e.TaskID), ContextID: e.ContextID, Artifact: v03ArtifactOf(e.Artifact),
			Append: e.Append, LastChunk: e.LastChunk, Metadata: e.Metadata,
		}
	}
	return nil
}

// errorEvents is a stream of one error: how a stream request that fails
// before it starts is answered, as an event, since a 0.3 client reads
// its answer as a stream.
func errorEvents(err error) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) { yield(nil, err) }
}

// streamV03 writes a stream's events as Server-Sent Events, one JSON-RPC
// response with id each, as 0.3 does; an error is the stream's last event.
// A status update is final when the stream ends with it, by the one rule
// of the 1.0 streams (streamEnds): an interruption (but, in the stream of
// an answer, the one it answers), or a terminal task whose obligation, in
// the update's ledger metadata, ended too.
func streamV03(w http.ResponseWriter, id any, events iter.Seq2[a2a.Event, error], answering bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(result any, err error) bool {
		body, _ := json.Marshal(v03Response(id, result, err))
		if _, werr := fmt.Fprintf(w, "data: %s\n\n", body); werr != nil {
			return false
		}
		return rc.Flush() == nil
	}
	var end func(a2a.TaskStatus, ledger.ObligationState) bool
	for ev, err := range events {
		if err != nil {
			send(nil, err)
			return
		}
		final := false
		switch e := ev.(type) {
		case *a2a.Task:
			end = streamEnds(e.Status, answering)
		case *a2a.TaskStatusUpdateEvent:
			final = end != nil && end(e.Status, obligationIn(e.Metadata))
		}
		if !send(v03EventOf(ev, final), nil) {
			return
		}
	}
}

// writeV03 writes the JSON-RPC response to request id: its result, or
// err as 0.3's error (HTTP 200, as JSON-RPC errors are).
func writeV03(w http.ResponseWriter, id, result any, err error) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v03Response(id, result, err))
}

// v03Response is the JSON-RPC response object of result or err.
func v03Response(id, result any, err error) map[string]any {
	if err != nil {
		return map[string]any{"jsonrpc": "2.0", "id": id, "error": v03ErrorOf(err)}
	}
	return map[string]any{"jsonrpc": "2.0", "id": id, "result": result}
}

// v03Codes are the 0.3 error codes of the handler's errors, in the order
// they are tried. 0.3 has no ExtensionSupportRequiredError (1.0's -32008):
// a message without the ledger extension's data is InvalidParams (-32602),
// what it lacks being in its params, with reason
// EXTENSION_SUPPORT_REQUIRED and the extension's URI in the error's data.
// Nor has 0.3 1.0's VersionNotSupported and authentication errors, which
// it answers at the HTTP level: InvalidRequest (-32600).
var v03Codes = []struct {
	err  error
	code int
}{
	{a2a.ErrTaskNotFound, -32001},
	{a2a.ErrTaskNotCancelable, -32002},
	{a2a.ErrPushNotificationNotSupported, -32003},
	{a2a.ErrUnsupportedOperation, -32004},
	{a2a.ErrUnsupportedContentType, -32005},
	{a2a.ErrInvalidAgentResponse, -32006},
	{a2a.ErrExtendedCardNotConfigured, -32007},
	{a2a.ErrExtensionSupportRequired, -32602},
	{a2a.ErrParseError, -32700},
	{a2a.ErrInvalidRequest, -32600},
	{a2a.ErrMethodNotFound, -32601},
	{a2a.ErrInvalidParams, -32602},
	{a2a.ErrVersionNotSupported, -32600},
	{a2a.ErrUnauthenticated, -32600},
	{a2a.ErrUnauthorized, -32600},
	{a2a.ErrServerError, -32000},
	{a2a.ErrInternalError, -32603},
}

// v03ErrorOf is err as a 0.3 JSON-RPC error: the code of its kind
// (v03Codes), the message the 1.0 bindings give, and data, an object as
// 0.3 clients decode it, with the 1.0 ErrorInfo's reason and metadata
// (problem_code and problem_status of a ledger refusal, the extension's
// URI) and the message again under "error", where a2a-go's 0.3 client
// reads it. An error of no A2A kind is an internal error that says
// nothing more.
func v03ErrorOf(err error) v03Error {
	out := v03Error{Code: -32603, Message: "internal error"}
	var ae *a2a.Error
	known := errors.As(err, &ae)
	for _, c := range v03Codes {
		if errors.Is(err, c.err) {
			out.Code, known = c.code, true
			break
		}
	}
	if !known {
		return out
	}
	out.Message = err.Error()
	out.Data = map[string]any{"reason": a2a.ErrorReason(err), "error": out.Message}
	if ae != nil {
		if meta, ok := ae.ErrorInfo().Value["metadata"].(map[string]string); ok {
			for k, v := range meta {
				out.Data[k] = v
			}
		}
	}
	return out
}

// obligationIn is the obligation state in a task's or update's ledger
// metadata (taskMetadata), empty when it has none.
func obligationIn(metadata map[string]any) ledger.ObligationState {
	m, _ := metadata[ExtensionURI].(map[string]any)
	s, _ := m["obligation_state"].(string)
	return ledger.ObligationState(s)
}
