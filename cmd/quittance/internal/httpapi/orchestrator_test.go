package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/ledger/webhook"
)

// These tests drive the orchestrator loop through the public API on real
// PostgreSQL and real HTTP: continuing interrupted tasks of an a2a-go v0.3.3
// agent, task snapshots, the replayable event stream, signed webhooks, and
// the ledger's JWKS.

const orchLedgerID = "ledger-orch-test"

// orchPeer is a remote agent on a2a-go v0.3.3. The first message's text
// picks what it does: "input_required" and "auth_required" stop the task
// there and a follow-up message completes it, with an artifact sent in two
// appended chunks; anything else works until canceled. Compensation
// requests are answered with a compensated receipt, and their metadata is
// kept.
type orchPeer struct {
	stop chan struct{}

	mu        sync.Mutex
	followUps []string
	compMeta  []map[string]any

	cardURL string
}

func messageText(m *a2a.Message) string {
	var out []string
	for _, p := range m.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			out = append(out, tp.Text)
		}
	}
	return strings.Join(out, "\n")
}

func (p *orchPeer) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	for _, part := range rc.Message.Parts {
		if dp, ok := part.(a2a.DataPart); ok {
			if req, ok := dp.Data["compensationRequest"].(map[string]any); ok {
				p.mu.Lock()
				p.compMeta = append(p.compMeta, rc.Message.Metadata)
				p.mu.Unlock()
				art := a2a.NewArtifactEvent(rc, a2a.DataPart{Data: map[string]any{
					"outcome": "compensated", "receiptId": "rcpt-1", "taskId": req["taskId"], "idempotencyKey": req["idempotencyKey"],
				}})
				art.Artifact.Name = compensation.ReceiptArtifactName
				if err := q.Write(ctx, art); err != nil {
					return err
				}
				done := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCompleted, nil)
				done.Final = true
				return q.Write(ctx, done)
			}
		}
	}
	if rc.StoredTask != nil {
		p.mu.Lock()
		p.followUps = append(p.followUps, messageText(rc.Message))
		p.mu.Unlock()
		if err := q.Write(ctx, a2a.NewStatusUpdateEvent(rc, a2a.TaskStateWorking, nil)); err != nil {
			return err
		}
		first := a2a.NewArtifactEvent(rc, a2a.TextPart{Text: "part-1;"})
		first.Artifact.Name = "result"
		if err := q.Write(ctx, first); err != nil {
			return err
		}
		second := a2a.NewArtifactUpdateEvent(rc, first.Artifact.ID, a2a.TextPart{Text: "part-2"})
		second.LastChunk = true
		if err := q.Write(ctx, second); err != nil {
			return err
		}
		done := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCompleted, nil)
		done.Final = true
		return q.Write(ctx, done)
	}
	switch messageText(rc.Message) {
	case "input_required":
		ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateInputRequired, a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "Which cost center should be charged?"}))
		ev.Final = true
		return q.Write(ctx, ev)
	case "auth_required":
		ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateAuthRequired, a2a.NewMessage(a2a.MessageRoleAgent,
			a2a.TextPart{Text: "Consent needed: https://consent.example.test/authorize?task=" + string(rc.TaskID)}))
		ev.Final = true
		return q.Write(ctx, ev)
	}
	if err := q.Write(ctx, a2a.NewStatusUpdateEvent(rc, a2a.TaskStateWorking, nil)); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case <-p.stop:
		return finishOnStop(ctx, rc, q)
	}
}

func (p *orchPeer) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

func startOrchPeer(t *testing.T) *orchPeer {
	t.Helper()
	p := &orchPeer{stop: make(chan struct{})}
	_, p.cardURL = serveA2APeer(t, p, "127.0.0.1", "asks questions")
	t.Cleanup(func() { close(p.stop) })
	return p
}

// orchEnv is the whole service on one database: API, A2A workers, webhook
// deliveries and the ledger identity.
type orchEnv struct {
	*a2aEnv
}

