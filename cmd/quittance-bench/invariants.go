package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

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

// dbDelegation is a delegation row as the checks read it.
type dbDelegation struct {
	State ledger.ObligationState
	Task  string
}

// invariantReport is what checkInvariants found.
type invariantReport struct {
	Violations  []string
	Budgets     int
	Delegations map[uuid.UUID]dbDelegation
	Events      int
	Streams     int
}

// checkInvariants checks DESIGN.md §2.2 straight from the database:
//   - per budget: available + held + spent + written_off = funded, no
//     column negative, held = the sum of the active holds, spent = the sum
//     of the settled, written_off = the sum of the written-off, and the
//     budget journal adds up to every column;
//   - per delegation: one hold entry, and exactly one entry moving it out
//     iff the hold left active, of the kind the final state says;
//   - per delegation: the first event is delegation_created, and the
//     events carrying obligation_from/obligation_to form a path of allowed
//     transitions (ledger.NextObligation on the event's obligation_event)
//     from held to the row's state — so no hold left active without its
//     evidence event;
//   - every event stream's hash chain verifies (ledger.VerifyChain).
func checkInvariants(ctx context.Context, pool *pgxpool.Pool) (invariantReport, error) {
	rep := invariantReport{Delegations: map[uuid.UUID]dbDelegation{}}
	fail := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}

	rows, err := pool.Query(ctx, `
		SELECT b.id, b.funded_minor, b.available_minor, b.held_minor, b.spent_minor, b.written_off_minor,
		       COALESCE((SELECT sum(amount_minor) FROM delegations d WHERE d.budget_id = b.id AND d.obligation_state = ANY($1)), 0)::bigint,
		       COALESCE((SELECT sum(amount_minor) FROM delegations d WHERE d.budget_id = b.id AND d.obligation_state = 'settled'), 0)::bigint,
		       COALESCE((SELECT sum(amount_minor) FROM delegations d WHERE d.budget_id = b.id AND d.obligation_state = 'written_off'), 0)::bigint,
		       COALESCE((SELECT sum(CASE kind WHEN 'fund' THEN amount_minor ELSE 0 END) FROM budget_entries j WHERE j.budget_id = b.id), 0)::bigint,
		       COALESCE((SELECT sum(CASE kind WHEN 'hold' THEN amount_minor WHEN 'fund' THEN 0 ELSE -amount_minor END) FROM budget_entries j WHERE j.budget_id = b.id), 0)::bigint,
		       COALESCE((SELECT sum(CASE kind WHEN 'spend' THEN amount_minor ELSE 0 END) FROM budget_entries j WHERE j.budget_id = b.id), 0)::bigint,
		       COALESCE((SELECT sum(CASE kind WHEN 'write_off' THEN amount_minor ELSE 0 END) FROM budget_entries j WHERE j.budget_id = b.id), 0)::bigint
		FROM budgets b ORDER BY b.id`, activeStates())
	if err != nil {
		return rep, fmt.Errorf("query budgets: %w", err)
	}
	for rows.Next() {
		var (
			id                                           string
			funded, avail, held, spent, wo               int64
			activeSum, settledSum, woSum, jF, jH, jS, jW int64
		)
		if err := rows.Scan(&id, &funded, &avail, &held, &spent, &wo, &activeSum, &settledSum, &woSum, &jF, &jH, &jS, &jW); err != nil {
			rows.Close()
			return rep, fmt.Errorf("scan budget: %w", err)
		}
		rep.Budgets++
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
		if jF != funded || jH != held || jS != spent || jW != wo {
			fail("budget %s: journal (%d, %d, %d, %d) disagrees with the row (%d, %d, %d, %d)", id, jF, jH, jS, jW, funded, held, spent, wo)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("read budgets: %w", err)
	}

	rows, err = pool.Query(ctx, `
		SELECT d.id, d.obligation_state, d.task_status, d.amount_minor,
		       coalesce(array_agg(j.kind ORDER BY j.id) FILTER (WHERE j.id IS NOT NULL), '{}'),
		       coalesce(array_agg(j.amount_minor ORDER BY j.id) FILTER (WHERE j.id IS NOT NULL), '{}')
		FROM delegations d LEFT JOIN budget_entries j ON j.delegation_id = d.id
		GROUP BY d.id`)
	if err != nil {
		return rep, fmt.Errorf("query delegations: %w", err)
	}
	for rows.Next() {
		var (
			id          uuid.UUID
			state, task string
			amount      int64
			kinds       []string
			amounts     []int64
		)
		if err := rows.Scan(&id, &state, &task, &amount, &kinds, &amounts); err != nil {
			rows.Close()
			return rep, fmt.Errorf("scan delegation: %w", err)
		}
		st := ledger.ObligationState(state)
		rep.Delegations[id] = dbDelegation{State: st, Task: task}
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
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("read delegations: %w", err)
	}

	streams, n, err := loadEvents(ctx, pool)
	if err != nil {
		return rep, err
	}
	rep.Events, rep.Streams = n, len(streams)
	for stream, events := range streams {
		if err := ledger.VerifyChain(events); err != nil {
			fail("%v", err)
		}
		raw, ok := strings.CutPrefix(stream, "delegation:")
		if !ok {
			continue
		}
		id, err := uuid.Parse(raw)
		if err != nil {
			fail("stream %s: not a delegation id", stream)
			continue
		}
		d, ok := rep.Delegations[id]
		if !ok {
			fail("stream %s: no such delegation", stream)
			continue
		}
		if events[0].Type != ledger.EventTypeDelegationCreated {
			fail("delegation %s: first event is %s, not %s", id, events[0].Type, ledger.EventTypeDelegationCreated)
		}
		state := ledger.ObligationHeld
		for _, ev := range events {
			if ev.ObligationFrom == "" && ev.ObligationTo == "" {
				continue
			}
			var data struct {
				ObligationEvent ledger.ObligationEvent `json:"obligation_event"`
			}
			_ = json.Unmarshal(ev.Data, &data)
			next, _, err := ledger.NextObligation(ev.ObligationFrom, data.ObligationEvent)
			switch {
			case ev.ObligationFrom != state:
				fail("delegation %s event %d: transition from %s, but the obligation was %s", id, ev.StreamSeq, ev.ObligationFrom, state)
			case err != nil || next != ev.ObligationTo:
				fail("delegation %s event %d: %s -%s-> %s is not an allowed transition", id, ev.StreamSeq, ev.ObligationFrom, data.ObligationEvent, ev.ObligationTo)
			}
			state = ev.ObligationTo
		}
		if state != d.State {
			fail("delegation %s: its events lead to %s, the row says %s", id, state, d.State)
		}
	}
	for id := range rep.Delegations {
		if _, ok := streams["delegation:"+id.String()]; !ok {
			fail("delegation %s has no events", id)
		}
	}
	return rep, nil
}

