package main

// quittance-bench failover: the figures of deploy/OPERATIONS.md's
// failover sections (BENCHMARK.md, "Failover and reads from the standby").
//
// Failover trials. Each trial starts a fresh primary and a streaming
// standby (pg_basebackup -R) from the machine's binaries, with
// synchronous replication turned on once the standby streams, or left
// asynchronous; `quittance serve` runs on the multi-host URL
// (target_session_attrs=read-write) and clients run create → canceled →
// signed ack, retrying each request unchanged after a transport error or
// a 5xx. The primary's postmaster is SIGKILLed and the standby promoted
// (pg_ctl promote, scripted: no manager's detection time is in the
// figure). Measured: the time from the kill to the first 2xx answer to a
// write sent after the kill and answered once the standby took writes
// (a backend of the killed primary may still commit for a few
// milliseconds before it notices its postmaster is gone: such an answer
// is not the new primary's), and how many answers 2xx to a lifecycle's
// writes, whenever given, the new primary lacks.
//
// Export. On a pair with 100,000 open obligations generated with SQL, the
// clients' lifecycle throughput is measured without an export, then while
// CSV exports of every open obligation run back to back, once from a
// service reading from the primary and once from a service reading from
// the standby (QUITTANCE_READ_DATABASE_URL).

import (
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
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/sql/pgcluster"
)

// failoverConfig is the failover bench's flags.
type failoverConfig struct {
	Trials     int
	Clients    int
	Before     time.Duration // load before the kill
	After      time.Duration // load after writes resumed
	ExportOpen int           // open obligations exported
	ExportFor  time.Duration // each throughput window of the export runs
	// Feedback turns hot_standby_feedback on on the export runs' standby,
	// so that the primary's vacuum keeps the rows a long export there
	// still reads, instead of the standby canceling it once replay has
	// waited max_standby_streaming_delay (30 s).
	Feedback bool
	Keep     bool
}

func parseFailoverFlags(args []string, stderr io.Writer) (failoverConfig, error) {
	var cfg failoverConfig
	fs := flag.NewFlagSet("failover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Trials, "trials", 3, "failovers per replication mode (0 skips them)")
	fs.IntVar(&cfg.Clients, "clients", 4, "concurrent lifecycle clients")
	fs.DurationVar(&cfg.Before, "before", 3*time.Second, "load before the primary is killed")
	fs.DurationVar(&cfg.After, "after", 2*time.Second, "load after writes resumed")
	fs.IntVar(&cfg.ExportOpen, "export-rows", 100_000, "open obligations in the CSV export (0 skips the export runs)")
	fs.DurationVar(&cfg.ExportFor, "export-duration", 20*time.Second, "length of each throughput window of the export runs")
	fs.BoolVar(&cfg.Feedback, "standby-feedback", true, "hot_standby_feedback on the export runs' standby")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the scratch directory (logs, data)")
	quick := fs.Bool("quick", false, "one trial per mode and a 20,000-row export: a short run whose figures are not the benchmark's")
	if err := fs.Parse(args); err != nil {
		return cfg, errUsage
	}
	if *quick {
		cfg.Trials, cfg.ExportOpen, cfg.ExportFor = 1, 20_000, 5*time.Second
	}
	if cfg.Trials < 0 || cfg.Clients < 1 || cfg.ExportOpen < 0 {
		return cfg, errors.New("-clients must be positive, -trials and -export-rows not negative")
	}
	return cfg, nil
}

// failoverTrial is one failover's figures.
type failoverTrial struct {
	Synchronous bool
	Promoted    time.Duration // kill → the standby takes writes
	ToWrite     time.Duration // kill → first 2xx to a write sent after it, answered by the new primary
	Acked       int           // answers 2xx to a lifecycle's writes
	Lost        int           // of which the new primary lacks
	LagBytes    int64         // WAL the standby had not flushed just before the kill
	Refused503  int           // answers 503 (with Retry-After) during the switch
	Unknown500  int           // answers 500 outcome_unknown
	Other       int           // any other 5xx or transport error
}

// exportRun is the lifecycle throughput beside CSV exports read from one
// server.
type exportRun struct {
	From          string // "primary" or "standby"
	Baseline      float64
	DuringExport  float64
	Exports       int
	ExportRows    int64
	ExportAvgTook time.Duration
}

func runFailoverBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFailoverFlags(args, stderr)
	if err != nil {
		return err
	}
	h, err := newHarness(ctx, stderr, cfg.Keep, "")
	if err != nil {
		return err
	}
	defer h.close()
	var trials []failoverTrial
	for _, sync := range []bool{true, false} {
		for i := range cfg.Trials {
			name := fmt.Sprintf("failover_async_%d", i)
			if sync {
				name = fmt.Sprintf("failover_sync_%d", i)
			}
			tr, err := runFailoverTrial(ctx, h, cfg, name, sync)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			fmt.Fprintf(stderr, "%s: promoted %s, first write %s after the kill; %d of %d acknowledged answers lost (standby %d bytes behind); %d×503, %d×500 outcome_unknown, %d other\n",
				name, ms(tr.Promoted), ms(tr.ToWrite), tr.Lost, tr.Acked, tr.LagBytes, tr.Refused503, tr.Unknown500, tr.Other)
			trials = append(trials, tr)
		}
	}
	var exports []exportRun
	if cfg.ExportOpen > 0 {
		if exports, err = runExportBench(ctx, h, cfg); err != nil {
			return fmt.Errorf("export: %w", err)
		}
	}
	printFailoverReport(stdout, cfg, trials, exports)
	return nil
}

