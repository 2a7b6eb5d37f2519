package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// callTimeout bounds a unary JSON-RPC call (streams are bounded only by the
// caller's context).
const callTimeout = 90 * time.Second

// maxBodyBytes caps a JSON-RPC response body.
const maxBodyBytes = 8 << 20

// jsonrpcBinding is the JSON-RPC binding, hand-written: A2A v1.0, or v0.3
// for interfaces whose ProtocolVersion is "0.3" (a2a-go v2's JSON-RPC
// transport speaks 1.0 only).
type jsonrpcBinding struct {
	hc      *http.Client
	url     string
	dialect dialect
	nextID  atomic.Int64
}

// dialect encodes requests for one protocol version. Responses are decoded
// the same way for both versions (decode.go).
type dialect interface {
	version() string
	extensionsHeader() string
	sendMessage(req SendRequest) (method string, params any, err error)
	getTask(id string) (method string, params any)
	listTasks(req ListTasksRequest) (method string, params any)
	cancelTask(id string, metadata json.RawMessage) (method string, params any)
	subscribe(id string) (method string, params any)
	setPushConfig(taskID string, pc PushConfig) (method string, params any)
}

func newJSONRPCBinding(hc *http.Client, iface AgentInterface) *jsonrpcBinding {
	var d dialect = v1Dialect{tenant: iface.Tenant}
	if majorMinor(iface.ProtocolVersion) == "0.3" {
		d = v03Dialect{}
	}
	return &jsonrpcBinding{hc: hc, url: iface.URL, dialect: d}
}

// sendMessage: v1.0 SendMessage, v0.3 message/send.
func (c *jsonrpcBinding) sendMessage(ctx context.Context, req SendRequest) (SendResult, error) {
	method, params, err := c.dialect.sendMessage(req)
	if err != nil {
		return SendResult{}, err
	}
	raw, err := c.call(ctx, method, params, req.Extensions)
	if err != nil {
		return SendResult{}, err
	}
	return decodeSendResult(raw)
}

// getTask: v1.0 GetTask, v0.3 tasks/get.
func (c *jsonrpcBinding) getTask(ctx context.Context, id string) (Task, error) {
	method, params := c.dialect.getTask(id)
	raw, err := c.call(ctx, method, params, nil)
	if err != nil {
		return Task{}, err
	}
	return decodeTaskResult(raw)
}

// listTasks: v1.0 ListTasks, v0.3.7 and later tasks/list.
func (c *jsonrpcBinding) listTasks(ctx context.Context, req ListTasksRequest) (ListTasksResult, error) {
	method, params := c.dialect.listTasks(req)
	raw, err := c.call(ctx, method, params, nil)
	if err != nil {
		return ListTasksResult{}, err
	}
	return decodeListTasksResult(raw)
}

// cancelTask: v1.0 CancelTask, v0.3 tasks/cancel, the metadata in
// CancelTaskRequest.metadata (v1.0) or TaskIdParams.metadata (v0.3).
func (c *jsonrpcBinding) cancelTask(ctx context.Context, id string, extensions []string, metadata json.RawMessage) (Task, error) {
	method, params := c.dialect.cancelTask(id, metadata)
	raw, err := c.call(ctx, method, params, extensions)
	if err != nil {
		return Task{}, err
	}
	return decodeTaskResult(raw)
}

// setPushConfig: v1.0 CreateTaskPushNotificationConfig, v0.3
// tasks/pushNotificationConfig/set.
func (c *jsonrpcBinding) setPushConfig(ctx context.Context, taskID string, pc PushConfig) error {
	method, params := c.dialect.setPushConfig(taskID, pc)
	_, err := c.call(ctx, method, params, nil)
	return err
}

