package console_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
)

// benchSize reads a size from the environment, with a default.
func benchSize(b *testing.B, name string, dflt int) int {
	raw := os.Getenv(name)
	if raw == "" {
		return dflt
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 {
		b.Fatalf("%s=%q is not a count", name, raw)
	}
	return n
}

// BenchmarkObligationsPage measures the server-side render time of the
// console's obligations page (the needs-action queue, 50 rows, oldest
// first, and the same filtered to one org and sorted by amount) on a
// database of QUITTANCE_BENCH_DELEGATIONS delegations (default 1,000,000)
// of which QUITTANCE_BENCH_OPEN are open obligations (default 10,000).
// It reports p50_ms and p99_ms per request besides ns/op; the target is a
// p99 under 200 ms. Run it with
//
//	go run ./sql/pgtest/pgtestenv go test -run '^$' -bench BenchmarkObligationsPage \
//	    -benchtime 200x ./cmd/quittance/internal/console/
//
// Rows are inserted with SQL (a delegation and, for open ones, their last
// event), not through the API: the page reads the delegations, their
// cases and their last event, and that is what is measured.
func BenchmarkObligationsPage(b *testing.B) {
	e := seedBench(b)
	// Sign in once; every request carries the session cookie.
	w := &world{Env: e}
	c := w.client(b)
	c.signIn(e.OncallToken)
	cookies := c.client.Jar.Cookies(mustURLB(b, e.URL+"/console/"))
	pages := []string{
		"/console/obligations",
		"/console/obligations?org=org-a&sort=amount_desc",
		"/console/obligations?state=compensation_unconfirmed&older=1h",
	}
	var samples []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		req := httptest.NewRequest(http.MethodGet, pages[i%len(pages)], nil)
		for _, ck := range cookies {
			req.AddCookie(ck)
		}
		rec := httptest.NewRecorder()
		t0 := time.Now()
		e.Console.ServeHTTP(rec, req)
		samples = append(samples, time.Since(t0))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "table class=\"obligations\"") {
			b.Fatalf("GET %s: %d", req.URL, rec.Code)
		}
	}
	b.StopTimer()
	slices.Sort(samples)
	pct := func(p float64) float64 {
		return float64(samples[int(p*float64(len(samples)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
}

func mustURLB(b *testing.B, raw string) *url.URL {
	u, err := url.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	return u
}

// seedBench starts an Env whose database holds the benchmark's
// delegations (see BenchmarkObligationsPage).
func seedBench(b *testing.B) *apitest.Env {
	total := benchSize(b, "QUITTANCE_BENCH_DELEGATIONS", 1_000_000)
	open := benchSize(b, "QUITTANCE_BENCH_OPEN", 10_000)
	if open > total {
		b.Fatalf("QUITTANCE_BENCH_OPEN (%d) exceeds QUITTANCE_BENCH_DELEGATIONS (%d)", open, total)
	}
	e := apitest.New(b)
	e.PutBudget(b, "bench", "EUR", 1<<50)
	e.PutOrg(b, "org-a", false)
	e.PutOrg(b, "org-b", false)
	ctx := b.Context()
	start := time.Now()
	_, err := e.Pool.Exec(ctx, `
		INSERT INTO delegations (id, tenant, business_operation_id, request_hash, org_id, task_class, budget_id,
		                         amount_minor, currency, remote_task_id, task_status, obligation_state,
		                         settled_amount_minor, reversed_amount_minor,
		                         compensation_deadline, version, created_at, updated_at)
		SELECT md5('bench' || i)::uuid, 'tenant-' || (i % 7), 'op-' || i, '\x00', CASE WHEN i % 2 = 0 THEN 'org-a' ELSE 'org-b' END,
		       'procurement', 'bench', s.amount, 'EUR', 'task-' || i, 'canceled', s.state,
		       CASE WHEN s.state = 'settled' THEN s.amount END, CASE WHEN s.state = 'compensated' THEN s.amount END,
		       $3::timestamptz - make_interval(secs => i) + interval '72 hours', 2,
		       $3::timestamptz - make_interval(secs => i), $3::timestamptz - make_interval(secs => i)
		FROM generate_series(1, $1::int) AS i, LATERAL (
		    SELECT 1000 + (i::bigint * 7919) % 1000000 AS amount,
		           CASE WHEN i <= $2 THEN (ARRAY['revocation_pending_compensation', 'compensation_unconfirmed', 'escalated'])[1 + i % 3]
		                ELSE (ARRAY['settled', 'released', 'compensated', 'written_off'])[1 + i % 4] END AS state) s`, total, open, apitest.Epoch)
	if err != nil {
		b.Fatal(err)
	}
	_, err = e.Pool.Exec(ctx, `
		INSERT INTO events (stream, stream_seq, delegation_id, type, at, actor, obligation_from, obligation_to, data, prev_hash, hash)
		SELECT 'delegation:' || d.id, 1, d.id, 'compensation_deadline_passed', d.updated_at, 'system:sweep',
		       'revocation_pending_compensation', d.obligation_state, '{}', '\x00', '\x00'
		FROM delegations d WHERE d.obligation_state IN ('revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')`)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.Pool.Exec(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d delegations (%d open) in %v", total, open, time.Since(start).Round(time.Millisecond))

	return e
}
