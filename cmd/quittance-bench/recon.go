package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/ledger"
)

// reconInfo describes the bulk-loaded reconciliation data set.
type reconInfo struct {
	Total, Open int
	LoadTime    time.Duration
}

// bulkLoad is the reconciliation data set, written straight with SQL in
// the shape the service writes: 50 orgs, 100 budgets (EUR and USD), total
// delegations created over the last 90 days, of which the first open are
// open obligations (revocation_pending_compensation,
// compensation_unconfirmed, escalated in turn) and the rest ended
// (settled, released, compensated, written_off in turn). Each delegation
// has its journal entries (hold, and the movement out of an ended one) and
// its events: delegation_created, task_status_changed and the transition
// (the obligation list reads the last event of each delegation). Budgets
// are then set from the delegations so that available + held + spent +
// written_off = funded and held is the sum of the active holds. Event
// hashes are placeholders: the chains are not what is measured. Rows are
// inserted in key order, so the indexes grow at their right edge instead
// of thrashing the buffer cache.
var bulkLoad = []string{
	`INSERT INTO remote_orgs (id, name, shared_coordinator, created_at, updated_at)
	 SELECT 'org-' || g, 'Org ' || g, false, now() - interval '120 days', now() FROM generate_series(0, 49) g`,
	`INSERT INTO budgets (id, currency, funded_minor, available_minor, created_at, updated_at)
	 SELECT 'budget-' || g, CASE WHEN g % 4 = 0 THEN 'USD' ELSE 'EUR' END, 1000000000000000, 1000000000000000,
	        now() - interval '120 days', now()
	 FROM generate_series(0, 99) g`,
	`CREATE TEMP TABLE gen AS
	 SELECT g,
	        gen_random_uuid() AS id,
	        CASE WHEN g <= $2 THEN (ARRAY['revocation_pending_compensation', 'compensation_unconfirmed', 'escalated'])[1 + g % 3]
	             ELSE (ARRAY['settled', 'released', 'compensated', 'written_off'])[1 + g % 4] END AS state,
	        now() - make_interval(secs => (g::bigint * 7919) % (90 * 86400)) AS created_at
	 FROM generate_series(1, $1::int) g`,
	`INSERT INTO delegations (id, tenant, business_operation_id, request_hash, org_id, task_class, budget_id,
	        amount_minor, currency, remote_task_id, remote_context_id, protocol_version, task_status, task_status_at,
	        obligation_state, obligation_reason, cancel_requested_at, compensation_key, compensation_deadline,
	        version, created_at, updated_at)
	 SELECT id, 'tenant-' || g % 10, 'op-' || g, sha256(('op-' || g)::bytea), 'org-' || g % 50,
	        (ARRAY['procurement', 'payment', 'provisioning', 'shipment'])[1 + g % 4], 'budget-' || g % 100,
	        100 + (g::bigint * 37) % 100000, CASE WHEN (g % 100) % 4 = 0 THEN 'USD' ELSE 'EUR' END,
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
	        CASE WHEN state = 'revocation_pending_compensation' THEN now() + interval '72 hours'
	             WHEN state NOT IN ('settled', 'released') THEN created_at + interval '73 hours' END,
	        3, created_at, created_at + interval '2 hours'
	 FROM gen ORDER BY id`,
	`INSERT INTO budget_entries (budget_id, delegation_id, kind, amount_minor, at)
	 SELECT d.budget_id, d.id, 'hold', d.amount_minor, d.created_at FROM delegations d`,
	`INSERT INTO budget_entries (budget_id, delegation_id, kind, amount_minor, at)
	 SELECT d.budget_id, d.id,
	        CASE d.obligation_state WHEN 'settled' THEN 'spend' WHEN 'written_off' THEN 'write_off' ELSE 'return' END,
	        d.amount_minor, d.updated_at
	 FROM delegations d WHERE d.obligation_state IN ('settled', 'released', 'compensated', 'written_off')`,
	`INSERT INTO events (stream, stream_seq, delegation_id, type, at, actor, obligation_from, obligation_to, data, hashed_data, prev_hash, hash)
	 SELECT 'delegation:' || d.id, s.seq, d.id, s.type, d.created_at + s.seq * interval '1 hour', 'bench:bulk',
	        CASE WHEN s.seq = 3 THEN CASE WHEN d.obligation_state = 'compensation_unconfirmed' THEN 'revocation_pending_compensation' ELSE 'held' END END,
	        CASE WHEN s.seq = 3 THEN d.obligation_state END,
	        '{}'::jsonb, '{}'::json,
	        sha256((d.id::text || (s.seq - 1))::bytea), sha256((d.id::text || s.seq)::bytea)
	 FROM delegations d
	 CROSS JOIN LATERAL (VALUES (1, 'delegation_created'), (2, 'task_status_changed'),
	        (3, CASE d.obligation_state WHEN 'compensation_unconfirmed' THEN 'compensation_deadline_passed'
	                 WHEN 'escalated' THEN 'identity_revoked' WHEN 'compensated' THEN 'compensation_acked'
	                 WHEN 'written_off' THEN 'write_off_executed' ELSE 'task_status_changed' END)) s(seq, type)
	 WHERE s.seq < 3 OR d.obligation_state <> 'held'
	 ORDER BY d.id, s.seq`,
	`UPDATE budgets b SET
	        held_minor = s.held, spent_minor = s.spent, written_off_minor = s.wo,
	        available_minor = b.funded_minor - s.held - s.spent - s.wo
	 FROM (SELECT budget_id,
	              coalesce(sum(amount_minor) FILTER (WHERE obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')), 0) AS held,
	              coalesce(sum(amount_minor) FILTER (WHERE obligation_state = 'settled'), 0) AS spent,
	              coalesce(sum(amount_minor) FILTER (WHERE obligation_state = 'written_off'), 0) AS wo
	       FROM delegations GROUP BY budget_id) s
	 WHERE b.id = s.budget_id`,
	`INSERT INTO budget_entries (budget_id, kind, amount_minor, at)
	 SELECT id, 'fund', funded_minor, created_at FROM budgets`,
	`ANALYZE`,
}

