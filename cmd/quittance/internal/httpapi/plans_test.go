package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/quittance/quittance/ledger"
)

// largeTables are the tables that grow with every delegation: a
// statement of the write path that reads one of them whole costs time in
// proportion to the ledger's size.
var largeTables = map[string]bool{
	"delegations": true, "events": true, "event_positions": true, "budget_entries": true,
	"used_token_ids": true, "compensation_evidence": true, "webhook_deliveries": true, "a2a_outbox": true,
}

// TestWritePathPlansUseIndexes plans every statement the lifecycle's calls
// (create → canceled → signed ack) and the deadline sweep send, as a pooled connection runs it
// once its prepared statement goes generic, against tables of tens of
// thousands of rows, and refuses a scan of a whole large table: the cost
// of such a statement grows with the ledger, not with the call. A flush's
// pre-read that found its delegations with an OR of an id list and a
// subquery scanned delegations whole, 195 ms a flush at 300,000 rows;
// the benchmark's lifecycle runs start from an empty database and did not
// show it.
func TestWritePathPlansUseIndexes(t *testing.T) {
	t.Parallel()
	e, rt := tracedCompEnv(t)
	ctx := context.Background()
	owner, err := pgx.Connect(ctx, e.Pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	seedLargeTables(t, owner, 20000)

	// Warm up (authentication, statement caches), then record one
	// lifecycle's statements.
	e.accept(t, acksPath, e.ack(t, e.pending(t, orgB, 100)), "applied")
	rt.during(func() {
		d := e.delegation(t, orgB, 100)
		d = e.ReportStatus(t, e.orch, d.ID, "TASK_STATE_CANCELED", time.Time{})
		e.acceptAnswer(t, acksPath, e.ack(t, d), "applied")
		// And the deadline sweep, which moves obligations in batches.
		e.pending(t, orgB, 100)
		e.Clock.Advance(ledger.DefaultCompensationTimeout + time.Minute)
		if n := e.sweep(t); n != 1 {
			t.Fatalf("the sweep moved %d, want 1", n)
		}
	})
	statements := rt.sentStatements()
	if len(statements) < 10 {
		t.Fatalf("recorded %d statements of a lifecycle; the tracer missed them", len(statements))
	}
	if _, err := owner.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	planned := map[string]bool{}
	var names []string
	for _, s := range statements {
		if planned[s.sql] || !explainable(s.sql) {
			continue
		}
		planned[s.sql] = true
		names = append(names, statementName(s.sql))
		scans, err := wholeTableScans(ctx, owner, len(planned), s)
		if err != nil {
			t.Fatalf("planning %s: %v", statementName(s.sql), err)
		}
		if len(scans) > 0 {
			t.Errorf("%s scans %s whole", statementName(s.sql), strings.Join(scans, ", "))
		}
	}
	t.Logf("planned %d statements of a lifecycle and a sweep: %s", len(names), strings.Join(names, ", "))
}

// seedLargeTables adds n settled delegations of org B on the test's
// budget, each with its creation event, its hold's journal entry, a used
// token id, its evidence and its finished dispatch job, and has PostgreSQL analyze them, as a ledger in use
// would be.
func seedLargeTables(t *testing.T, conn *pgx.Conn, n int) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO delegations (id, tenant, business_operation_id, request_hash, org_id, task_class, budget_id,
		     amount_minor, currency, remote_task_id, task_status, obligation_state, settled_amount_minor,
		     version, created_at, updated_at)
		 SELECT gen_random_uuid(), 'seed', 'seed-' || g, '\x00', $2, 'seed', $3, 1, 'EUR', 'seed-task-' || g,
		     'completed', 'settled', 1, 2, now(), now()
		 FROM generate_series(1, $1::integer) g`,
		`INSERT INTO events (stream, stream_seq, delegation_id, type, at, actor, data, hashed_data, prev_hash, hash)
		 SELECT 'delegation:' || id, 1, id, 'delegation_created', now(), 'seed', '{}', '{}', '\x00', '\x00'
		 FROM delegations WHERE tenant = 'seed' AND $1::integer > 0 AND $2::text <> '' AND $3::text <> ''`,
		`INSERT INTO budget_entries (budget_id, delegation_id, kind, amount_minor, at)
		 SELECT $3, id, 'hold', 1, now() FROM delegations WHERE tenant = 'seed' AND $1::integer > 0 AND $2::text <> ''`,
		`INSERT INTO used_token_ids (org_id, jti, delegation_id, token_sha256, used_at)
		 SELECT $2, 'seed-' || id, id, '\x00', now() FROM delegations WHERE tenant = 'seed' AND $1::integer > 0 AND $3::text <> ''`,
		`INSERT INTO compensation_evidence (delegation_id, idempotency_key, kind, channel, payload_sha256, status,
		     receipt, data, received_at)
		 SELECT id, 'seed-' || id, 'compensation_ack', 'http', '\x00', 'unused', '{}', '{}', now()
		 FROM delegations WHERE tenant = 'seed' AND $1::integer > 0 AND $2::text <> '' AND $3::text <> ''`,
		`INSERT INTO a2a_outbox (delegation_id, kind, attempts, run_after, done_at, created_at, updated_at)
		 SELECT id, 'dispatch', 1, now(), now(), now(), now()
		 FROM delegations WHERE tenant = 'seed' AND $1::integer > 0 AND $2::text <> '' AND $3::text <> ''`,
	} {
		if _, err := conn.Exec(ctx, q, n, orgB, budgetID); err != nil {
			t.Fatalf("seed: %v\n%s", err, q)
		}
	}
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
}

// explainable: sql is a statement EXPLAIN plans (not BEGIN, COMMIT or a
// setting).
func explainable(sql string) bool {
	for line := range strings.SplitSeq(sql, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "--") {
			continue
		}
		word := strings.ToUpper(strings.Fields(line)[0])
		return word == "SELECT" || word == "WITH" || word == "INSERT" || word == "UPDATE" || word == "DELETE"
	}
	return false
}

// statementName is the sqlc name of a query, or its first line.
func statementName(sql string) string {
	first, _, _ := strings.Cut(strings.TrimSpace(sql), "\n")
	if name, ok := strings.CutPrefix(first, "-- name: "); ok {
		return strings.Fields(name)[0]
	}
	return first
}

// wholeTableScans prepares s as statement number i and returns the large
// tables its generic plan, with s's arguments, reads with a sequential
// scan. EXPLAIN EXECUTE takes no parameters of its own, so the arguments
// are written into it as literals, encoded as the connection encodes them.
func wholeTableScans(ctx context.Context, conn *pgx.Conn, i int, s sentStatement) ([]string, error) {
	name := fmt.Sprintf("planned_%d", i)
	desc, err := conn.Prepare(ctx, name, s.sql)
	if err != nil {
		return nil, err
	}
	if len(desc.ParamOIDs) != len(s.args) {
		return nil, fmt.Errorf("%d parameters, %d arguments", len(desc.ParamOIDs), len(s.args))
	}
	literals := make([]string, len(desc.ParamOIDs))
	for j, oid := range desc.ParamOIDs {
		var typ string
		if err := conn.QueryRow(ctx, "SELECT format_type($1::oid, NULL)", oid).Scan(&typ); err != nil {
			return nil, err
		}
		text, err := conn.TypeMap().Encode(oid, pgtype.TextFormatCode, s.args[j], nil)
		if err != nil {
			return nil, fmt.Errorf("argument %d: %w", j+1, err)
		}
		literals[j] = "NULL::" + typ
		if text != nil {
			literals[j] = "'" + strings.ReplaceAll(string(text), "'", "''") + "'::" + typ
		}
	}
	explain := "EXPLAIN (FORMAT JSON) EXECUTE " + name
	if len(literals) > 0 {
		explain += "(" + strings.Join(literals, ", ") + ")"
	}
	var plan []struct {
		Plan planNode `json:"Plan"`
	}
	var raw []byte
	if err := conn.QueryRow(ctx, explain).Scan(&raw); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &plan); err != nil {
		return nil, err
	}
	var scans []string
	for _, p := range plan {
		p.Plan.walk(func(n planNode) {
			if n.NodeType == "Seq Scan" && largeTables[n.Relation] {
				scans = append(scans, n.Relation)
			}
		})
	}
	return scans, nil
}

// planNode is a node of EXPLAIN's JSON plan.
type planNode struct {
	NodeType string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Plans    []planNode `json:"Plans"`
}

func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}
