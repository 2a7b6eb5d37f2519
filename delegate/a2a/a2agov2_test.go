package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v2 "github.com/a2aproject/a2a-go/v2/a2a"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	"github.com/a2aproject/a2a-go/v2/a2apb/v1"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/a2aproject/a2a-go/v2/a2asrv/push"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/quittance/quittance/delegate/egress"
)

// These tests run the client against a2a-go v2.3.1's server (a2asrv), the
// Go SDK's protocol-1.0 line, in process, served over the three bindings
// of A2A v1.0 at once: JSON-RPC, HTTP+JSON and gRPC, each on loopback.

// bindings are the A2A v1.0 bindings, as the card names them.
var bindings = []string{BindingJSONRPC, BindingHTTPJSON, BindingGRPC}

// v2Executor is a remote agent: a task works until it is canceled or
// released (then it reports an artifact and completes).
type v2Executor struct {
	refuseCancel bool
	mu           sync.Mutex
	release      map[string]chan struct{}
	cancelMeta   map[string]map[string]any
	stop         chan struct{} // closed when the test ends: every task stops
	executed     int
}

func (e *v2Executor) releaseChan(taskID string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.release == nil {
		e.release = map[string]chan struct{}{}
	}
	ch, ok := e.release[taskID]
	if !ok {
		ch = make(chan struct{})
		e.release[taskID] = ch
	}
	return ch
}

func (e *v2Executor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[v2.Event, error] {
	e.mu.Lock()
	e.executed++
	e.mu.Unlock()
	return func(yield func(v2.Event, error) bool) {
		if !yield(v2.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		if parts := ec.Message.Parts; len(parts) == 1 && parts[0].Text() == "huge" {
			// A task larger than the client takes.
			if yield(v2.NewArtifactEvent(ec, v2.NewTextPart(strings.Repeat("a", maxBodyBytes+1))), nil) {
				yield(v2.NewStatusUpdateEvent(ec, v2.TaskStateCompleted, nil), nil)
			}
			return
		}
		if !yield(v2.NewStatusUpdateEvent(ec, v2.TaskStateWorking, nil), nil) {
			return
		}
		select {
		case <-ctx.Done():
		case <-e.stop:
			// The test ended: the task ends too, so that the server's
			// goroutines for it end.
			yield(v2.NewStatusUpdateEvent(ec, v2.TaskStateFailed, nil), nil)
		case <-e.releaseChan(string(ec.TaskID)):
			if yield(v2.NewArtifactEvent(ec, v2.NewTextPart("po-4711")), nil) {
				yield(v2.NewStatusUpdateEvent(ec, v2.TaskStateCompleted, nil), nil)
			}
		}
	}
}

func (e *v2Executor) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[v2.Event, error] {
	return func(yield func(v2.Event, error) bool) {
		if e.refuseCancel {
			yield(nil, v2.ErrTaskNotCancelable)
			return
		}
		e.mu.Lock()
		if e.cancelMeta == nil {
			e.cancelMeta = map[string]map[string]any{}
		}
		e.cancelMeta[string(ec.TaskID)] = ec.Metadata
		e.mu.Unlock()
		yield(v2.NewStatusUpdateEvent(ec, v2.TaskStateCanceled, nil), nil)
	}
}

// v2Agent is the agent served over the three bindings; its card lists them
// in the order given.
type v2Agent struct {
	exec    *v2Executor
	srv     *httptest.Server
	grpcURL string
	card    AgentCard
	hc      *http.Client
	// grpcCancelMeta: the metadata of each CancelTask over gRPC, by task.
	grpcCancelMeta *sync.Map
	lose           *atomic.Int32
}

// loseReplies handles a request and drops the connection instead of
// replying while lose is above zero.
func loseReplies(lose *atomic.Int32, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lose.Add(-1) < 0 {
			lose.Add(1)
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	})
}

// TestV2LostReply: on each binding, a SendMessage the agent handled but
// whose reply was lost — the connection dropped after the handler ran
// (HTTP bindings), UNAVAILABLE after it ran (gRPC, from an interceptor) —
// is retryable, and the resend with the same messageId is answered.
func TestV2LostReply(t *testing.T) {
	t.Parallel()
	for _, b := range bindings {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			exec := &v2Executor{}
			a := serveV2(t, exec)
			c := a.client(t, b)
			req := SendRequest{Message: Message{MessageID: "msg-lost-" + b, Role: RoleUser, Parts: []Part{{Text: "buy"}}}, ReturnImmediately: true}
			a.lose.Store(1)
			_, err := c.SendMessage(t.Context(), req)
			if err == nil || !Retryable(err) {
				t.Fatalf("a lost reply: %v, retryable %v", err, Retryable(err))
			}
			exec.mu.Lock()
			handled := exec.executed
			exec.mu.Unlock()
			if handled != 1 {
				t.Fatalf("the agent executed %d messages before the reply was lost, want 1", handled)
			}
			res, err := c.SendMessage(t.Context(), req)
			if err != nil || res.Task == nil || res.Task.Binding != b {
				t.Fatalf("the resend: %+v, %v", res, err)
			}
		})
	}
}

