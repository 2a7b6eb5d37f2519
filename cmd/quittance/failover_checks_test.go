package main

// What the failover tests check besides the load (failover_test.go): the
// outbox's remote tasks, an event stream that reconnects, the
// authentication cache while LISTEN is down, and the checkpoints' chain.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/cmd/quittance/internal/demoagent"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger/audit"
)

// failoverAgentOrg is the org whose delegations are dispatched to a real
// A2A agent through the outbox during a failover test.
const failoverAgentOrg = "agent-supplier"

// a2aEnv is the service's configuration for dispatching to the loopback
// agent, with short intervals so a job claimed on the dead primary is
// claimed again soon.
var a2aEnv = []string{
	"QUITTANCE_EGRESS_ALLOW_HTTP=true", "QUITTANCE_EGRESS_ALLOW_CIDRS=127.0.0.1/32",
	"QUITTANCE_A2A_INTERVAL=100ms", "QUITTANCE_A2A_LEASE=2s", "QUITTANCE_A2A_STREAMING=false",
}

// failoverAgent is a demo A2A agent on loopback whose SendMessage requests
// are counted per messageId, with the tasks it answered them with.
func failoverAgent(t *testing.T) (*sendCounter, *demoagent.Agent, string) {
	t.Helper()
	agent, err := demoagent.New(demoagent.Config{OrgID: failoverAgentOrg, LedgerID: faultLedgerID, WorkDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	counter := &sendCounter{next: agent.Handler(), sends: map[string]int{}, tasks: map[string]map[string]bool{}}
	srv := httptest.NewServer(counter)
	t.Cleanup(srv.Close)
	return counter, agent, srv.URL
}

// dispatcher creates delegations dispatched through the outbox to the
// agent's org, one every interval, retrying each creation unchanged (same
// business operation id) after a transport error or a 5xx, through the
// load's send, so its refusals are checked with the others.
type dispatcher struct {
	l   *load
	mu  sync.Mutex
	ids []string // the delegations answered 2xx
}

func (d *dispatcher) run(stop <-chan struct{}, interval time.Duration) (wait func()) {
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(interval):
			}
			op := fmt.Sprintf("dispatch-%d", i)
			body := map[string]any{
				"business_operation_id": op, "org_id": failoverAgentOrg, "task_class": "procurement", "budget_id": faultBudget,
				"hold":     map[string]any{"amount_minor": faultAmount, "currency": "EUR"},
				"dispatch": map[string]any{"message": map[string]any{"parts": []any{map[string]any{"text": "order " + op}}}},
			}
			res, ok := d.l.send(&opRecord{}, op+" create", http.MethodPost, "/v1/delegations", body)
			if !ok {
				continue
			}
			var v delegationView
			if err := json.Unmarshal(res.body, &v); err != nil || v.ID == "" {
				d.l.problem("%s create: undecodable answer %s", op, res.body)
				continue
			}
			d.mu.Lock()
			d.ids = append(d.ids, v.ID)
			d.mu.Unlock()
		}
	})
	return wg.Wait
}

// checkOutbox: every dispatched delegation the clients were told about
// reaches its agent as exactly one remote task, the one the delegation
// names, within the wait; a job whose claim died with the primary is sent
// again with the same messageId and creates no second task.
func checkOutbox(t *testing.T, api *testClient, token string, d *dispatcher, counter *sendCounter, within time.Duration) {
	t.Helper()
	d.mu.Lock()
	ids := append([]string(nil), d.ids...)
	d.mu.Unlock()
	if len(ids) == 0 {
		t.Error("no dispatched delegation was created")
		return
	}
	deadline := time.Now().Add(within)
	resent := 0
	for _, id := range ids {
		var v delegationView
		for {
			api.must(t, http.MethodGet, "/v1/delegations/"+id, token, nil, &v, http.StatusOK)
			if v.Remote.TaskID != "" || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		sends, tasks := counter.counts(delegate.DispatchMessageID(uuid.MustParse(id)))
		counter.mu.Lock()
		named := counter.tasks[delegate.DispatchMessageID(uuid.MustParse(id))][v.Remote.TaskID]
		counter.mu.Unlock()
		switch {
		case v.Remote.TaskID == "":
			t.Errorf("dispatched delegation %s has no remote task %s after the failover (%d sends)", id, within, sends)
		case tasks != 1 || !named:
			t.Errorf("dispatched delegation %s: %d remote tasks from %d sends, the delegation names %s; want exactly one, that one",
				id, tasks, sends, v.Remote.TaskID)
		}
		if sends > 1 {
			resent++
		}
	}
	t.Logf("outbox: %d dispatched delegations, one remote task each; %d sent more than once", len(ids), resent)
}

// sseFollower follows GET /v1/events?stream=true, reconnecting with
// Last-Event-ID whenever a stream ends or is cut, and records how often it
// received each event.
type sseFollower struct {
	base, token string
	cut         chan struct{}

	mu        sync.Mutex
	seen      map[int64]int
	streamSeq map[string]int32
	last      string
	resumed   int // streams opened with Last-Event-ID and answered 200
	problems  []string
}

func newSSEFollower(base, token string) *sseFollower {
	return &sseFollower{base: base, token: token, cut: make(chan struct{}, 1), seen: map[int64]int{}, streamSeq: map[string]int32{}}
}

// cutNow ends the current stream, as a client's network or a proxy would.
func (f *sseFollower) cutNow() {
	select {
	case f.cut <- struct{}{}:
	default:
	}
}

// run follows the stream until ctx ends.
func (f *sseFollower) run(ctx context.Context) {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for ctx.Err() == nil {
		connCtx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-f.cut:
				cancel()
			case <-connCtx.Done():
			}
		}()
		f.follow(connCtx, hc)
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (f *sseFollower) follow(ctx context.Context, hc *http.Client) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.base+"/v1/events?stream=true", nil)
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	req.Header.Set("Accept", "text/event-stream")
	f.mu.Lock()
	if f.last != "" {
		req.Header.Set("Last-Event-ID", f.last)
	}
	f.mu.Unlock()
	resp, err := hc.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return // refused during the switch: try again
	}
	if req.Header.Get("Last-Event-ID") != "" {
		f.mu.Lock()
		f.resumed++
		f.mu.Unlock()
	}
	br := bufio.NewReader(resp.Body)
	var id, data string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return // an event cut off mid-way was not delivered: it comes again
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if data != "" {
				f.deliver(id, data)
			}
			id, data = "", ""
		case strings.HasPrefix(line, "id:"):
			id = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
}