// newOrchEnv starts an orchEnv on a fresh database: its workers are w with
// webhook deliveries (tasks polled after 300ms without news, every 50ms,
// unless set), opts change the rest.
func newOrchEnv(t *testing.T, w apitest.Worker, opts ...apitest.Option) *orchEnv {
	t.Helper()
	w.Webhooks = true
	if w.PollAfter == 0 {
		w.PollAfter = 300 * time.Millisecond
	}
	if w.PollInterval == 0 {
		w.PollInterval = 50 * time.Millisecond
	}
	return &orchEnv{newA2AEnv(t, w, append([]apitest.Option{apitest.WithLedgerID(orchLedgerID), apitest.WithIdentity()}, opts...)...)}
}

func (e *orchEnv) dispatchText(t *testing.T, op, org, text string, extra map[string]any) httpapi.DelegationBody {
	t.Helper()
	body := map[string]any{
		"business_operation_id": op, "org_id": org, "task_class": "procurement", "budget_id": "ops",
		"hold":     map[string]any{"amount_minor": 1_000, "currency": "EUR"},
		"dispatch": map[string]any{"message": map[string]any{"parts": []any{map[string]any{"text": text}}}},
	}
	for k, v := range extra {
		body[k] = v
	}
	var d httpapi.DelegationBody
	if err := json.Unmarshal(e.must(t, http.MethodPost, "/v1/delegations", e.orch, body, http.StatusCreated), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func (e *orchEnv) task(t *testing.T, id string) delegate.TaskSnapshot {
	t.Helper()
	var s delegate.TaskSnapshot
	if err := json.Unmarshal(e.must(t, http.MethodGet, "/v1/delegations/"+id+"/task", e.orch, nil, http.StatusOK), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestContinueInterruptedTasks(t *testing.T) {
	t.Parallel()
	for _, scenario := range []string{"input_required", "auth_required"} {
		t.Run(scenario, func(t *testing.T) {
			t.Parallel()
			peer := startOrchPeer(t)
			e := newOrchEnv(t, apitest.Worker{})
			e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)
			d := e.dispatchText(t, "op-"+scenario, "supplier", scenario, nil)
			d = e.waitFor(t, d.ID, scenario, func(d httpapi.DelegationBody) bool { return d.TaskStatus == scenario })

			snap := e.task(t, d.ID)
			want := map[string]string{"input_required": "cost center", "auth_required": "https://consent.example.test/authorize"}[scenario]
			if snap.State != ledger.TaskStatus(scenario) || snap.StatusMessage == nil || !strings.Contains(snap.StatusMessage.Text, want) {
				t.Fatalf("snapshot = %+v", snap)
			}
			if !bytes.Contains(e.must(t, http.MethodGet, "/v1/delegations/"+d.ID+"/events", e.orch, nil, http.StatusOK), []byte(want)) {
				t.Fatalf("the status message is not in the events")
			}

			answer := map[string]any{"message_id": "answer-1", "message": map[string]any{"parts": []any{map[string]any{"text": "CC-42"}}}}
			var first, again httpapi.MessageBody
			_ = json.Unmarshal(e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/messages", e.orch, answer, http.StatusAccepted), &first)
			_ = json.Unmarshal(e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/messages", e.orch, answer, http.StatusOK), &again)
			if first.A2AMessageID == "" || again.A2AMessageID != first.A2AMessageID || again.MessageID != "answer-1" {
				t.Fatalf("repeat answered %+v, first %+v", again, first)
			}
			other := map[string]any{"message_id": "answer-1", "message": map[string]any{"parts": []any{map[string]any{"text": "CC-43"}}}}
			e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/messages", e.orch, other, http.StatusUnprocessableEntity)

			d = e.waitFor(t, d.ID, "settled", func(d httpapi.DelegationBody) bool { return d.ObligationState == "settled" })
			var snapDone delegate.TaskSnapshot
			deadline := time.Now().Add(15 * time.Second)
			for {
				snapDone = e.task(t, d.ID)
				if snapDone.State == ledger.StatusCompleted && len(snapDone.Artifacts) == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("final snapshot = %+v", snapDone)
				}
				time.Sleep(20 * time.Millisecond)
			}
			art := snapDone.Artifacts[0]
			var text string
			for _, p := range art.Parts {
				text += p.Text
			}
			if text != "part-1;part-2" || art.Name != "result" || art.TooLarge {
				t.Fatalf("artifact = %+v", art)
			}

			var sent httpapi.MessageBody
			_ = json.Unmarshal(e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/messages", e.orch, answer, http.StatusOK), &sent)
			if sent.Status != delegate.MessageSent || sent.A2AMessageID != first.A2AMessageID {
				t.Fatalf("after the task completed, the repeat answered %+v", sent)
			}
			peer.mu.Lock()
			got := append([]string(nil), peer.followUps...)
			peer.mu.Unlock()
			if len(got) != 1 || got[0] != "CC-42" {
				t.Fatalf("the peer received follow-ups %q, want exactly one", got)
			}
			// A terminal task takes no follow-up: a refinement is a new delegation.
			code, body := e.do(t, http.MethodPost, "/v1/delegations/"+d.ID+"/messages", e.orch,
				map[string]any{"message_id": "answer-2", "message": map[string]any{"parts": []any{map[string]any{"text": "more"}}}})
			if code != http.StatusConflict || !strings.Contains(string(body), "task_terminal") {
				t.Fatalf("continuing a completed task: %d %s", code, body)
			}
			events := e.events(t, d.ID)
			if countEvents(events, ledger.EventTypeMessageQueued) != 1 || countEvents(events, ledger.EventTypeMessageSent) != 1 {
				t.Fatalf("events = %+v", events)
			}
		})
	}
}

func TestRefinementLinksAndContext(t *testing.T) {
	t.Parallel()
	peer := startOrchPeer(t)
	e := newOrchEnv(t, apitest.Worker{})
	e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)
	first := e.dispatchText(t, "op-first", "supplier", "input_required", nil)
	first = e.waitFor(t, first.ID, "dispatch", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "input_required" })
	second := e.dispatchText(t, "op-second", "supplier", "input_required", map[string]any{
		"context_from": first.ID, "references": []string{first.ID},
	})
	if second.Links == nil || second.Links.ContextFrom != first.ID || len(second.Links.References) != 1 {
		t.Fatalf("links of the refinement = %+v", second.Links)
	}
	second = e.waitFor(t, second.ID, "dispatch", dispatched)
	if second.Remote.ContextID != first.Remote.ContextID {
		t.Fatalf("refinement sent in context %q, want %q", second.Remote.ContextID, first.Remote.ContextID)
	}
	back := e.get(t, first.ID)
	if back.Links == nil || len(back.Links.ContextChildren) != 1 || back.Links.ContextChildren[0] != second.ID ||
		len(back.Links.ReferencedBy) != 1 || back.Links.ReferencedBy[0] != second.ID {
		t.Fatalf("links seen from the first delegation = %+v", back.Links)
	}
	code, body := e.do(t, http.MethodPost, "/v1/delegations", e.orch, map[string]any{
		"business_operation_id": "op-bad", "org_id": "supplier", "task_class": "procurement", "budget_id": "ops",
		"hold": map[string]any{"amount_minor": 1, "currency": "EUR"}, "remote": map[string]any{"task_id": "t-x"},
		"references": []string{uuid.NewString()},
	})
	if code != http.StatusUnprocessableEntity || !strings.Contains(string(body), "references_not_found") {
		t.Fatalf("unknown reference: %d %s", code, body)
	}
}

func TestCompensationRequestCarriesVerifiableJWS(t *testing.T) {
	t.Parallel()
	peer := startOrchPeer(t)
	e := newOrchEnv(t, apitest.Worker{})
	e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)

	resp, err := http.Get(e.URL + "/.well-known/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	jwks, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "jwk-set") ||
		!strings.Contains(string(jwks), e.Identity.ActiveKeyID()) || strings.Contains(string(jwks), `"d"`) {
		t.Fatalf("JWKS: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), jwks)
	}

	d := e.dispatchText(t, "op-comp", "supplier", "work", nil)
	e.waitFor(t, d.ID, "working", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "working" })
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	d = e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })

	peer.mu.Lock()
	metas := append([]map[string]any(nil), peer.compMeta...)
	peer.mu.Unlock()
	if len(metas) != 1 {
		t.Fatalf("compensation requests: %v", metas)
	}
	ext, _ := metas[0][compensation.ExtensionURI].(map[string]any)
	token, _ := ext["requestJws"].(string)
	if token == "" {
		t.Fatalf("no requestJws in %v", metas[0])
	}
	claims, err := compensation.VerifyCompensationRequest(token, jwks, orchLedgerID, "supplier", time.Now())
	if err != nil {
		t.Fatalf("the request's JWS does not verify against the published JWKS: %v", err)
	}
	if claims.TaskID != d.Remote.TaskID || claims.IdempotencyKey != d.Compensation.IdempotencyKey {
		t.Fatalf("claims %+v for delegation %+v", claims, d)
	}
	if _, err := compensation.VerifyCompensationRequest(token, jwks, orchLedgerID, "another-org", time.Now()); err == nil {
		t.Fatal("a token for another org verified")
	}
	other, _ := jose.NewIdentityFile("other", time.Now())
	otherID, _ := jose.LoadIdentity(orchLedgerID, other)
	if _, err := compensation.VerifyCompensationRequest(token, otherID.JWKS(), orchLedgerID, "supplier", time.Now()); err == nil {
		t.Fatal("the token verified against someone else's keys")
	}
}

// sseEvent is one Server-Sent Event as read by the test client.
type sseEvent struct {
	id   string
	data string
}

// sseClient reads a stream; close drops the connection.
type sseClient struct {
	events chan sseEvent
	close  func()
}

func openStream(t *testing.T, url, token, lastEventID string) *sseClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		body, _ := io.ReadAll(resp.Body)
		cancel()
		t.Fatalf("stream: %d %s", resp.StatusCode, body)
	}
	return readStream(t, resp, cancel)
}