func serveV2(t *testing.T, exec *v2Executor, order ...string) *v2Agent {
	t.Helper()
	exec.stop = make(chan struct{})
	handler := a2asrv.NewHandler(exec,
		a2asrv.WithPushNotifications(push.NewInMemoryStore(), push.NewHTTPPushSender(&push.HTTPSenderConfig{Timeout: 5 * time.Second})))
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	// lose > 0: the next that many calls are handled and their replies
	// lost, the connection dropped (HTTP) or UNAVAILABLE (gRPC).
	lose := &atomic.Int32{}
	mux.Handle("/rpc", loseReplies(lose, a2asrv.NewJSONRPCHandler(handler)))
	mux.Handle("/rest/", loseReplies(lose, http.StripPrefix("/rest", a2asrv.NewRESTHandler(handler))))

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// a2a-go v2.3.1's gRPC handler drops a CancelTaskRequest's metadata
	// (it builds the request from the id alone): the interceptor keeps
	// what the client sent.
	grpcCancelMeta := &sync.Map{}
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*a2apb.CancelTaskRequest); ok && r.GetMetadata() != nil {
			grpcCancelMeta.Store(r.GetId(), r.GetMetadata().AsMap())
		}
		resp, err := handler(ctx, req)
		if lose.Add(-1) >= 0 {
			return nil, status.Error(codes.Unavailable, "reply lost")
		}
		lose.Add(1)
		return resp, err
	}))
	a2agrpc.NewHandler(handler).RegisterWith(gs)
	go func() { _ = gs.Serve(l) }()
	t.Cleanup(gs.Stop)

	urls := map[string]string{
		BindingJSONRPC:  srv.URL + "/rpc",
		BindingHTTPJSON: srv.URL + "/rest",
		BindingGRPC:     "http://" + l.Addr().String(),
	}
	if len(order) == 0 {
		order = bindings
	}
	card := &v2.AgentCard{
		Name: "Procurement Agent", Description: "buys things", Version: "1.0.0",
		Capabilities:      v2.AgentCapabilities{Streaming: true, PushNotifications: true},
		DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"},
		Skills: []v2.AgentSkill{{ID: "buy", Name: "buy", Description: "buy", Tags: []string{"buy"}}},
	}
	for _, b := range order {
		card.SupportedInterfaces = append(card.SupportedInterfaces,
			&v2.AgentInterface{URL: urls[b], ProtocolBinding: v2.TransportProtocol(b), ProtocolVersion: "1.0"})
	}
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	// Cleanups run last first: the tasks end while the servers still run.
	t.Cleanup(func() { close(exec.stop) })

	hc := egress.NewClient(loopbackPolicy)
	got, err := FetchAgentCard(t.Context(), hc, srv.URL+a2asrv.WellKnownAgentCardPath, []string{"127.0.0.1"})
	if err != nil {
		t.Fatalf("fetch card: %v", err)
	}
	return &v2Agent{exec: exec, srv: srv, grpcURL: urls[BindingGRPC], card: got, hc: hc, grpcCancelMeta: grpcCancelMeta, lose: lose}
}

// client returns a client for the agent's interface of the given binding.
func (a *v2Agent) client(t *testing.T, binding string) *Client {
	t.Helper()
	for _, iface := range a.card.Interfaces {
		if iface.Binding == binding {
			c := NewClient(a.hc, iface)
			if c.Interface() != iface {
				t.Fatalf("client interface %+v, want %+v", c.Interface(), iface)
			}
			return c
		}
	}
	t.Fatalf("the card has no %s interface: %+v", binding, a.card.Interfaces)
	return nil
}

