package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
)

// maxErrorBodyBytes caps the error body of an HTTP+JSON response.
const maxErrorBodyBytes = 64 << 10

// restBinding is the HTTP+JSON (REST) binding of A2A v1.0, through a2a-go
// v2's a2aclient.RESTTransport. The SDK gets a copy of the caller's
// *http.Client whose transport wraps the caller's: every request still
// goes through it, and the wrapper (exchangeTransport) caps response
// bodies and keeps what the SDK drops — the HTTP status and the error
// body's google.rpc.ErrorInfo details — so that an error is the same
// *RPCError or *HTTPStatusError as on JSON-RPC. CancelTask is sent by hand:
// the SDK's sends no body, and the cancel's metadata (the compensation
// request of an atomic cancel) travels in it.
type restBinding struct {
	hc     *http.Client
	base   *url.URL
	t      a2aclient.Transport
	d      v1Dialect
	tenant string
}

func newRESTBinding(hc *http.Client, iface AgentInterface) binding {
	u, err := url.Parse(iface.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return unusableBinding{iface}
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	wrapped := &http.Client{Transport: &exchangeTransport{base: base}, CheckRedirect: hc.CheckRedirect, Jar: hc.Jar, Timeout: hc.Timeout}
	return &restBinding{hc: wrapped, base: u, t: a2aclient.NewRESTTransport(u, wrapped), d: v1Dialect{tenant: iface.Tenant}, tenant: iface.Tenant}
}

// exchange is what exchangeTransport saw of one call's last response.
type exchange struct {
	status int
	body   []byte // the body of a response other than 200 OK, capped
}

type exchangeKey struct{}

// exchangeTransport records the status and error body of each response
// for the call whose context carries an *exchange, and caps the bodies of
// the other responses at maxBodyBytes (event streams are capped per event
// by their reader).
type exchangeTransport struct {
	base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *exchangeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	ex, _ := req.Context().Value(exchangeKey{}).(*exchange)
	if ex != nil {
		ex.status, ex.body = resp.StatusCode, nil
	}
	switch {
	case resp.StatusCode != http.StatusOK:
		body, rerr := readCapped(resp.Body, maxErrorBodyBytes)
		resp.Body.Close()
		if rerr != nil {
			body = nil
		}
		if ex != nil {
			ex.body = body
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
	case mediaType(resp.Header.Get("Content-Type")) != "text/event-stream":
		resp.Body = &cappedBody{rc: resp.Body, max: maxBodyBytes}
	}
	return resp, nil
}

// cappedBody fails with ErrBodyTooLarge once the body has more than max
// bytes, handing out none beyond max: a JSON decoder that finds a whole
// value in what it was given would otherwise not look at the error.
type cappedBody struct {
	rc   io.ReadCloser
	max  int64
	read int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if left := b.max - b.read + 1; int64(len(p)) > left {
		p = p[:left]
	}
	n, err := b.rc.Read(p)
	b.read += int64(n)
	if over := b.read - b.max; over > 0 {
		return n - int(over), fmt.Errorf("%w: more than %d bytes", ErrBodyTooLarge, b.max)
	}
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }

// call runs one unary call within callTimeout and reports its error as
// the JSON-RPC binding would.
func (c *restBinding) call(ctx context.Context, op string, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	ex := &exchange{}
	return c.err(op, ex, f(context.WithValue(ctx, exchangeKey{}, ex)))
}

// err converts the error of a call: a response other than 200 OK is the
// *RPCError its google.rpc.Status names by an A2A ErrorInfo reason, else an
// *HTTPStatusError; a 200 OK the SDK could not read (unreadable) is
// malformed; anything else (the connection, the context) is kept as it is,
// wrapped.
func (c *restBinding) err(op string, ex *exchange, err error) error {
	if err == nil {
		return nil
	}
	if ex.status != 0 && ex.status != http.StatusOK {
		var body struct {
			Error struct {
				Message string            `json:"message"`
				Details []json.RawMessage `json:"details"`
			} `json:"error"`
		}
		if json.Unmarshal(ex.body, &body) == nil {
			if rpcErr := statusDetailsError(body.Error.Message, body.Error.Details); rpcErr != nil {
				return fmt.Errorf("%s: %w", op, rpcErr)
			}
		}
		return fmt.Errorf("%s: %w", op, &HTTPStatusError{StatusCode: ex.status})
	}
	if ex.status == http.StatusOK && unreadable(err) {
		return fmt.Errorf("%s: %w: %w", op, ErrMalformedResponse, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func (c *restBinding) sendMessage(ctx context.Context, req SendRequest) (SendResult, error) {
	_, params, _ := c.d.sendMessage(req)
	sreq, err := toSDK[sdk.SendMessageRequest](params)
	if err != nil {
		return SendResult{}, err
	}
	var res sdk.SendMessageResult
	if err := c.call(ctx, "SendMessage", func(ctx context.Context) (err error) {
		res, err = c.t.SendMessage(ctx, sdkParams(req.Extensions), sreq)
		return err
	}); err != nil {
		return SendResult{}, err
	}
	return sdkSendResult(res)
}

func (c *restBinding) getTask(ctx context.Context, id string) (Task, error) {
	var task *sdk.Task
	if err := c.call(ctx, "GetTask", func(ctx context.Context) (err error) {
		task, err = c.t.GetTask(ctx, sdkParams(nil), &sdk.GetTaskRequest{Tenant: c.tenant, ID: sdk.TaskID(id)})
		return err
	}); err != nil {
		return Task{}, err
	}
	return sdkTask(task)
}

func (c *restBinding) listTasks(ctx context.Context, req ListTasksRequest) (ListTasksResult, error) {
	_, params := c.d.listTasks(req)
	lreq, err := toSDK[sdk.ListTasksRequest](params)
	if err != nil {
		return ListTasksResult{}, err
	}
	var res *sdk.ListTasksResponse
	if err := c.call(ctx, "ListTasks", func(ctx context.Context) (err error) {
		res, err = c.t.ListTasks(ctx, sdkParams(nil), lreq)
		return err
	}); err != nil {
		return ListTasksResult{}, err
	}
	return sdkListResult(res)
}

// cancelTask posts to /tasks/{id}:cancel itself, with the metadata in the
// body (CancelTaskRequest, body "*" in a2a.proto's HTTP mapping).
func (c *restBinding) cancelTask(ctx context.Context, id string, extensions []string, metadata json.RawMessage) (Task, error) {
	body := []byte("{}")
	if len(metadata) > 0 {
		var err error
		if body, err = json.Marshal(struct {
			Metadata json.RawMessage `json:"metadata"`
		}{metadata}); err != nil {
			return Task{}, fmt.Errorf("CancelTask: encode: %w", err)
		}
	}
	u := c.base
	if c.tenant != "" {
		u = u.JoinPath(c.tenant)
	}
	u = u.JoinPath("tasks", id+":cancel")
	var raw []byte
	err := c.call(ctx, "CancelTask", func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		for k, v := range sdkParams(extensions) {
			req.Header[k] = v
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return &HTTPStatusError{StatusCode: resp.StatusCode}
		}
		raw, err = io.ReadAll(resp.Body)
		return err
	})
	if err != nil {
		return Task{}, err
	}
	return decodeTaskResult(raw)
}

func (c *restBinding) setPushConfig(ctx context.Context, taskID string, pc PushConfig) error {
	_, params := c.d.setPushConfig(taskID, pc)
	preq, err := toSDK[sdk.PushConfig](params)
	if err != nil {
		return err
	}
	return c.call(ctx, "CreateTaskPushNotificationConfig", func(ctx context.Context) error {
		_, err := c.t.CreateTaskPushConfig(ctx, sdkParams(nil), preq)
		return err
	})
}

func (c *restBinding) subscribe(ctx context.Context, taskID string) iter.Seq2[StreamEvent, error] {
	return func(yield func(StreamEvent, error) bool) {
		ex := &exchange{}
		sctx := context.WithValue(ctx, exchangeKey{}, ex)
		for ev, err := range c.t.SubscribeToTask(sctx, sdkParams(nil), &sdk.SubscribeToTaskRequest{Tenant: c.tenant, ID: sdk.TaskID(taskID)}) {
			var se StreamEvent
			if err == nil {
				se, err = sdkEvent(ev)
			} else if ctxErr := ctx.Err(); ctxErr != nil {
				err = ctxErr
			} else {
				err = c.streamErr(ex, err)
			}
			if !yield(se, err) || err != nil {
				return
			}
		}
	}
}

// streamErr converts an error of an event stream: before the stream, as a
// call's; within it, an error event (which the SDK reads into an
// *sdk.Error) is the *RPCError of its reason, its details as Data.
func (c *restBinding) streamErr(ex *exchange, err error) error {
	if ex.status != http.StatusOK {
		return c.err("SubscribeToTask", ex, err)
	}
	var sdkErr *sdk.Error
	if errors.As(err, &sdkErr) {
		details := make([]json.RawMessage, 0, len(sdkErr.TypedDetails)+1)
		for _, d := range sdkErr.TypedDetails {
			m := map[string]any{"@type": d.TypeURL}
			for k, v := range d.Value {
				if k != "@type" {
					m[k] = v
				}
			}
			if raw, merr := json.Marshal(m); merr == nil {
				details = append(details, raw)
			}
		}
		info, _ := json.Marshal(map[string]any{"@type": errorInfoType, "reason": sdk.ErrorReason(sdkErr.Err), "domain": sdk.ProtocolDomain})
		if rpcErr := statusDetailsError(sdkErr.Message, append(details, info)); rpcErr != nil {
			return fmt.Errorf("SubscribeToTask: %w", rpcErr)
		}
	}
	if malformed(err) {
		return fmt.Errorf("SubscribeToTask: %w: %w", ErrMalformedResponse, err)
	}
	return fmt.Errorf("SubscribeToTask: %w", err)
}

// unreadable reports whether err, after a 200 OK, is the SDK's refusal of
// the body itself — bad JSON, or a value that is no A2A answer — rather
// than the connection failing under it, the cap, or the caller's context.
func unreadable(err error) bool {
	return malformed(err) || !(Retryable(err) || errors.Is(err, ErrBodyTooLarge) || errors.Is(err, context.Canceled))
}
