package apitest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Recorder is a pgx tracer that records, while a test asks it to
// (During), the round trips a service's connections make to PostgreSQL
// and every statement sent, with its arguments: each statement sent on
// its own and each batch is one round trip, a batch's statements are
// recorded one by one. Preparing a statement the first time a connection
// sends it is not recorded (it happens once per connection), nor is the
// wake-up of feed readers (FeedNotify), sent after the commit, outside
// the request's transaction. An Env records through one when started
// WithRecorder.
type Recorder struct {
	mu         sync.Mutex
	on         bool
	trips      []string
	statements []Statement
}

// Statement is a statement as a connection sent it.
type Statement struct {
	SQL  string
	Args []any
}

func (r *Recorder) record(s string, statements ...Statement) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on && !strings.Contains(s, "name: FeedNotify ") {
		r.trips = append(r.trips, strings.Join(strings.Fields(s), " "))
		r.statements = append(r.statements, statements...)
	}
}

// TraceQueryStart implements pgx.QueryTracer.
func (r *Recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.record(d.SQL, Statement{SQL: d.SQL, Args: d.Args})
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (r *Recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart implements pgx.BatchTracer.
func (r *Recorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var first []string
	var statements []Statement
	for _, q := range d.Batch.QueuedQueries {
		first = append(first, strings.SplitN(strings.TrimPrefix(q.SQL, "-- name: "), " ", 2)[0])
		statements = append(statements, Statement{SQL: q.SQL, Args: q.Arguments})
	}
	r.record("batch: "+strings.Join(first, ", "), statements...)
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (r *Recorder) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (r *Recorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// During records what f sends, forgetting what was recorded before, and
// returns its round trips.
func (r *Recorder) During(f func()) []string {
	r.mu.Lock()
	r.on, r.trips, r.statements = true, nil, nil
	r.mu.Unlock()
	f()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.trips
}

// Statements returns the statements the last During recorded.
func (r *Recorder) Statements() []Statement {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.statements)
}

// WithRecorder has New trace the Env's connections through r (Start
// takes the pool it is given, traced or not).
func WithRecorder(r *Recorder) Option { return func(o *options) { o.recorder = r } }

// LargeTables are the tables that grow with the ledger, each with what
// makes it grow: a statement of a per-request or per-job path that reads
// one of them whole costs time in proportion to the ledger's size, not to
// its work. Every other table is bounded by configuration (orgs, budgets,
// task classes, principals and their tokens, webhook endpoints, key
// sets), by what is open right now (pending changes, which expire; open
// cases; the org backoff), by a retention (console sessions, token
// refusal samples), or by rare events (the releases an identity
// revocation discredits, one per declaration of a revoked org), so
// scanning it is no cost of the ledger's size.
var LargeTables = map[string]string{
	"delegations":             "one a delegation",
	"events":                  "several a delegation",
	"event_positions":         "one an event",
	"budget_entries":          "several a delegation",
	"used_token_ids":          "one a signed token",
	"compensation_evidence":   "one an evidence submission",
	"webhook_deliveries":      "one an event an endpoint or push config subscribes to",
	"a2a_outbox":              "finished jobs stay: several a dispatched delegation",
	"a2a_delegations":         "one a dispatched delegation",
	"delegation_remote_tasks": "one a remote task a delegation named",
	"task_snapshots":          "one a dispatched delegation",
	"write_offs":              "one a write-off request",
	"gateway_push_configs":    "those the gateway's callers set, per task",
	"delegation_messages":     "one a follow-up message",
	"delegation_links":        "one a link between delegations",
	"delegation_cases":        "one a delegation on-call handled",
	"checkpoints":             "one a signing interval, kept for ever",
}

// SeedLargeTables adds n settled, dispatched delegations of org on
// budget (tenant "seed"), each with its creation event, its hold's
// journal entry, a used token id, its evidence, its finished dispatch
// job, its remote task and snapshot, a link, a case, an executed
// write-off, a sent follow-up message, a gateway push configuration and a
// delivered push, and as many checkpoints, and has PostgreSQL analyze
// them, as a ledger in use would be.
func SeedLargeTables(t testing.TB, conn *pgx.Conn, n int, org, budget string) {
	t.Helper()
	ctx := context.Background()
	// Every statement takes the three parameters; those that need only
	// the seeded delegations still name them, so all bind alike.
	const seeded = ` FROM delegations WHERE tenant = 'seed' AND $1::integer > 0 AND $2::text <> '' AND $3::text <> ''`
	// The delegations go in a few thousand a statement: a trigger takes an
	// advisory lock for each remote task recorded, and PostgreSQL's lock
	// table holds only so many at once.
	const chunk = 2000
	for from := 1; from <= n; from += chunk {
		if _, err := conn.Exec(ctx, `INSERT INTO delegations (id, tenant, business_operation_id, request_hash, org_id,
		     task_class, budget_id, amount_minor, currency, remote_task_id, task_status, obligation_state,
		     settled_amount_minor, version, created_at, updated_at)
		 SELECT gen_random_uuid(), 'seed', 'seed-' || g, '\x00', $3, 'seed', $4, 1, 'EUR', 'seed-task-' || g,
		     'completed', 'settled', 1, 2, now(), now()
		 FROM generate_series($1::integer, $2::integer) g`, from, min(from+chunk-1, n), org, budget); err != nil {
			t.Fatalf("seed delegations: %v", err)
		}
	}
	for _, q := range []string{
		`INSERT INTO events (stream, stream_seq, delegation_id, type, at, actor, data, hashed_data, prev_hash, hash)
		 SELECT 'delegation:' || id, 1, id, 'delegation_created', now(), 'seed', '{}', '{}', '\x00', '\x00'` + seeded,
		`INSERT INTO budget_entries (budget_id, delegation_id, kind, amount_minor, at)
		 SELECT $3, id, 'hold', 1, now()` + seeded,
		`INSERT INTO used_token_ids (org_id, jti, delegation_id, token_sha256, used_at)
		 SELECT $2, 'seed-' || id, id, '\x00', now()` + seeded,
		`INSERT INTO compensation_evidence (delegation_id, idempotency_key, kind, channel, payload_sha256, status,
		     receipt, data, received_at)
		 SELECT id, 'seed-' || id, 'compensation_ack', 'http', '\x00', 'unused', '{}', '{}', now()` + seeded,
		`INSERT INTO a2a_outbox (delegation_id, kind, attempts, run_after, done_at, created_at, updated_at)
		 SELECT id, 'dispatch', 1, now(), now(), now(), now()` + seeded,
		`INSERT INTO a2a_delegations (delegation_id, dispatched, observed_at, created_at, updated_at)
		 SELECT id, true, now(), now(), now()` + seeded,
		`INSERT INTO delegation_remote_tasks (delegation_id, task_id, purpose, found_by, status, found_at, updated_at)
		 SELECT id, remote_task_id, 'dispatch', 'seed', 'completed', now(), now()` + seeded,
		`INSERT INTO delegation_links (delegation_id, linked_id, kind, created_at) SELECT id, id, 'reference', now()` + seeded,
		`INSERT INTO delegation_cases (delegation_id, notes, updated_at) SELECT id, 1, now()` + seeded,
		`INSERT INTO task_snapshots (delegation_id, snapshot, updated_at) SELECT id, '{}', now()` + seeded,
		`INSERT INTO write_offs (id, delegation_id, amount_minor, currency, reason, status, requested_by, requested_by_id,
		     approved_by, approved_by_id, created_at, executed_at)
		 SELECT gen_random_uuid(), id, 1, 'EUR', 'seed', 'executed', 'seed', gen_random_uuid(), 'seed', gen_random_uuid(), now(), now()` + seeded,
		`INSERT INTO delegation_messages (delegation_id, message_id, a2a_message_id, request_hash, payload, status, created_at, updated_at)
		 SELECT id, 'seed', 'seed-' || id, '\x00', '{}', 'sent', now(), now()` + seeded,
		`INSERT INTO gateway_push_configs (delegation_id, id, tenant, url, token, created_at, updated_at)
		 SELECT id, 'seed', 'seed', 'http://127.0.0.1:9/push', 'seed', now(), now()` + seeded,
		`INSERT INTO webhook_deliveries (tenant, event_seq, status, attempts, next_attempt_at, created_at, delivered_at,
		     updated_at, push_delegation_id, push_config_id)
		 SELECT 'seed', 1, 'delivered', 1, now(), now(), now(), now(), id, 'seed'` + seeded,
		// Checkpoints through positions before any event the test appends,
		// so that none signs its streams; ids far above the ones it may sign.
		`INSERT INTO checkpoints (id, created_at, created_by, kid, streams, heads_sha256, payload, jws,
		     through_pos, through_order_xid, through_tx_pos)
		 SELECT 1000000000 + g, now(), 'seed', 'seed', 0, '\x00', '{"streams": []}', 'seed', g, '1'::xid8, g
		 FROM generate_series(1, $1::integer) g WHERE $2::text <> '' AND $3::text <> ''`,
	} {
		if _, err := conn.Exec(ctx, q, n, org, budget); err != nil {
			t.Fatalf("seed: %v\n%s", err, q)
		}
	}
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
}

// CheckPlansOf seeds e's database with rows of org on budget in every
// table that grows with the ledger (SeedLargeTables), records what run
// sends through rt (e's recorder, WithRecorder) and plans each statement
// generic (CheckPlans): a sequential scan of one of those tables fails t.
// It logs the statements planned, as those of what.
func (e *Env) CheckPlansOf(t testing.TB, rt *Recorder, org, budget, what string, run func()) {
	t.Helper()
	ctx := context.Background()
	owner, err := pgx.Connect(ctx, e.Pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	SeedLargeTables(t, owner, 20000, org, budget)
	rt.During(run)
	statements := rt.Statements()
	if len(statements) < 10 {
		t.Fatalf("recorded %d statements of %s; the recorder missed them", len(statements), what)
	}
	names := CheckPlans(t, owner, statements)
	t.Logf("planned %d statements of %s: %s", len(names), what, strings.Join(names, ", "))
}

// CheckPlans plans every statement of statements (once each) as a pooled
// connection runs it once its prepared statement goes generic (EXPLAIN
// EXECUTE under plan_cache_mode=force_generic_plan, with the statement's
// own arguments), on conn, and fails t for each that reads one of
// LargeTables with a sequential scan. It returns the names of the
// statements it planned.
func CheckPlans(t testing.TB, conn *pgx.Conn, statements []Statement) []string {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	planned := map[string]bool{}
	var names []string
	for _, s := range statements {
		if planned[s.SQL] || !explainable(s.SQL) {
			continue
		}
		planned[s.SQL] = true
		names = append(names, StatementName(s.SQL))
		scans, err := wholeTableScans(ctx, conn, len(planned), s)
		if err != nil {
			t.Fatalf("planning %s: %v", StatementName(s.SQL), err)
		}
		if len(scans) > 0 {
			t.Errorf("%s scans %s whole", StatementName(s.SQL), strings.Join(scans, ", "))
		}
	}
	return names
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

// StatementName is the sqlc name of a query, or its first line.
func StatementName(sql string) string {
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
func wholeTableScans(ctx context.Context, conn *pgx.Conn, i int, s Statement) ([]string, error) {
	name := fmt.Sprintf("planned_%d", i)
	desc, err := conn.Prepare(ctx, name, s.SQL)
	if err != nil {
		return nil, err
	}
	if len(desc.ParamOIDs) != len(s.Args) {
		return nil, fmt.Errorf("%d parameters, %d arguments", len(desc.ParamOIDs), len(s.Args))
	}
	literals := make([]string, len(desc.ParamOIDs))
	for j, oid := range desc.ParamOIDs {
		var typ string
		if err := conn.QueryRow(ctx, "SELECT format_type($1::oid, NULL)", oid).Scan(&typ); err != nil {
			return nil, err
		}
		text, err := conn.TypeMap().Encode(oid, pgtype.TextFormatCode, s.Args[j], nil)
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
			if _, large := LargeTables[n.Relation]; large && n.NodeType == "Seq Scan" {
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