func startV2Task(t *testing.T, c *Client, contextID string) Task {
	t.Helper()
	res, err := c.SendMessage(t.Context(), SendRequest{
		Message: Message{
			MessageID: "msg-" + strings.ReplaceAll(t.Name(), "/", "-"), ContextID: contextID, Role: RoleUser,
			Parts: []Part{{Text: "buy 3 pallets"}, {Data: []byte(`{"sku":"P-1","qty":3}`)}},
		},
		ReturnImmediately: true,
	})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if res.Task == nil || res.Task.ID == "" {
		t.Fatalf("send returned no task: %+v", res)
	}
	return *res.Task
}

// TestV2PreferredInterface: the client calls the first interface of the
// card's declared order among those it speaks.
func TestV2PreferredInterface(t *testing.T) {
	t.Parallel()
	for _, first := range bindings {
		t.Run(first, func(t *testing.T) {
			t.Parallel()
			order := []string{first}
			for _, b := range bindings {
				if b != first {
					order = append(order, b)
				}
			}
			a := serveV2(t, &v2Executor{}, order...)
			iface, err := a.card.PreferredInterface()
			if err != nil || iface.Binding != first || iface.ProtocolVersion != "1.0" {
				t.Fatalf("preferred interface %+v, %v; want %s 1.0", iface, err, first)
			}
		})
	}
	card := AgentCard{Interfaces: []AgentInterface{
		{URL: "https://a.example/ws", Binding: "WEBSOCKET", ProtocolVersion: "1.0"},
		{URL: "https://a.example/rest03", Binding: BindingHTTPJSON, ProtocolVersion: "0.3"},
		{URL: "https://a.example/rpc03", Binding: BindingJSONRPC, ProtocolVersion: "0.3"},
		{URL: "https://a.example/grpc", Binding: BindingGRPC, ProtocolVersion: "1.0"},
	}}
	if iface, err := card.PreferredInterface(); err != nil || iface.URL != "https://a.example/grpc" {
		t.Fatalf("preferred %+v, %v; want the gRPC 1.0 interface over unsupported ones and 0.3", iface, err)
	}
	card.Interfaces = card.Interfaces[:2]
	if _, err := card.PreferredInterface(); !errors.Is(err, ErrNoUsableInterface) {
		t.Fatalf("no usable interface: %v", err)
	}
	if _, err := NewClient(http.DefaultClient, card.Interfaces[0]).GetTask(t.Context(), "x"); !errors.Is(err, ErrNoUsableInterface) {
		t.Fatalf("a client of an unusable interface: %v", err)
	}
}

// TestV2Lifecycle: on each binding, a task is sent, read, canceled, and a task the agent does not know is TaskNotFound
// with its ErrorInfo as the error's data, not retryable.
func TestV2Lifecycle(t *testing.T) {
	t.Parallel()
	for _, b := range bindings {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			a := serveV2(t, &v2Executor{})
			c := a.client(t, b)
			ctx := t.Context()
			contextID := "ctx-" + strings.ReplaceAll(t.Name(), "/", "-")
			task := startV2Task(t, c, contextID)
			if task.ContextID != contextID {
				t.Fatalf("task context %q, want %q", task.ContextID, contextID)
			}
			got := waitV2State(t, c, task.ID, TaskStateWorking)
			if len(got.HistoryMessageIDs) == 0 || got.HistoryMessageIDs[0] != "msg-"+strings.ReplaceAll(t.Name(), "/", "-") {
				t.Errorf("history %v: want the message that created the task", got.HistoryMessageIDs)
			}
			canceled, err := c.CancelTask(ctx, task.ID, nil)
			if err != nil || canceled.Status.State != TaskStateCanceled {
				t.Fatalf("cancel: %+v, %v", canceled, err)
			}
			_, err = c.GetTask(ctx, "no-such-task")
			checkA2AError(t, err, ErrTaskNotFound, -32001, "TASK_NOT_FOUND")
		})
	}
}

