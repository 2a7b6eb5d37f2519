package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// TestReportingRole checks the migration-created role: it reads the
// reporting views and nothing else.
func TestReportingRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the test changes nothing
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE quittance_reporting"); err != nil {
		t.Fatalf("set role: %v", err)
	}
	for _, view := range []string{
		"reporting.pending_obligations_v1", "reporting.obligation_summary_v1",
		"reporting.anomalies_v1", "reporting.budgets_v1", "reporting.token_refusals_v1",
		"reporting.delegation_amounts_v1", "reporting.shared_remote_tasks_v1",
	} {
		if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT * FROM "+view+" LIMIT 1"); err != nil {
			t.Errorf("quittance_reporting cannot read %s: %v", view, err)
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"delegations", "events", "budgets", "api_tokens", "used_token_ids", "write_offs", "token_refusals", "token_refusal_samples", "shared_remote_tasks"} {
		if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
		_, err := tx.Exec(ctx, "SELECT * FROM "+table+" LIMIT 1")
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("quittance_reporting reading %s: %v, want permission denied", table, err)
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
	}
	var canLogin bool
	if err := tx.QueryRow(ctx, "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'quittance_reporting'").Scan(&canLogin); err != nil {
		t.Fatal(err)
	}
	if canLogin {
		t.Error("quittance_reporting must be NOLOGIN")
	}
}

