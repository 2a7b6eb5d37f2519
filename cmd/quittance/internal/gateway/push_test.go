package gateway_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
)

// pushLog is a push endpoint, of either version's receiver: it keeps the
// tasks of the pushes take accepts, by the token they came with, and
// answers any other 401, noting why, which fails the test at its next
// wait.
type pushLog[T any] struct {
	t   *testing.T
	url string
	// take is a push's token and task, or why it is refused; it is called
	// with mu held.
	take  func(req *http.Request, body []byte) (token string, task T, refused string)
	mu    sync.Mutex
	tasks map[string][]T
	bad   []string
}

func newPushLog[T any](t *testing.T, take func(*http.Request, []byte) (string, T, string)) *pushLog[T] {
	return &pushLog[T]{t: t, take: take, tasks: map[string][]T{}}
}

// serve serves the endpoint on loopback until the test ends, at path.
func (l *pushLog[T]) serve(path string) {
	srv := httptest.NewServer(l)
	l.t.Cleanup(srv.Close)
	l.url = srv.URL + path
}

func (l *pushLog[T]) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	l.mu.Lock()
	defer l.mu.Unlock()
	token, task, refused := l.take(req, body)
	if refused != "" {
		l.bad = append(l.bad, refused)
		http.Error(w, refused, http.StatusUnauthorized)
		return
	}
	l.tasks[token] = append(l.tasks[token], task)
}

// wait waits until a task pushed with token satisfies ok, and returns it;
// a push refused before fails the test.
func (l *pushLog[T]) wait(token, what string, ok func(T) bool) T {
	l.t.Helper()
	pushed := func() ([]T, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.bad) > 0 {
			return nil, fmt.Errorf("pushes refused: %v", l.bad)
		}
		return slices.Clone(l.tasks[token]), nil
	}
	var found T
	has := func(tasks []T) bool {
		i := slices.IndexFunc(tasks, ok)
		if i >= 0 {
			found = tasks[i]
		}
		return i >= 0
	}
	poll(l.t, "a push of "+what+" with token "+token, pushed, has, func(tasks []T) string { return fmt.Sprintf("%d pushed", len(tasks)) })
	return found
}

// pushed is how many pushes came with token.
func (l *pushLog[T]) pushed(token string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.tasks[token])
}

// pushReceiver is an orchestrator's push endpoint on loopback: it checks
// each push as a receiver does — a token it gave, the Standard Webhooks
// signature keyed with that token, a StreamResponse body — and keeps the
// tasks it was pushed, by token.
type pushReceiver struct {
	*pushLog[*a2a.Task]
	tokens map[string]bool
	auth   map[string]string // token: the Authorization header it must come with
}

func newPushReceiver(t *testing.T) *pushReceiver {
	r := &pushReceiver{tokens: map[string]bool{}, auth: map[string]string{}}
	r.pushLog = newPushLog(t, r.take)
	r.serve("/a2a-push")
	return r
}

// expect makes the receiver take pushes carrying token (and, when set,
// that Authorization header).
func (r *pushReceiver) expect(token, authorization string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tokens[token], r.auth[token] = true, authorization
}

// take is the task of a push with a token the receiver expects, the
// Authorization header that goes with it, JSON, signed with the token,
// whose body is a StreamResponse of a task; or why it is not.
func (r *pushReceiver) take(req *http.Request, body []byte) (token string, task *a2a.Task, refused string) {
	token = req.Header.Get("A2A-Notification-Token")
	switch {
	case !r.tokens[token]:
		return "", nil, "unknown token " + strconv.Quote(token)
	case req.Header.Get("Authorization") != r.auth[token]:
		return "", nil, "authorization " + strconv.Quote(req.Header.Get("Authorization"))
	case req.Header.Get("Content-Type") != "application/json":
		return "", nil, "content type " + req.Header.Get("Content-Type")
	}
	if err := verifyPushSignature(token, req.Header, body); err != nil {
		return "", nil, "signature: " + err.Error()
	}
	var sr a2a.StreamResponse
	if err := json.Unmarshal(body, &sr); err != nil {
		return "", nil, "body: " + err.Error()
	}
	task, ok := sr.Event.(*a2a.Task)
	if !ok {
		return "", nil, fmt.Sprintf("a push of %T", sr.Event)
	}
	return token, task, ""
}