func (f *sseFollower) deliver(id, data string) {
	var ev struct {
		Seq       int64  `json:"seq"`
		Stream    string `json:"stream"`
		StreamSeq int32  `json:"stream_seq"`
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := json.Unmarshal([]byte(data), &ev); err != nil || strconv.FormatInt(ev.Seq, 10) != id {
		f.problems = append(f.problems, fmt.Sprintf("event id %q with data that does not match it (%v)", id, err))
		return
	}
	f.last = id
	f.seen[ev.Seq]++
	if n := f.seen[ev.Seq]; n > 1 {
		f.problems = append(f.problems, fmt.Sprintf("event %d received %d times", ev.Seq, n))
		return
	}
	if prev := f.streamSeq[ev.Stream]; ev.StreamSeq != prev+1 {
		f.problems = append(f.problems, fmt.Sprintf("stream %s: event %d (stream_seq %d) after stream_seq %d", ev.Stream, ev.Seq, ev.StreamSeq, prev))
	}
	f.streamSeq[ev.Stream] = max(f.streamSeq[ev.Stream], ev.StreamSeq)
}

// check: within the wait, the follower has received every event the
// database holds, each once, and nothing else; and it resumed with
// Last-Event-ID at least once.
func (f *sseFollower) check(t *testing.T, pool *pgxpool.Pool, within time.Duration) {
	t.Helper()
	want := map[int64]bool{}
	rows, err := pool.Query(t.Context(), `SELECT seq FROM events`)
	if err != nil {
		t.Fatalf("read events: %v", err)
	}
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			t.Fatal(err)
		}
		want[seq] = true
	}
	rows.Close()
	deadline := time.Now().Add(within)
	for {
		f.mu.Lock()
		missing := 0
		for seq := range want {
			if f.seen[seq] == 0 {
				missing++
			}
		}
		f.mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("event stream: %d of the database's %d events never received", missing, len(want))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.problems {
		t.Error("event stream: " + p)
	}
	for seq := range f.seen {
		if !want[seq] {
			t.Errorf("event stream: event %d received but not in the database", seq)
		}
	}
	if f.resumed == 0 {
		t.Error("event stream: never resumed with Last-Event-ID")
	}
	t.Logf("event stream: %d events in the database, %d received once each, resumed %d times with Last-Event-ID",
		len(want), len(f.seen), f.resumed)
}

// checkpointChain: the signed checkpoints form one chain through the
// failover: ids consecutive, each naming the SHA-256 of the previous one's
// JWS, and the checkpoint that was the head before the switch (its JWS as
// the service served it then) is in the new primary's chain unchanged,
// followed by at least one signed after it.
func checkCheckpointChain(t *testing.T, pool *pgxpool.Pool, headBefore latestCheckpoint) {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT id, payload, jws FROM checkpoints ORDER BY id`)
	if err != nil {
		t.Fatalf("read checkpoints: %v", err)
	}
	defer rows.Close()
	var prevID int64
	var prevJWS string
	after, sawHead := 0, false
	for rows.Next() {
		var (
			id           int64
			payload, jws string
		)
		if err := rows.Scan(&id, &payload, &jws); err != nil {
			t.Fatal(err)
		}
		var p audit.CheckpointPayload
		if err := json.Unmarshal([]byte(payload), &p); err != nil {
			t.Fatalf("checkpoint %d: %v", id, err)
		}
		want := ""
		if prevJWS != "" {
			sum := sha256.Sum256([]byte(prevJWS))
			want = hex.EncodeToString(sum[:])
		}
		if id != prevID+1 || p.Previous != want {
			t.Errorf("checkpoint %d follows %d and names previous %q, want %d and %q", id, prevID, p.Previous, prevID+1, want)
		}
		if id == headBefore.ID {
			sawHead = true
			if jws != headBefore.JWS {
				t.Errorf("checkpoint %d, the head before the failover, differs on the new primary", id)
			}
		}
		if id > headBefore.ID {
			after++
		}
		prevID, prevJWS = id, jws
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if headBefore.ID != 0 && !sawHead {
		t.Errorf("checkpoint %d, the head before the failover, is not on the new primary", headBefore.ID)
	}
	if after == 0 {
		t.Errorf("no checkpoint after %d", headBefore.ID)
	}
	t.Logf("checkpoints: %d signed after the head before the failover (%d), one chain", after, headBefore.ID)
}
