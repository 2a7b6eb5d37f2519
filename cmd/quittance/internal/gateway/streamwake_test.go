package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/quittance/quittance/cmd/quittance/internal/demoagent"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
)

// streamed is one event of a stream read in the background, or its error.
type streamed struct {
	ev  a2a.Event
	err error
}

// background reads events until they end or ctx does, handing each on;
// the channel closes when the stream ends.
func background(ctx context.Context, events func(yield func(a2a.Event, error) bool)) <-chan streamed {
	out := make(chan streamed)
	go func() {
		defer close(out)
		for ev, err := range events {
			select {
			case out <- streamed{ev, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return out
}

// next is the next event of a background stream within d; ok false when
// the stream ended.
func next(t *testing.T, what string, ch <-chan streamed, d time.Duration) (a2a.Event, bool) {
	t.Helper()
	select {
	case s, ok := <-ch:
		if !ok {
			return nil, false
		}
		if s.err != nil {
			t.Fatalf("%s: the stream failed: %v", what, s.err)
		}
		return s.ev, true
	case <-time.After(d):
		t.Fatalf("%s: nothing within %s", what, d)
		return nil, false
	}
}

// ledgerOf is the ledger extension's metadata of a task or status update.
func ledgerOf(ev a2a.Event) (a2a.TaskState, map[string]any) {
	switch e := ev.(type) {
	case *a2a.Task:
		m, _ := e.Metadata[extensionURI()].(map[string]any)
		return e.Status.State, m
	case *a2a.TaskStatusUpdateEvent:
		m, _ := e.Metadata[extensionURI()].(map[string]any)
		return e.Status.State, m
	}
	return a2a.TaskStateUnspecified, nil
}

// TestGatewayStreamFollowsTheObligation: with the event streams polled
// once a minute, a subscription is woken by the ledger's NOTIFY: the
// cancel's change reaches it in seconds. It does not end at the canceled
// task while the obligation is open: it carries the obligation's moves
// (revocation_pending_compensation while the supplier's compensation is
// pending, then compensated) and ends at the compensation. A subscriber
// whose connection dropped subscribes again, starts from the task as it
// stands and follows it to the same end. Over both bindings.
func TestGatewayStreamFollowsTheObligation(t *testing.T) {
	t.Parallel()
	e := newGatewayEnvWith(t, apitest.Worker{}, demoagent.Config{Compensation: demoagent.CompensationPending, PendingDelay: 2 * time.Second},
		apitest.WithStream(time.Minute, time.Second))
	t.Run("woken", func(t *testing.T) {
		acme := e.client(t, e.acme, orgID, a2a.TransportProtocolJSONRPC)
		task := sendWorking(t, acme, ledgerMessage("po-woken-"+t.Name(), "Order 3 chairs", 10_000))
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		events := background(ctx, acme.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}))
		if ev, _ := next(t, "the subscription's task", events, 10*time.Second); ev == nil {
			t.Fatal("the subscription ended at once")
		} else if st, m := ledgerOf(ev); st != a2a.TaskStateWorking || m["obligation_state"] != "held" {
			t.Fatalf("the subscription began with %T %s %+v", ev, st, m)
		}
		if _, err := acme.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID}); err != nil {
			t.Fatal(err)
		}
		// The cancel's event wakes the stream: well within the minute the
		// poll would take.
		ev, ok := next(t, "the cancel's update", events, 5*time.Second)
		if _, m := ledgerOf(ev); !ok || m["cancel_requested_at"] == nil {
			t.Fatalf("after the cancel: %T %+v", ev, ev)
		}
		followToCompensation(t, "woken", ev, events)
	})
	t.Run("resubscribed", func(t *testing.T) {
		acme := e.client(t, e.acme, orgID, a2a.TransportProtocolHTTPJSON)
		task := sendWorking(t, acme, ledgerMessage("po-resub-"+t.Name(), "Order 4 chairs", 10_000))
		dropped, drop := context.WithCancel(context.Background())
		events := background(dropped, acme.SubscribeToTask(dropped, &a2a.SubscribeToTaskRequest{ID: task.ID}))
		next(t, "the first subscription", events, 10*time.Second)
		drop() // the connection drops while the task works
		if _, err := acme.CancelTask(context.Background(), &a2a.CancelTaskRequest{ID: task.ID}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		events = background(ctx, acme.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}))
		first, ok := next(t, "the second subscription", events, 10*time.Second)
		if _, m := ledgerOf(first); !ok || m["cancel_requested_at"] == nil {
			t.Fatalf("the second subscription began with %T %+v", first, first)
		}
		followToCompensation(t, "resubscribed", first, events)
	})
}