// verifyPushSignature checks a push as a Standard Webhooks receiver does,
// with no code of Quittance's: HMAC-SHA256 over "id.timestamp.body" keyed
// with the config's token, against each v1 signature, and a timestamp
// within 5 minutes.
func verifyPushSignature(token string, h http.Header, body []byte) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook headers")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return fmt.Errorf("bad timestamp %q", ts)
	}
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	for _, s := range strings.Fields(sigs) {
		if v, sig, ok := strings.Cut(s, ","); ok && v == "v1" {
			if got, err := base64.StdEncoding.DecodeString(sig); err == nil && hmac.Equal(got, mac.Sum(nil)) {
				return nil
			}
		}
	}
	return errors.New("no signature matches")
}

// TestGatewayPush: over each binding, a2a-go v2's client registers push
// configs on a task — given with the message that creates it, and with
// CreateTaskPushConfig — and a receiver on loopback is pushed the task,
// signed, with its token, as it is dispatched, works and is canceled; the
// configs are shown without their secrets after the answer that registered
// them; another tenant gets TaskNotFoundError for each call, as for a task
// that does not exist; a deleted config is pushed nothing more.
func TestGatewayPush(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t, apitest.Worker{Webhooks: true, WebhookMaxAttempts: 40})
	if card := e.card(t, e.acme, orgID); !card.Capabilities.PushNotifications {
		t.Fatalf("capabilities %+v: want push notifications", card.Capabilities)
	}
	for _, binding := range []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON} {
		t.Run(string(binding), func(t *testing.T) { testPush(t, e, binding) })
	}
}

func testPush(t *testing.T, e *gwEnv, binding a2a.TransportProtocol) {
	ctx := context.Background()
	recv := newPushReceiver(t)
	acme := e.client(t, e.acme, orgID, binding)
	inline, second := "inline-"+uuid.NewString(), "second-"+uuid.NewString()
	recv.expect(inline, "")
	recv.expect(second, "Bearer receiver-credential")

	res, err := acme.SendMessage(ctx, &a2a.SendMessageRequest{
		Message: ledgerMessage(uuid.NewString(), "Order 40 laptops for the Lyon office", 10_000),
		Config:  &a2a.SendMessageConfig{PushConfig: &a2a.PushConfig{URL: recv.url, Token: inline}},
	})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2a.Task)
	created, err := acme.CreateTaskPushConfig(ctx, &a2a.PushConfig{TaskID: task.ID, ID: "second", URL: recv.url, Token: second,
		Auth: &a2a.PushAuthInfo{Scheme: "bearer", Credentials: "receiver-credential"}})
	if err != nil {
		t.Fatal(err)
	}
	if created.ID != "second" || created.TaskID != task.ID || created.Token != second || created.Auth == nil ||
		created.Auth.Scheme != "Bearer" || created.Auth.Credentials != "receiver-credential" {
		t.Fatalf("the created config %+v %+v", created, created.Auth)
	}

	// Pushed as Quittance dispatches it and the supplier works on it, to
	// both configs.
	for _, token := range []string{inline, second} {
		pushed := recv.wait(token, "the task working", func(p *a2a.Task) bool {
			return p.ID == task.ID && p.Status.State == a2a.TaskStateWorking && meta(t, p)["remote_task_id"] != nil
		})
		if pushed.ContextID != task.ContextID {
			t.Fatalf("pushed context %q, the task's %q", pushed.ContextID, task.ContextID)
		}
	}

	// After the answer that registered them, the configs are shown without
	// their secrets.
	got, err := acme.GetTaskPushConfig(ctx, &a2a.GetTaskPushConfigRequest{TaskID: task.ID, ID: "default"})
	if err != nil || got.URL != recv.url || got.Token != "" || got.TaskID != task.ID {
		t.Fatalf("GetTaskPushConfig of the inline config: %+v, %v", got, err)
	}
	list, err := acme.ListTaskPushConfigs(ctx, &a2a.ListTaskPushConfigRequest{TaskID: task.ID})
	if err != nil || len(list) != 2 || list[0].ID != "default" || list[1].ID != "second" ||
		list[1].Token != "" || list[1].Auth == nil || list[1].Auth.Scheme != "Bearer" || list[1].Auth.Credentials != "" {
		t.Fatalf("ListTaskPushConfigs: %+v, %v", list, err)
	}
	if _, err := acme.GetTaskPushConfig(ctx, &a2a.GetTaskPushConfigRequest{TaskID: task.ID, ID: "none"}); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Fatalf("a config the task does not have: %v", err)
	}

	testPushOfOthers(t, e, binding, task.ID)

	// Deleted, a config is pushed nothing more; the other follows the
	// task to its end and the obligation's.
	if err := acme.DeleteTaskPushConfig(ctx, &a2a.DeleteTaskPushConfigRequest{TaskID: task.ID, ID: "second"}); err != nil {
		t.Fatal(err)
	}
	if err := acme.DeleteTaskPushConfig(ctx, &a2a.DeleteTaskPushConfigRequest{TaskID: task.ID, ID: "second"}); err != nil {
		t.Fatalf("a delete retried: %v", err)
	}
	before := recv.pushed(second)
	if _, err := acme.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID}); err != nil {
		t.Fatal(err)
	}
	recv.wait(inline, "the task canceled and compensated", func(p *a2a.Task) bool {
		return p.Status.State == a2a.TaskStateCanceled && meta(t, p)["obligation_state"] == "compensated"
	})
	if n := recv.pushed(second); n != before {
		t.Fatalf("the deleted config was pushed %d more", n-before)
	}
}