// readStream reads the events of an open stream's response; cancel is its
// request's.
func readStream(t *testing.T, resp *http.Response, cancel func()) *sseClient {
	c := &sseClient{events: make(chan sseEvent, 1000)}
	var once sync.Once
	c.close = func() { once.Do(func() { cancel(); resp.Body.Close() }) }
	t.Cleanup(c.close)
	go func() {
		defer close(c.events)
		r := bufio.NewReader(resp.Body)
		var ev sseEvent
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\r\n")
			switch {
			case line == "":
				if ev.id != "" || ev.data != "" {
					c.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id:"):
				ev.id = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
			case strings.HasPrefix(line, "data:"):
				ev.data += strings.TrimSpace(strings.TrimPrefix(line, "data:"))
			}
		}
	}()
	return c
}

// next returns the next event, failing after a timeout.
func (c *sseClient) next(t *testing.T) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-c.events:
		if !ok {
			t.Fatal("the stream ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return sseEvent{}
}

// quiet fails if an event arrives within d.
func (c *sseClient) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case ev, ok := <-c.events:
		if ok {
			t.Fatalf("unexpected event %s: %s", ev.id, ev.data)
		}
	case <-time.After(d):
	}
}

func eventType(t *testing.T, ev sseEvent) ledger.EventType {
	t.Helper()
	var b struct {
		Type ledger.EventType `json:"type"`
		Seq  int64            `json:"seq"`
	}
	if err := json.Unmarshal([]byte(ev.data), &b); err != nil {
		t.Fatalf("event data %q: %v", ev.data, err)
	}
	if strconv.FormatInt(b.Seq, 10) != ev.id {
		t.Fatalf("event id %s is not its seq %d", ev.id, b.Seq)
	}
	return b.Type
}

