package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quittance/quittance/ledger/webhook"
)

// The soak's world beyond the service: the demo agent as the remote org
// (behind a proxy that counts what it is sent), a load balancer for the
// agent's push notifications, a webhook receiver, and an event-stream
// client that moves between replicas.

// loopbackServer serves h on a free loopback port until close.
type loopbackServer struct {
	URL string
	srv *http.Server
}

func serveLoopback(h http.Handler) (*loopbackServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &loopbackServer{URL: "http://" + l.Addr().String(), srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go s.srv.Serve(l) //nolint:errcheck // ends with ErrServerClosed
	return s, nil
}

func (s *loopbackServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}

// forward sends r, with body, to base and copies the answer to w; a
// streamed answer (text/event-stream) is copied as it arrives. It reports
// whether an answer came (false: nothing was written to w).
func forward(hc *http.Client, w http.ResponseWriter, r *http.Request, base string, body []byte) ([]byte, bool) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, false
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	// Answers are read here (the proxy parses them): let the transport ask
	// for compression itself, and undo it, or not at all.
	req.Header.Del("Accept-Encoding")
	req.Host = r.Host // the agent names the proxy in its card, as the interface to call
	resp, err := hc.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		rc := http.NewResponseController(w)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return nil, true
				}
				_ = rc.Flush()
			}
			if err != nil {
				return nil, true
			}
		}
	}
	out, _ := io.ReadAll(resp.Body)
	_, _ = w.Write(out)
	return out, true
}

// demoAgent is a `quittance demo-agent` subprocess playing one remote org,
// and the counting proxy Quittance reaches it through.
type demoAgent struct {
	org   string
	cmd   *exec.Cmd
	done  chan struct{}
	base  string // the agent itself
	proxy *loopbackServer
	hc    *http.Client

	mu    sync.Mutex
	sends map[string]int             // SendMessage requests per messageId
	tasks map[string]map[string]bool // messageId → the task ids the agent answered with
}

// startDemoAgent starts the demo agent for org, whose tasks work for
// workDelay before they complete, and its proxy.
func startDemoAgent(ctx context.Context, h *harness, org string, workDelay time.Duration) (*demoAgent, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(h.dir, "demo-agent-"+org+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	a := &demoAgent{
		org: org, base: "http://" + addr, done: make(chan struct{}),
		hc:    &http.Client{Timeout: 30 * time.Second},
		sends: map[string]int{}, tasks: map[string]map[string]bool{},
	}
	a.cmd = exec.Command(h.binary, "demo-agent", "--addr", addr, "--org-id", org, "--ledger-id", ledgerID,
		"--work-delay", workDelay.String(), "--key-file", filepath.Join(h.dir, "demo-agent-"+org+".pem"))
	a.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start the demo agent: %w", err)
	}
	go func() {
		_ = a.cmd.Wait()
		logf.Close()
		close(a.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/.well-known/jwks.json", nil)
		if resp, err := a.hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-a.done:
			return nil, fmt.Errorf("the demo agent exited; see %s", logPath)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			a.stop()
			return nil, fmt.Errorf("the demo agent did not answer within 30s; see %s", logPath)
		}
	}
	if a.proxy, err = serveLoopback(a); err != nil {
		a.stop()
		return nil, err
	}
	return a, nil
}