// testPushOfOthers: globex, another tenant, gets for each push call on
// acme's task what it gets for a task that does not exist.
func testPushOfOthers(t *testing.T, e *gwEnv, binding a2a.TransportProtocol, id a2a.TaskID) {
	ctx := context.Background()
	globex := e.client(t, e.globex, orgID, binding)
	calls := func(id a2a.TaskID) []error {
		_, createErr := globex.CreateTaskPushConfig(ctx, &a2a.PushConfig{TaskID: id, URL: "http://127.0.0.1:1/x", Token: "t"})
		_, getErr := globex.GetTaskPushConfig(ctx, &a2a.GetTaskPushConfigRequest{TaskID: id, ID: "default"})
		_, listErr := globex.ListTaskPushConfigs(ctx, &a2a.ListTaskPushConfigRequest{TaskID: id})
		deleteErr := globex.DeleteTaskPushConfig(ctx, &a2a.DeleteTaskPushConfigRequest{TaskID: id, ID: "default"})
		return []error{createErr, getErr, listErr, deleteErr}
	}
	unknown := calls(a2a.TaskID(uuid.NewString()))
	for i, err := range calls(id) {
		if !errors.Is(err, a2a.ErrTaskNotFound) || err.Error() != unknown[i].Error() {
			t.Fatalf("%s: globex's push call %d on acme's task: %v; on an unknown task: %v", binding, i, err, unknown[i])
		}
	}
	acme := e.client(t, e.acme, orgID, binding)
	if list, err := acme.ListTaskPushConfigs(ctx, &a2a.ListTaskPushConfigRequest{TaskID: id}); err != nil || len(list) != 2 {
		t.Fatalf("acme's configs after globex's calls: %+v, %v", list, err)
	}
}

