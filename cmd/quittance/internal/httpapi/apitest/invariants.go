package apitest

import (
	"context"
	"fmt"
	"testing"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
)

// CheckInvariants re-checks ledger/DESIGN.md §2.2's invariants straight from the
// database with pgstore.CheckInvariants (conservation and the journal per
// budget, the journal per delegation, allowed transition paths from held to
// each row's state, every stream's hash chain) and fails t with every
// violation found.
func (e *Env) CheckInvariants(t testing.TB) {
	t.Helper()
	for _, p := range Violations(context.Background(), e) {
		t.Error(p)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// HoldEvidenceViolations returns what pgstore.CheckHoldEvidence reports: the
// holds that left active without a matching evidence row, and applied
// evidence rows that discharged nothing. It is CheckInvariants' check of
// that invariant alone, cheap enough to run after every step of a test.
func HoldEvidenceViolations(ctx context.Context, e *Env) []string {
	problems, err := pgstore.CheckHoldEvidence(ctx, e.Pool)
	if err != nil {
		return append(problems, fmt.Sprintf("check hold evidence: %v", err))
	}
	return problems
}

// Violations returns the invariant violations CheckInvariants reports. A
// database that cannot be read is reported as one more violation.
func Violations(ctx context.Context, e *Env) []string {
	rep, err := pgstore.CheckInvariants(ctx, e.Pool)
	if err != nil {
		return append(rep.Violations, fmt.Sprintf("check invariants: %v", err))
	}
	return rep.Violations
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
