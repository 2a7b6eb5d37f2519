package a2a

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	a2ago "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	"github.com/a2aproject/a2a-go/a2asrv/push"

	"github.com/quittance/quittance/delegate/egress"
)

// These tests run the client against the a2a-go v0.3.3 server in process:
// an independent A2A v0.3 implementation.

// v03Executor is a remote agent: a task works until it is canceled or the
// test ends. With stream set, it reports "working" every few milliseconds
// until release is closed, then an artifact and completion.
type v03Executor struct {
	refuseCancel bool
	stream       bool
	release      chan struct{}
	stop         chan struct{}
}

func (e *v03Executor) Execute(ctx context.Context, reqCtx *a2asrv.RequestContext, q eventqueue.Queue) error {
	if err := q.Write(ctx, a2ago.NewStatusUpdateEvent(reqCtx, a2ago.TaskStateWorking, nil)); err != nil {
		return err
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.stop:
			done := a2ago.NewStatusUpdateEvent(reqCtx, a2ago.TaskStateCompleted, nil)
			done.Final = true
			return q.Write(ctx, done)
		case <-e.release:
			if err := q.Write(ctx, a2ago.NewArtifactEvent(reqCtx, a2ago.TextPart{Text: "po-4711"})); err != nil {
				return err
			}
			done := a2ago.NewStatusUpdateEvent(reqCtx, a2ago.TaskStateCompleted, nil)
			done.Final = true
			return q.Write(ctx, done)
		case <-tick.C:
			if e.stream {
				if err := q.Write(ctx, a2ago.NewStatusUpdateEvent(reqCtx, a2ago.TaskStateWorking, nil)); err != nil {
					return err
				}
			}
		}
	}
}

func (e *v03Executor) Cancel(ctx context.Context, reqCtx *a2asrv.RequestContext, q eventqueue.Queue) error {
	if e.refuseCancel {
		return a2ago.ErrTaskNotCancelable
	}
	ev := a2ago.NewStatusUpdateEvent(reqCtx, a2ago.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

type v03Bundle struct {
	srv    *httptest.Server
	exec   *v03Executor
	client *Client
	card   AgentCard
}

func setupV03(t *testing.T, exec *v03Executor) *v03Bundle {
	t.Helper()
	exec.stop = make(chan struct{})
	if exec.release == nil {
		exec.release = make(chan struct{})
	}
	handler := a2asrv.NewHandler(exec,
		a2asrv.WithPushNotifications(push.NewInMemoryStore(), push.NewHTTPPushSender(&push.HTTPSenderConfig{Timeout: 5 * time.Second})),
	)
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(exec.stop) })
	mux.Handle("/rpc", a2asrv.NewJSONRPCHandler(handler))
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(&a2ago.AgentCard{
		Name:               "Procurement Agent",
		Description:        "buys things",
		URL:                srv.URL + "/rpc",
		PreferredTransport: a2ago.TransportProtocolJSONRPC,
		AdditionalInterfaces: []a2ago.AgentInterface{
			{URL: srv.URL + "/rpc", Transport: a2ago.TransportProtocolJSONRPC},
		},
		ProtocolVersion: "0.3.0",
		Version:         "1.0.0",
		Capabilities: a2ago.AgentCapabilities{
			Streaming:         true,
			PushNotifications: true,
			Extensions: []a2ago.AgentExtension{
				{URI: testExtensionURI, Params: map[string]any{"atomicCancel": true}},
			},
		},
		DefaultInputModes:  []string{"text"},
		DefaultOutputModes: []string{"text"},
		Skills:             []a2ago.AgentSkill{{ID: "buy", Name: "buy", Description: "buy", Tags: []string{"buy"}}},
	}))

	hc := egress.NewClient(loopbackPolicy)
	u, _ := url.Parse(srv.URL)
	card, err := FetchAgentCard(t.Context(), hc, srv.URL+a2asrv.WellKnownAgentCardPath, []string{u.Hostname()})
	if err != nil {
		t.Fatalf("fetch card: %v", err)
	}
	iface, err := card.JSONRPCInterface()
	if err != nil {
		t.Fatal(err)
	}
	return &v03Bundle{srv: srv, exec: exec, client: NewClient(hc, iface), card: card}
}

