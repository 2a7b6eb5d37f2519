package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/ledger/access"
)

// The data-scale bench: reconciliation reads (the first page of
// /v1/obligations, the summary, the CSV export) and the deadline sweep, on
// a database the size of years of production use.
//
// The data set is generated in PostgreSQL with set-based SQL
// (generate_series), never through the API: ten million delegations
// through the API would take hours. It has the shape the service writes —
// each delegation with its budget journal entries and its events
// (delegation_created, task_status_changed and, for one that left held, the
// transition), events with their commit-order positions (order_xid 0, as
// positions written before the feed's commit order: ordered by pos) — and the budgets
// add up. The event hashes are placeholders: the chains are not what is
// measured. Ids are time-ordered (UUIDv7-like) as the service's are.
//
// To load fast the session skips triggers and foreign-key checks
// (session_replication_role = replica: the bench owns the cluster), writes
// event_positions itself, drops the secondary indexes for the load and
// rebuilds them after it, recounts the ended obligations the skipped
// triggers did not count, and then vacuums and analyzes, as a database
// that has been in use for years would be.

// scaleConfig is the data-scale bench's flags.
type scaleConfig struct {
	Delegations   int
	Open          int
	Requests      int
	SweepDue      int
	SweepReplicas int
	Chunk         int
}

func (c *scaleConfig) register(fs *flag.FlagSet) {
	fs.IntVar(&c.Delegations, "scale-delegations", 10_000_000, "delegations generated for the data-scale runs")
	fs.IntVar(&c.Open, "scale-open", 100_000, "of which open obligations (revocation_pending_compensation, compensation_unconfirmed, escalated)")
	fs.IntVar(&c.Requests, "scale-requests", 300, "requests per reconciliation query (sequential)")
	fs.IntVar(&c.SweepDue, "sweep-due", 100_000, "obligations past their deadline for the sweep (added to the data set); 0 skips the sweep")
	fs.IntVar(&c.SweepReplicas, "sweep-replicas", 3, "service processes sweeping at once")
	fs.IntVar(&c.Chunk, "scale-chunk", 500_000, "delegations generated per load transaction")
}

// quick shrinks the data set for a quick run, except where a flag set it.
func (c *scaleConfig) quick(set map[string]bool) {
	if !set["scale-delegations"] {
		c.Delegations = 200_000
	}
	if !set["scale-open"] {
		c.Open = 10_000
	}
	if !set["scale-requests"] {
		c.Requests = 100
	}
	if !set["sweep-due"] {
		c.SweepDue = 10_000
	}
}

func (c *scaleConfig) check() error {
	switch {
	case c.Delegations < 1 || c.Open < 1 || c.Requests < 1:
		return errors.New("-scale-delegations, -scale-open and -scale-requests must be positive")
	case c.Open > c.Delegations:
		return errors.New("-scale-open exceeds -scale-delegations")
	case c.SweepDue < 0 || c.SweepReplicas < 1 || c.Chunk < 1:
		return errors.New("-sweep-due must not be negative, -sweep-replicas and -scale-chunk must be positive")
	}
	return nil
}

// Targets of the data-scale runs.
const (
	targetScaleP99 = 100 * time.Millisecond
	targetSweep    = 60 * time.Second
)

// reconResult is the latency of one reconciliation query.
type reconResult struct {
	Name     string
	Path     string
	Target   bool // a target applies
	Requests int
	P50, P99 time.Duration
	Max      time.Duration
	Bytes    int
}

// exportResult is one streamed CSV export.
type exportResult struct {
	Rows, Bytes int64
	FirstByte   time.Duration
	Total       time.Duration
}

// sweepResult is the multi-replica deadline sweep.
type sweepResult struct {
	Due      int
	Replicas int
	Took     time.Duration
	// Moved counts obligations moved (compensation_unconfirmed), Events
	// their compensation_deadline_passed events, Twice the obligations
	// with more than one.
	Moved, Events, Twice int
	// PerReplica is how many each replica reported moving (from its log).
	PerReplica []int
	PeakRSS    int64
}

// scaleResult is the data-scale runs.
type scaleResult struct {
	Delegations, Open int
	Events            int64
	LoadTime          time.Duration
	Reused            bool // measured on a kept run's data set (-reuse): LoadTime is not known
	DatabaseBytes     int64
	Recon             []reconResult
	Console           []consoleResult
	Export            []exportResult
	ReconRSS          int64
	// Checkpoints is how the recon service's checkpoint loop covered the
	// data set, which generate writes without any, before it was measured.
	Checkpoints checkpointCatchUp
	Sweep       *sweepResult
}

// checkpointCatchUp is the signing of a data set's first checkpoints: span
// after span of the feed, until its last event is covered.
type checkpointCatchUp struct {
	Took         time.Duration
	Count        int
	LargestBytes int64 // the largest signed payload
}