// loadEvents reads every event, grouped by stream in stream order.
func loadEvents(ctx context.Context, pool *pgxpool.Pool) (map[string][]ledger.Event, int, error) {
	rows, err := pool.Query(ctx, `
		SELECT seq, stream, stream_seq, coalesce(delegation_id::text, ''), type, at, actor,
		       coalesce(obligation_from, ''), coalesce(obligation_to, ''), data, coalesce(evidence, ''), prev_hash, hash
		FROM events ORDER BY stream, stream_seq`)
	if err != nil {
		return nil, 0, fmt.Errorf("query events: %w", err)
	}
	defer rows.Close()
	out := map[string][]ledger.Event{}
	n := 0
	for rows.Next() {
		var (
			e        ledger.Event
			deleg    string
			from, to string
			data     []byte
		)
		if err := rows.Scan(&e.Seq, &e.Stream, &e.StreamSeq, &deleg, &e.Type, &e.At, &e.Actor, &from, &to, &data, &e.Evidence, &e.PrevHash, &e.Hash); err != nil {
			return nil, 0, fmt.Errorf("scan event: %w", err)
		}
		if deleg != "" {
			e.DelegationID = uuid.MustParse(deleg)
		}
		e.ObligationFrom, e.ObligationTo, e.Data = ledger.ObligationState(from), ledger.ObligationState(to), data
		out[e.Stream] = append(out[e.Stream], e)
		n++
	}
	return out, n, rows.Err()
}