// checkA2AError: err is the sentinel's *RPCError with the code, its data
// the google.rpc detail array with the A2A ErrorInfo of the reason, and
// not retryable.
func checkA2AError(t *testing.T, err error, sentinel error, code int, reason string) {
	t.Helper()
	var rpcErr *RPCError
	if !errors.Is(err, sentinel) || !errors.As(err, &rpcErr) || rpcErr.Code != code {
		t.Fatalf("error %v; want %v (%d)", err, sentinel, code)
	}
	if Retryable(err) {
		t.Errorf("%v is retryable", err)
	}
	var details []struct {
		Type   string `json:"@type"`
		Reason string `json:"reason"`
		Domain string `json:"domain"`
	}
	if err := json.Unmarshal(rpcErr.Data, &details); err != nil {
		t.Fatalf("error data %s: %v", rpcErr.Data, err)
	}
	for _, d := range details {
		if d.Type == "type.googleapis.com/google.rpc.ErrorInfo" && d.Reason == reason && d.Domain == "a2a-protocol.org" {
			return
		}
	}
	t.Errorf("error data %s has no ErrorInfo %s", rpcErr.Data, reason)
}

func waitV2State(t *testing.T, c *Client, id string, want TaskState) Task {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		task, err := c.GetTask(t.Context(), id)
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if task.Status.State == want {
			return task
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %s, want %s", id, task.Status.State, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestV2CancelRefused: TaskNotCancelable on each binding.
func TestV2CancelRefused(t *testing.T) {
	t.Parallel()
	for _, b := range bindings {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			a := serveV2(t, &v2Executor{refuseCancel: true})
			c := a.client(t, b)
			task := startV2Task(t, c, "")
			waitV2State(t, c, task.ID, TaskStateWorking)
			_, err := c.CancelTask(t.Context(), task.ID, nil)
			checkA2AError(t, err, ErrTaskNotCancelable, -32002, "TASK_NOT_CANCELABLE")
		})
	}
}

// TestV2Subscribe: on each binding, a subscription to a working task sees
// its artifact and its completion.
func TestV2Subscribe(t *testing.T) {
	t.Parallel()
	for _, b := range bindings {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			exec := &v2Executor{}
			a := serveV2(t, exec)
			c := a.client(t, b)
			task := startV2Task(t, c, "")
			waitV2State(t, c, task.ID, TaskStateWorking)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			released := false
			var artifact, completed bool
			for ev, err := range c.Subscribe(ctx, task.ID) {
				if err != nil {
					t.Fatalf("stream: %v", err)
				}
				if ev.TaskID() != task.ID {
					t.Fatalf("event for task %q", ev.TaskID())
				}
				if !released {
					// The first event is the task as it stands.
					close(exec.releaseChan(task.ID))
					released = true
				}
				if ev.ArtifactUpdate != nil && len(ev.ArtifactUpdate.Artifact.Parts) == 1 && ev.ArtifactUpdate.Artifact.Parts[0].Text == "po-4711" {
					artifact = true
				}
				if ev.StatusUpdate != nil && ev.StatusUpdate.Status.State == TaskStateCompleted {
					completed = true
				}
			}
			if !artifact || !completed {
				t.Fatalf("stream ended: artifact %v, completed %v", artifact, completed)
			}
		})
	}
}

// TestV2Push: on each binding, the push configs registered for a task
// bring notifications with their credentials: a token (a2a-go sends it as
// A2A-Notification-Token) and an Authorization scheme with credentials.
func TestV2Push(t *testing.T) {
	t.Parallel()
	for _, b := range bindings {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			got := make(chan string, 64)
			hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body := make([]byte, 1<<16)
				n, _ := r.Body.Read(body)
				if ev, err := ParsePushNotification(body[:n]); err == nil {
					got <- r.Header.Get("Authorization") + "|" + PushTokenFromRequest(r) + "|" + ev.TaskID()
				}
			}))
			t.Cleanup(hook.Close)
			exec := &v2Executor{}
			a := serveV2(t, exec)
			c := a.client(t, b)
			task := startV2Task(t, c, "")
			if err := c.SetPushConfig(t.Context(), task.ID, PushConfig{ID: "p1", URL: hook.URL, Token: "tok-1"}); err != nil {
				t.Fatalf("set push config: %v", err)
			}
			if err := c.SetPushConfig(t.Context(), task.ID, PushConfig{ID: "p2", URL: hook.URL, AuthScheme: "Bearer", AuthCredentials: "cred-1"}); err != nil {
				t.Fatalf("set push config with authentication: %v", err)
			}
			close(exec.releaseChan(task.ID))
			want := map[string]bool{"|tok-1|" + task.ID: false, "Bearer cred-1|cred-1|" + task.ID: false}
			for deadline := time.After(20 * time.Second); ; {
				select {
				case s := <-got:
					if _, ok := want[s]; !ok {
						t.Fatalf("push %q; want one of %v", s, want)
					}
					want[s] = true
				case <-deadline:
					t.Fatalf("push notifications seen: %v", want)
				}
				if want["|tok-1|"+task.ID] && want["Bearer cred-1|cred-1|"+task.ID] {
					return
				}
			}
		})
	}
}