func (b *v03Bundle) startTask(t *testing.T, push *PushConfig) Task {
	t.Helper()
	res, err := b.client.SendMessage(t.Context(), SendRequest{
		Message: Message{
			MessageID:  "msg-" + strings.ReplaceAll(t.Name(), "/", "-"),
			Role:       RoleUser,
			Parts:      []Part{{Text: "buy 3 pallets"}, {Data: []byte(`{"sku":"P-1","qty":3}`)}},
			Extensions: []string{testExtensionURI},
		},
		ReturnImmediately: true,
		Push:              push,
		Extensions:        []string{testExtensionURI},
	})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if res.Task == nil {
		t.Fatalf("send returned no task: %+v", res)
	}
	return *res.Task
}

func TestV03AgentCard(t *testing.T) {
	t.Parallel()
	b := setupV03(t, &v03Executor{})
	want := AgentInterface{URL: b.srv.URL + "/rpc", Binding: "JSONRPC", ProtocolVersion: "0.3"}
	if len(b.card.Interfaces) != 1 || b.card.Interfaces[0] != want {
		t.Fatalf("interfaces = %+v, want one %+v", b.card.Interfaces, want)
	}
	if b.card.Name != "Procurement Agent" || !b.card.Streaming || !b.card.PushNotifications {
		t.Fatalf("card = %+v", b.card)
	}
	ext, ok := b.card.Extension(testExtensionURI)
	if !ok || string(ext.Params) != `{"atomicCancel":true}` {
		t.Fatalf("extension = %+v, %v", ext, ok)
	}
	if _, err := FetchAgentCard(t.Context(), egress.NewClient(loopbackPolicy), b.srv.URL+a2asrv.WellKnownAgentCardPath, []string{"agent.example.com"}); !errors.Is(err, egress.ErrDenied) {
		t.Fatalf("card with a foreign interface host: got %v, want egress.ErrDenied", err)
	}
}

func TestV03SendGetCancel(t *testing.T) {
	t.Parallel()
	b := setupV03(t, &v03Executor{})
	task := b.startTask(t, nil)
	if task.ID == "" || task.ContextID == "" || task.Status.State != TaskStateWorking {
		t.Fatalf("sent task = %+v", task)
	}

	got, err := b.client.GetTask(t.Context(), task.ID)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.ID != task.ID || got.ContextID != task.ContextID || got.Status.State != TaskStateWorking {
		t.Fatalf("got task %+v", got)
	}
	if got.Status.Timestamp.IsZero() {
		t.Fatal("status timestamp not decoded")
	}

	canceled, err := b.client.CancelTask(t.Context(), task.ID, nil)
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if canceled.ID != task.ID || canceled.Status.State != TaskStateCanceled {
		t.Fatalf("canceled task %+v", canceled)
	}

	_, err = b.client.GetTask(t.Context(), "no-such-task")
	if !errors.Is(err, ErrTaskNotFound) {
		t.Fatalf("unknown task: got %v, want ErrTaskNotFound", err)
	}
	var rpcErr *RPCError
	if !errors.As(err, &rpcErr) || rpcErr.Code != -32001 || Retryable(err) {
		t.Fatalf("unknown task error = %#v", err)
	}
}

func TestV03CancelRefused(t *testing.T) {
	t.Parallel()
	b := setupV03(t, &v03Executor{refuseCancel: true})
	task := b.startTask(t, nil)
	_, err := b.client.CancelTask(t.Context(), task.ID, nil)
	if !errors.Is(err, ErrTaskNotCancelable) {
		t.Fatalf("got %v, want ErrTaskNotCancelable", err)
	}
	var rpcErr *RPCError
	if !errors.As(err, &rpcErr) || rpcErr.Code != -32002 || len(rpcErr.Data) == 0 {
		t.Fatalf("error = %#v", err)
	}
	if Retryable(err) {
		t.Fatal("a refused cancel is not retryable")
	}
}

