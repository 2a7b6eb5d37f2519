package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
)

// invariantFixture is a database with one budget, one delegation still
// held and one settled.
type invariantFixture struct {
	bundle
	held, settled ledger.Delegation
}

func setupInvariants(t *testing.T) invariantFixture {
	t.Helper()
	b := setup(t)
	held := b.delegation(t, "op-held")
	settled := b.delegation(t, "op-settled")
	b.report(t, settled.ID, ledger.StatusWorking, epoch)
	b.report(t, settled.ID, ledger.StatusCompleted, epoch.Add(time.Second))
	return invariantFixture{bundle: b, held: held, settled: settled}
}

// tamper runs stmts as the test database's superuser, around the
// application, with the events_append_only trigger disabled for them.
func tamper(t *testing.T, pool *pgxpool.Pool, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	all := append(append([]string{`ALTER TABLE events DISABLE TRIGGER events_append_only`}, stmts...), `ALTER TABLE events ENABLE TRIGGER events_append_only`)
	for _, s := range all {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func TestCheckInvariantsCleanDatabase(t *testing.T) {
	t.Parallel()
	f := setupInvariants(t)
	ctx := context.Background()
	rep, err := pgstore.CheckInvariants(ctx, f.pool)
	if err != nil {
		t.Fatalf("CheckInvariants: %v", err)
	}
	if len(rep.Violations) > 0 {
		t.Fatalf("violations in a database only the ledger wrote:\n%s", strings.Join(rep.Violations, "\n"))
	}
	var events, streams int
	if err := f.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT stream) FROM events`).Scan(&events, &streams); err != nil {
		t.Fatal(err)
	}
	if rep.Budgets != 1 || rep.Events != events || rep.Streams != streams {
		t.Errorf("report counts %d budgets, %d events in %d streams; the database has 1, %d in %d",
			rep.Budgets, rep.Events, rep.Streams, events, streams)
	}
	want := map[uuid.UUID]ledger.ObligationState{f.held.ID: ledger.ObligationHeld, f.settled.ID: ledger.ObligationSettled}
	if fmt.Sprint(rep.Delegations) != fmt.Sprint(want) {
		t.Errorf("report delegations %v, want %v", rep.Delegations, want)
	}
}

func TestCheckInvariantsReportsTampering(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		stmt func(f invariantFixture) string
		want func(f invariantFixture) []string
	}{
		{
			name: "budget held moved without a hold",
			stmt: func(invariantFixture) string {
				// Conserving, so the budgets_conservation constraint lets it through.
				return `UPDATE budgets SET held_minor = held_minor + 7, available_minor = available_minor - 7 WHERE id = 'ops'`
			},
			want: func(invariantFixture) []string {
				return []string{
					"budget ops: held 1257 != sum of active holds 1250",
					"budget ops: journal (funded 10000, held 1250, spent 1250, written_off 0) disagrees with the row (10000, 1257, 1250, 0)",
				}
			},
		},
		{
			name: "journal entry deleted",
			stmt: func(invariantFixture) string { return `DELETE FROM budget_entries WHERE kind = 'spend'` },
			want: func(f invariantFixture) []string {
				return []string{
					fmt.Sprintf("delegation %s (settled, hold 1250, settled 1250, reversed none): journal holds 1250, spent 0, wrote off 0; want 0, 1250, 0", f.settled.ID),
					"budget ops: journal (funded 10000, held 2500, spent 0, written_off 0) disagrees with the row (10000, 1250, 1250, 0)",
				}
			},
		},
		{
			name: "settled amount edited",
			stmt: func(f invariantFixture) string {
				return fmt.Sprintf(`UPDATE delegations SET settled_amount_minor = 1000 WHERE id = '%s'`, f.settled.ID)
			},
			want: func(f invariantFixture) []string {
				return []string{
					fmt.Sprintf("delegation %s (settled, hold 1250, settled 1000, reversed none): journal holds 0, spent 1250, wrote off 0; want 0, 1000, 0", f.settled.ID),
					"budget ops: spent 1250 != what its settled and compensated delegations spent, 1000",
				}
			},
		},
		{
			name: "hold raised without its journal entry",
			stmt: func(f invariantFixture) string {
				return fmt.Sprintf(`UPDATE delegations SET amount_minor = 2000 WHERE id = '%s'`, f.held.ID)
			},
			want: func(f invariantFixture) []string {
				return []string{
					fmt.Sprintf("delegation %s (held, hold 2000, settled none, reversed none): journal holds 1250, spent 0, wrote off 0; want 2000, 0, 0", f.held.ID),
					"budget ops: held 1250 != sum of active holds 2000",
				}
			},
		},
		{
			name: "event data edited",
			stmt: func(f invariantFixture) string {
				return fmt.Sprintf(`UPDATE events SET data = data || '{"tampered": true}' WHERE stream = '%s' AND stream_seq = 2`, f.settled.Stream())
			},
			want: func(f invariantFixture) []string {
				return []string{fmt.Sprintf("event chain %s broken at 2", f.settled.Stream())}
			},
		},
		{
			name: "obligation transition rewritten",
			stmt: func(f invariantFixture) string {
				return fmt.Sprintf(`UPDATE events SET obligation_to = 'released' WHERE stream = '%s' AND obligation_to = 'settled'`, f.settled.Stream())
			},
			want: func(f invariantFixture) []string {
				return []string{
					fmt.Sprintf("event chain %s broken at", f.settled.Stream()),
					"-> released is not an allowed transition",
					fmt.Sprintf("delegation %s: its events lead to released, the row says settled", f.settled.ID),
				}
			},
		},
		{
			name: "executed write-off of a delegation not written off",
			stmt: func(f invariantFixture) string {
				return fmt.Sprintf(`INSERT INTO write_offs (id, delegation_id, amount_minor, currency, reason, status, requested_by, requested_by_id, created_at, executed_at)
					VALUES (gen_random_uuid(), '%s', 1250, 'EUR', 'forged', 'executed', 'x', gen_random_uuid(), now(), now())`, f.held.ID)
			},
			want: func(f invariantFixture) []string {
				return []string{fmt.Sprintf("delegation %s (held, 1250): 1 executed write-offs of 1250 in total", f.held.ID)}
			},
		},
		{
			name: "pending write-off the delegation does not name",
			stmt: func(f invariantFixture) string {
				return fmt.Sprintf(`INSERT INTO write_offs (id, delegation_id, amount_minor, currency, reason, status, requested_by, requested_by_id, created_at)
					VALUES ('00000000-0000-0000-0000-0000000000aa', '%s', 1250, 'EUR', 'forged', 'pending_approval', 'x', gen_random_uuid(), now())`, f.held.ID)
			},
			want: func(f invariantFixture) []string {
				return []string{fmt.Sprintf("delegation %s: pending_write_off_id is none, its write-off awaiting approval is 00000000-0000-0000-0000-0000000000aa", f.held.ID)}
			},
		},
		{
			name: "delegation events deleted",
			stmt: func(f invariantFixture) string {
				return fmt.Sprintf(`DELETE FROM events WHERE stream = '%s'`, f.held.Stream())
			},
			want: func(f invariantFixture) []string {
				return []string{fmt.Sprintf("delegation %s has no events", f.held.ID)}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setupInvariants(t)
			tamper(t, f.pool, tc.stmt(f))
			rep, err := pgstore.CheckInvariants(context.Background(), f.pool)
			if err != nil {
				t.Fatalf("CheckInvariants: %v", err)
			}
			got := strings.Join(rep.Violations, "\n")
			for _, w := range tc.want(f) {
				if !strings.Contains(got, w) {
					t.Errorf("violations do not report %q; got:\n%s", w, got)
				}
			}
		})
	}
}

// evidenceFixture is a database with one delegation still held, one
// settled and one compensated on a signed ack that reversed 1,000 of its
// 1,250 hold.
type evidenceFixture struct {
	bundle
	held, settled, compensated ledger.Delegation
}

// setGlobexKey registers signer's key as globex's, written through the
// store: a key change through the ledger waits for a second on-call approval.
func (b bundle) setGlobexKey(t *testing.T, signer *compensationtest.Signer) {
	t.Helper()
	ctx := context.Background()
	if err := b.store.Compensation().InTx(ctx, func(tx compensation.Tx) error {
		org, err := tx.Revocation().OrgForUpdate(ctx, "globex")
		if err != nil {
			return err
		}
		org.JWKS = signer.JWKS()
		return tx.Revocation().PutOrg(ctx, org)
	}); err != nil {
		t.Fatal(err)
	}
}

func setupEvidence(t *testing.T) evidenceFixture {
	t.Helper()
	ctx := context.Background()
	b := setup(t)
	f := evidenceFixture{bundle: b, held: b.delegation(t, "op-held"), settled: b.delegation(t, "op-settled"), compensated: b.delegation(t, "op-comp")}
	b.report(t, f.settled.ID, ledger.StatusCompleted, epoch)
	b.report(t, f.compensated.ID, ledger.StatusCanceled, epoch)
	signer := compensationtest.NewEd25519Signer(t, "globex-1")
	b.setGlobexKey(t, signer)
	claims := compensationtest.AckClaims("globex", "ledger-inv", f.compensated.Remote.TaskID, ledger.CompensationKey(f.compensated), epoch)
	claims["reversed_amount_minor"] = 1000
	comp := compensation.NewService(compensation.Config{Store: b.store.Compensation(), Clock: fixedClock{epoch}, LedgerID: "ledger-inv"})
	res, err := comp.SubmitAck(ctx, []byte(signer.Sign(t, string(compensation.KindAck), claims)), "127.0.0.1")
	if err != nil || res.Outcome != compensation.OutcomeApplied || res.Delegation.ObligationState != ledger.ObligationCompensated {
		t.Fatalf("ack: %+v, %v", res, err)
	}
	return f
}

// TestCheckInvariantsHoldLeftActiveWithoutEvidence: no hold leaves active
// without a matching evidence row. A database the ledger wrote passes; each
// edit made as the database owner — evidence removed, changed or moved to
// another delegation, a release without any event, a settlement whose
// status event says something else — is reported as such.
func TestCheckInvariantsHoldLeftActiveWithoutEvidence(t *testing.T) {
	t.Parallel()
	clean := setupEvidence(t)
	rep, err := pgstore.CheckInvariants(context.Background(), clean.pool)
	if err != nil || len(rep.Violations) > 0 {
		t.Fatalf("a database only the ledger wrote: %v\n%s", err, strings.Join(rep.Violations, "\n"))
	}
	if alone, err := pgstore.CheckHoldEvidence(context.Background(), clean.pool); err != nil || len(alone) > 0 {
		t.Fatalf("CheckHoldEvidence on a database only the ledger wrote: %v\n%s", err, strings.Join(alone, "\n"))
	}
	leftActive := func(d ledger.Delegation, state ledger.ObligationState, event ledger.EventType, problem string) []string {
		return []string{
			fmt.Sprintf("delegation %s (%s): its hold left active at event ", d.ID, state),
			fmt.Sprintf(" (%s) without a matching evidence row: %s", event, problem),
		}
	}
	for _, tc := range []struct {
		name string
		stmt func(f evidenceFixture) string
		want func(f evidenceFixture) []string
	}{
		{
			name: "compensated without its evidence row",
			stmt: func(f evidenceFixture) string {
				return fmt.Sprintf(`DELETE FROM compensation_evidence WHERE delegation_id = '%s'`, f.compensated.ID)
			},
			want: func(f evidenceFixture) []string {
				return leftActive(f.compensated, ledger.ObligationCompensated, ledger.EventTypeCompensationAcked,
					`no applied compensation_ack evidence row (its row: "", "")`)
			},
		},
		{
			name: "evidence row reversing another amount",
			stmt: func(f evidenceFixture) string {
				return fmt.Sprintf(`UPDATE compensation_evidence SET data = '{"reversed_amount_minor": 5}' WHERE delegation_id = '%s'`, f.compensated.ID)
			},
			want: func(f evidenceFixture) []string {
				return leftActive(f.compensated, ledger.ObligationCompensated, ledger.EventTypeCompensationAcked,
					"its evidence row reversed 5 (<nil>), the row says 1000")
			},
		},
		{
			name: "evidence row moved to a held delegation",
			stmt: func(f evidenceFixture) string {
				return fmt.Sprintf(`UPDATE compensation_evidence SET delegation_id = '%s' WHERE delegation_id = '%s'`, f.held.ID, f.compensated.ID)
			},
			want: func(f evidenceFixture) []string {
				return append(leftActive(f.compensated, ledger.ObligationCompensated, ledger.EventTypeCompensationAcked, "no applied compensation_ack"),
					fmt.Sprintf("delegation %s (held): an applied compensation_ack evidence row, but its hold is active", f.held.ID))
			},
		},
		{
			name: "released without any event",
			stmt: func(f evidenceFixture) string {
				return fmt.Sprintf(`UPDATE delegations SET obligation_state = 'released', obligation_reason = 'gate_not_required' WHERE id = '%s'`, f.held.ID)
			},
			want: func(f evidenceFixture) []string {
				return []string{fmt.Sprintf("delegation %s (released): its hold left active, and no event of its stream moved it", f.held.ID)}
			},
		},
		{
			name: "settlement status rewritten",
			stmt: func(f evidenceFixture) string {
				return fmt.Sprintf(`UPDATE events SET data = jsonb_set(data, '{state}', '"working"') WHERE stream = '%s' AND obligation_to = 'settled'`, f.settled.Stream())
			},
			want: func(f evidenceFixture) []string {
				return leftActive(f.settled, ledger.ObligationSettled, ledger.EventTypeTaskStatusChanged,
					`settled by a task_status_changed event (state "working", task_completed), not a completed status`)
			},
		},
		{
			name: "applied evidence on a settled delegation",
			stmt: func(f evidenceFixture) string {
				return fmt.Sprintf(`INSERT INTO compensation_evidence (delegation_id, idempotency_key, kind, channel, payload_sha256, status, receipt, data, received_at, decided_at)
					VALUES ('%s', 'qc_forged', 'declaration_verified', 'http', '\x00', 'applied', '{}', '{}', now(), now())`, f.settled.ID)
			},
			want: func(f evidenceFixture) []string {
				return []string{fmt.Sprintf("delegation %s (settled): an applied declaration_verified evidence row, but it was not discharged on it", f.settled.ID)}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setupEvidence(t)
			tamper(t, f.pool, tc.stmt(f))
			rep, err := pgstore.CheckInvariants(context.Background(), f.pool)
			if err != nil {
				t.Fatalf("CheckInvariants: %v", err)
			}
			// The check alone, as the model test runs it after every step,
			// reports the same.
			alone, err := pgstore.CheckHoldEvidence(context.Background(), f.pool)
			if err != nil {
				t.Fatalf("CheckHoldEvidence: %v", err)
			}
			for name, violations := range map[string][]string{"CheckInvariants": rep.Violations, "CheckHoldEvidence": alone} {
				got := strings.Join(violations, "\n")
				for _, w := range tc.want(f) {
					if !strings.Contains(got, w) {
						t.Errorf("%s does not report %q; got:\n%s", name, w, got)
					}
				}
			}
		})
	}
}
