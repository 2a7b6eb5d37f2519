package a2a

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quittance/quittance/delegate/egress"
)

const taskNotFoundStatus = `{"error":{"code":404,"status":"NOT_FOUND","message":"gone","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"TASK_NOT_FOUND","domain":"a2a-protocol.org"}]}}`

// TestRESTEdges: the HTTP+JSON binding's answers that a2a-go's client reads
// loosely are reported as JSON-RPC's are: an error status before a stream
// and an error event within one are the *RPCError of their reason, a body
// that is not JSON is malformed, a body over the cap is too large, and a
// status without an A2A reason is an *HTTPStatusError.
func TestRESTEdges(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/tasks/gone:subscribe"), strings.HasSuffix(r.URL.Path, "/tasks/gone"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, taskNotFoundStatus)
		case strings.HasSuffix(r.URL.Path, "/tasks/purged:subscribe"):
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, `data: {"task":{"id":"purged","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}}`+"\n\n")
			fmt.Fprint(w, "data: "+taskNotFoundStatus+"\n\n")
		case strings.HasSuffix(r.URL.Path, "/tasks/garbled"):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id": "garbled", "status": `)
			fmt.Fprint(w, `]`)
		case strings.HasSuffix(r.URL.Path, "/tasks/huge"):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":"huge","contextId":"c","status":{"state":"TASK_STATE_WORKING"},"metadata":{"x":"`)
			fmt.Fprint(w, strings.Repeat("a", maxBodyBytes))
			fmt.Fprint(w, `"}}`)
		case strings.HasSuffix(r.URL.Path, "/message:send"):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"neither":"task nor message"}`)
		case strings.HasSuffix(r.URL.Path, "/tasks/teapot"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTeapot)
			fmt.Fprint(w, `{"error":{"code":418,"message":"no"}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c := NewClient(egress.NewClient(loopbackPolicy), AgentInterface{URL: srv.URL, Binding: BindingHTTPJSON, ProtocolVersion: "1.0"})
	ctx := t.Context()

	_, err := c.GetTask(ctx, "gone")
	checkA2AError(t, err, ErrTaskNotFound, -32001, "TASK_NOT_FOUND")
	for _, id := range []string{"gone", "purged"} {
		var last error
		n := 0
		for ev, err := range c.Subscribe(ctx, id) {
			if err != nil {
				last = err
				break
			}
			if ev.Task == nil || ev.Task.Binding != BindingHTTPJSON {
				t.Fatalf("%s: event %+v", id, ev)
			}
			n++
		}
		checkA2AError(t, last, ErrTaskNotFound, -32001, "TASK_NOT_FOUND")
		if want := map[string]int{"gone": 0, "purged": 1}[id]; n != want {
			t.Errorf("%s: %d events before the error, want %d", id, n, want)
		}
	}
	if _, err := c.GetTask(ctx, "garbled"); !errors.Is(err, ErrMalformedResponse) || Retryable(err) {
		t.Errorf("garbled body: %v", err)
	}
	if _, err := c.GetTask(ctx, "huge"); !errors.Is(err, ErrBodyTooLarge) || Retryable(err) {
		t.Errorf("body over the cap: %v", err)
	}
	if _, err := c.SendMessage(ctx, SendRequest{Message: Message{MessageID: "m", Role: RoleUser, Parts: []Part{{Text: "x"}}}}); !errors.Is(err, ErrMalformedResponse) || Retryable(err) {
		t.Errorf("a send answered with neither a task nor a message: %v", err)
	}
	var statusErr *HTTPStatusError
	if _, err := c.GetTask(ctx, "teapot"); !errors.As(err, &statusErr) || statusErr.StatusCode != http.StatusTeapot || Retryable(err) {
		t.Errorf("a status without an A2A reason: %v", err)
	}
}
