package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/demoagent"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/delegate/egress"
	"github.com/quittance/quittance/ledger"
)

// TestVerifyEveryStoredTokenPath: every way an honest token comes to be
// stored on a delegation's chain, driven through the API and the A2A wire —
// an ack and a declaration received early and applied by the task's end,
// an early ack the task's completion leaves unused, a second ack with
// another receipt id (evidence_conflict, the remote org's own doing), an
// early ack applied after its exp, an atomic cancel-and-compensate receipt
// of the demo agent, and an extra task's signed receipt — verifies: exit 0
// for verify-chain, verify-chain --delegation and verify-pack of each
// delegation's evidence pack. Each stored token with one byte changed by
// the database's owner (the chain rehashed, so only the token can tell)
// is a break for both commands, on that event.
func TestVerifyEveryStoredTokenPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	agent, err := demoagent.New(demoagent.Config{OrgID: "demo", LedgerID: "ledger-cli", WorkDelay: time.Hour, AtomicCancel: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	srv := httptest.NewServer(agent.Handler())
	t.Cleanup(srv.Close)
	e := startCheckpointingService(t, "QUITTANCE_CHECKPOINT_INTERVAL=1h", "QUITTANCE_EGRESS_ALLOW_HTTP=true", "QUITTANCE_EGRESS_ALLOW_CIDRS=127.0.0.1/32",
		"QUITTANCE_A2A_INTERVAL=100ms", "QUITTANCE_A2A_STREAMING=false", "QUITTANCE_POLL_AFTER=200ms", "QUITTANCE_RATE_LIMIT_RPS=0")
	signer := compensationtest.NewEd25519Signer(t, "sup-key")
	orch, finance := e.supplierLedger(t, signer)
	var registered json.RawMessage
	if s := e.api(t, http.MethodPut, "/admin/v1/orgs/demo", e.oncall, map[string]any{
		"name": "Demo Supplier", "jwks": json.RawMessage(agent.JWKS()), "agent_card_url": agent.CardURL(srv.URL), "allowed_hosts": []string{"127.0.0.1"},
	}, &registered); s != http.StatusAccepted {
		t.Fatalf("put org demo: %d %s", s, registered)
	}
	e.approvePending(t, registered)

	create := func(op, org string, dispatch bool) string {
		t.Helper()
		body := map[string]any{
			"business_operation_id": op, "org_id": org, "task_class": "procurement", "budget_id": "ops",
			"hold": map[string]any{"amount_minor": 1000, "currency": "EUR"},
		}
		if dispatch {
			body["dispatch"] = map[string]any{"message": map[string]any{"parts": []any{map[string]any{"text": "Order 40 laptops"}}}}
		} else {
			body["remote"] = map[string]any{"task_id": "task-" + op}
		}
		var d delegationState
		if s := e.api(t, http.MethodPost, "/v1/delegations", orch, body, &d); s != http.StatusCreated {
			t.Fatalf("create %s: %d", op, s)
		}
		return d.ID
	}
	report := func(id, state, want string) {
		t.Helper()
		var d delegationState
		if s := e.api(t, http.MethodPost, "/v1/delegations/"+id+"/task-status", orch, map[string]any{"state": state}, &d); s != http.StatusOK || d.ObligationState != want {
			t.Fatalf("report %s: %d, obligation %s, want %s", state, s, d.ObligationState, want)
		}
	}
	waitFor := func(id, what string, ok func(delegationView) bool) delegationView {
		t.Helper()
		var d delegationView
		for deadline := time.Now().Add(30 * time.Second); ; {
			if s := e.api(t, http.MethodGet, "/v1/delegations/"+id, orch, nil, &d); s == http.StatusOK && ok(d) {
				return d
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %+v", what, d)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	key := func(id string) string { return ledger.CompensationKey(ledger.Delegation{ID: uuid.MustParse(id)}) }
	// ack signs an ack of delegation id; expiring, one whose exp passed 57
	// seconds ago, within the clock skew allowed for 3 seconds more.
	ack := func(op, id string, expiring bool) string {
		now := time.Now()
		c := compensationtest.AckClaims("supplier", "ledger-cli", "task-"+op, key(id), now)
		if expiring {
			c = compensationtest.AckClaims("supplier", "ledger-cli", "task-"+op, key(id), now.Add(-2*time.Minute))
			c["exp"] = now.Add(-compensation.ClockSkew + 3*time.Second).Unix()
		}
		return signer.Sign(t, "compensation-ack+jwt", c)
	}
	post := func(path, token string, want int) {
		t.Helper()
		if s := e.postEvidence(t, path, token); s != want {
			t.Fatalf("post %s: %d, want %d", path, s, want)
		}
	}

	// Each delegation, and the event type that must store a token on it.
	type path struct{ name, id string }
	var paths []path
	storing := map[string]ledger.EventType{}
	add := func(name, id string, typ ledger.EventType) {
		paths = append(paths, path{name, id})
		storing[id] = typ
	}

	// An ack received early, applied when the task is canceled.
	id := create("early-ack", "supplier", false)
	post("/v1/compensation/acks", ack("early-ack", id, false), http.StatusOK)
	report(id, "canceled", "compensated")
	add("early ack", id, ledger.EventTypeTaskStatusChanged)

	// A declaration received early, applied when the task is canceled.
	id = create("early-decl", "supplier", false)
	post("/v1/compensation/declarations", signer.Sign(t, "no-compensation-required+jwt",
		compensationtest.DeclarationClaims("supplier", "ledger-cli", "task-early-decl", time.Now())), http.StatusOK)
	report(id, "canceled", "released")
	add("early declaration", id, ledger.EventTypeTaskStatusChanged)

	// An early ack the task's completion leaves unused.
	id = create("early-unused", "supplier", false)
	post("/v1/compensation/acks", ack("early-unused", id, false), http.StatusOK)
	report(id, "completed", "settled")
	add("early ack unused", id, ledger.EventTypeEarlyEvidenceUnused)

	// A second ack with another receipt id: the remote org's conflict.
	id = e.pendingDelegation(t, orch, "conflict")
	post("/v1/compensation/acks", ack("conflict", id, false), http.StatusOK)
	post("/v1/compensation/acks", ack("conflict", id, false), http.StatusUnprocessableEntity)
	add("evidence conflict", id, ledger.EventTypeEvidenceConflict)

	// An early ack applied after its exp.
	id = create("late-exp", "supplier", false)
	post("/v1/compensation/acks", ack("late-exp", id, true), http.StatusOK)
	time.Sleep(4 * time.Second) // past its exp and the clock skew
	report(id, "canceled", "compensated")
	add("held evidence applied after its exp", id, ledger.EventTypeTaskStatusChanged)

	// The demo agent's atomic cancel-and-compensate receipt.
	id = create("atomic", "demo", true)
	waitFor(id, "the dispatch", func(d delegationView) bool { return d.Remote.TaskID != "" })
	if s := e.api(t, http.MethodPost, "/v1/delegations/"+id+"/cancel", orch, nil, nil); s != http.StatusOK {
		t.Fatalf("cancel: %d", s)
	}
	waitFor(id, "compensated by the atomic receipt", func(d delegationView) bool { return d.ObligationState == "compensated" })
	add("atomic receipt", id, ledger.EventTypeTaskStatusChanged)

	// An extra task's signed receipt: a task of the agent's, canceled,
	// that the delegation's settlement leaves to compensate.
	hc := egress.NewClient(egress.Policy{AllowHTTP: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	card, err := a2a.FetchAgentCard(ctx, hc, agent.CardURL(srv.URL), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	iface, err := card.JSONRPCInterface()
	if err != nil {
		t.Fatal(err)
	}
	client := a2a.NewClient(hc, iface)
	sent, err := client.SendMessage(ctx, a2a.SendRequest{
		Message:           a2a.Message{MessageID: "m-extra", Role: a2a.RoleUser, Parts: []a2a.Part{{Text: "Order 3 chairs"}}},
		ReturnImmediately: true,
	})
	if err != nil || sent.Task == nil {
		t.Fatalf("send to the agent: %+v %v", sent, err)
	}
	if _, err := client.CancelTask(ctx, sent.Task.ID, nil); err != nil {
		t.Fatal(err)
	}
	id = create("extra", "demo", false)
	if err := e.exec(ctx, `INSERT INTO delegation_remote_tasks (delegation_id, task_id, purpose, found_by, status, found_at, updated_at)
		VALUES ($1, $2, 'dispatch', 'list_tasks', 'canceled', now(), now())`, id, sent.Task.ID); err != nil {
		t.Fatal(err)
	}
	report(id, "completed", "settled")
	add("extra task receipt", id, ledger.EventTypeExtraTaskCompensated)

	// Every path stored its token where it should.
	tokens := map[string][]ledger.EventRecord{}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		missing := ""
		for _, p := range paths {
			tokens[p.id] = e.tokenEvents(t, finance, p.id)
			found := false
			for _, r := range tokens[p.id] {
				found = found || r.Type == storing[p.id]
			}
			if !found {
				missing = fmt.Sprintf("%s: no %s event stores a token (%d token events)", p.name, storing[p.id], len(tokens[p.id]))
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(missing)
		}
	}
	time.Sleep(500 * time.Millisecond) // the workers settle
	for _, p := range paths {
		tokens[p.id] = e.tokenEvents(t, finance, p.id)
	}

	if _, errOut, code := e.cli(t, e.oncall, "checkpoints", "create"); code != 0 {
		t.Fatalf("checkpoints create: exit %d %s", code, errOut)
	}
	if out, errOut, code := e.cli(t, finance, "verify-chain"); code != 0 {
		t.Errorf("verify-chain of an honest ledger: exit %d\n%s\n%s", code, out, errOut)
	}
	dir := t.TempDir()
	pack := func(id, name string) (string, string, int) {
		t.Helper()
		file := filepath.Join(dir, name+".json")
		if _, errOut, code := e.cli(t, finance, "evidence-pack", id, "-o", file); code != 0 {
			t.Fatalf("evidence-pack: exit %d %s", code, errOut)
		}
		return offlineCLI(t, "verify-pack", file)
	}
	for _, p := range paths {
		out, errOut, code := e.cli(t, finance, "verify-chain", "--delegation", p.id)
		t.Logf("%s: verify-chain --delegation:\n%s", p.name, out)
		if code != 0 || strings.Count(out, "token\t"+p.id+"\t") != len(tokens[p.id]) {
			t.Errorf("%s: verify-chain --delegation: exit %d, want 0 and %d tokens\n%s%s", p.name, code, len(tokens[p.id]), out, errOut)
		}
		out, errOut, code = pack(p.id, "honest-"+p.id)
		if code != 0 || strings.Count(out, "token\t"+p.id+"\t") != len(tokens[p.id]) {
			t.Errorf("%s: verify-pack: exit %d, want 0 and %d tokens\n%s%s", p.name, code, len(tokens[p.id]), out, errOut)
		}
	}
	if t.Failed() {
		return
	}

	// One byte of each stored token changed by the owner, the chain
	// rehashed from there: only the token can tell.
	for _, p := range paths {
		for _, r := range tokens[p.id] {
			restore := e.rewriteToken(t, finance, p.id, r.StreamSeq, func(tok string) string {
				b := []byte(tok)
				at := len(b) - 5
				if b[at] == 'A' {
					b[at] = 'B'
				} else {
					b[at] = 'A'
				}
				return string(b)
			})
			want := fmt.Sprintf("event %d (%s): token does not verify", r.StreamSeq, r.Type)
			out, errOut, code := e.cli(t, finance, "verify-chain", "--delegation", p.id)
			if code != exitFailure || !strings.Contains(out, "BROKEN\t"+p.id+"\t"+want) {
				t.Errorf("%s, event %d changed: verify-chain --delegation exit %d, want %d and %q\n%s%s", p.name, r.StreamSeq, code, exitFailure, want, out, errOut)
			}
			out, errOut, code = pack(p.id, fmt.Sprintf("tampered-%s-%d", p.id, r.StreamSeq))
			if code != exitFailure || !strings.Contains(out, want) {
				t.Errorf("%s, event %d changed: verify-pack exit %d, want %d and %q\n%s%s", p.name, r.StreamSeq, code, exitFailure, want, out, errOut)
			}
			restore()
		}
	}
	if out, errOut, code := e.cli(t, finance, "verify-chain"); code != 0 {
		t.Errorf("verify-chain once every token is restored: exit %d\n%s\n%s", code, out, errOut)
	}
}

// tokenEvents returns the events of delegation id that store a token.
func (e *cliEnv) tokenEvents(t *testing.T, token, id string) []ledger.EventRecord {
	t.Helper()
	var ch chain
	if s := e.api(t, http.MethodGet, "/v1/delegations/"+id+"/evidence", token, nil, &ch); s != http.StatusOK {
		t.Fatalf("evidence: %d", s)
	}
	var out []ledger.EventRecord
	for _, r := range ch.Events {
		if r.Evidence != "" {
			out = append(out, r)
		}
	}
	return out
}

// rewriteToken has the database's owner replace the token stored on event
// seq of delegation id by change(token), and rehash the chain from there so
// that it still links; it returns a function that puts every row back.
func (e *cliEnv) rewriteToken(t *testing.T, token, id string, seq int32, change func(string) string) (restore func()) {
	t.Helper()
	ctx := context.Background()
	var ch chain
	if s := e.api(t, http.MethodGet, "/v1/delegations/"+id+"/evidence", token, nil, &ch); s != http.StatusOK {
		t.Fatalf("evidence: %d", s)
	}
	update := func(events []ledger.Event) {
		t.Helper()
		for _, stmt := range []string{"ALTER TABLE events DISABLE TRIGGER events_append_only", "", "ALTER TABLE events ENABLE TRIGGER events_append_only"} {
			if stmt != "" {
				if err := e.exec(ctx, stmt); err != nil {
					t.Fatal(err)
				}
				continue
			}
			for _, le := range events {
				if err := e.exec(ctx, "UPDATE events SET evidence = NULLIF($1, ''), prev_hash = decode($2, 'hex'), hash = decode($3, 'hex') WHERE stream = $4 AND stream_seq = $5",
					le.Evidence, hex.EncodeToString(le.PrevHash), hex.EncodeToString(le.Hash), le.Stream, le.StreamSeq); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	var original, rewritten []ledger.Event
	prev := ledger.GenesisHash
	for _, r := range ch.Events {
		le, err := r.Event()
		if err != nil {
			t.Fatal(err)
		}
		if le.StreamSeq < seq {
			prev = le.Hash
			continue
		}
		original = append(original, le)
		if le.StreamSeq == seq {
			le.Evidence = change(le.Evidence)
		}
		le.PrevHash = prev
		if le.Hash, err = le.ComputeHash(); err != nil {
			t.Fatal(err)
		}
		prev = le.Hash
		rewritten = append(rewritten, le)
	}
	if len(rewritten) == 0 || rewritten[0].StreamSeq != seq {
		t.Fatalf("delegation %s has no event %d", id, seq)
	}
	update(rewritten)
	return func() { update(original) }
}