// subscribe: v1.0 SubscribeToTask, v0.3 tasks/resubscribe, read as
// server-sent events.
func (c *jsonrpcBinding) subscribe(ctx context.Context, taskID string) iter.Seq2[StreamEvent, error] {
	return func(yield func(StreamEvent, error) bool) {
		method, params := c.dialect.subscribe(taskID)
		id := c.nextID.Add(1)
		resp, err := c.post(ctx, id, method, params, nil, "text/event-stream")
		if err != nil {
			yield(StreamEvent{}, err)
			return
		}
		defer resp.Body.Close()
		if mediaType(resp.Header.Get("Content-Type")) != "text/event-stream" {
			// Errors before the stream starts come back as a plain
			// JSON-RPC response, with HTTP 200.
			body, err := readCapped(resp.Body, maxBodyBytes)
			if err == nil {
				_, err = decodeRPCResponse(body, id)
			}
			if err == nil {
				err = fmt.Errorf("%w: expected an event stream, got %q", ErrMalformedResponse, resp.Header.Get("Content-Type"))
			}
			yield(StreamEvent{}, err)
			return
		}
		sse := newSSEReader(resp.Body, maxEventBytes)
		for {
			ev, err := sse.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				if ctxErr := ctx.Err(); ctxErr != nil {
					err = ctxErr
				}
				yield(StreamEvent{}, err)
				return
			}
			raw, err := decodeRPCResponse(ev.Data, id)
			var se StreamEvent
			if err == nil {
				se, err = decodeEvent(raw)
			}
			if !yield(se, err) || err != nil {
				return
			}
		}
	}
}

// call makes one unary JSON-RPC call and returns its result.
func (c *jsonrpcBinding) call(ctx context.Context, method string, params any, extensions []string) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	id := c.nextID.Add(1)
	resp, err := c.post(ctx, id, method, params, extensions, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := readCapped(resp.Body, maxBodyBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: read response: %w", method, err)
	}
	return decodeRPCResponse(body, id)
}

// post sends a JSON-RPC request and returns a 2xx response; any other
// status is an *HTTPStatusError.
func (c *jsonrpcBinding) post(ctx context.Context, id int64, method string, params any, extensions []string, accept string) (*http.Response, error) {
	body, err := encodeRPCRequest(id, method, params)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: build request: %w", method, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	req.Header.Set("A2A-Version", c.dialect.version())
	if len(extensions) > 0 {
		req.Header.Set(c.dialect.extensionsHeader(), strings.Join(extensions, ", "))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %w", method, &HTTPStatusError{StatusCode: resp.StatusCode})
	}
	return resp, nil
}

func mediaType(contentType string) string {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return ""
	}
	return mt
}

// encodeRPCRequest encodes a JSON-RPC 2.0 request. Empty params are sent as
// {} and never as null.
func encodeRPCRequest(id int64, method string, params any) ([]byte, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("%s: encode params: %w", method, err)
	}
	if bytes.Equal(p, []byte("null")) {
		p = []byte("{}")
	}
	return json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      int64           `json:"id"`
		Method  string          `json:"method"`
		Params  json.RawMessage `json:"params"`
	}{"2.0", id, method, p})
}

// decodeRPCResponse decodes a JSON-RPC 2.0 response to the request with
// the given id and returns its result, or its error as an *RPCError. The id
// may come back as a number or a string; an error may carry a null id.
func decodeRPCResponse(body []byte, id int64) (json.RawMessage, error) {
	var resp struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int             `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedResponse, err)
	}
	if resp.Error != nil {
		if present(resp.ID) && !idMatches(resp.ID, id) {
			return nil, fmt.Errorf("%w: response id %s does not match request %d", ErrMalformedResponse, resp.ID, id)
		}
		return nil, &RPCError{Code: resp.Error.Code, Message: resp.Error.Message, Data: nonNull(resp.Error.Data)}
	}
	if !idMatches(resp.ID, id) {
		return nil, fmt.Errorf("%w: response id %s does not match request %d", ErrMalformedResponse, resp.ID, id)
	}
	if !present(resp.Result) {
		return nil, fmt.Errorf("%w: response has neither result nor error", ErrMalformedResponse)
	}
	return resp.Result, nil
}

func idMatches(raw json.RawMessage, id int64) bool {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return false
	}
	want := strconv.FormatInt(id, 10)
	switch v := v.(type) {
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64) == want
	case string:
		return v == want
	}
	return false
}

// readCapped reads r to the end, failing with ErrBodyTooLarge beyond limit
// bytes.
func readCapped(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrBodyTooLarge, limit)
	}
	return b, nil
}