type pushDelivery struct {
	header http.Header
	body   []byte
}

func pushReceiver(t *testing.T) (*httptest.Server, <-chan pushDelivery) {
	ch := make(chan pushDelivery, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ch <- pushDelivery{header: r.Header.Clone(), body: body}
	}))
	t.Cleanup(srv.Close)
	return srv, ch
}

func TestV03Push(t *testing.T) {
	t.Parallel()
	b := setupV03(t, &v03Executor{})
	receiver, deliveries := pushReceiver(t)
	task := b.startTask(t, nil)

	err := b.client.SetPushConfig(t.Context(), task.ID, PushConfig{ID: "cfg-1", URL: receiver.URL + "/push", Token: "tok-123"})
	if err != nil {
		t.Fatalf("set push config: %v", err)
	}
	if _, err := b.client.CancelTask(t.Context(), task.ID, nil); err != nil {
		t.Fatalf("cancel: %v", err)
	}

	timeout := time.After(10 * time.Second)
	for {
		select {
		case d := <-deliveries:
			ev, err := ParsePushNotification(d.body)
			if err != nil {
				t.Fatalf("parse push %s: %v", d.body, err)
			}
			if ev.TaskID() != task.ID || ev.Task == nil {
				t.Fatalf("push event = %+v", ev)
			}
			r := &http.Request{Header: d.header}
			if tok := PushTokenFromRequest(r); tok != "tok-123" {
				t.Fatalf("push token = %q", tok)
			}
			if ev.Task.Status.State == TaskStateCanceled {
				return
			}
		case <-timeout:
			t.Fatal("no push with the canceled task arrived")
		}
	}
}

func TestV03PushConfigInSend(t *testing.T) {
	t.Parallel()
	b := setupV03(t, &v03Executor{})
	receiver, deliveries := pushReceiver(t)
	task := b.startTask(t, &PushConfig{URL: receiver.URL, AuthScheme: "Bearer", AuthCredentials: "cred-9"})
	select {
	case d := <-deliveries:
		ev, err := ParsePushNotification(d.body)
		if err != nil || ev.TaskID() != task.ID {
			t.Fatalf("push = %+v, %v", ev, err)
		}
		if got := d.header.Get("Authorization"); got != "Bearer cred-9" {
			t.Fatalf("Authorization = %q", got)
		}
		if tok := PushTokenFromRequest(&http.Request{Header: d.header}); tok != "cred-9" {
			t.Fatalf("token = %q", tok)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no push arrived")
	}
}

func TestV03Resubscribe(t *testing.T) {
	t.Parallel()
	b := setupV03(t, &v03Executor{stream: true})
	task := b.startTask(t, nil)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var (
		released  bool
		artifact  string
		completed bool
		events    int
	)
	for ev, err := range b.client.Subscribe(ctx, task.ID) {
		if err != nil {
			t.Fatalf("stream error after %d events: %v", events, err)
		}
		events++
		if ev.TaskID() != task.ID {
			t.Fatalf("event for another task: %+v", ev)
		}
		if !released {
			close(b.exec.release)
			released = true
		}
		if u := ev.ArtifactUpdate; u != nil && len(u.Artifact.Parts) == 1 {
			artifact = u.Artifact.Parts[0].Text
		}
		if u := ev.StatusUpdate; u != nil && u.Status.State == TaskStateCompleted {
			completed = true
		}
	}
	if artifact != "po-4711" || !completed {
		t.Fatalf("after %d events: artifact %q, completed %v", events, artifact, completed)
	}
}

// TestV03ListTasksNotSupported: the a2a-go v0.3 server has no tasks/list;
// Quittance's lookup reads its answer as "does not list tasks"
// (Unsupported), never as "no task".
func TestV03ListTasksNotSupported(t *testing.T) {
	b := setupV03(t, &v03Executor{})
	task := b.startTask(t, nil)
	_, err := b.client.ListTasks(t.Context(), ListTasksRequest{ContextID: task.ContextID})
	if !Unsupported(err) {
		t.Fatalf("tasks/list on a2a-go answered %v, want method not found", err)
	}
}