// TestTokenRefusalsView: the per-(org, reason) counts of refused evidence
// tokens reach finance's SQL clients through reporting.token_refusals_v1,
// read as the reporting role.
func TestTokenRefusalsView(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO token_refusals (org_id, reason, refused, first_at, last_at)
		VALUES ('org-b', 'token_signature_invalid', 3, '2026-12-01T10:00:00Z', '2026-12-01T11:00:00Z'),
		       ('', 'token_org_unknown', 200, '2026-12-01T10:00:00Z', '2026-12-01T10:05:00Z')`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the test reads only
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE quittance_reporting"); err != nil {
		t.Fatal(err)
	}
	var got []string
	rows, err := tx.Query(ctx, "SELECT org_id || '/' || reason || '=' || refused FROM reporting.token_refusals_v1 ORDER BY org_id, reason")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "/token_org_unknown=200 org-b/token_signature_invalid=3"; strings.Join(got, " ") != want {
		t.Fatalf("reporting.token_refusals_v1: %v, want %s", got, want)
	}
}

// TestDelegationAmountsView: reporting.delegation_amounts_v1, read as the
// reporting role, says how each hold split: a partial settlement spent
// what the work cost and returned the rest; a hold that was raised and is
// still active has held it all and spent nothing; a rejection returned
// all of it. Each row's journal columns add up to what was held.
func TestDelegationAmountsView(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	settled := b.delegation(t, "op-partial")
	cost := int64(400)
	if _, err := b.comp().ReportTaskStatus(ctx, orch, settled.ID, compensation.Observation{
		Status: ledger.StatusCompleted, Timestamp: epoch.Add(time.Second), SettledAmountMinor: &cost,
	}); err != nil {
		t.Fatalf("partial settle: %v", err)
	}
	held := b.delegation(t, "op-raised")
	if _, err := b.svc.ChangeHold(ctx, orch, held.ID, 2_000); err != nil {
		t.Fatalf("raise the hold: %v", err)
	}
	rejected := b.delegation(t, "op-rejected")
	b.report(t, rejected.ID, ledger.StatusRejected, epoch.Add(time.Second))

	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the test reads only
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE quittance_reporting"); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `SELECT delegation_id::text, obligation_state, amount_minor, coalesce(settled_amount_minor, -1),
		coalesce(reversed_amount_minor, -1), held_total_minor, spent_minor, returned_minor, written_off_minor
		FROM reporting.delegation_amounts_v1`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var id, state string
		var amount, settledAmt, reversed, heldTotal, spent, returned, writtenOff int64
		if err := rows.Scan(&id, &state, &amount, &settledAmt, &reversed, &heldTotal, &spent, &returned, &writtenOff); err != nil {
			t.Fatal(err)
		}
		got[id] = fmt.Sprintf("%s amount=%d settled=%d reversed=%d held=%d spent=%d returned=%d written_off=%d",
			state, amount, settledAmt, reversed, heldTotal, spent, returned, writtenOff)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{
		settled.ID.String():  "settled amount=1250 settled=400 reversed=-1 held=1250 spent=400 returned=850 written_off=0",
		held.ID.String():     "held amount=2000 settled=-1 reversed=-1 held=2000 spent=0 returned=0 written_off=0",
		rejected.ID.String(): "released amount=1250 settled=-1 reversed=-1 held=1250 spent=0 returned=1250 written_off=0",
	} {
		if got[id] != want {
			t.Errorf("delegation_amounts_v1 for %s:\n got %s\nwant %s", id, got[id], want)
		}
	}
}

// TestSharedRemoteTasksKept: delegations of two tenants that record the
// same remote task id of one org, many pairs at once from two replicas,
// are each kept as shared the moment the second commits: the reporting
// view, read as the reporting role, and the anomalies' reader list every
// pair and nothing else. The backfill finds the same pairs again from the
// delegations alone, as after a load that skipped the trigger.
func TestSharedRemoteTasksKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.delegation(t, "budget-and-org")
	other := ledger.Principal{Role: ledger.RoleOrchestrator, Name: "orch-initech", Tenant: "initech"}
	holdsFor(t, b.store, "ops", orch.Tenant, other.Tenant)
	replica := ledger.NewService(ledger.Config{Store: pgstore.New(widePool(t, b.pool, 4)), Clock: fixedClock{epoch}})
	create := func(svc *ledger.Service, p ledger.Principal, op, task string) error {
		_, _, err := svc.CreateDelegation(ctx, p, ledger.CreateInput{
			BusinessOperationID: op, OrgID: "globex", TaskClass: "procurement", BudgetID: "ops",
			Hold: ledger.Money{AmountMinor: 10, Currency: "EUR"}, Remote: ledger.RemoteTask{TaskID: task, ContextID: "ctx"},
		})
		return err
	}
	const pairs = 12
	var want []string
	var wg sync.WaitGroup
	for i := range pairs {
		task := fmt.Sprintf("shared-%02d", i)
		want = append(want, task)
		wg.Go(func() {
			if err := create(b.svc, orch, "op-"+task, task); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if err := create(replica, other, "op-"+task, task); err != nil {
				t.Error(err)
			}
		})
		// One tenant alone records this one: not shared.
		wg.Go(func() {
			if err := create(replica, other, "alone-"+task, "alone-"+task); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()

	viewed := func() []string {
		t.Helper()
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // read only
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE quittance_reporting"); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, `SELECT remote_task_id, array_to_string(tenants, ',') FROM reporting.shared_remote_tasks_v1 ORDER BY remote_task_id`)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for rows.Next() {
			var task, tenants string
			if err := rows.Scan(&task, &tenants); err != nil {
				t.Fatal(err)
			}
			if tenants != "acme,initech" && tenants != "initech,acme" {
				t.Errorf("%s: tenants %s", task, tenants)
			}
			out = append(out, task)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := viewed(); !slices.Equal(got, want) {
		t.Fatalf("reporting.shared_remote_tasks_v1 lists %v, want %v", got, want)
	}
	listed, err := b.store.Reports().SharedRemoteTasks(ctx, 100)
	if err != nil || len(listed) != pairs {
		t.Fatalf("SharedRemoteTasks: %d (%v), want %d", len(listed), err, pairs)
	}
	for _, s := range listed {
		if s.OrgID != "globex" || len(s.DelegationIDs) != 2 || len(s.Tenants) != 2 {
			t.Errorf("shared remote task %+v", s)
		}
	}

	if _, err := b.pool.Exec(ctx, `DELETE FROM shared_remote_tasks`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `SELECT quittance_find_shared_remote_tasks()`); err != nil {
		t.Fatal(err)
	}
	if got := viewed(); !slices.Equal(got, want) {
		t.Fatalf("after the backfill the view lists %v, want %v", got, want)
	}
}

// TestSharedRemoteTaskKeptOnChange: an update of a delegation keeps a
// shared remote task id when it changes the delegation's id to one
// another delegation holds, and runs nothing when it leaves the id as it
// was (migration 00043): a pair removed by hand is not found again by an
// update that sets the id it already had.
func TestSharedRemoteTaskKeptOnChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.delegation(t, "budget-and-org")
	other := ledger.Principal{Role: ledger.RoleOrchestrator, Name: "orch-initech", Tenant: "initech"}
	holdsFor(t, b.store, "ops", orch.Tenant, other.Tenant)
	create := func(p ledger.Principal, op, task string) ledger.Delegation {
		d, _, err := b.svc.CreateDelegation(ctx, p, ledger.CreateInput{
			BusinessOperationID: op, OrgID: "globex", TaskClass: "procurement", BudgetID: "ops",
			Hold: ledger.Money{AmountMinor: 10, Currency: "EUR"}, Remote: ledger.RemoteTask{TaskID: task, ContextID: "ctx"},
		})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	create(orch, "op-1", "task-shared")
	holder := create(other, "op-1", "task-shared")
	create(other, "op-2", "task-alone")
	moved := create(orch, "op-2", "task-moved")
	shared := func() []string {
		t.Helper()
		rows, err := b.pool.Query(ctx, `SELECT remote_task_id FROM shared_remote_tasks ORDER BY remote_task_id`)
		if err != nil {
			t.Fatal(err)
		}
		tasks, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return tasks
	}
	if got := shared(); !slices.Equal(got, []string{"task-shared"}) {
		t.Fatalf("after the inserts: %v shared", got)
	}
	if _, err := b.pool.Exec(ctx, `DELETE FROM shared_remote_tasks`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE delegations SET remote_task_id = remote_task_id, task_status = task_status WHERE id = $1`, holder.ID); err != nil {
		t.Fatal(err)
	}
	if got := shared(); len(got) != 0 {
		t.Fatalf("an update leaving the remote task id as it was found %v again", got)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE delegations SET remote_task_id = 'task-alone' WHERE id = $1`, moved.ID); err != nil {
		t.Fatal(err)
	}
	if got := shared(); !slices.Equal(got, []string{"task-alone"}) {
		t.Fatalf("an update recording a held remote task id: %v shared", got)
	}
}