// ServeHTTP forwards a request to the agent, counting the SendMessage
// requests per messageId and the task each is answered with.
func (a *demoAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, "unreadable", http.StatusBadRequest)
		return
	}
	var req struct {
		Method string `json:"method"`
		Params struct {
			Message struct {
				MessageID string `json:"messageId"`
			} `json:"message"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &req)
	out, ok := forward(a.hc, w, r, a.base, body)
	if !ok {
		http.Error(w, "agent unreachable", http.StatusBadGateway)
		return
	}
	if r.Method != http.MethodPost || (req.Method != "SendMessage" && req.Method != "message/send") {
		return
	}
	var resp struct {
		Result struct {
			Task struct {
				ID string `json:"id"`
			} `json:"task"`
		} `json:"result"`
	}
	_ = json.Unmarshal(out, &resp)
	id := req.Params.Message.MessageID
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sends[id]++
	if a.tasks[id] == nil {
		a.tasks[id] = map[string]bool{}
	}
	if resp.Result.Task.ID != "" {
		a.tasks[id][resp.Result.Task.ID] = true
	}
}

// jwks is the org's public JWK Set, as the agent serves it.
func (a *demoAgent) jwks(ctx context.Context) (json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/.well-known/jwks.json", nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// cardURL is the agent card's URL through the proxy.
func (a *demoAgent) cardURL() string { return a.proxy.URL + "/.well-known/agent-card.json" }

// counts returns, per messageId, the SendMessage requests and the task ids
// they were answered with.
func (a *demoAgent) counts() (map[string]int, map[string][]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sends := make(map[string]int, len(a.sends))
	tasks := make(map[string][]string, len(a.tasks))
	for k, v := range a.sends {
		sends[k] = v
	}
	for k, v := range a.tasks {
		for t := range v {
			tasks[k] = append(tasks[k], t)
		}
	}
	return sends, tasks
}

func (a *demoAgent) stop() {
	if a.proxy != nil {
		a.proxy.close()
	}
	_ = a.cmd.Process.Kill()
	<-a.done
}

// balancer spreads requests over the replicas, going on to the next one
// when a replica does not answer: the service's public URL, where the
// remote agents push their notifications.
type balancer struct {
	backends []string
	next     atomic.Uint64
	hc       *http.Client
}

func (b *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, "unreadable", http.StatusBadRequest)
		return
	}
	start := b.next.Add(1)
	for i := range len(b.backends) {
		if _, ok := forward(b.hc, w, r, b.backends[(int(start)+i)%len(b.backends)], body); ok {
			return
		}
	}
	http.Error(w, "no replica answered", http.StatusBadGateway)
}

// webhookReceiver is an orchestrator's webhook endpoint: it verifies each
// delivery's signature and accepts each event once, by its webhook-id;
// a redelivery (at least once: a replica may die between the receiver's
// answer and recording it) is answered 200 and not accepted again.
type webhookReceiver struct {
	secret string

	mu          sync.Mutex
	accepted    map[int64][32]byte // event seq → sha256 of the body accepted
	redelivered int
	problems    []string
}

func (h *webhookReceiver) setSecret(secret string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.secret = secret
}

func (h *webhookReceiver) problem(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.problems) < 1000 {
		h.problems = append(h.problems, fmt.Sprintf(format, args...))
	}
}

func (h *webhookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, "unreadable", http.StatusBadRequest)
		return
	}
	id := r.Header.Get("webhook-id")
	ts, err := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
	if err != nil {
		h.problem("webhook %s: bad webhook-timestamp %q", id, r.Header.Get("webhook-timestamp"))
		http.Error(w, "bad timestamp", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	secret := h.secret
	h.mu.Unlock()
	if secret == "" {
		http.Error(w, "not registered yet", http.StatusServiceUnavailable)
		return
	}
	want, err := webhook.Sign(secret, id, time.Unix(ts, 0), body)
	if err != nil || !hmac.Equal([]byte(want), []byte(r.Header.Get("webhook-signature"))) {
		h.problem("webhook %s: signature does not verify", id)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var p webhook.Payload
	if err := json.Unmarshal(body, &p); err != nil || webhook.MessageID(p.Data.Seq) != id {
		h.problem("webhook %s: body is not the event it names (%v)", id, err)
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	sum := sha256.Sum256(body)
	h.mu.Lock()
	prev, seen := h.accepted[p.Data.Seq]
	switch {
	case !seen:
		h.accepted[p.Data.Seq] = sum
	case prev != sum:
		h.problems = append(h.problems, fmt.Sprintf("webhook %s redelivered with a different body", id))
	default:
		h.redelivered++
	}
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// sseClient follows GET /v1/events as a replayable Server-Sent Events
// stream from the first event on, and after every SIGKILL of a replica
// (and every broken stream) resumes on another replica with Last-Event-ID.
// It checks every event arrives once, and each stream's events in order.
type sseClient struct {
	replicas []string
	token    string
	kills    chan int // the replica just killed

	mu        sync.Mutex
	seen      map[int64]int    // seq → times received
	streamSeq map[string]int32 // stream → the last stream_seq received
	last      string           // the last SSE id received
	resumed   int              // connections opened with a Last-Event-ID
	problems  []string
}

func newSSEClient(replicas []string, token string) *sseClient {
	return &sseClient{replicas: replicas, token: token, kills: make(chan int, 64),
		seen: map[int64]int{}, streamSeq: map[string]int32{}}
}

func (c *sseClient) problem(format string, args ...any) {
	if len(c.problems) < 1000 {
		c.problems = append(c.problems, fmt.Sprintf(format, args...))
	}
}

// killed tells the client a replica was SIGKILLed.
func (c *sseClient) killed(replica int) {
	select {
	case c.kills <- replica:
	default:
	}
}

// run follows the stream until ctx ends.
func (c *sseClient) run(ctx context.Context) {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	cur := 0
	for ctx.Err() == nil {
		connCtx, cancel := context.WithCancel(ctx)
		moved := make(chan int, 1)
		go func() {
			select {
			case k := <-c.kills:
				moved <- k
				cancel()
			case <-connCtx.Done():
			}
		}()
		c.follow(connCtx, hc, c.replicas[cur])
		cancel()
		if ctx.Err() != nil {
			return
		}
		// Another replica: the next one, but not the one just killed.
		next := (cur + 1) % len(c.replicas)
		select {
		case k := <-moved:
			if next == k && len(c.replicas) > 2 {
				next = (next + 1) % len(c.replicas)
			}
		default:
			time.Sleep(100 * time.Millisecond) // a broken stream: do not spin
		}
		cur = next
	}
}

// follow reads one connection's events until it ends.
func (c *sseClient) follow(ctx context.Context, hc *http.Client, base string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/events?stream=true", nil)
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "text/event-stream")
	c.mu.Lock()
	if c.last != "" {
		req.Header.Set("Last-Event-ID", c.last)
	}
	c.mu.Unlock()
	resp, err := hc.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// A replica whose database is restarting may refuse: try another.
		return
	}
	if req.Header.Get("Last-Event-ID") != "" {
		c.mu.Lock()
		c.resumed++
		c.mu.Unlock()
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var id, data string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return // an event cut off mid-way is not delivered: it comes again
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if data != "" {
				c.deliver(id, data)
			}
			id, data = "", ""
		case strings.HasPrefix(line, "id:"):
			id = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
}

// deliver records one complete event.
func (c *sseClient) deliver(id, data string) {
	var ev struct {
		Seq       int64  `json:"seq"`
		Stream    string `json:"stream"`
		StreamSeq int32  `json:"stream_seq"`
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := json.Unmarshal([]byte(data), &ev); err != nil || strconv.FormatInt(ev.Seq, 10) != id {
		c.problem("event stream: event id %q with data that does not match it (%v)", id, err)
		return
	}
	c.last = id
	c.seen[ev.Seq]++
	if n := c.seen[ev.Seq]; n > 1 {
		c.problem("event stream: event %d received %d times", ev.Seq, n)
		return
	}
	if prev := c.streamSeq[ev.Stream]; ev.StreamSeq != prev+1 {
		c.problem("event stream: stream %s event %d (stream_seq %d) after stream_seq %d", ev.Stream, ev.Seq, ev.StreamSeq, prev)
	}
	c.streamSeq[ev.Stream] = max(c.streamSeq[ev.Stream], ev.StreamSeq)
}

// received returns how many distinct events the client has received.
func (c *sseClient) received() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// errNotCaughtUp reports a wait that ran out.
var errNotCaughtUp = errors.New("not caught up")