// followToCompensation reads a stream that told last to its end: the task
// goes canceled with the obligation pending compensation, then the
// obligation compensated, and the stream ends there.
func followToCompensation(t *testing.T, what string, last a2a.Event, events <-chan streamed) {
	t.Helper()
	var moves []string
	seen := func(ev a2a.Event) {
		st, m := ledgerOf(ev)
		if st.Terminal() {
			if ob, _ := m["obligation_state"].(string); len(moves) == 0 || moves[len(moves)-1] != ob {
				moves = append(moves, ob)
			}
		}
	}
	seen(last)
	for {
		ev, ok := next(t, what, events, 30*time.Second)
		if !ok {
			break
		}
		seen(ev)
		last = ev
	}
	st, m := ledgerOf(last)
	if st != a2a.TaskStateCanceled || m["obligation_state"] != "compensated" {
		t.Fatalf("%s: the stream ended at %s %+v", what, st, m)
	}
	if len(moves) < 2 || moves[0] != "revocation_pending_compensation" || moves[len(moves)-1] != "compensated" {
		t.Fatalf("%s: the canceled task's obligation moved %v on the stream", what, moves)
	}
}

// TestGatewayStreamCaps: the gateway's streams count against the event
// streams' caps. With one stream a principal, acme's open event stream
// (GET /v1/events) leaves no room for a subscription or a streamed
// message, which are refused (-32000, problem_code too_many_streams)
// before anything is sent; globex, another principal, subscribes. Once
// the event stream closed a subscription opens, and while it is open an
// event stream is refused with 429.
func TestGatewayStreamCaps(t *testing.T) {
	t.Parallel()
	e := newGatewayEnvWith(t, apitest.Worker{}, demoagent.Config{}, apitest.WithStreamCaps(1, 100))
	acme := e.client(t, e.acme, orgID, a2a.TransportProtocolJSONRPC)
	task := send(t, acme, ledgerMessage("po-caps-"+t.Name(), "Order 5 chairs", 10_000))

	sse, stopSSE := context.WithCancel(context.Background())
	defer stopSSE()
	res := openEventStream(t, e, sse, e.acme)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("acme's event stream: %d", res.StatusCode)
	}
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, a2a.ErrServerError) {
			t.Fatalf("%s over the cap: %v, want a server error", what, err)
		}
		if m := errorInfoMeta(t, err); m["problem_code"] != "too_many_streams" || m["cap"] != "principal" || m["retry_after"] == "" {
			t.Fatalf("%s over the cap: ErrorInfo metadata %+v", what, m)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	refused("SubscribeToTask", firstError(acme.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID})))
	held := e.budgetHeld(t)
	refused("SendStreamingMessage", firstError(acme.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: ledgerMessage("po-caps-streamed", "Order 6 chairs", 10_000)})))
	if after := e.budgetHeld(t); after != held {
		t.Fatalf("a refused streamed message held %d", after-held)
	}
	globex := e.client(t, e.globex, orgID, a2a.TransportProtocolJSONRPC)
	mine := send(t, globex, ledgerMessage("po-caps-globex", "Order 7 chairs", 10_000))
	if err := firstError(globex.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: mine.ID})); err != nil {
		t.Fatalf("globex subscribes: %v", err)
	}

	stopSSE()
	_ = res.Body.Close()
	sub, stopSub := context.WithCancel(ctx)
	defer stopSub()
	var events <-chan streamed
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The event stream's slot frees once its server side has seen the
		// client go.
		events = background(sub, acme.SubscribeToTask(sub, &a2a.SubscribeToTaskRequest{ID: task.ID}))
		s := <-events
		if s.err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a subscription once the event stream closed: %v", s.err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	again := openEventStream(t, e, ctx, e.acme)
	defer again.Body.Close()
	if again.StatusCode != http.StatusTooManyRequests || again.Header.Get("Retry-After") == "" {
		t.Fatalf("an event stream while the subscription is open: %d", again.StatusCode)
	}
}