// recordMarker appends a marker event to a delegation's stream.
func recordMarker(ctx context.Context, tx ledger.Tx, id uuid.UUID, typ ledger.EventType) (ledger.Event, error) {
	d, err := tx.DelegationForUpdate(ctx, id)
	if err != nil {
		return ledger.Event{}, err
	}
	ev, err := ledger.Record(ctx, tx, d, ledger.Change{Type: typ, Actor: "test", At: time.Now().UTC().Truncate(time.Microsecond)})
	if err != nil {
		return ev, err
	}
	// The store writes a transaction's events at its end, or before a
	// statement that reads events (sql/pgstore/eventbatch.go): reading the
	// stream writes the marker now, so the transaction holds its xid and
	// the marker its Seq from here.
	r, ok := tx.(interface {
		StreamEvents(context.Context, string) ([]ledger.Event, error)
	})
	if !ok {
		return ev, fmt.Errorf("%T reads no stream", tx)
	}
	events, err := r.StreamEvents(ctx, ev.Stream)
	if err != nil {
		return ev, err
	}
	if n := len(events); n == 0 || events[n-1].StreamSeq != ev.StreamSeq {
		return ev, fmt.Errorf("stream %s does not end at the marker", ev.Stream)
	}
	return events[len(events)-1], nil
}

