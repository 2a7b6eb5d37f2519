package httpapi_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
)

var updateEventPayloads = flag.Bool("update-event-payloads", false, "rewrite testdata/event_payloads.golden from this run")

// eventPayloadsGolden holds the events a fixed sequence of lifecycles
// appends, as stored: the canonical data every hash is computed over. It
// was recorded before event data was built from typed payloads, so
// TestEventPayloadsReplay proves that the typed payloads store the same
// bytes, and therefore the same hashes.
const eventPayloadsGolden = "testdata/event_payloads.golden"

// TestEventPayloadsReplay runs budgets, orgs, task classes, principals,
// pending changes, delegations and their obligations through the API on a
// fake clock, reads back every event the ledger stored, checks each
// stream's chain, and compares the events with eventPayloadsGolden. Ids,
// hashes, tokens and signatures differ on every run: they are replaced by
// numbered placeholders in the order they first appear, so equal values
// stay equal and the comparison covers the rest of each byte.
func TestEventPayloadsReplay(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	runEventLifecycles(t, e)

	got := storedEvents(t, e.Env)
	if *updateEventPayloads {
		if err := os.WriteFile(eventPayloadsGolden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(eventPayloadsGolden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i, n := 0, 0; (i < len(gl) || i < len(wl)) && n < 5; i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				n++
				t.Errorf("event %d differs from %s:\n got %s\nwant %s", i+1, eventPayloadsGolden, g, w)
			}
		}
	}
}