// pair is a primary and its streaming standby of the failover bench.
type pair struct {
	primary, standby *pgcluster.Cluster
}

// url is the multi-host URL of database db on the pair.
func (p pair) url(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		pgcluster.Superuser, p.primary.Port(), p.standby.Port(), db)
}

// stop stops both servers (a killed one is already stopped).
func (p pair) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = p.standby.Stop(ctx)
	_ = p.primary.Stop(ctx)
}

// startPair starts a primary, migrates its quittance database with the
// binary (as the owner), and makes a standby of it, synchronous if asked.
func startPair(ctx context.Context, h *harness, name string, synchronous bool) (pair, error) {
	var p pair
	var err error
	p.primary, err = pgcluster.Start(ctx, pgcluster.Config{DataDir: filepath.Join(h.dir, name+"-primary"), BinDir: h.binDir, Log: h.log})
	if err != nil {
		return p, err
	}
	migrate := exec.CommandContext(ctx, h.binary, "migrate")
	migrate.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + p.primary.URL(pgcluster.Database), "QUITTANCE_LOG_LEVEL=warn"}
	if out, err := migrate.CombinedOutput(); err != nil {
		_ = p.primary.Stop(ctx)
		return p, fmt.Errorf("quittance migrate: %w: %s", err, out)
	}
	p.standby, err = pgcluster.StartStandby(ctx, p.primary, pgcluster.Config{DataDir: filepath.Join(h.dir, name+"-standby"), Log: h.log})
	if err != nil {
		_ = p.primary.Stop(ctx)
		return p, err
	}
	if synchronous {
		if err := p.primary.RequireSynchronousStandby(ctx); err != nil {
			p.stop()
			return p, err
		}
	}
	return p, nil
}

// benchLoad is clients running lifecycles against one service, each
// request retried unchanged after a transport error or a 5xx, with every
// answer recorded.
type benchLoad struct {
	c      *client
	orch   string
	org    string
	budget string
	sig    *signer
	prefix string
	// oncall and oncall2 are the on-call principals: one asks for
	// privileged changes, the other approves.
	oncall, oncall2 string

	mu      sync.Mutex
	answers []benchAnswer
	steps   map[string]int // op → the furthest step answered 2xx (1 created, 2 canceled, 3 acked)
	ackedAt map[string][4]time.Time
	okCount atomic.Int64
}

// benchAnswer is one answer: when its request was sent and answered, and
// its status (0: a transport error) and problem code.
type benchAnswer struct {
	sent, answered time.Time
	status         int
	code           string
}