func TestEventStreamResumesWithoutGapsOrDuplicates(t *testing.T) {
	t.Parallel()
	// A cluster of its own: the test times the feed, whose cut is the
	// cluster's (another test's open transaction would hold it back), and
	// holds a transaction open itself.
	e := newOrchEnv(t, apitest.Worker{}, apitest.WithStream(50*time.Millisecond, 100*time.Millisecond), apitest.WithPrivateCluster())
	e.must(t, http.MethodPut, "/admin/v1/orgs/plain", e.OncallToken, map[string]any{"name": "Plain"}, http.StatusCreated)
	create := func(op string) uuid.UUID {
		var d httpapi.DelegationBody
		_ = json.Unmarshal(e.must(t, http.MethodPost, "/v1/delegations", e.orch, map[string]any{
			"business_operation_id": op, "org_id": "plain", "task_class": "read_only", "budget_id": "ops",
			"hold": map[string]any{"amount_minor": 10, "currency": "EUR"}, "remote": map[string]any{"task_id": "t-" + op},
		}, http.StatusCreated), &d)
		return uuid.MustParse(d.ID)
	}
	d1, d2 := create("op-1"), create("op-2")

	stream := openStream(t, e.URL+"/v1/events?stream=true", e.orch, "")
	if got := eventType(t, stream.next(t)); got != ledger.EventTypeDelegationCreated {
		t.Fatalf("first event %s", got)
	}
	if got := eventType(t, stream.next(t)); got != ledger.EventTypeDelegationCreated {
		t.Fatalf("second event %s", got)
	}

	// T1 appends first (lower seq) and commits last; T2 commits in between.
	appended, release, committed := make(chan ledger.Event, 1), make(chan struct{}), make(chan error, 1)
	var releaseOnce sync.Once
	commitSlow := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(commitSlow) // should the test fail while T1 is open
	go func() {
		committed <- e.Store.InTx(context.Background(), func(tx ledger.Tx) error {
			ev, err := recordMarker(context.Background(), tx, d1, "marker_slow")
			if err != nil {
				return err
			}
			select {
			case appended <- ev:
			default:
			}
			<-release
			return nil
		})
	}()
	slow := <-appended
	var fast ledger.Event
	if err := e.Store.InTx(context.Background(), func(tx ledger.Tx) error {
		var err error
		fast, err = recordMarker(context.Background(), tx, d2, "marker_fast")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if slow.Seq >= fast.Seq {
		t.Fatalf("seqs %d, %d: the test needs the slow transaction to hold the lower seq", slow.Seq, fast.Seq)
	}
	// While T1 is open, heartbeats flow and nothing else: the slow event is
	// not committed, and the fast one waits for T1, which was writing when
	// it committed and could still commit an event before it.
	stream.quiet(t, 300*time.Millisecond)

	commitSlow()
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	// Both arrive at once, in commit order: ids are not increasing.
	ev := stream.next(t)
	if eventType(t, ev) != "marker_fast" {
		t.Fatalf("got %s", ev.data)
	}
	stream.close() // forced disconnect, the slow event unread
	// Resuming after the higher seq must still deliver the lower one,
	// committed later, and nothing twice.
	resumed := openStream(t, e.URL+"/v1/events?stream=true", e.orch, ev.id)
	got := resumed.next(t)
	if eventType(t, got) != "marker_slow" || got.id != strconv.FormatInt(slow.Seq, 10) {
		t.Fatalf("after resuming at %s got %s %s", ev.id, got.id, got.data)
	}
	resumed.quiet(t, 300*time.Millisecond)
	resumed.close()

	// A restart: a new server on the same database, the client resumes there.
	restarted := e.restart(t, apitest.WithStream(50*time.Millisecond, 0))
	again := openStream(t, restarted.URL+"/v1/delegations/"+d1.String()+"/events?stream=true", restarted.orch, got.id)
	if err := restarted.Store.InTx(context.Background(), func(tx ledger.Tx) error {
		_, err := recordMarker(context.Background(), tx, d1, "marker_after_restart")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if typ := eventType(t, again.next(t)); typ != "marker_after_restart" {
		t.Fatalf("after the restart got %s", typ)
	}
	again.quiet(t, 200*time.Millisecond)

	// The delegation stream from the start has exactly its own events.
	full := openStream(t, restarted.URL+"/v1/delegations/"+d1.String()+"/events?stream=true", restarted.orch, "")
	for _, want := range []ledger.EventType{ledger.EventTypeDelegationCreated, "marker_slow", "marker_after_restart"} {
		if typ := eventType(t, full.next(t)); typ != want {
			t.Fatalf("delegation stream: got %s, want %s", typ, want)
		}
	}
	full.quiet(t, 200*time.Millisecond)

	// Tenants see only their own events; the JSON listing is unchanged.
	other := access.NewTokenSecret()
	if _, err := e.Access.EnsureToken(context.Background(), access.TokenInput{Role: ledger.RoleOrchestrator, Tenant: "globex", Name: "globex"}, other); err != nil {
		t.Fatal(err)
	}
	foreign := openStream(t, e.URL+"/v1/events?stream=true", other, "")
	foreign.quiet(t, 200*time.Millisecond)
	if code, _ := e.do(t, http.MethodGet, "/v1/delegations/"+d1.String()+"/events?stream=true", other, nil); code != http.StatusNotFound {
		t.Fatalf("another tenant's delegation stream: %d", code)
	}
	if n := len(e.events(t, d1.String())); n != 3 {
		t.Fatalf("JSON listing has %d events", n)
	}
	if code, body := e.do(t, http.MethodGet, "/v1/events?stream=true&after=999999999", e.orch, nil); code != http.StatusBadRequest {
		t.Fatalf("unknown Last-Event-ID: %d %s", code, body)
	}
}

// verifyStandardWebhook checks a delivery the way a Standard Webhooks
// receiver does: HMAC-SHA256 over "id.timestamp.body" with the decoded
// secret, compared in constant time against each v1 signature, and a
// timestamp within 5 minutes.
func verifyStandardWebhook(secret string, h http.Header, body []byte) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return fmt.Errorf("missing headers")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return fmt.Errorf("bad timestamp %q", ts)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		v, sig, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("no signature matches")
}

// hookReceiver fails the first failures attempts of each webhook-id (all
// of them when failures < 0), then accepts.
type hookReceiver struct {
	mu       sync.Mutex
	secret   string
	failures int
	attempts map[string]int
	accepted map[string]int
	bad      []string
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := verifyStandardWebhook(h.secret, r.Header, body); err != nil {
		h.bad = append(h.bad, err.Error())
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	id := r.Header.Get("webhook-id")
	h.attempts[id]++
	if h.failures < 0 || h.attempts[id] <= h.failures {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	h.accepted[id]++
	w.WriteHeader(http.StatusNoContent)
}

func (h *hookReceiver) set(f func(h *hookReceiver)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

type deliveryList struct {
	Deliveries []httpapi.DeliveryBody `json:"deliveries"`
}

func (e *orchEnv) deliveries(t *testing.T, hook string) []httpapi.DeliveryBody {
	t.Helper()
	var out deliveryList
	_ = json.Unmarshal(e.must(t, http.MethodGet, "/v1/webhooks/"+hook+"/deliveries", e.orch, nil, http.StatusOK), &out)
	return out.Deliveries
}

func (e *orchEnv) waitDeliveries(t *testing.T, hook string, ok func([]httpapi.DeliveryBody) bool) []httpapi.DeliveryBody {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ds := e.deliveries(t, hook)
		if ok(ds) {
			return ds
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries of %s: %+v", hook, ds)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func allStatus(status string, n int) func([]httpapi.DeliveryBody) bool {
	return func(ds []httpapi.DeliveryBody) bool {
		if len(ds) != n {
			return false
		}
		for _, d := range ds {
			if d.Status != status {
				return false
			}
		}
		return true
	}
}

func TestWebhooksRetryDeadLetterAndRedrive(t *testing.T) {
	t.Parallel()
	e := newOrchEnv(t, apitest.Worker{WebhookMaxAttempts: 4})
	e.must(t, http.MethodPut, "/admin/v1/orgs/plain", e.OncallToken, map[string]any{"name": "Plain"}, http.StatusCreated)

	flaky := &hookReceiver{failures: 2, attempts: map[string]int{}, accepted: map[string]int{}}
	flakySrv := httptest.NewServer(flaky)
	t.Cleanup(flakySrv.Close)
	down := &hookReceiver{failures: -1, attempts: map[string]int{}, accepted: map[string]int{}}
	downSrv := httptest.NewServer(down)
	t.Cleanup(downSrv.Close)

	var created httpapi.WebhookBody
	_ = json.Unmarshal(e.must(t, http.MethodPut, "/v1/webhooks/flaky", e.orch, map[string]any{"url": flakySrv.URL + "/hook"}, http.StatusCreated), &created)
	if !strings.HasPrefix(created.Secret, "whsec_") {
		t.Fatalf("created endpoint = %+v", created)
	}
	flaky.set(func(h *hookReceiver) { h.secret = created.Secret })
	var updated httpapi.WebhookBody
	_ = json.Unmarshal(e.must(t, http.MethodPut, "/v1/webhooks/flaky", e.orch, map[string]any{"url": flakySrv.URL + "/hook"}, http.StatusOK), &updated)
	if updated.Secret != "" {
		t.Fatal("the secret was shown twice")
	}
	var downHook httpapi.WebhookBody
	_ = json.Unmarshal(e.must(t, http.MethodPut, "/v1/webhooks/down", e.orch, map[string]any{
		"url": downSrv.URL, "event_types": []ledger.EventType{ledger.EventTypeTaskStatusChanged},
	}, http.StatusCreated), &downHook)
	down.set(func(h *hookReceiver) { h.secret = downHook.Secret })

	// Forbidden destinations are refused by the egress rules.
	for _, u := range []string{"http://10.0.0.7/hook", "http://169.254.169.254/latest", "ftp://127.0.0.1/x", "http://user:pw@127.0.0.1/"} {
		if code, body := e.do(t, http.MethodPut, "/v1/webhooks/bad", e.orch, map[string]any{"url": u}); code != http.StatusUnprocessableEntity {
			t.Fatalf("webhook URL %s: %d %s", u, code, body)
		}
	}
	// A filter may name only event types of the catalogue: a misspelt one
	// would silently deliver nothing.
	for _, typ := range []string{"task_status_chnaged", "TASK_STATUS_CHANGED", ""} {
		code, body := e.do(t, http.MethodPut, "/v1/webhooks/typo", e.orch, map[string]any{"url": downSrv.URL, "event_types": []string{typ}})
		if code != http.StatusUnprocessableEntity || !strings.Contains(string(body), "event_types") {
			t.Fatalf("webhook event type %q: %d %s", typ, code, body)
		}
	}

	var d httpapi.DelegationBody
	_ = json.Unmarshal(e.must(t, http.MethodPost, "/v1/delegations", e.orch, map[string]any{
		"business_operation_id": "op-hook", "org_id": "plain", "task_class": "read_only", "budget_id": "ops",
		"hold": map[string]any{"amount_minor": 10, "currency": "EUR"}, "remote": map[string]any{"task_id": "t-hook"},
	}, http.StatusCreated), &d)
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", e.orch, map[string]any{"state": "TASK_STATE_COMPLETED"}, http.StatusOK)

	// Two events (created, settled), each accepted exactly once after two failures.
	ds := e.waitDeliveries(t, "flaky", allStatus(webhook.StatusDelivered, 2))
	flaky.mu.Lock()
	if len(flaky.bad) != 0 || len(flaky.accepted) != 2 {
		t.Fatalf("receiver: bad %v, accepted %v", flaky.bad, flaky.accepted)
	}
	for _, dl := range ds {
		if flaky.accepted[dl.WebhookID] != 1 || flaky.attempts[dl.WebhookID] != 3 || dl.Attempts != 3 {
			t.Fatalf("delivery %+v: accepted %d, attempts %d", dl, flaky.accepted[dl.WebhookID], flaky.attempts[dl.WebhookID])
		}
	}
	flaky.mu.Unlock()

	// The endpoint that is down dead-letters its one event after 4 attempts.
	dead := e.waitDeliveries(t, "down", allStatus(webhook.StatusDead, 1))
	if dead[0].Attempts != 4 || dead[0].LastStatus != http.StatusServiceUnavailable {
		t.Fatalf("dead delivery = %+v", dead[0])
	}
	e.must(t, http.MethodPost, "/admin/v1/webhooks/deliveries/redrive", e.orch, map[string]any{}, http.StatusForbidden)
	down.set(func(h *hookReceiver) { h.failures = 0 })
	var redriven struct {
		Redriven int `json:"redriven"`
	}
	_ = json.Unmarshal(e.must(t, http.MethodPost, "/admin/v1/webhooks/deliveries/redrive", e.OncallToken,
		map[string]any{"tenant": "acme", "webhook_id": "down"}, http.StatusOK), &redriven)
	if redriven.Redriven != 1 {
		t.Fatalf("redriven %d", redriven.Redriven)
	}
	// The redrive is on the record: who asked, for what, how many.
	var actor, oncall, data string
	if err := e.Pool.QueryRow(context.Background(), "SELECT actor, data::text FROM events WHERE stream = $1 AND type = $2",
		webhook.RedriveStream, string(ledger.EventTypeWebhookDeliveriesRedriven)).Scan(&actor, &data); err != nil {
		t.Fatalf("the redrive's event: %v", err)
	}
	if err := e.Pool.QueryRow(context.Background(), "SELECT id::text FROM principals WHERE name_key = 'oncall'").Scan(&oncall); err != nil {
		t.Fatal(err)
	}
	if actor != "principal:"+oncall || data != `{"tenant": "acme", "redriven": 1, "endpoint_id": "down"}` {
		t.Errorf("the redrive is recorded as %s's: %s", actor, data)
	}
	e.waitDeliveries(t, "down", allStatus(webhook.StatusDelivered, 1))
	down.mu.Lock()
	defer down.mu.Unlock()
	if len(down.accepted) != 1 || len(down.bad) != 0 {
		t.Fatalf("down receiver accepted %v, bad %v", down.accepted, down.bad)
	}
}

// TestWebhookDeliveryRefusesForbiddenAddressAtSendTime: an endpoint whose
// name resolves somewhere the policy forbids is never reached, even when
// registered (the dialer checks every connection).
func TestWebhookDeliveryRefusesForbiddenAddressAtSendTime(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	reached := make(chan struct{}, 10)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached <- struct{}{} }))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	e := newOrchEnv(t, apitest.Worker{WebhookMaxAttempts: 2})
	code, _ := e.do(t, http.MethodPut, "/v1/webhooks/elsewhere", e.orch, map[string]any{"url": srv.URL})
	if code != http.StatusUnprocessableEntity {
		t.Fatalf("127.0.0.2 outside the allow-list was accepted: %d", code)
	}
	select {
	case <-reached:
		t.Fatal("the forbidden address was reached")
	default:
	}
}