// runRecon bulk-loads the reconciliation data set into a fresh database
// behind a running service and measures the latency of the obligation
// list (first JSON page, and filtered) and the summary.
func runRecon(ctx context.Context, h *harness, cfg benchConfig) ([]reconResult, reconInfo, error) {
	info := reconInfo{Total: cfg.ReconTotal, Open: cfg.ReconOpen}
	dbURL, err := h.createDatabase(ctx, "quittance_recon")
	if err != nil {
		return nil, info, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, info, err
	}
	admin := ledger.NewTokenSecret()
	svc, err := startService(ctx, serviceConfig{
		Binary: h.binary, Addr: addr, DatabaseURL: dbURL, Token: admin,
		LogPath: filepath.Join(h.dir, "quittance_recon.log"),
		// The sweep would move loaded obligations while they are measured.
		Env: []string{"QUITTANCE_SWEEP_INTERVAL=24h", "QUITTANCE_A2A_STREAMING=false"},
	})
	if err != nil {
		return nil, info, err
	}
	defer svc.stop()

	fmt.Fprintf(h.stderr, "bulk-loading %d delegations (%d open)\n", cfg.ReconTotal, cfg.ReconOpen)
	t0 := time.Now()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, info, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for i, q := range bulkLoad {
		var args []any
		if i == 2 {
			args = []any{cfg.ReconTotal, cfg.ReconOpen}
		}
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			return nil, info, fmt.Errorf("bulk load step %d: %w", i+1, err)
		}
	}
	info.LoadTime = time.Since(t0)
	fmt.Fprintf(h.stderr, "loaded in %s\n", info.LoadTime.Round(time.Second))

	c := newClient(svc.URL, 1)
	finance, err := newToken(ctx, c, admin, "finance", "", "bench-finance")
	if err != nil {
		return nil, info, err
	}
	queries := []struct{ name, path string }{
		{"obligations, first page", "/v1/obligations"},
		{"obligations, org + state", "/v1/obligations?org_id=org-7&state=compensation_unconfirmed"},
		{"obligations, tenant, older than 30d", "/v1/obligations?tenant=tenant-3&older_than=30d&limit=50"},
		{"obligations summary", "/v1/obligations/summary"},
	}
	var out []reconResult
	for _, q := range queries {
		r := reconResult{Name: q.name, Path: q.path, Requests: cfg.ReconRequests}
		var lat latencies
		for i := range cfg.ReconRequests + 10 {
			t := time.Now()
			resp, err := c.do(ctx, http.MethodGet, q.path, finance, "", nil)
			d := time.Since(t)
			if err != nil {
				return nil, info, fmt.Errorf("GET %s: %w", q.path, err)
			}
			if resp.Status != http.StatusOK {
				return nil, info, fmt.Errorf("GET %s: status %d: %s", q.path, resp.Status, resp.Body)
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
	return out, info, nil
}
