package a2a

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
)

// Client calls one remote agent interface over the interface's protocol
// binding — JSON-RPC (A2A v1.0 or v0.3), HTTP+JSON (v1.0) or gRPC (v1.0) —
// and reports what the agent said in the package's version-neutral types,
// whichever binding carried it. It is safe for concurrent use.
type Client struct {
	iface AgentInterface
	b     binding
}

// binding makes the calls of one protocol binding.
type binding interface {
	sendMessage(ctx context.Context, req SendRequest) (SendResult, error)
	getTask(ctx context.Context, id string) (Task, error)
	listTasks(ctx context.Context, req ListTasksRequest) (ListTasksResult, error)
	cancelTask(ctx context.Context, id string, extensions []string, metadata json.RawMessage) (Task, error)
	setPushConfig(ctx context.Context, taskID string, pc PushConfig) error
	subscribe(ctx context.Context, taskID string) iter.Seq2[StreamEvent, error]
}

// NewClient returns a client for iface, sending every request through hc,
// which should come from egress.NewClient. The gRPC binding opens its
// connections with hc's dialer (grpc.go). An interface this package cannot
// speak (Supports) gives a client whose every call fails with
// ErrNoUsableInterface.
func NewClient(hc *http.Client, iface AgentInterface) *Client {
	c := &Client{iface: iface}
	switch {
	case !Supports(iface):
		c.b = unusableBinding{iface}
	case iface.Binding == BindingHTTPJSON:
		c.b = newRESTBinding(hc, iface)
	case iface.Binding == BindingGRPC:
		c.b = newGRPCBinding(hc, iface)
	default:
		c.b = newJSONRPCBinding(hc, iface)
	}
	return c
}

// Interface returns the interface the client calls: its Binding and
// ProtocolVersion say how every call went.
func (c *Client) Interface() AgentInterface { return c.iface }

// SendMessage sends a message (v1.0 SendMessage, v0.3 message/send) and
// returns the task the agent created or its direct reply.
func (c *Client) SendMessage(ctx context.Context, req SendRequest) (SendResult, error) {
	res, err := c.b.sendMessage(ctx, req)
	if res.Task != nil {
		res.Task.Binding = c.iface.Binding
	}
	return res, err
}

// GetTask fetches the current state of a task (v1.0 GetTask, v0.3 tasks/get).
func (c *Client) GetTask(ctx context.Context, id string) (Task, error) {
	return c.tagged(c.b.getTask(ctx, id))
}

// ListTasks lists the tasks of a context (v1.0 ListTasks, v0.3.7 and later
// tasks/list), newest status first, one page at a time. An agent that does
// not list tasks answers with an error that Unsupported recognizes.
func (c *Client) ListTasks(ctx context.Context, req ListTasksRequest) (ListTasksResult, error) {
	res, err := c.b.listTasks(ctx, req)
	for i := range res.Tasks {
		res.Tasks[i].Binding = c.iface.Binding
	}
	return res, err
}

// CancelTask asks the agent to cancel a task (v1.0 CancelTask, v0.3
// tasks/cancel) and returns the task as the agent reports it afterwards.
// A canceled task says nothing about the task's effects.
func (c *Client) CancelTask(ctx context.Context, id string, extensions []string) (Task, error) {
	return c.CancelTaskWithMetadata(ctx, id, extensions, nil)
}

// CancelTaskWithMetadata is CancelTask with the request's metadata
// (CancelTaskRequest.metadata in v1.0, TaskIdParams.metadata in v0.3), a
// JSON object or nil: the compensation request travels there to an agent
// that declares atomicCancel.
func (c *Client) CancelTaskWithMetadata(ctx context.Context, id string, extensions []string, metadata json.RawMessage) (Task, error) {
	return c.tagged(c.b.cancelTask(ctx, id, extensions, metadata))
}

// tagged notes the client's binding on a task it read.
func (c *Client) tagged(t Task, err error) (Task, error) {
	if err == nil {
		t.Binding = c.iface.Binding
	}
	return t, err
}

// SetPushConfig registers a push notification endpoint for a task (v1.0
// CreateTaskPushNotificationConfig, v0.3 tasks/pushNotificationConfig/set).
func (c *Client) SetPushConfig(ctx context.Context, taskID string, pc PushConfig) error {
	return c.b.setPushConfig(ctx, taskID, pc)
}

// Subscribe streams the updates of a running task (v1.0 SubscribeToTask,
// v0.3 tasks/resubscribe) until the agent closes the stream, an error
// occurs, or ctx ends. An error ends the sequence.
func (c *Client) Subscribe(ctx context.Context, taskID string) iter.Seq2[StreamEvent, error] {
	return func(yield func(StreamEvent, error) bool) {
		for ev, err := range c.b.subscribe(ctx, taskID) {
			if ev.Task != nil {
				ev.Task.Binding = c.iface.Binding
			}
			if !yield(ev, err) {
				return
			}
		}
	}
}

// unusableBinding answers every call with ErrNoUsableInterface.
type unusableBinding struct{ iface AgentInterface }

func (u unusableBinding) err() error {
	return fmt.Errorf("%w: %s %s", ErrNoUsableInterface, u.iface.Binding, u.iface.ProtocolVersion)
}

func (u unusableBinding) sendMessage(context.Context, SendRequest) (SendResult, error) {
	return SendResult{}, u.err()
}
func (u unusableBinding) getTask(context.Context, string) (Task, error) { return Task{}, u.err() }
func (u unusableBinding) listTasks(context.Context, ListTasksRequest) (ListTasksResult, error) {
	return ListTasksResult{}, u.err()
}
func (u unusableBinding) cancelTask(context.Context, string, []string, json.RawMessage) (Task, error) {
	return Task{}, u.err()
}
func (u unusableBinding) setPushConfig(context.Context, string, PushConfig) error { return u.err() }
func (u unusableBinding) subscribe(context.Context, string) iter.Seq2[StreamEvent, error] {
	return func(yield func(StreamEvent, error) bool) { yield(StreamEvent{}, u.err()) }
}