// setupBenchLoad creates, with the bootstrap token, the on-call
// principals, a budget, the org and the orchestrator.
func setupBenchLoad(ctx context.Context, c *client, bootstrap, prefix string) (*benchLoad, error) {
	admin, admin2, err := twoOncall(ctx, c, bootstrap)
	if err != nil {
		return nil, err
	}
	oc := onCall{c: c, token: admin, approver: admin2}
	l := &benchLoad{c: c, org: "supplier", budget: "hot", sig: newSigner("k1"), prefix: prefix, oncall: admin, oncall2: admin2,
		steps: map[string]int{}, ackedAt: map[string][4]time.Time{}}
	if err := oc.privileged(ctx, http.MethodPut, "/admin/v1/budgets/"+l.budget,
		map[string]any{"currency": "EUR", "funded_minor": int64(1) << 50, "tenants": []string{"bench"}}); err != nil {
		return nil, err
	}
	if err := oc.privileged(ctx, http.MethodPut, "/admin/v1/orgs/"+l.org, map[string]any{"name": "Supplier", "jwks": l.sig.jwks()}); err != nil {
		return nil, err
	}
	if l.orch, err = oc.newToken(ctx, "orchestrator", "bench", "bench-orchestrator"); err != nil {
		return nil, err
	}
	return l, nil
}

// benchRequest is one request of a lifecycle: what send sends, where it
// decodes the answer (out; nil: nowhere) and the statuses that count as
// answered (want).
type benchRequest struct {
	method, path, token, contentType string
	body, out                        any
	want                             []int
}

// send sends one request until it is answered with something other than
// a transport error or a 5xx, for at most a minute.
func (l *benchLoad) send(ctx context.Context, r benchRequest) bool {
	deadline := time.Now().Add(time.Minute)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		sent := time.Now()
		resp, err := l.c.do(ctx, r.method, r.path, r.token, r.contentType, r.body)
		if ctx.Err() != nil {
			return false
		}
		l.record(sent, resp, err)
		if err == nil && slices.Contains(r.want, resp.Status) {
			l.okCount.Add(1)
			if r.out != nil {
				return json.Unmarshal(resp.Body, r.out) == nil
			}
			return true
		}
		if err == nil && resp.Status < 500 {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// record keeps one attempt's answer, with the problem's code when it was
// a 5xx, so that the report can say what the clients saw and when; it is
// apart from send so that the retry loop reads as the policy it is.
func (l *benchLoad) record(sent time.Time, resp response, err error) {
	a := benchAnswer{sent: sent, answered: time.Now(), status: resp.Status}
	if err == nil && resp.Status >= 500 {
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(resp.Body, &p)
		a.code = p.Code
	}
	l.mu.Lock()
	l.answers = append(l.answers, a)
	l.mu.Unlock()
}

// confirm records that op's step was answered 2xx.
func (l *benchLoad) confirm(op string, step int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.steps[op] = step
	at := l.ackedAt[op]
	at[step] = time.Now()
	l.ackedAt[op] = at
}

// lifecycle runs op through create → canceled → signed ack.
func (l *benchLoad) lifecycle(ctx context.Context, op string) {
	task := "task-" + op
	var d delegation
	if !l.send(ctx, benchRequest{method: http.MethodPost, path: "/v1/delegations", token: l.orch, body: map[string]any{
		"business_operation_id": op, "org_id": l.org, "task_class": "procurement", "budget_id": l.budget,
		"hold":   map[string]any{"amount_minor": 1000, "currency": "EUR"},
		"remote": map[string]any{"task_id": task, "context_id": "ctx-" + op},
	}, out: &d, want: []int{http.StatusCreated, http.StatusOK}}) {
		return
	}
	l.confirm(op, 1)
	if !l.send(ctx, benchRequest{method: http.MethodPost, path: "/v1/delegations/" + d.ID + "/task-status", token: l.orch,
		body: map[string]any{"state": "TASK_STATE_CANCELED"}, out: &d, want: []int{http.StatusOK}}) || d.Compensation == nil {
		return
	}
	l.confirm(op, 2)
	token := l.sig.sign(typAck, evidenceClaims(l.org, task, d.Compensation.IdempotencyKey, time.Now()))
	if l.send(ctx, benchRequest{method: http.MethodPost, path: "/v1/compensation/acks", contentType: "application/jose",
		body: token, want: []int{http.StatusOK}}) {
		l.confirm(op, 3)
	}
}

// run starts n clients that run lifecycles until ctx ends.
func (l *benchLoad) run(ctx context.Context, n int) (wait func()) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for k := 0; ctx.Err() == nil; k++ {
				l.lifecycle(ctx, fmt.Sprintf("%s-c%d-%d", l.prefix, i, k))
			}
		})
	}
	return wg.Wait
}

