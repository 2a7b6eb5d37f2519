package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
)

// TestWritePathKeepsGenericPlans: every statement the write path runs
// again and again is planned a few times on a connection and then runs
// its generic plan, rather than being planned anew on every flush.
// PostgreSQL plans a prepared statement for its arguments five times,
// then keeps the generic plan unless that is estimated dearer than those
// plans; a statement whose arrays' lengths the planner reads from the
// arguments stays dearer, and was planned on every flush (half a
// millisecond of PostgreSQL's CPU each time, measured on the pre-read).
// After an invalidation (an analyze, or a reset of the connection's
// caches while the suite's other tests change catalogs) PostgreSQL may
// plan a statement for its arguments once more, setting the new generic
// plan's cost against the old plans' average: the test fails a statement
// planned so on more than a fifth of its runs after the first five.
// No generic plan it keeps is estimated dear enough to be compiled (JIT)
// on every run (keptPlan).
func TestWritePathKeepsGenericPlans(t *testing.T) {
	t.Parallel()
	b, _ := setupCoalesced(t, pgstore.Coalescing{})
	fixtures(t, b, 1_000_000)
	k := newModelEvidence(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A ledger of some size, its statistics read: the planner's estimates
	// of a plan made for a flush's arrays and of the generic plan differ
	// most when the tables are large (a bench run planned its creations'
	// key check on every flush; a test on an empty ledger did not).
	seedDelegations(ctx, t, b, 20_000)
	// Enough lifecycles, in sixes at once, that each connection of the
	// pool runs each statement past five times, with arrays of one
	// element and of more.
	const atOnce = 6
	for i := range 30 {
		errs := make(chan error, atOnce)
		for j := range atOnce {
			go func() { errs <- lifecycle(ctx, t, b, k, fmt.Sprintf("plan-%d-%d", i, j)) }()
		}
		for range atOnce {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	conns := b.pool.AcquireAllIdle(ctx)
	for len(conns) == 0 && ctx.Err() == nil { // the last flush's connection is on its way back
		time.Sleep(10 * time.Millisecond)
		conns = b.pool.AcquireAllIdle(ctx)
	}
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	if len(conns) == 0 {
		t.Fatal("no idle connection to read the prepared statements of")
	}
	checked := 0
	for _, c := range conns {
		rows, err := c.Query(ctx, `SELECT name, statement, custom_plans, generic_plans, cardinality(parameter_types)
			FROM pg_prepared_statements WHERE NOT from_sql`)
		if err != nil {
			t.Fatal(err)
		}
		type prepared struct {
			name, statement string
			params          int
		}
		var kept []prepared
		for rows.Next() {
			var (
				p               prepared
				custom, generic int64
			)
			if err := rows.Scan(&p.name, &p.statement, &custom, &generic, &p.params); err != nil {
				t.Fatal(err)
			}
			if custom+generic < 7 { // the first five are always planned for their arguments
				continue
			}
			checked++
			if later, planned := custom+generic-5, custom-5; planned*5 > later {
				t.Errorf("%s: planned for its arguments %d times, its generic plan run %d times", statementLabel(p.statement), custom, generic)
			}
			kept = append(kept, p)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		for _, p := range kept {
			if plan := keptPlan(ctx, t, c, p.name, p.params); strings.Contains(plan, "JIT:") {
				t.Errorf("%s: its generic plan is compiled on every run (JIT):\n%s", statementLabel(p.statement), plan)
			}
		}
	}
	if checked < 5 {
		t.Errorf("only %d statements ran ten times or more on one connection: the run checked too little", checked)
	}
}

// keptPlan is the generic plan c keeps for its prepared statement name,
// which takes params parameters. A plan estimated dearer than
// jit_above_cost is compiled with LLVM each time it runs: a pre-read whose
// estimate crossed it cost PostgreSQL 40 ms of CPU an operation in a bench run
// (TestWritePathKeepsGenericPlans).
func keptPlan(ctx context.Context, t *testing.T, c *pgxpool.Conn, name string, params int) string {
	t.Helper()
	if _, err := c.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	defer c.Exec(context.WithoutCancel(ctx), `RESET plan_cache_mode`) //nolint:errcheck // the pool's connection is closed with the test
	execute := `EXECUTE ` + pgx.Identifier{name}.Sanitize()
	if params > 0 {
		execute += `(` + strings.TrimSuffix(strings.Repeat("NULL, ", params), ", ") + `)`
	}
	return explain(ctx, t, c, execute)
}

// explain is the plan PostgreSQL shows for statement, run on q.
func explain(ctx context.Context, t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, statement string) string {
	t.Helper()
	rows, err := q.Query(ctx, `EXPLAIN `+statement)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// lifecycle is the benchmark's: it creates a delegation, reports its
// remote task canceled and submits globex's acknowledgement of the
// compensation, signed with k's key, which releases the hold.
func lifecycle(ctx context.Context, t *testing.T, b bundle, k *modelEvidenceKit, op string) error {
	d, _, err := b.svc.CreateDelegation(ctx, orch, creation(op, "globex", 10))
	if err != nil {
		return err
	}
	if _, err := b.comp().ReportTaskStatus(ctx, orch, d.ID, compObservation(ledger.StatusCanceled, epoch.Add(time.Second))); err != nil {
		return err
	}
	ack := k.signer.Sign(t, string(compensation.KindAck),
		compensationtest.AckClaims("globex", modelLedgerID, d.Remote.TaskID, ledger.CompensationKey(d), epoch))
	res, err := k.comp.Submit(ctx, compensation.KindAck, []byte(ack), "127.0.0.1")
	if err == nil && res.Outcome != compensation.OutcomeApplied {
		err = fmt.Errorf("the acknowledgement of %s was answered %s", op, res.Outcome)
	}
	return err
}

// statementLabel is a statement's sqlc name, or its first line.
func statementLabel(sql string) string {
	first, _, _ := strings.Cut(strings.TrimSpace(sql), "\n")
	return first
}

// TestPreReadProbesIndexesAfterTheTableGrows: the pre-read's lock of the
// delegations looks each one up through an index even in a generic plan
// made while the table held a few hundred rows. A connection keeps that
// plan as the table grows, until statistics change; a plan that hashed a
// scan of the table, cheaper at that size, read every delegation on every
// flush of a bench run as the table grew past thousands (measured with
// auto_explain), and the whole ledger's after a quiet start.
func TestPreReadProbesIndexesAfterTheTableGrows(t *testing.T) {
	t.Parallel()
	b, _ := setupCoalesced(t, pgstore.Coalescing{})
	fixtures(t, b, 1_000_000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := lifecycle(ctx, t, b, newModelEvidence(t, b), "probe"); err != nil {
		t.Fatal(err)
	}
	statement := preparedStatement(ctx, t, b.pool, "DelegationsAndStreamsLockForFlush")
	seedDelegations(ctx, t, b, 400)
	text := genericPlan(ctx, t, b.pool, statement, `'{globex}', '{seed-task-1}', '{00000000-0000-0000-0000-000000000001}'`)
	if strings.Contains(text, "Seq Scan on delegations") {
		t.Errorf("the generic plan scans the delegations:\n%s", text)
	}
}

// seedDelegations records n settled delegations of another tenant, and
// the statistics of the table they are in.
func seedDelegations(ctx context.Context, t *testing.T, b bundle, n int) {
	t.Helper()
	if _, err := b.pool.Exec(ctx, `INSERT INTO delegations (id, tenant, business_operation_id, request_hash, org_id,
		     task_class, budget_id, amount_minor, currency, remote_task_id, task_status, obligation_state,
		     settled_amount_minor, version, created_at, updated_at)
		 SELECT gen_random_uuid(), 'seed', 'seed-' || g, '\x00', 'globex', 'seed', 'ops', 1, 'EUR', 'seed-task-' || g,
		     'completed', 'settled', 1, 2, now(), now()
		 FROM generate_series(1, $1::integer) g`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `ANALYZE delegations`); err != nil {
		t.Fatal(err)
	}
}

// preparedStatement is the text of the statement named name as the store
// sends it, read from the connection that prepared it once that
// connection is back in the pool.
func preparedStatement(ctx context.Context, t *testing.T, pool *pgxpool.Pool, name string) string {
	t.Helper()
	for ctx.Err() == nil {
		var statement string
		for _, c := range pool.AcquireAllIdle(ctx) {
			if statement == "" {
				_ = c.QueryRow(ctx, `SELECT statement FROM pg_prepared_statements WHERE statement LIKE $1`,
					"-- name: "+name+" %").Scan(&statement)
			}
			c.Release()
		}
		if statement != "" {
			return statement
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no connection prepared %s", name)
	return ""
}

// genericPlan is the plan PostgreSQL runs for statement, with args (SQL
// literals), once it keeps the statement's generic plan.
func genericPlan(ctx context.Context, t *testing.T, pool *pgxpool.Pool, statement, args string) string {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // it only plans
	for _, q := range []string{`SET LOCAL plan_cache_mode = force_generic_plan`, `PREPARE planned AS ` + statement} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return explain(ctx, t, tx, `EXECUTE planned(`+args+`)`)
}