// TestV2CancelMetadata: the cancel's metadata (where an atomic cancel's
// compensation request travels) reaches the agent's executor over
// JSON-RPC, and the gRPC server in the CancelTaskRequest. a2a-go v2.3.1's
// gRPC and HTTP+JSON handlers do not pass it on to the executor (they
// build the request from the task id alone), and its HTTP+JSON server
// reads no cancel body, so over HTTP+JSON the test pins what the client
// sends (TestRESTCancelSendsMetadata) instead.
func TestV2CancelMetadata(t *testing.T) {
	t.Parallel()
	for _, b := range []string{BindingJSONRPC, BindingGRPC} {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			exec := &v2Executor{}
			a := serveV2(t, exec)
			c := a.client(t, b)
			task := startV2Task(t, c, "")
			waitV2State(t, c, task.ID, TaskStateWorking)
			if _, err := c.CancelTaskWithMetadata(t.Context(), task.ID, []string{testExtensionURI},
				json.RawMessage(`{"`+testExtensionURI+`":{"key":"k-1"}}`)); err != nil {
				t.Fatal(err)
			}
			exec.mu.Lock()
			defer exec.mu.Unlock()
			meta := exec.cancelMeta[task.ID]
			if b == BindingGRPC {
				m, _ := a.grpcCancelMeta.Load(task.ID)
				meta, _ = m.(map[string]any)
			}
			ext, _ := meta[testExtensionURI].(map[string]any)
			if ext["key"] != "k-1" {
				t.Fatalf("the agent got cancel metadata %v", meta)
			}
		})
	}
}