// runScale generates the data set, measures the reconciliation reads on
// one service process and then the sweep on several.
func runScale(ctx context.Context, h *harness, cfg scaleConfig) (*scaleResult, error) {
	res := &scaleResult{Delegations: cfg.Delegations, Open: cfg.Open}
	const name = "quittance_scale"
	dbURL := h.cluster.URL(name)
	res.Reused = h.reused && hasDataSet(ctx, dbURL, cfg)
	if !res.Reused {
		var err error
		if dbURL, err = h.createDatabase(ctx, name); err != nil {
			return nil, err
		}
		if err := checkDiskSpace(h.dir, cfg.Delegations+cfg.SweepDue); err != nil {
			return nil, err
		}
	}
	// A reused data set gets the migrations added since it was generated.
	migrate := exec.CommandContext(ctx, h.binary, "migrate")
	migrate.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "DATABASE_URL=" + dbURL, "QUITTANCE_LOG_LEVEL=warn"}
	if out, err := migrate.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("quittance migrate: %w: %s", err, out)
	}
	if res.Reused {
		fmt.Fprintf(h.stderr, "reusing the %d delegations (%d open) generated in %s\n", cfg.Delegations, cfg.Open, h.dir)
	} else {
		fmt.Fprintf(h.stderr, "generating %d delegations (%d open) with SQL\n", cfg.Delegations, cfg.Open)
		t0 := time.Now()
		if err := generate(ctx, h, dbURL, cfg); err != nil {
			return nil, err
		}
		res.LoadTime = time.Since(t0)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM events), pg_database_size(current_database())`).
		Scan(&res.Events, &res.DatabaseBytes); err != nil {
		return nil, err
	}
	fmt.Fprintf(h.stderr, "data set: %d events, database %.1f GiB\n", res.Events, float64(res.DatabaseBytes)/(1<<30))

	if err := runRecon(ctx, h, cfg, dbURL, res); err != nil {
		return nil, err
	}
	// The sweep comes after the reads: its set-up adds open obligations,
	// and it rewrites them twice (made due, then moved), which leaves
	// their pages not all-visible and three entries each in
	// delegations_active_cover. Its data set is not reused (hasDataSet).
	if cfg.SweepDue > 0 {
		if res.Sweep, err = runSweep(ctx, h, cfg, dbURL, conn); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// checkpointCatchUpTimeout bounds how long the service may take to cover a
// data set with checkpoints.
const checkpointCatchUpTimeout = 30 * time.Minute

// awaitCheckpoints waits until the latest checkpoint's span ends at the
// feed's last final event, and reports how many checkpoints that took.
func awaitCheckpoints(ctx context.Context, dbURL string) (checkpointCatchUp, error) {
	var r checkpointCatchUp
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return r, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	deadline := time.Now().Add(checkpointCatchUpTimeout)
	for {
		var covered bool
		if err := conn.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM checkpoints),
			       coalesce((SELECT max(length(payload)) FROM checkpoints), 0),
			       coalesce((SELECT through_pos FROM checkpoints ORDER BY id DESC LIMIT 1), 0) = coalesce((
			           SELECT p.pos FROM event_positions p
			           WHERE p.order_xid < pg_snapshot_xmin(pg_current_snapshot())::xid8
			           ORDER BY p.order_xid DESC, p.tx_pos DESC, p.pos DESC LIMIT 1), 0)`).
			Scan(&r.Count, &r.LargestBytes, &covered); err != nil {
			return r, err
		}
		if covered && r.Count > 0 {
			return r, nil
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("%d checkpoints signed, and the data set is still not covered after %s", r.Count, checkpointCatchUpTimeout)
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// hasDataSet reports whether the database at dbURL holds the data set cfg
// asks for, as generate left it: that many delegations (a sweep's added
// ones would make more), that many of them open.
func hasDataSet(ctx context.Context, dbURL string, cfg scaleConfig) bool {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return false // no such database yet
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// Two counts, so that each is read off an index.
	var all, open int
	err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM delegations),
		(SELECT count(*) FROM delegations WHERE obligation_state = ANY ($1))`, openStates).Scan(&all, &open)
	return err == nil && all == cfg.Delegations && open == cfg.Open
}

// checkDiskSpace refuses a data set the scratch directory's file system
// has no room for (about 3 KB per delegation, WAL included).
func checkDiskSpace(dir string, delegations int) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return nil // unknown: let PostgreSQL say so
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	need := int64(delegations) * 3000
	if free < need {
		return fmt.Errorf("%s has %.1f GiB free; %d delegations need about %.1f GiB (set TMPDIR, or lower -scale-delegations)",
			dir, float64(free)/(1<<30), delegations, float64(need)/(1<<30))
	}
	return nil
}

// The states of the generated obligations: open ones take the first list
// in turn, ended ones the second.
var (
	openStates  = []string{"revocation_pending_compensation", "compensation_unconfirmed", "escalated"}
	endedStates = []string{"settled", "released", "compensated", "written_off"}
)

// generateChunk writes delegations lo..hi with their journal entries,
// events and event positions, in one statement. Delegation g is open when g
// is a multiple of stride and g/stride <= open (so the open ones are spread
// evenly over the 90 days), in state open[(g/stride) % len]; otherwise it
// ended, in ended[g % len]. It is created at start + (g-first)·step
// seconds; pending obligations are due at $9. Its tenant (of 10), org
// (of 50), budget (of 100) and task class are drawn from hashes of g, so
// open and ended obligations spread evenly over all of them.
const generateChunk = `
WITH gen AS (
    SELECT g,
           $5::timestamptz + make_interval(secs => (g - $10::bigint) * $6::float8) AS created_at,
           CASE WHEN g % $3 = 0 AND g / $3 <= $4
                THEN ($7::text[])[1 + (g / $3) % cardinality($7::text[])]
                ELSE ($8::text[])[1 + g % cardinality($8::text[])] END AS state,
           md5(g::text) AS h,
           abs(hashint8(g * 5 + 2)) % 100 AS budget
    FROM generate_series($1::bigint, $2::bigint) g
), ids AS (
    SELECT g, created_at, state, budget,
           (lpad(to_hex((extract(epoch FROM created_at) * 1000)::bigint), 12, '0')
            || '7' || substr(h, 1, 3) || '8' || substr(h, 4, 15))::uuid AS id
    FROM gen
), d AS (
    INSERT INTO delegations (id, tenant, business_operation_id, request_hash, org_id, task_class, budget_id,
            amount_minor, currency, remote_task_id, remote_context_id, protocol_version, task_status, task_status_at,
            obligation_state, obligation_reason, cancel_requested_at, compensation_key, compensation_deadline,
            settled_amount_minor, reversed_amount_minor, version, created_at, updated_at)
    SELECT id, 'tenant-' || abs(hashint8(g * 3 + 1)) % 10, 'op-' || g, sha256(('op-' || g)::bytea),
           'org-' || abs(hashint8(g)) % 50,
           (ARRAY['procurement', 'payment', 'provisioning', 'shipment'])[1 + abs(hashint8(g * 7 + 3)) % 4],
           'budget-' || budget, 100 + (g * 37) % 100000, CASE WHEN budget % 4 = 0 THEN 'USD' ELSE 'EUR' END,
           'task-' || g, 'ctx-' || g, '1.0',
           CASE state WHEN 'settled' THEN 'completed' WHEN 'released' THEN 'rejected' WHEN 'written_off' THEN 'failed'
                      ELSE 'canceled' END,
           created_at + interval '1 hour',
           state,
           CASE state WHEN 'settled' THEN 'completed' WHEN 'released' THEN 'rejected_before_work'
                      WHEN 'compensated' THEN 'compensation_acknowledged' WHEN 'written_off' THEN 'written_off'
                      WHEN 'compensation_unconfirmed' THEN 'compensation_unconfirmed' WHEN 'escalated' THEN 'identity_revoked'
                      ELSE 'compensation_required' END,
           CASE WHEN state <> 'settled' THEN created_at + interval '50 minutes' END,
           CASE WHEN state NOT IN ('settled', 'released') THEN 'qc_' || md5(id::text) END,
           CASE WHEN state = 'revocation_pending_compensation' THEN $9::timestamptz
                WHEN state NOT IN ('settled', 'released') THEN created_at + interval '73 hours' END,
           CASE WHEN state = 'settled' THEN 100 + (g * 37) % 100000 END,
           CASE WHEN state = 'compensated' THEN 100 + (g * 37) % 100000 END,
           3, created_at, created_at + interval '2 hours'
    FROM ids ORDER BY id
    RETURNING id, tenant, budget_id, amount_minor, obligation_state, created_at, updated_at
), e AS (
    INSERT INTO events (stream, stream_seq, delegation_id, type, at, actor, obligation_from, obligation_to, data, hashed_data, prev_hash, hash)
    SELECT 'delegation:' || d.id, s.seq, d.id, s.type, d.created_at + s.seq * interval '1 hour', 'bench:generated',
           CASE WHEN s.seq = 3 THEN CASE WHEN d.obligation_state = 'compensation_unconfirmed'
                                         THEN 'revocation_pending_compensation' ELSE 'held' END END,
           CASE WHEN s.seq = 3 THEN d.obligation_state END,
           '{}'::jsonb, '{}'::json,
           CASE WHEN s.seq = 1 THEN '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea
                ELSE sha256((d.id::text || (s.seq - 1))::bytea) END,
           sha256((d.id::text || s.seq)::bytea)
    FROM d
    CROSS JOIN LATERAL (VALUES (1, 'delegation_created'), (2, 'task_status_changed'),
           (3, CASE d.obligation_state WHEN 'compensation_unconfirmed' THEN 'compensation_deadline_passed'
                    WHEN 'escalated' THEN 'identity_revoked' WHEN 'compensated' THEN 'compensation_acked'
                    WHEN 'written_off' THEN 'write_off_executed' ELSE 'task_status_changed' END)) s(seq, type)
    WHERE s.seq < 3 OR d.obligation_state <> 'held'
    ORDER BY d.id, s.seq
    RETURNING seq, delegation_id
), p AS (
    INSERT INTO event_positions (seq, delegation_id, tenant, order_xid, tx_pos)
    SELECT e.seq, e.delegation_id, d.tenant, '0'::xid8, 0 FROM e JOIN d ON d.id = e.delegation_id ORDER BY e.seq
), b AS (
    INSERT INTO budget_entries (budget_id, delegation_id, kind, amount_minor, at)
    SELECT budget_id, id, kind, amount_minor, at FROM (
        SELECT d.budget_id, d.id, 'hold' AS kind, d.amount_minor, d.created_at AS at, 1 AS k FROM d
        UNION ALL
        SELECT d.budget_id, d.id,
               CASE d.obligation_state WHEN 'settled' THEN 'spend' WHEN 'written_off' THEN 'write_off' ELSE 'return' END,
               d.amount_minor, d.updated_at, 2
        FROM d WHERE d.obligation_state IN ('settled', 'released', 'compensated', 'written_off')
    ) x ORDER BY id, k
)
SELECT count(*) FROM d`

// balanceBudgets sets every budget from its delegations, so that
// available + held + spent + written_off = funded and held is the sum of
// the active holds.
const balanceBudgets = `
UPDATE budgets b SET
       held_minor = s.held, spent_minor = s.spent, written_off_minor = s.wo,
       available_minor = b.funded_minor - s.held - s.spent - s.wo
FROM (SELECT budget_id,
             coalesce(sum(amount_minor) FILTER (WHERE obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')), 0) AS held,
             coalesce(sum(amount_minor) FILTER (WHERE obligation_state = 'settled'), 0) AS spent,
             coalesce(sum(amount_minor) FILTER (WHERE obligation_state = 'written_off'), 0) AS wo
      FROM delegations GROUP BY budget_id) s
WHERE b.id = s.budget_id`

// bulkTables are the tables the generator fills.
var bulkTables = []string{"delegations", "events", "event_positions", "budget_entries"}

// droppedIndex is a secondary index (or unique constraint) dropped for the
// load, and how to make it again.
type droppedIndex struct {
	table, name, create string
	constraint          bool
}

// generate writes the data set into dbURL.
func generate(ctx context.Context, h *harness, dbURL string, cfg scaleConfig) error {
	admin, err := pgx.Connect(ctx, h.cluster.URL("postgres"))
	if err != nil {
		return err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	// Fewer, larger checkpoints while loading; reset afterwards.
	for _, q := range []string{"ALTER SYSTEM SET max_wal_size = '8GB'", "ALTER SYSTEM SET checkpoint_timeout = '30min'", "SELECT pg_reload_conf()"} {
		if _, err := admin.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	defer func() {
		for _, q := range []string{"ALTER SYSTEM RESET max_wal_size", "ALTER SYSTEM RESET checkpoint_timeout", "SELECT pg_reload_conf()", "CHECKPOINT"} {
			if _, err := admin.Exec(context.WithoutCancel(ctx), q); err != nil {
				fmt.Fprintf(h.stderr, "%s: %v\n", q, err)
			}
		}
	}()

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := seedOrgsAndBudgets(ctx, conn); err != nil {
		return err
	}
	if err := generateDelegations(ctx, h, conn, cfg); err != nil {
		return err
	}
	return balanceAndVacuum(ctx, h, conn)
}

// seedOrgsAndBudgets sets conn up for a bulk load (no triggers, no
// synchronous commit, large sort memory) and adds the data set's 50 orgs
// and 100 budgets.
func seedOrgsAndBudgets(ctx context.Context, conn *pgx.Conn) error {
	for _, q := range []string{
		"SET session_replication_role = replica", "SET synchronous_commit = off",
		"SET maintenance_work_mem = '1GB'", "SET max_parallel_maintenance_workers = 2", "SET work_mem = '256MB'",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	for _, q := range []string{
		`INSERT INTO remote_orgs (id, name, shared_coordinator, created_at, updated_at)
		 SELECT 'org-' || g, 'Org ' || g, false, now() - interval '120 days', now() FROM generate_series(0, 49) g`,
		`INSERT INTO budgets (id, currency, funded_minor, available_minor, created_at, updated_at)
		 SELECT 'budget-' || g, CASE WHEN g % 4 = 0 THEN 'USD' ELSE 'EUR' END, 1000000000000000, 1000000000000000,
		        now() - interval '120 days', now()
		 FROM generate_series(0, 99) g`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("generate orgs and budgets: %w", err)
		}
	}
	return nil
}

// generateDelegations writes cfg.Delegations delegations, cfg.Open of them
// open, created over the last 90 days, in chunks of cfg.Chunk, with the
// secondary indexes dropped during the load and rebuilt after.
func generateDelegations(ctx context.Context, h *harness, conn *pgx.Conn, cfg scaleConfig) error {
	dropped, err := dropIndexes(ctx, conn)
	if err != nil {
		return err
	}
	var start time.Time
	if err := conn.QueryRow(ctx, `SELECT date_trunc('second', now()) - interval '90 days'`).Scan(&start); err != nil {
		return err
	}
	step := (90 * 24 * time.Hour).Seconds() / float64(cfg.Delegations)
	stride := cfg.Delegations / cfg.Open
	pendingDue := time.Now().Add(72 * time.Hour)
	t0 := time.Now()
	for lo := 1; lo <= cfg.Delegations; lo += cfg.Chunk {
		hi := min(lo+cfg.Chunk-1, cfg.Delegations)
		if _, err := conn.Exec(ctx, generateChunk, lo, hi, stride, cfg.Open, start, step, openStates, endedStates, pendingDue, 1); err != nil {
			return fmt.Errorf("generate delegations %d–%d: %w", lo, hi, err)
		}
		fmt.Fprintf(h.stderr, "  %d delegations (%s)\n", hi, time.Since(t0).Round(time.Second))
	}
	t1 := time.Now()
	for _, ix := range dropped {
		if _, err := conn.Exec(ctx, ix.create); err != nil {
			return fmt.Errorf("rebuild %s: %w", ix.name, err)
		}
	}
	fmt.Fprintf(h.stderr, "  %d indexes rebuilt (%s)\n", len(dropped), time.Since(t1).Round(time.Second))
	return nil
}

// balanceAndVacuum brings what the load skipped up to date (budget
// balances and entries, the event sequence, the counts the triggers keep)
// and vacuums and analyzes the tables.
func balanceAndVacuum(ctx context.Context, h *harness, conn *pgx.Conn) error {
	for _, q := range []string{
		balanceBudgets,
		`INSERT INTO budget_entries (budget_id, kind, amount_minor, at) SELECT id, 'fund', funded_minor, created_at FROM budgets`,
		`SELECT setval(pg_get_serial_sequence('event_positions', 'pos'), (SELECT max(pos) FROM event_positions))`,
		// The load skipped the triggers that keep the ended states' counts
		// (migration 00032) and the shared remote task ids (00033): find
		// them once, as the migrations do.
		`SELECT quittance_recount_ended_obligations()`,
		`SELECT quittance_find_shared_remote_tasks()`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("balance budgets: %w", err)
		}
	}
	t2 := time.Now()
	if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) "+strings.Join(bulkTables, ", ")+", budgets, remote_orgs"); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	if err := vacuumUntilAllVisible(ctx, h, conn); err != nil {
		return err
	}
	fmt.Fprintf(h.stderr, "  vacuumed and analyzed (%s)\n", time.Since(t2).Round(time.Second))
	return nil
}

// vacuumUntilAllVisible vacuums delegations again, a few times, while any
// of its pages is not all-visible after the data set's vacuum (VACUUM sets
// pg_class.relallvisible from the visibility map). A vacuum leaves a page
// unmarked when a snapshot older than its rows is open in the database —
// an autovacuum worker analyzing one of the bulk tables while they load,
// say — and the reconciliation reads' index-only scans then fetch those
// rows from the heap: the reads would measure the load, not the queries.
func vacuumUntilAllVisible(ctx context.Context, h *harness, conn *pgx.Conn) error {
	const tries = 10
	for i := 1; ; i++ {
		var pages, visible int64
		if err := conn.QueryRow(ctx, `SELECT relpages, relallvisible FROM pg_class WHERE oid = 'delegations'::regclass`).
			Scan(&pages, &visible); err != nil {
			return err
		}
		if visible >= pages {
			return nil
		}
		if i == tries {
			fmt.Fprintf(h.stderr, "  warning: %d of the %d pages of delegations are not all-visible after %d vacuums\n", pages-visible, pages, tries)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		if _, err := conn.Exec(ctx, "VACUUM delegations"); err != nil {
			return fmt.Errorf("vacuum delegations: %w", err)
		}
	}
}

// dropIndexes drops the secondary indexes and unique constraints of the
// bulk tables (primary keys stay: foreign keys refer to them) and returns
// how to create them again.
func dropIndexes(ctx context.Context, conn *pgx.Conn) ([]droppedIndex, error) {
	rows, err := conn.Query(ctx, `
		SELECT t.relname, c.relname, pg_get_indexdef(i.indexrelid), con.conname IS NOT NULL,
		       coalesce(pg_get_constraintdef(con.oid), '')
		FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid
		JOIN pg_class t ON t.oid = i.indrelid
		LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid AND con.contype = 'u'
		WHERE t.relname = ANY ($1) AND t.relnamespace = 'public'::regnamespace AND NOT i.indisprimary
		ORDER BY t.relname, c.relname`, bulkTables)
	if err != nil {
		return nil, err
	}
	var out []droppedIndex
	for rows.Next() {
		var ix droppedIndex
		var def, conDef string
		if err := rows.Scan(&ix.table, &ix.name, &def, &ix.constraint, &conDef); err != nil {
			return nil, err
		}
		ix.create = def
		if ix.constraint {
			ix.create = fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s %s",
				pgx.Identifier{ix.table}.Sanitize(), pgx.Identifier{ix.name}.Sanitize(), conDef)
		}
		out = append(out, ix)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, ix := range out {
		q := "DROP INDEX " + pgx.Identifier{ix.name}.Sanitize()
		if ix.constraint {
			q = fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s", pgx.Identifier{ix.table}.Sanitize(), pgx.Identifier{ix.name}.Sanitize())
		}
		if _, err := conn.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	return out, nil
}

// runRecon measures the reconciliation reads on one service process:
// each JSON query cfg.Requests times after ten to warm up, the console's
// obligations page as many times (measureConsole), then the CSV export of
// every open obligation, streamed, three times. The process's
// peak RSS covers all of them.
func runRecon(ctx context.Context, h *harness, cfg scaleConfig, dbURL string, res *scaleResult) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	admin := access.NewTokenSecret()
	svc, err := startService(ctx, serviceConfig{
		Binary: h.binary, Addr: addr, DatabaseURL: dbURL, Token: admin,
		LogPath: filepath.Join(h.dir, "quittance_scale_recon.log"),
		// The sweep would move obligations while they are measured; the
		// checkpoint loop starts covering the data set at once.
		Env: []string{"QUITTANCE_SWEEP_INTERVAL=24h", "QUITTANCE_A2A_STREAMING=false", "QUITTANCE_CHECKPOINT_INTERVAL=1s"},
	})
	if err != nil {
		return err
	}
	defer svc.stop()
	t0 := time.Now()
	c := newClient(svc.URL, 1)
	finance, err := financeToken(ctx, h, c, admin, res.Reused)
	if err != nil {
		return err
	}
	// A live ledger signs checkpoints as it goes; a generated data set has
	// none, so the service covers it first, and is measured after.
	if res.Checkpoints, err = awaitCheckpoints(ctx, dbURL); err != nil {
		return err
	}
	res.Checkpoints.Took = time.Since(t0)
	fmt.Fprintf(h.stderr, "checkpoints: %d signed over the data set in %s, the largest payload %.1f MiB\n",
		res.Checkpoints.Count, res.Checkpoints.Took.Round(time.Second), float64(res.Checkpoints.LargestBytes)/(1<<20))
	if err := checkpoint(ctx, h); err != nil {
		return err
	}
	if err := readyForReads(ctx, h, dbURL); err != nil {
		return err
	}
	if res.Recon, err = measureQueries(ctx, h, c, finance, cfg.Requests); err != nil {
		return err
	}
	if res.Console, err = measureConsole(ctx, svc.URL, finance, cfg.Requests, h.stderr); err != nil {
		return err
	}
	if res.Export, err = measureExports(ctx, h, c, finance, cfg.Open); err != nil {
		return err
	}
	res.ReconRSS, err = svc.peakRSS()
	return err
}

// readyForReads checks, just before the reconciliation reads, that the
// active holds are as a ledger in use keeps them: on all-visible pages,
// so that the summary's and the scrape's index-only scans of
// delegations_active_cover read no heap. In a ledger in use autovacuum
// keeps the visibility map; the bench has its own vacuum, generate's,
// after the last bulk step that writes delegations. Nothing between it
// and the reads writes them (the migrations of a reused data set, the
// service's start, its finance principal and checkpoints do not), and the
// sweep's set-up, which adds obligations, and the sweep, which rewrites
// them, come after the reads (runScale). Should a step ever write them in
// between, each active row costs a heap fetch, a random read at ten
// million delegations; this says so, and vacuums delegations as
// autovacuum would, so that the reads measure the queries.
func readyForReads(ctx context.Context, h *harness, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	scan, err := scanActiveHolds(ctx, conn)
	if err != nil {
		return err
	}
	fmt.Fprintf(h.stderr, "before the reads: %s\n", scan)
	if scan.HeapFetches == 0 {
		return nil
	}
	fmt.Fprintln(h.stderr, "warning: a step after the data set's vacuum wrote its active holds; vacuuming delegations before the reads")
	if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) delegations"); err != nil {
		return fmt.Errorf("vacuum delegations: %w", err)
	}
	if scan, err = scanActiveHolds(ctx, conn); err != nil {
		return err
	}
	fmt.Fprintf(h.stderr, "after the vacuum: %s\n", scan)
	return nil
}

// activeScan is what one read of the active holds off
// delegations_active_cover cost: the rows it returned, and how many index
// entries it had to check in the heap because their page was not
// all-visible (EXPLAIN's Heap Fetches).
type activeScan struct {
	IndexOnly         bool
	Rows, HeapFetches int64
}

func (s activeScan) String() string {
	if !s.IndexOnly {
		return "the active holds are not read by an index-only scan"
	}
	return fmt.Sprintf("the active holds' index-only scan made %d heap fetches for %d rows", s.HeapFetches, s.Rows)
}

// scanActiveHolds runs the summary's read of the active holds (the same
// columns and states as ObligationSummary, constants for its parameters)
// under EXPLAIN ANALYZE, with sequential and bitmap scans off so that the
// plan is the index-only scan at any size of the data set, and reads its
// Heap Fetches.
func scanActiveHolds(ctx context.Context, conn *pgx.Conn) (activeScan, error) {
	var s activeScan
	tx, err := conn.Begin(ctx)
	if err != nil {
		return s, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	var plan string
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off"); err != nil {
		return s, err
	}
	if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON)
		SELECT org_id, currency, obligation_state, count(*), sum(amount_minor), min(created_at)
		FROM delegations
		WHERE obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')
		GROUP BY org_id, currency, obligation_state`).Scan(&plan); err != nil {
		return s, fmt.Errorf("explain the active holds' read: %w", err)
	}
	var explained []struct{ Plan planNode }
	if err := json.Unmarshal([]byte(plan), &explained); err != nil || len(explained) != 1 {
		return s, fmt.Errorf("the active holds' plan: %v: %s", err, plan)
	}
	explained[0].Plan.addScans(&s)
	return s, nil
}

// planNode is a node of an EXPLAIN (ANALYZE, FORMAT JSON) plan, with the
// fields scanActiveHolds reads.
type planNode struct {
	NodeType    string     `json:"Node Type"`
	Relation    string     `json:"Relation Name"`
	ActualRows  int64      `json:"Actual Rows"`
	ActualLoops int64      `json:"Actual Loops"`
	HeapFetches int64      `json:"Heap Fetches"`
	Plans       []planNode `json:"Plans"`
}

// addScans adds the index-only scans of delegations under n to s.
func (n planNode) addScans(s *activeScan) {
	if n.NodeType == "Index Only Scan" && n.Relation == "delegations" {
		s.IndexOnly = true
		s.Rows += n.ActualRows * n.ActualLoops
		s.HeapFetches += n.HeapFetches
	}
	for _, c := range n.Plans {
		c.addScans(s)
	}
}

// reconQueries are the reconciliation reads runRecon measures; target
// marks those with a latency target.
var reconQueries = []struct {
	name, path string
	target     bool
}{
	{"obligations, first page", "/v1/obligations", true},
	{"obligations summary", "/v1/obligations/summary", true},
	{"obligations, org + state", "/v1/obligations?org_id=org-7&state=compensation_unconfirmed", false},
	{"obligations, tenant, older than 30d", "/v1/obligations?tenant=tenant-3&older_than=30d&limit=50", false},
	// The scrape-time collector reads the same tables at this size.
	{"metrics scrape", "/metrics", false},
}

// measureQueries times each of reconQueries requests times with the
// finance token, after ten requests that warm caches and connections.
func measureQueries(ctx context.Context, h *harness, c *client, finance string, requests int) ([]reconResult, error) {
	var out []reconResult
	for _, q := range reconQueries {
		r := reconResult{Name: q.name, Path: q.path, Target: q.target, Requests: requests}
		var lat latencies
		for i := range requests + 10 {
			t := time.Now()
			resp, err := c.do(ctx, http.MethodGet, q.path, finance, "", nil)
			d := time.Since(t)
			if err != nil {
				return nil, fmt.Errorf("GET %s: %w", q.path, err)
			}
			if resp.Status != http.StatusOK {
				return nil, fmt.Errorf("GET %s: status %d: %s", q.path, resp.Status, resp.Body)
			}
			if i >= 10 { // the first ten warm the caches and connections
				lat = append(lat, d)
				r.Bytes = len(resp.Body)
			}
		}
		r.P50, r.P99, r.Max = lat.quantile(0.5), lat.quantile(0.99), lat.quantile(1)
		fmt.Fprintf(h.stderr, "%-40s p50 %s p99 %s\n", q.name, ms(r.P50), ms(r.P99))
		out = append(out, r)
	}
	return out, nil
}

// measureExports streams the CSV export of every open obligation three
// times and checks it has the data set's open rows.
func measureExports(ctx context.Context, h *harness, c *client, finance string, open int) ([]exportResult, error) {
	var out []exportResult
	for range 3 {
		e, err := exportCSV(ctx, c, finance)
		if err != nil {
			return nil, err
		}
		if e.Rows != int64(open) {
			return nil, fmt.Errorf("the CSV export has %d rows; the data set has %d open obligations", e.Rows, open)
		}
		fmt.Fprintf(h.stderr, "CSV export: %d rows, %.1f MiB, first byte %s, all %s\n",
			e.Rows, float64(e.Bytes)/(1<<20), ms(e.FirstByte), e.Total.Round(time.Millisecond))
		out = append(out, e)
	}
	return out, nil
}

// financeToken returns the finance token the reconciliation reads use. A
// fresh data set gets the bench's two on-call principals (made with the
// bootstrap token, which may make only those) and a finance principal,
// whose token is kept beside the cluster; a reused one has them already,
// so the kept token is read back.
func financeToken(ctx context.Context, h *harness, c *client, bootstrap string, reused bool) (string, error) {
	path := filepath.Join(h.dir, "scale-finance-token")
	if reused {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("-reuse: the data set's finance token: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	oncall, oncall2, err := twoOncall(ctx, c, bootstrap)
	if err != nil {
		return "", err
	}
	finance, err := onCall{c: c, token: oncall, approver: oncall2}.newToken(ctx, "finance", "", "bench-finance")
	if err != nil {
		return "", err
	}
	return finance, os.WriteFile(path, []byte(finance+"\n"), 0o600)
}

// exportTimeout bounds one CSV export. The bench client's per-request
// timeout is for single pages; an export of every open obligation at 10M
// delegations streams for longer than that, and is measured whole.
const exportTimeout = 20 * time.Minute

// exportCSV reads the CSV export of every open obligation as it streams,
// keeping none of it.
func exportCSV(ctx context.Context, c *client, token string) (exportResult, error) {
	var e exportResult
	ctx, cancel := context.WithTimeout(ctx, exportTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/obligations?format=csv", nil)
	if err != nil {
		return e, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	t0 := time.Now()
	streaming := &http.Client{Transport: c.hc.Transport} // no whole-request timeout: ctx bounds it
	resp, err := streaming.Do(req)
	if err != nil {
		return e, fmt.Errorf("CSV export: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return e, fmt.Errorf("CSV export: status %d: %s", resp.StatusCode, b)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	if _, err := br.Peek(1); err != nil {
		return e, fmt.Errorf("CSV export: %w", err)
	}
	e.FirstByte = time.Since(t0)
	buf := make([]byte, 64<<10)
	var last byte // the last byte of the previous read: a CRLF may span two
	for {
		n, err := br.Read(buf)
		e.Bytes += int64(n)
		e.Rows += int64(bytes.Count(buf[:n], []byte("\r\n")))
		if n > 0 {
			if last == '\r' && buf[0] == '\n' {
				e.Rows++
			}
			last = buf[n-1]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return e, fmt.Errorf("CSV export after %d bytes: %w", e.Bytes, err)
		}
	}
	e.Total = time.Since(t0)
	e.Rows-- // the header
	return e, nil
}

// runSweep adds cfg.SweepDue pending obligations to the data set, starts
// cfg.SweepReplicas service processes together, makes the obligations due
// at once, and times until none is left; then it checks that each was
// moved exactly once. It leaves those obligations' pages not all-visible,
// so a kept database read after a run is not as the reads found it: an
// index-only scan of the active holds there makes about three heap
// fetches per swept obligation.
func runSweep(ctx context.Context, h *harness, cfg scaleConfig, dbURL string, conn *pgx.Conn) (*sweepResult, error) {
	res := &sweepResult{Due: cfg.SweepDue, Replicas: cfg.SweepReplicas}
	future, err := addSweepObligations(ctx, h, cfg, conn)
	if err != nil {
		return nil, err
	}
	admin := access.NewTokenSecret()
	svcs, err := startReplicas(ctx, h, replicaSet{n: cfg.SweepReplicas, dbURL: dbURL, token: admin, name: "quittance_scale_sweep", env: func(int) []string {
		// Info level: each replica logs how many obligations it moved.
		return []string{"QUITTANCE_SWEEP_INTERVAL=250ms", "QUITTANCE_A2A_STREAMING=false", "QUITTANCE_LOG_LEVEL=info"}
	}})
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, s := range svcs {
			s.stop()
		}
	}()
	if err := checkpoint(ctx, h); err != nil {
		return nil, err
	}
	if res.Took, err = timeSweep(ctx, h, cfg, conn, future); err != nil {
		return nil, err
	}
	lo, hi := cfg.Delegations+1, cfg.Delegations+cfg.SweepDue
	if err := conn.QueryRow(ctx, `
		WITH s AS (
		    SELECT d.id, d.obligation_state, count(e.seq) AS n
		    FROM delegations d
		    LEFT JOIN events e ON e.delegation_id = d.id AND e.type = 'compensation_deadline_passed'
		    WHERE d.business_operation_id IN (SELECT 'op-' || g FROM generate_series($1::bigint, $2::bigint) g)
		    GROUP BY d.id, d.obligation_state)
		SELECT count(*) FILTER (WHERE obligation_state = 'compensation_unconfirmed'),
		       coalesce(sum(n), 0), count(*) FILTER (WHERE n > 1)
		FROM s`, lo, hi).Scan(&res.Moved, &res.Events, &res.Twice); err != nil {
		return nil, err
	}
	for _, s := range svcs {
		rss, err := s.peakRSS()
		if err != nil {
			return nil, err
		}
		res.PeakRSS = max(res.PeakRSS, rss)
		res.PerReplica = append(res.PerReplica, movedInLog(s.cfg.LogPath))
	}
	fmt.Fprintf(h.stderr, "sweep: %d moved in %s by %d replicas %v; %d events, %d moved twice\n",
		res.Moved, res.Took.Round(time.Millisecond), res.Replicas, res.PerReplica, res.Events, res.Twice)
	return res, nil
}

// addSweepObligations adds the sweep's cfg.SweepDue open, pending
// obligations after the data set's delegations, all due at the returned
// time a day from now, which no other obligation is.
func addSweepObligations(ctx context.Context, h *harness, cfg scaleConfig, conn *pgx.Conn) (time.Time, error) {
	fmt.Fprintf(h.stderr, "adding %d pending obligations for the sweep\n", cfg.SweepDue)
	lo, hi := cfg.Delegations+1, cfg.Delegations+cfg.SweepDue
	future := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return future, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
		return future, err
	}
	// Every one of them is open (stride 1) and pending, created over the
	// last day.
	start := time.Now().Add(-24 * time.Hour).Truncate(time.Second)
	step := (24 * time.Hour).Seconds() / float64(cfg.SweepDue)
	if _, err := tx.Exec(ctx, generateChunk, lo, hi, 1, hi, start, step,
		[]string{"revocation_pending_compensation"}, endedStates, future, lo); err != nil {
		return future, fmt.Errorf("generate the sweep's obligations: %w", err)
	}
	if _, err := tx.Exec(ctx, balanceBudgets); err != nil {
		return future, err
	}
	if _, err := tx.Exec(ctx, `SELECT setval(pg_get_serial_sequence('event_positions', 'pos'), (SELECT max(pos) FROM event_positions))`); err != nil {
		return future, err
	}
	if err := tx.Commit(ctx); err != nil {
		return future, err
	}
	_, err = conn.Exec(ctx, "VACUUM (ANALYZE) delegations, events, event_positions, budget_entries")
	return future, err
}

// timeSweep makes the sweep's obligations (those due at future) due now
// in one statement and returns how long the replicas took, from its
// commit, until none is left due.
func timeSweep(ctx context.Context, h *harness, cfg scaleConfig, conn *pgx.Conn, future time.Time) (time.Duration, error) {
	tag, err := conn.Exec(ctx, `UPDATE delegations SET compensation_deadline = now() - interval '1 minute'
		WHERE obligation_state = 'revocation_pending_compensation' AND compensation_deadline = $1`, future)
	t0 := time.Now()
	if err != nil {
		return 0, fmt.Errorf("make the obligations due: %w", err)
	}
	if tag.RowsAffected() != int64(cfg.SweepDue) {
		return 0, fmt.Errorf("made %d obligations due, want %d", tag.RowsAffected(), cfg.SweepDue)
	}
	fmt.Fprintf(h.stderr, "%d obligations due; %d replicas sweeping\n", cfg.SweepDue, cfg.SweepReplicas)
	deadline := t0.Add(10 * time.Minute)
	for {
		var left int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM delegations
			WHERE obligation_state = 'revocation_pending_compensation' AND compensation_deadline <= now()`).Scan(&left); err != nil {
			return 0, err
		}
		if left == 0 {
			return time.Since(t0), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d obligations still due 10 minutes after the sweep started", left)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// movedInLog sums what a replica's log says its sweeps moved.
func movedInLog(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return -1
	}
	defer f.Close()
	total := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg   string `json:"msg"`
			Moved int    `json:"moved"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && strings.HasPrefix(line.Msg, "compensation sweep moved") {
			total += line.Moved
		}
	}
	return total
}