// openEventStream opens GET /v1/events as a stream with token, until ctx
// ends.
func openEventStream(t *testing.T, e *gwEnv, ctx context.Context, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL+"/v1/events?stream=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	hc := &http.Client{Transport: e.Client.Transport}
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// firstError is a stream's first error, nil when its first event came
// (the stream is left there).
func firstError(events func(yield func(a2a.Event, error) bool)) error {
	for _, err := range events {
		return err
	}
	return errors.New("an empty stream")
}

// TestGatewayStreamEndsWhenItsCredentialIsRevoked: a task stream checks
// its credential as the API's event streams do: revoked, the open
// subscription ends with UnauthenticatedError within seconds.
func TestGatewayStreamEndsWhenItsCredentialIsRevoked(t *testing.T) {
	t.Parallel()
	e := newGatewayEnvWith(t, apitest.Worker{}, demoagent.Config{}, apitest.WithStream(time.Minute, time.Second))
	var credential struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	e.Do(t, http.MethodPost, "/admin/v1/tokens", e.OncallToken, map[string]any{"role": "orchestrator", "tenant": "acme", "name": "short-lived"}).
		Expect(t, http.StatusCreated).JSON(t, &credential)
	c := e.client(t, credential.Token, orgID, a2a.TransportProtocolJSONRPC)
	task := send(t, c, ledgerMessage("po-revoked-"+t.Name(), "Order 8 chairs", 10_000))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := background(ctx, c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}))
	next(t, "the subscription's task", events, 10*time.Second)
	e.Do(t, http.MethodPost, "/admin/v1/credentials/"+credential.ID+"/revoke", e.OncallToken, map[string]any{"reason": "leaked"}).
		Expect(t, http.StatusOK)
	for {
		select {
		case s, ok := <-events:
			if !ok {
				t.Fatal("the stream ended without an error")
			}
			if s.err != nil {
				if !errors.Is(s.err, a2a.ErrUnauthenticated) {
					t.Fatalf("the stream ended with %v, want UnauthenticatedError", s.err)
				}
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the stream of a revoked credential is still open")
		}
	}
}

// TestGatewayStreamKeepsAlive: an idle task stream sends a comment line
// every heartbeat (a second here), so proxies keep it open while the task
// works or its obligation waits, as the event streams do.
func TestGatewayStreamKeepsAlive(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	acme := e.client(t, e.acme, orgID, a2a.TransportProtocolJSONRPC)
	task := sendWorking(t, acme, ledgerMessage("po-idle-"+t.Name(), "Order 1 desk", 10_000))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := `{"jsonrpc":"2.0","id":1,"method":"SubscribeToTask","params":{"id":"` + string(task.ID) + `"}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.orgBase(orgID)+"/jsonrpc", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.acme)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	res, err := (&http.Client{Transport: e.Client.Transport}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	lines := bufio.NewScanner(res.Body)
	var seen []string
	for lines.Scan() {
		if line := lines.Text(); strings.HasPrefix(line, ":") {
			return
		} else if line != "" {
			seen = append(seen, line)
		}
	}
	t.Fatalf("no comment line on the idle stream (%v); it showed %q", lines.Err(), seen)
}