// TestGatewayPushRefusals: a URL Quittance will not send to, an
// authentication it cannot send and a task's eleventh config are
// InvalidParamsError; a message whose config is refused creates no task.
func TestGatewayPushRefusals(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	ctx := context.Background()
	acme := e.client(t, e.acme, orgID, a2a.TransportProtocolHTTPJSON)
	task := send(t, acme, ledgerMessage(uuid.NewString(), "Order 1 laptop", 1_000))
	for what, pc := range map[string]*a2a.PushConfig{
		"no URL":               {},
		"ftp":                  {URL: "ftp://127.0.0.1/push"},
		"userinfo":             {URL: "http://user:secret@127.0.0.1/push"},
		"a private address":    {URL: "http://10.1.2.3/push"},
		"a long URL":           {URL: "http://127.0.0.1/" + strings.Repeat("a", 2048)},
		"a relative URL":       {URL: "/push"},
		"a token with newline": {URL: "http://127.0.0.1/push", Token: "a\r\nX-Evil: 1"},
		"a long token":         {URL: "http://127.0.0.1/push", Token: strings.Repeat("t", 513)},
		"a scheme not sent":    {URL: "http://127.0.0.1/push", Auth: &a2a.PushAuthInfo{Scheme: "Digest", Credentials: "x"}},
		"no credentials":       {URL: "http://127.0.0.1/push", Auth: &a2a.PushAuthInfo{Scheme: "Bearer"}},
		"a bad id":             {URL: "http://127.0.0.1/push", ID: "a b"},
	} {
		pc.TaskID = task.ID
		if _, err := acme.CreateTaskPushConfig(ctx, pc); !errors.Is(err, a2a.ErrInvalidParams) {
			t.Fatalf("%s: %v, want InvalidParamsError", what, err)
		}
	}

	held := e.budgetHeld(t)
	for _, c := range []*a2aclient.Client{acme, e.client(t, e.acme, orgID, a2a.TransportProtocolJSONRPC)} {
		for what, pc := range map[string]*a2a.PushConfig{
			"userinfo": {URL: "https://user:pw@127.0.0.1/push", Token: "t"},
			"no token": {URL: "http://127.0.0.1/push"},
		} {
			_, err := c.SendMessage(ctx, &a2a.SendMessageRequest{
				Message: ledgerMessage(uuid.NewString(), "Order 2 laptops", 2_000),
				Config:  &a2a.SendMessageConfig{PushConfig: pc},
			})
			if !errors.Is(err, a2a.ErrInvalidParams) {
				t.Fatalf("a message with a config with %s: %v", what, err)
			}
		}
	}
	if now := e.budgetHeld(t); now != held {
		t.Fatalf("held %d after the refused messages, %d before", now, held)
	}

	for i := range 10 {
		created, err := acme.CreateTaskPushConfig(ctx, &a2a.PushConfig{TaskID: task.ID, URL: "http://127.0.0.1/push/" + strconv.Itoa(i)})
		if err != nil {
			t.Fatalf("config %d: %v", i, err)
		}
		if len(created.Token) < 32 {
			t.Fatalf("config %d has token %q: want one Quittance made", i, created.Token)
		}
	}
	if _, err := acme.CreateTaskPushConfig(ctx, &a2a.PushConfig{TaskID: task.ID, URL: "http://127.0.0.1/push/10"}); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Fatalf("an eleventh config: %v", err)
	}
}

// TestGatewayPushReceiverDown: pushes to a receiver that does not answer
// are retried until it is up, and it then gets the task as it stands.
func TestGatewayPushReceiverDown(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t, apitest.Worker{Webhooks: true, WebhookMaxAttempts: 40})
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // down: nothing listens there
	acme := e.client(t, e.acme, orgID, a2a.TransportProtocolJSONRPC)
	task := send(t, acme, ledgerMessage(uuid.NewString(), "Order 3 laptops", 3_000))
	token := "down-" + uuid.NewString()
	if _, err := acme.CreateTaskPushConfig(ctx, &a2a.PushConfig{TaskID: task.ID, ID: "down", URL: "http://" + addr + "/a2a-push", Token: token}); err != nil {
		t.Fatal(err)
	}
	waitTask(t, acme, task.ID, "the task working", func(task *a2a.Task) bool { return task.Status.State == a2a.TaskStateWorking })
	if _, err := acme.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID}); err != nil {
		t.Fatal(err)
	}
	// Attempts fail while nothing listens.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var failed int
		if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE push_config_id = 'down' AND last_error IS NOT NULL`).Scan(&failed); err != nil {
			t.Fatal(err)
		}
		if failed > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no push attempt failed")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Up again, on the same address: the receiver gets the task as it
	// stands, canceled.
	recv := &pushReceiver{tokens: map[string]bool{token: true}, auth: map[string]string{token: ""}}
	recv.pushLog = newPushLog(t, recv.take)
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(recv)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	recv.wait(token, "the task canceled", func(p *a2a.Task) bool {
		return p.ID == task.ID && p.Status.State == a2a.TaskStateCanceled
	})
}