// TestRESTCancelSendsMetadata: over HTTP+JSON the cancel is POST
// {tenant}/tasks/{id}:cancel with the metadata in its body, and the
// extensions in the A2A-Extensions header.
func TestRESTCancelSendsMetadata(t *testing.T) {
	t.Parallel()
	type seen struct {
		path, ext, version string
		body               []byte
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := make([]byte, 4096)
		n, _ := r.Body.Read(body)
		got <- seen{r.Method + " " + r.URL.Path, r.Header.Get("A2A-Extensions"), r.Header.Get("A2A-Version"), body[:n]}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"t-1","contextId":"c-1","status":{"state":"TASK_STATE_CANCELED"}}`))
	}))
	t.Cleanup(srv.Close)
	c := NewClient(egress.NewClient(loopbackPolicy), AgentInterface{URL: srv.URL + "/a2a", Binding: BindingHTTPJSON, ProtocolVersion: "1.0", Tenant: "acme"})
	task, err := c.CancelTaskWithMetadata(t.Context(), "t-1", []string{testExtensionURI}, json.RawMessage(`{"k":"v"}`))
	if err != nil || task.Status.State != TaskStateCanceled {
		t.Fatalf("cancel: %+v, %v", task, err)
	}
	s := <-got
	if s.path != "POST /a2a/acme/tasks/t-1:cancel" || s.ext != testExtensionURI || s.version != "1.0" || string(s.body) != `{"metadata":{"k":"v"}}` {
		t.Fatalf("request %+v (body %s)", s, s.body)
	}
}

// TestBindingFailures: on each binding, a dropped connection is
// retryable, an HTTP 503 (HTTP bindings) is retryable, and a destination
// the egress policy refuses is refused, finally, before anything is sent.
func TestBindingFailures(t *testing.T) {
	t.Parallel()
	// An HTTP server that drops every connection, and a TCP listener that
	// does the same for gRPC.
	drop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(drop.Close)
	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(unavailable.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	hc := egress.NewClient(loopbackPolicy)
	strict := egress.NewClient(egress.Policy{AllowHTTP: true})
	for _, b := range bindings {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			dropURL := drop.URL
			if b == BindingGRPC {
				dropURL = "http://" + l.Addr().String()
			}
			iface := AgentInterface{URL: dropURL, Binding: b, ProtocolVersion: "1.0"}
			_, err := NewClient(hc, iface).GetTask(t.Context(), "t-1")
			if err == nil || !Retryable(err) {
				t.Errorf("dropped connection: %v, retryable %v", err, Retryable(err))
			}
			_, err = NewClient(strict, iface).GetTask(t.Context(), "t-1")
			if !errors.Is(err, egress.ErrDenied) || Retryable(err) {
				t.Errorf("refused by egress: %v, retryable %v", err, Retryable(err))
			}
			if b != BindingGRPC {
				iface.URL = unavailable.URL
				_, err = NewClient(hc, iface).GetTask(t.Context(), "t-1")
				var statusErr *HTTPStatusError
				if !errors.As(err, &statusErr) || statusErr.StatusCode != 503 || !Retryable(err) {
					t.Errorf("503: %v", err)
				}
			}
		})
	}
}

// TestGRPCInterfaceTarget: a gRPC interface may name a bare host:port
// (TLS); its host must be an allowed host like any interface's.
func TestGRPCInterfaceTarget(t *testing.T) {
	t.Parallel()
	grpcIface := AgentInterface{URL: "agent.example:443", Binding: BindingGRPC, ProtocolVersion: "1.0"}
	if err := checkInterfaceHost(grpcIface, []string{"agent.example"}); err != nil {
		t.Fatalf("bare gRPC target: %v", err)
	}
	if err := checkInterfaceHost(grpcIface, []string{"other.example"}); !errors.Is(err, egress.ErrDenied) {
		t.Fatalf("bare gRPC target on another host: %v", err)
	}
	u, err := interfaceURL(grpcIface)
	if err != nil || u.Scheme != "https" || u.Host != "agent.example:443" {
		t.Fatalf("gRPC target as URL: %v, %v", u, err)
	}
	rest := AgentInterface{URL: "agent.example:443", Binding: BindingHTTPJSON, ProtocolVersion: "1.0"}
	if err := checkInterfaceHost(rest, []string{"agent.example"}); !errors.Is(err, egress.ErrDenied) {
		t.Fatalf("a bare host:port is a URL for gRPC only: %v", err)
	}
}

// TestV2ResponseCap: on each binding, a task larger than the cap is
// ErrBodyTooLarge, not retryable.
func TestV2ResponseCap(t *testing.T) {
	t.Parallel()
	for _, b := range bindings {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			a := serveV2(t, &v2Executor{})
			c := a.client(t, b)
			_, err := c.SendMessage(t.Context(), SendRequest{Message: Message{MessageID: "msg-huge-" + b, Role: RoleUser, Parts: []Part{{Text: "huge"}}}})
			if !errors.Is(err, ErrBodyTooLarge) || Retryable(err) {
				t.Fatalf("a task over the cap: %v", err)
			}
		})
	}
}

// TestV2GRPCOverTLS: a gRPC interface at https://host:port, or a bare
// host:port, is spoken to over TLS with the HTTP client's TLS
// configuration (here the test server's root), and its dialer.
func TestV2GRPCOverTLS(t *testing.T) {
	t.Parallel()
	exec := &v2Executor{stop: make(chan struct{})}
	t.Cleanup(func() { close(exec.stop) })
	handler := a2asrv.NewHandler(exec)
	certs := httptest.NewUnstartedServer(http.NotFoundHandler())
	certs.StartTLS()
	t.Cleanup(certs.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&certs.TLS.Certificates[0])))
	a2agrpc.NewHandler(handler).RegisterWith(gs)
	go func() { _ = gs.Serve(l) }()
	t.Cleanup(gs.Stop)
	for _, u := range []string{"https://" + l.Addr().String(), l.Addr().String()} {
		c := NewClient(certs.Client(), AgentInterface{URL: u, Binding: BindingGRPC, ProtocolVersion: "1.0"})
		task := startV2Task(t, c, "")
		if got := waitV2State(t, c, task.ID, TaskStateWorking); got.Binding != BindingGRPC {
			t.Fatalf("%s: task %+v", u, got)
		}
	}
	// Without the test root, the certificate is refused, finally.
	c := NewClient(egress.NewClient(loopbackPolicy), AgentInterface{URL: "https://" + l.Addr().String(), Binding: BindingGRPC, ProtocolVersion: "1.0"})
	if _, err := c.GetTask(t.Context(), "t-1"); err == nil || Retryable(err) || errors.Is(err, egress.ErrDenied) {
		t.Fatalf("a certificate from an unknown authority: %v, retryable %v; want a final refusal", err, Retryable(err))
	}
}