// runEventLifecycles drives the lifecycles whose events the golden file
// holds; each step is synchronous, so the events come in the same order
// on every run.
func runEventLifecycles(t *testing.T, e *compEnv) {
	t.Helper()
	step := func() { e.Clock.Advance(time.Minute) }
	alice, bob := e.TwoOncall(t, "alice", "bob")
	finance := e.NewToken(t, ledger.RoleFinance, "", "finance-desk")
	e.PutTaskClass(t, "quick", true, []string{"canceled", "failed"}, time.Hour)
	e.PutBudgetFor(t, "team", "EUR", 5_000, "acme")
	e.PutBudgetFor(t, "team", "EUR", 7_000, "acme", "globex")
	var asked struct {
		PendingChange struct {
			ID string `json:"id"`
		} `json:"pending_change"`
	}
	e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgB+"/task-class-policies/acme", alice.Token,
		map[string]any{"classes": []string{"procurement", "quick"}}).JSON(t, &asked)
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+asked.PendingChange.ID+"/approve", bob.Token, nil)
	step()

	// Settled, then a conflicting status; a stale report; a hold change.
	settled := e.delegation(t, orgB, 1_000)
	e.Do(t, http.MethodPatch, "/v1/delegations/"+settled.ID+"/hold", e.orch, map[string]any{"amount_minor": 1_500}).Expect(t, http.StatusOK)
	e.ReportStatus(t, e.orch, settled.ID, "TASK_STATE_WORKING", e.Clock.Now())
	e.ReportStatus(t, e.orch, settled.ID, "TASK_STATE_SUBMITTED", e.Clock.Now().Add(-time.Hour))
	step()
	e.Do(t, http.MethodPost, "/v1/delegations/"+settled.ID+"/task-status", e.orch,
		map[string]any{"state": "TASK_STATE_COMPLETED", "message": "done <ok> & fine", "settled_amount_minor": 900})
	e.ReportStatus(t, e.orch, settled.ID, "TASK_STATE_FAILED", time.Time{})
	step()

	// Canceled and acked; a late declaration.
	acked := e.delegation(t, orgB, 2_000)
	e.Do(t, http.MethodPost, "/v1/delegations/"+acked.ID+"/cancel", e.orch, nil).Expect(t, http.StatusOK)
	acked = e.ReportStatus(t, e.orch, acked.ID, "TASK_STATE_CANCELED", time.Time{})
	e.accept(t, acksPath, e.ack(t, acked), "applied")
	step()
	e.post(t, declsPath, e.declaration(t, acked))
	step()

	// Declared, then the org's identity revoked: released on a revoked
	// identity, acknowledged by finance; an open one escalated.
	declared := e.pending(t, orgC, 3_000)
	e.accept(t, declsPath, e.declaration(t, declared), "applied")
	open := e.pending(t, orgC, 3_500)
	step()
	e.Do(t, http.MethodPost, "/admin/v1/orgs/"+orgC+"/revoke-identity", e.OncallToken, map[string]any{"reason": "key leaked"})
	e.Do(t, http.MethodPost, "/v1/delegations/"+declared.ID+"/revoked-release/acknowledge", finance, map[string]any{"note": "checked with org-c"})
	step()

	// Early evidence: an ack while held, then the task completes.
	early := e.delegation(t, orgB, 4_000)
	early.Compensation = &httpapi.CompensationBody{IdempotencyKey: compensationKey(t, early.ID)}
	e.post(t, acksPath, e.ack(t, early))
	e.ReportStatus(t, e.orch, early.ID, "TASK_STATE_COMPLETED", time.Time{})
	e.post(t, declsPath, e.declaration(t, early))
	step()

	// Cases: owner, note, snooze.
	cased := e.pending(t, orgB, 5_000)
	e.Do(t, http.MethodPut, "/v1/delegations/"+cased.ID+"/owner", e.OncallToken, map[string]any{"owner": "alice"})
	e.Do(t, http.MethodPost, "/v1/delegations/"+cased.ID+"/notes", e.OncallToken, map[string]any{"note": "called org-b"})
	e.Do(t, http.MethodPost, "/v1/delegations/"+cased.ID+"/snooze", e.OncallToken,
		map[string]any{"until": e.Clock.Now().Add(24 * time.Hour), "reason": "waiting"})
	e.Do(t, http.MethodPut, "/v1/delegations/"+cased.ID+"/owner", e.OncallToken, map[string]any{"owner": ""})
	step()

	// Write-offs: refused while held, executed at once, requested and
	// approved, rejected, voided by an ack; after the deadline sweep.
	held := e.delegation(t, orgB, 600)
	e.Do(t, http.MethodPost, "/admin/v1/delegations/"+held.ID+"/write-offs", alice.Token, map[string]any{"reason": "early"})
	small := e.pending(t, orgB, 700)
	large := e.pending(t, orgB, 200_000)
	rejected := e.pending(t, orgB, 300_000)
	voided := e.pending(t, orgB, 400_000)
	e.Clock.Advance(96 * time.Hour)
	e.Do(t, http.MethodPost, "/admin/v1/compensation/sweep", e.OncallToken, nil)
	e.Do(t, http.MethodPost, "/admin/v1/delegations/"+small.ID+"/write-offs", alice.Token, map[string]any{"reason": "small", "reference": "INC-1"})
	var w struct {
		ID string `json:"id"`
	}
	e.Do(t, http.MethodPost, "/admin/v1/delegations/"+large.ID+"/write-offs", alice.Token, map[string]any{"reason": "large"}).JSON(t, &w)
	e.Do(t, http.MethodPost, "/admin/v1/write-offs/"+w.ID+"/approve", alice.Token, nil)
	e.Do(t, http.MethodPost, "/admin/v1/write-offs/"+w.ID+"/approve", bob.Token, nil)
	e.Do(t, http.MethodPost, "/admin/v1/delegations/"+rejected.ID+"/write-offs", alice.Token, map[string]any{"reason": "rejected"}).JSON(t, &w)
	e.Do(t, http.MethodPost, "/admin/v1/write-offs/"+w.ID+"/reject", bob.Token, map[string]any{"reason": "org-b is reversing it"})
	e.Do(t, http.MethodPost, "/admin/v1/delegations/"+voided.ID+"/write-offs", alice.Token, map[string]any{"reason": "voided"})
	e.post(t, acksPath, e.ack(t, voided))
	step()

	// The threshold, a role, a refused change, a revoked credential, a
	// disabled principal, a webhook redrive.
	e.Do(t, http.MethodPut, "/admin/v1/write-off-threshold", alice.Token, map[string]any{"threshold_minor": 150_000}).JSON(t, &asked)
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+asked.PendingChange.ID+"/approve", bob.Token, nil)
	finID := e.PrincipalID(t, finance)
	e.Do(t, http.MethodPost, "/admin/v1/principals/"+finID+"/role", alice.Token, map[string]any{"role": "oncall"}).JSON(t, &asked)
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+asked.PendingChange.ID+"/refuse", bob.Token, map[string]any{"reason": "not now"})
	var tok struct {
		ID string `json:"id"`
	}
	e.Do(t, http.MethodPost, "/admin/v1/tokens", e.OncallToken, map[string]any{"role": "orchestrator", "tenant": "globex", "name": "globex-agent"}).JSON(t, &tok)
	e.Do(t, http.MethodPost, "/admin/v1/credentials/"+tok.ID+"/revoke", e.OncallToken, map[string]any{"reason": "leaked"})
	e.Do(t, http.MethodPost, "/admin/v1/principals/"+finID+"/disable", alice.Token, map[string]any{"reason": "left"})
	e.Do(t, http.MethodPost, "/admin/v1/webhooks/deliveries/redrive", e.OncallToken, map[string]any{"tenant": "acme"})
	_ = open
	step()

	// Late evidence; a role granted on approval; a person marked as having
	// no identity-provider account; a change left to expire.
	e.post(t, declsPath, e.declaration(t, settled))
	auditorID := e.PrincipalID(t, e.NewToken(t, ledger.RoleFinance, "", "auditor"))
	e.Do(t, http.MethodPost, "/admin/v1/principals/"+auditorID+"/role", alice.Token, map[string]any{"role": "oncall"}).JSON(t, &asked)
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+asked.PendingChange.ID+"/approve", bob.Token, nil)
	e.Do(t, http.MethodPost, "/admin/v1/principals/"+auditorID+"/no-identity-provider-account", alice.Token, nil).JSON(t, &asked)
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+asked.PendingChange.ID+"/approve", bob.Token, nil)
	e.Do(t, http.MethodPut, "/admin/v1/write-off-threshold", alice.Token, map[string]any{"threshold_minor": 250_000})
	e.Clock.Advance(72 * time.Hour)
	if _, err := e.Access.ExpirePendingChanges(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// compensationKey is the compensation idempotency key of a delegation
// (ledger.CompensationKey), for evidence sent while it is held.
func compensationKey(t *testing.T, id string) string {
	t.Helper()
	var d ledger.Delegation
	if err := d.ID.UnmarshalText([]byte(id)); err != nil {
		t.Fatal(err)
	}
	return ledger.CompensationKey(d)
}

// volatile matches what differs between runs: UUIDs, hex digests,
// compensation keys, JWS and API tokens.
var volatile = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b[0-9a-f]{64}\b|qc_[0-9a-f]{32}|eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*|qt_[A-Za-z0-9_-]+|\b[A-Z2-7]{26}\b|[A-Za-z0-9_-]{43}`)

// storedEvents reads every event the ledger stored, in order, checks each
// stream's chain, and returns one line per event (stream, position, type,
// actor, obligation move, time and the data as hashed) with the volatile
// values numbered.
func storedEvents(t *testing.T, e *apitest.Env) string {
	t.Helper()
	ctx := t.Context()
	rows, err := e.Pool.Query(ctx, `SELECT DISTINCT stream FROM events`)
	if err != nil {
		t.Fatal(err)
	}
	var streams []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	rows.Close()
	var all []ledger.Event
	for _, s := range streams {
		events, err := e.Store.StreamEvents(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := ledger.VerifyChain(events); err != nil {
			t.Fatal(err)
		}
		all = append(all, events...)
	}
	byseq := make(map[int64]ledger.Event, len(all))
	var maxSeq int64
	for _, ev := range all {
		byseq[ev.Seq] = ev
		maxSeq = max(maxSeq, ev.Seq)
	}
	names := map[string]string{}
	name := func(s string) string {
		return volatile.ReplaceAllStringFunc(s, func(v string) string {
			if n, ok := names[v]; ok {
				return n
			}
			names[v] = fmt.Sprintf("<v%d>", len(names)+1)
			return names[v]
		})
	}
	var b strings.Builder
	for seq := int64(1); seq <= maxSeq; seq++ {
		ev, ok := byseq[seq]
		if !ok {
			continue
		}
		line, err := json.Marshal([]any{ev.Stream, ev.StreamSeq, ev.Type, ev.Actor, ev.ObligationFrom, ev.ObligationTo,
			ev.At.UTC().Format(time.RFC3339Nano), ev.Evidence != "", string(ev.Data)})
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(name(string(line)))
		b.WriteByte('\n')
	}
	return b.String()
}