// okBetween counts answers 2xx answered within [from, to).
func (l *benchLoad) okBetween(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.answers {
		if a.status >= 200 && a.status < 300 && !a.answered.Before(from) && a.answered.Before(to) {
			n++
		}
	}
	return n
}

// runFailoverTrial runs one failover under load.
func runFailoverTrial(ctx context.Context, h *harness, cfg failoverConfig, name string, synchronous bool) (failoverTrial, error) {
	tr := failoverTrial{Synchronous: synchronous}
	p, err := startPair(ctx, h, name, synchronous)
	if err != nil {
		return tr, err
	}
	defer p.stop()
	addr, err := freeAddr()
	if err != nil {
		return tr, err
	}
	bootstrap := access.NewTokenSecret()
	svc, err := startService(ctx, serviceConfig{Binary: h.binary, Addr: addr, DatabaseURL: p.url(pgcluster.Database), Token: bootstrap,
		LogPath: filepath.Join(h.dir, name+".log"), Env: []string{"QUITTANCE_SWEEP_INTERVAL=1h", "QUITTANCE_SHUTDOWN_TIMEOUT=5s"}})
	if err != nil {
		return tr, err
	}
	defer svc.stop()
	l, err := setupBenchLoad(ctx, newClient(svc.URL, cfg.Clients), bootstrap, name)
	if err != nil {
		return tr, err
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	wait := l.run(loadCtx, cfg.Clients)
	time.Sleep(cfg.Before)

	if tr.LagBytes, err = flushLag(ctx, p.primary); err != nil {
		return tr, err
	}
	killed := time.Now()
	if err := p.primary.Kill(); err != nil {
		return tr, err
	}
	if err := p.standby.Promote(ctx); err != nil {
		return tr, err
	}
	promoted := time.Now()
	tr.Promoted = promoted.Sub(killed)
	// Writes resumed: a request sent after the kill was answered 2xx by
	// the new primary.
	deadline := time.Now().Add(time.Minute)
	for tr.ToWrite == 0 {
		if time.Now().After(deadline) {
			return tr, errors.New("no write succeeded within a minute of the promotion")
		}
		time.Sleep(20 * time.Millisecond)
		l.mu.Lock()
		for _, a := range l.answers {
			if a.status >= 200 && a.status < 300 && a.sent.After(killed) && !a.answered.Before(promoted) &&
				(tr.ToWrite == 0 || a.answered.Sub(killed) < tr.ToWrite) {
				tr.ToWrite = a.answered.Sub(killed)
			}
		}
		l.mu.Unlock()
	}
	time.Sleep(cfg.After)
	stopLoad()
	wait()

	l.mu.Lock()
	for _, a := range l.answers {
		switch {
		case a.status >= 200 && a.status < 300:
		case a.status == http.StatusServiceUnavailable:
			tr.Refused503++
		case a.status == http.StatusInternalServerError && a.code == "outcome_unknown":
			tr.Unknown500++
		case a.status == 0 || a.status >= 500:
			tr.Other++
		}
	}
	l.mu.Unlock()
	tr.Acked, tr.Lost, err = lostAnswers(ctx, p.standby.URL(pgcluster.Database), l)
	return tr, err
}

// flushLag is how many bytes of WAL the primary has that its standby has
// not flushed.
func flushLag(ctx context.Context, primary *pgcluster.Cluster) (int64, error) {
	conn, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var lag int64
	err = conn.QueryRow(ctx, `SELECT coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn)), 0)::bigint FROM pg_stat_replication`).Scan(&lag)
	return lag, err
}

// lostAnswers counts the answers 2xx to a step of a lifecycle (created,
// canceled, acked) and, of those, the ones the new primary lacks: the
// delegation is missing or not that far.
func lostAnswers(ctx context.Context, dbURL string, l *benchLoad) (acked, lost int, err error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT business_operation_id, obligation_state FROM delegations WHERE business_operation_id LIKE $1`, l.prefix+"-%")
	if err != nil {
		return 0, 0, err
	}
	have := map[string]int{}
	for rows.Next() {
		var op, obl string
		if err := rows.Scan(&op, &obl); err != nil {
			rows.Close()
			return 0, 0, err
		}
		switch obl {
		case "compensated":
			have[op] = 3
		case "revocation_pending_compensation":
			have[op] = 2
		default:
			have[op] = 1
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for op, at := range l.ackedAt {
		for step := 1; step <= 3; step++ {
			if at[step].IsZero() {
				continue
			}
			acked++
			if have[op] < step {
				lost++
			}
		}
	}
	return acked, lost, nil
}

// runExportBench measures the lifecycle throughput beside CSV exports,
// read from the primary and then from the standby.
func runExportBench(ctx context.Context, h *harness, cfg failoverConfig) ([]exportRun, error) {
	const name = "failover_export"
	p, err := startPair(ctx, h, name, true)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	if cfg.Feedback {
		if err := setStandbyFeedback(ctx, p.standby); err != nil {
			return nil, err
		}
	}
	if err := generateExportRows(ctx, h, p, cfg); err != nil {
		return nil, err
	}
	bootstrap := access.NewTokenSecret()
	svcs, err := startExportServices(ctx, h, p, name, bootstrap)
	for _, s := range svcs {
		defer s.stop()
	}
	if err != nil {
		return nil, err
	}
	// The fixtures, made once through the first service.
	c0 := newClient(svcs[0].URL, cfg.Clients)
	setup, err := setupBenchLoad(ctx, c0, bootstrap, "export")
	if err != nil {
		return nil, err
	}
	finance, err := onCall{c: c0, token: setup.oncall, approver: setup.oncall2}.newToken(ctx, "finance", "", "bench-finance")
	if err != nil {
		return nil, err
	}
	var out []exportRun
	for i, from := range []string{"primary", "standby"} {
		l := &benchLoad{c: newClient(svcs[i].URL, cfg.Clients), orch: setup.orch, org: setup.org, budget: setup.budget, sig: setup.sig,
			prefix: "export-" + from, steps: map[string]int{}, ackedAt: map[string][4]time.Time{}}
		run, err := measureExportRun(ctx, cfg, l, finance, from)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(h.stderr, "export from the %s: lifecycle %.0f answers/s alone, %.0f during %d exports of %d rows (%s each)\n",
			from, run.Baseline, run.DuringExport, run.Exports, run.ExportRows, run.ExportAvgTook.Round(time.Millisecond))
		out = append(out, run)
	}
	return out, nil
}

// generateExportRows writes cfg.ExportOpen open obligations with SQL on
// the primary, so that each export has that many rows to read before the
// load adds its own; the synchronous standby has them too.
func generateExportRows(ctx context.Context, h *harness, p pair, cfg failoverConfig) error {
	fmt.Fprintf(h.stderr, "generating %d open obligations with SQL (replicated to the synchronous standby)\n", cfg.ExportOpen)
	gen := *h
	gen.cluster = p.primary
	return generate(ctx, &gen, p.primary.URL(pgcluster.Database), scaleConfig{
		Delegations: 2 * cfg.ExportOpen, Open: cfg.ExportOpen, Chunk: 2 * cfg.ExportOpen,
	})
}

// startExportServices starts the two services the export bench compares,
// both writing through the pair: the first also reads from the primary,
// the second reads from the standby (QUITTANCE_READ_DATABASE_URL). It
// returns the services it started even with an error, for the caller to
// stop.
func startExportServices(ctx context.Context, h *harness, p pair, name, bootstrap string) ([]*service, error) {
	base := []string{"QUITTANCE_SWEEP_INTERVAL=1h", "QUITTANCE_SHUTDOWN_TIMEOUT=5s"}
	var svcs []*service
	for i, env := range [][]string{base, append(slices.Clone(base), "QUITTANCE_READ_DATABASE_URL="+p.standby.URL(pgcluster.Database))} {
		addr, err := freeAddr()
		if err != nil {
			return svcs, err
		}
		svc, err := startService(ctx, serviceConfig{Binary: h.binary, Addr: addr, DatabaseURL: p.url(pgcluster.Database), Token: bootstrap,
			LogPath: filepath.Join(h.dir, fmt.Sprintf("%s-%d.log", name, i)), Env: env})
		if err != nil {
			return svcs, err
		}
		svcs = append(svcs, svc)
	}
	return svcs, nil
}

// measureExportRun runs l's lifecycles, measures their throughput alone
// and then beside back-to-back CSV exports (as finance) through the same
// service, reading from the server named by from. The load is stopped
// before it returns.
func measureExportRun(ctx context.Context, cfg failoverConfig, l *benchLoad, finance, from string) (exportRun, error) {
	run := exportRun{From: from}
	loadCtx, stopLoad := context.WithCancel(ctx)
	wait := l.run(loadCtx, cfg.Clients)
	defer wait()
	defer stopLoad()
	time.Sleep(2 * time.Second) // warm up
	t0 := time.Now()
	time.Sleep(cfg.ExportFor)
	t1 := time.Now()
	run.Baseline = float64(l.okBetween(t0, t1)) / t1.Sub(t0).Seconds()
	var took time.Duration
	for t1 = time.Now(); time.Since(t1) < cfg.ExportFor; {
		e, err := exportCSV(ctx, l.c, finance)
		if err != nil {
			return run, err
		}
		// The load's canceled delegations not yet acked are open too.
		if e.Rows < int64(cfg.ExportOpen) {
			return run, fmt.Errorf("the CSV export from the %s has %d rows, want at least %d", from, e.Rows, cfg.ExportOpen)
		}
		run.Exports++
		run.ExportRows = e.Rows
		took += e.Total
	}
	t2 := time.Now()
	run.DuringExport = float64(l.okBetween(t1, t2)) / t2.Sub(t1).Seconds()
	run.ExportAvgTook = took / time.Duration(run.Exports)
	return run, nil
}

// setStandbyFeedback turns hot_standby_feedback on on the standby.
func setStandbyFeedback(ctx context.Context, standby *pgcluster.Cluster) error {
	conn, err := pgx.Connect(ctx, standby.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, q := range []string{"ALTER SYSTEM SET hot_standby_feedback = on", "SELECT pg_reload_conf()"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// printFailoverReport writes the figures as Markdown.
func printFailoverReport(w io.Writer, cfg failoverConfig, trials []failoverTrial, exports []exportRun) {
	if len(trials) > 0 {
		printFailoverTrials(w, cfg, trials)
	}
	if len(exports) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### Lifecycle throughput beside a %d-row CSV export (%d clients, answers 2xx per second; hot_standby_feedback %v)\n\n",
		cfg.ExportOpen, cfg.Clients, cfg.Feedback)
	fmt.Fprintln(w, "| export read from | lifecycle alone | during exports | change | exports run | each took |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, e := range exports {
		fmt.Fprintf(w, "| %s | %.0f/s | %.0f/s | %+.0f%% | %d | %s |\n", e.From, e.Baseline, e.DuringExport,
			100*(e.DuringExport-e.Baseline)/e.Baseline, e.Exports, e.ExportAvgTook.Round(time.Millisecond))
	}
}

// printFailoverTrials writes the failover trials' table.
func printFailoverTrials(w io.Writer, cfg failoverConfig, trials []failoverTrial) {
	fmt.Fprintf(w, "\n### Failover (%d clients, create → canceled → signed ack, pg_ctl promote scripted)\n\n", cfg.Clients)
	fmt.Fprintln(w, "| replication | trial | standby behind at the kill | promoted after | first write after the kill | answers 2xx | of which lost | 503 | 500 outcome_unknown | other errors |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for i, tr := range trials {
		mode := "asynchronous"
		if tr.Synchronous {
			mode = "synchronous"
		}
		fmt.Fprintf(w, "| %s | %d | %d bytes | %s | %s | %d | %d | %d | %d | %d |\n", mode, i%cfg.Trials+1, tr.LagBytes,
			ms(tr.Promoted), ms(tr.ToWrite), tr.Acked, tr.Lost, tr.Refused503, tr.Unknown500, tr.Other)
	}
}
