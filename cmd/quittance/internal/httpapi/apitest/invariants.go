package apitest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// activeStates are the obligation states whose hold is active.
func activeStates() []string {
	var out []string
	for _, s := range ledger.ObligationStates {
		if s.Hold() == ledger.HoldActive {
			out = append(out, string(s))
		}
	}
	return out
}

// CheckInvariants re-checks DESIGN.md §2.2's invariants straight from the
// database and fails t with every violation found:
//   - per budget, available + held + spent + written_off = funded; held is
//     the sum of the active holds, spent of the settled ones, written_off of
//     the written-off ones; the journal adds up to each column;
//   - per delegation, exactly one hold entry and at most one entry moving it
//     out, matching the obligation's hold state;
//   - per delegation, the events carrying obligation transitions form a
//     path of allowed transitions from held to the current state, and the
//     first event is delegation_created;
//   - every event stream's hash chain verifies.
func (e *Env) CheckInvariants(t testing.TB) {
	t.Helper()
	for _, p := range Violations(context.Background(), e) {
		t.Error(p)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// Violations returns the invariant violations CheckInvariants reports.
func Violations(ctx context.Context, e *Env) []string {
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	rows, err := e.Pool.Query(ctx, `
		SELECT b.id, b.funded_minor, b.available_minor, b.held_minor, b.spent_minor, b.written_off_minor,
		       COALESCE((SELECT sum(amount_minor) FROM delegations d WHERE d.budget_id = b.id AND d.obligation_state = ANY($1)), 0),
		       COALESCE((SELECT sum(amount_minor) FROM delegations d WHERE d.budget_id = b.id AND d.obligation_state = 'settled'), 0),
		       COALESCE((SELECT sum(amount_minor) FROM delegations d WHERE d.budget_id = b.id AND d.obligation_state = 'written_off'), 0),
		       COALESCE((SELECT sum(CASE kind WHEN 'fund' THEN amount_minor ELSE 0 END) FROM budget_entries j WHERE j.budget_id = b.id), 0),
		       COALESCE((SELECT sum(CASE kind WHEN 'hold' THEN amount_minor WHEN 'fund' THEN 0 ELSE -amount_minor END) FROM budget_entries j WHERE j.budget_id = b.id), 0),
		       COALESCE((SELECT sum(CASE kind WHEN 'spend' THEN amount_minor ELSE 0 END) FROM budget_entries j WHERE j.budget_id = b.id), 0),
		       COALESCE((SELECT sum(CASE kind WHEN 'write_off' THEN amount_minor ELSE 0 END) FROM budget_entries j WHERE j.budget_id = b.id), 0)
		FROM budgets b ORDER BY b.id`, activeStates())
	if err != nil {
		return []string{fmt.Sprintf("query budgets: %v", err)}
	}
	for rows.Next() {
		var (
			id                                                         string
			funded, avail, held, spent, wo                             int64
			activeSum, settledSum, woSum, jFund, jHeld, jSpent, jWrOff int64
		)
		if err := rows.Scan(&id, &funded, &avail, &held, &spent, &wo, &activeSum, &settledSum, &woSum, &jFund, &jHeld, &jSpent, &jWrOff); err != nil {
			rows.Close()
			return []string{fmt.Sprintf("scan budget: %v", err)}
		}
		if avail+held+spent+wo != funded {
			fail("budget %s: available %d + held %d + spent %d + written_off %d != funded %d", id, avail, held, spent, wo, funded)
		}
		if avail < 0 || held < 0 || spent < 0 || wo < 0 {
			fail("budget %s: a negative column: %d/%d/%d/%d", id, avail, held, spent, wo)
		}
		if held != activeSum {
			fail("budget %s: held %d != sum of active holds %d", id, held, activeSum)
		}
		if spent != settledSum {
			fail("budget %s: spent %d != sum of settled delegations %d", id, spent, settledSum)
		}
		if wo != woSum {
			fail("budget %s: written_off %d != sum of written-off delegations %d", id, wo, woSum)
		}
		if jFund != funded || jHeld != held || jSpent != spent || jWrOff != wo {
			fail("budget %s: journal (funded %d, held %d, spent %d, written_off %d) disagrees with the row (%d, %d, %d, %d)",
				id, jFund, jHeld, jSpent, jWrOff, funded, held, spent, wo)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		fail("read budgets: %v", err)
	}

	// Per delegation: the journal entries match the hold state.
	rows, err = e.Pool.Query(ctx, `
		SELECT d.id, d.obligation_state, d.amount_minor,
		       coalesce(array_agg(j.kind ORDER BY j.id) FILTER (WHERE j.id IS NOT NULL), '{}'),
		       coalesce(array_agg(j.amount_minor ORDER BY j.id) FILTER (WHERE j.id IS NOT NULL), '{}')
		FROM delegations d LEFT JOIN budget_entries j ON j.delegation_id = d.id
		GROUP BY d.id ORDER BY d.id`)
	if err != nil {
		return append(problems, fmt.Sprintf("query delegations: %v", err))
	}
	type deleg struct {
		id    uuid.UUID
		state ledger.ObligationState
	}
	var delegs []deleg
	for rows.Next() {
		var (
			id      uuid.UUID
			state   string
			amount  int64
			kinds   []string
			amounts []int64
		)
		if err := rows.Scan(&id, &state, &amount, &kinds, &amounts); err != nil {
			rows.Close()
			return append(problems, fmt.Sprintf("scan delegation: %v", err))
		}
		st := ledger.ObligationState(state)
		delegs = append(delegs, deleg{id, st})
		want := []string{string(ledger.MoveHold)}
		switch st.Hold() {
		case ledger.HoldConsumed:
			want = append(want, string(ledger.MoveSpend))
		case ledger.HoldReturned:
			want = append(want, string(ledger.MoveReturn))
		case ledger.HoldLost:
			want = append(want, string(ledger.MoveWriteOff))
		case ledger.HoldActive:
		}
		if strings.Join(kinds, ",") != strings.Join(want, ",") {
			fail("delegation %s (%s): journal entries %v, want %v", id, st, kinds, want)
		}
		for _, a := range amounts {
			if a != amount {
				fail("delegation %s: journal amount %d != hold %d", id, a, amount)
			}
		}
	}
	rows.Close()

	// Per delegation: the obligation transitions recorded in its events.
	for _, d := range delegs {
		events, err := e.Store.StreamEvents(ctx, ledger.DelegationStream(d.id))
		if err != nil {
			fail("events of %s: %v", d.id, err)
			continue
		}
		if len(events) == 0 || events[0].Type != ledger.EventTypeDelegationCreated {
			fail("delegation %s: first event is not %s", d.id, ledger.EventTypeDelegationCreated)
		}
		state := ledger.ObligationHeld
		for _, ev := range events {
			if ev.ObligationTo == "" && ev.ObligationFrom == "" {
				continue
			}
			var data struct {
				ObligationEvent ledger.ObligationEvent `json:"obligation_event"`
			}
			_ = json.Unmarshal(ev.Data, &data)
			next, _, err := ledger.NextObligation(ev.ObligationFrom, data.ObligationEvent)
			switch {
			case ev.ObligationFrom != state:
				fail("delegation %s event %d: transition from %s, but the obligation was %s", d.id, ev.StreamSeq, ev.ObligationFrom, state)
			case err != nil || next != ev.ObligationTo:
				fail("delegation %s event %d: %s -%s-> %s is not an allowed transition", d.id, ev.StreamSeq, ev.ObligationFrom, data.ObligationEvent, ev.ObligationTo)
			}
			state = ev.ObligationTo
		}
		if state != d.state {
			fail("delegation %s: events lead to %s, the row says %s", d.id, state, d.state)
		}
	}

	// Every stream's hash chain.
	var streams []string
	srows, err := e.Pool.Query(ctx, `SELECT DISTINCT stream FROM events ORDER BY stream`)
	if err != nil {
		return append(problems, fmt.Sprintf("query streams: %v", err))
	}
	for srows.Next() {
		var s string
		if err := srows.Scan(&s); err != nil {
			srows.Close()
			return append(problems, fmt.Sprintf("scan stream: %v", err))
		}
		streams = append(streams, s)
	}
	srows.Close()
	for _, s := range streams {
		events, err := e.Store.StreamEvents(ctx, s)
		if err != nil {
			fail("events of %s: %v", s, err)
			continue
		}
		if err := ledger.VerifyChain(events); err != nil {
			fail("%v", err)
		}
	}
	return problems
}

// LedgerEvents turns events as the API publishes them back into ledger
// events, so a test can verify their chain with ledger.VerifyChain as any
// client would.
func LedgerEvents(t testing.TB, records []ledger.EventRecord) []ledger.Event {
	t.Helper()
	out := make([]ledger.Event, len(records))
	for i, r := range records {
		e, err := r.Event()
		if err != nil {
			t.Fatalf("event %d: %v", r.StreamSeq, err)
		}
		out[i] = e
	}
	return out
}

// Snapshot is a digest of everything the ledger has written: row counts of
// every table and the full budget rows. Two equal snapshots mean nothing
// was written in between.
type Snapshot string

// Snapshot takes a snapshot of the database.
func (e *Env) Snapshot(t testing.TB) Snapshot {
	t.Helper()
	var s string
	err := e.Pool.QueryRow(context.Background(), `
		SELECT concat_ws(' | ',
			'delegations=' || (SELECT count(*) FROM delegations),
			'delegation_versions=' || (SELECT coalesce(sum(version), 0) FROM delegations),
			'events=' || (SELECT count(*) FROM events),
			'budget_entries=' || (SELECT count(*) FROM budget_entries),
			'orgs=' || (SELECT coalesce(string_agg(id || ':' || updated_at::text, ',' ORDER BY id), '') FROM remote_orgs),
			'classes=' || (SELECT string_agg(name || ':' || updated_at::text, ',' ORDER BY name) FROM task_classes),
			'tokens=' || (SELECT count(*) FROM api_tokens),
			'budgets=' || (SELECT coalesce(string_agg(concat_ws(':', id, currency, funded_minor, available_minor, held_minor,
				spent_minor, written_off_minor, updated_at), ',' ORDER BY id), '') FROM budgets))`).Scan(&s)
	if err != nil {
		t.Fatalf("apitest: snapshot: %v", err)
	}
	return Snapshot(s)
}

// AssertUnchanged fails t if anything was written since before was taken.
func (e *Env) AssertUnchanged(t testing.TB, before Snapshot, what string) {
	t.Helper()
	if after := e.Snapshot(t); after != before {
		t.Fatalf("%s wrote to the database:\nbefore: %s\nafter:  %s", what, before, after)
	}
}
