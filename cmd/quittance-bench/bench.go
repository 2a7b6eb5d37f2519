package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/quittance/quittance/ledger"
)

// benchConfig is the bench subcommand's flags.
type benchConfig struct {
	Clients         []int
	Duration        time.Duration
	Warmup          time.Duration
	ManyBudgets     int
	ReconTotal      int
	ReconOpen       int
	ReconRequests   int
	SkipLifecycle   bool
	SkipRecon       bool
	Keep            bool
	Quick           bool
	FailOnTargets   bool
	Perf            bool
	Pprof           bool
	ResultsMarkdown string
}

func parseBenchFlags(args []string, stderr io.Writer) (benchConfig, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg benchConfig
	clients := fs.String("clients", "8,32", "comma-separated numbers of concurrent clients")
	fs.DurationVar(&cfg.Duration, "duration", 45*time.Second, "measured duration of each pgbench and lifecycle run")
	fs.DurationVar(&cfg.Warmup, "warmup", 3*time.Second, "unmeasured warm-up before each lifecycle run")
	fs.IntVar(&cfg.ManyBudgets, "budgets", 256, "number of budgets of the many-budgets case")
	fs.IntVar(&cfg.ReconTotal, "recon-delegations", 1_000_000, "delegations bulk-loaded for the reconciliation queries")
	fs.IntVar(&cfg.ReconOpen, "recon-open", 10_000, "of which open obligations")
	fs.IntVar(&cfg.ReconRequests, "recon-requests", 300, "requests per reconciliation query")
	fs.BoolVar(&cfg.SkipLifecycle, "skip-lifecycle", false, "skip pgbench and the lifecycle runs")
	fs.BoolVar(&cfg.SkipRecon, "skip-recon", false, "skip the reconciliation queries")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the scratch directory (cluster, logs)")
	fs.BoolVar(&cfg.Quick, "quick", os.Getenv("BENCH_QUICK") == "1", "a quick run: 10s per run, 200k delegations (also BENCH_QUICK=1)")
	fs.BoolVar(&cfg.FailOnTargets, "fail-on-targets", false, "exit non-zero when a target is missed")
	fs.BoolVar(&cfg.Perf, "perf", false, "record a CPU profile of the service with perf(1), kernel included, during each lifecycle run (kept with -keep)")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "take Go's CPU profile of the service (QUITTANCE_DEBUG_ADDR) during each lifecycle run, for go tool pprof (kept with -keep)")
	fs.StringVar(&cfg.ResultsMarkdown, "markdown", "", "also write the results as a Markdown table to this file")
	if err := fs.Parse(args); err != nil {
		return cfg, errUsage
	}
	for _, f := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return cfg, fmt.Errorf("-clients: %q is not a positive number", f)
		}
		cfg.Clients = append(cfg.Clients, n)
	}
	if cfg.Quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["duration"] {
			cfg.Duration = 10 * time.Second
		}
		if !set["warmup"] {
			cfg.Warmup = time.Second
		}
		if !set["recon-delegations"] {
			cfg.ReconTotal = 200_000
		}
		if !set["recon-requests"] {
			cfg.ReconRequests = 200
		}
	}
	if cfg.ReconOpen > cfg.ReconTotal {
		return cfg, errors.New("-recon-open exceeds -recon-delegations")
	}
	return cfg, nil
}

// Targets of issue 6.
const (
	targetManyRatio = 0.7
	targetHotRatio  = 0.5
	targetReconP99  = 50 * time.Millisecond
	targetRSS       = 150 << 20
)

// latencies summarizes a sample of durations.
type latencies []time.Duration

func (l latencies) quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// pgbenchResult is one pgbench run.
type pgbenchResult struct {
	Clients  int
	TPS      float64
	Avg      time.Duration
	P50, P99 time.Duration
	Txns     int
	Load     string // the 1-minute load average at the end
}

// lifecycleResult is one Quittance lifecycle run.
type lifecycleResult struct {
	Clients  int
	Mode     string // "hot" or "many"
	Ops      int64
	Errors   int64
	OpsPerS  float64
	P50, P99 time.Duration
	PeakRSS  int64
	Duration time.Duration
	Load     string // the 1-minute load average at the end
}

// reconResult is the latency of one reconciliation query.
type reconResult struct {
	Name     string
	Path     string
	Requests int
	P50, P99 time.Duration
	Max      time.Duration
	Bytes    int
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseBenchFlags(args, stderr)
	if err != nil {
		return err
	}
	started := time.Now()
	h, err := newHarness(ctx, stderr, cfg.Keep)
	if err != nil {
		return err
	}
	defer h.close()

	var (
		pgb   []pgbenchResult
		lifes []lifecycleResult
		recon []reconResult
		info  reconInfo
	)
	if !cfg.SkipLifecycle {
		for _, n := range cfg.Clients {
			r, err := runPgbench(ctx, h, n, cfg.Duration)
			if err != nil {
				return err
			}
			fmt.Fprintf(stderr, "pgbench  c=%-3d %8.1f tps  p50 %s p99 %s load %s\n", n, r.TPS, ms(r.P50), ms(r.P99), r.Load)
			pgb = append(pgb, r)
			for _, mode := range []string{"many", "hot"} {
				l, err := runLifecycle(ctx, h, cfg, n, mode)
				if err != nil {
					return err
				}
				fmt.Fprintf(stderr, "quittance c=%-3d %-4s %8.1f ops/s p50 %s p99 %s rss %s errors %d load %s\n",
					n, mode, l.OpsPerS, ms(l.P50), ms(l.P99), mib(l.PeakRSS), l.Errors, l.Load)
				lifes = append(lifes, l)
			}
		}
	}
	if !cfg.SkipRecon {
		recon, info, err = runRecon(ctx, h, cfg)
		if err != nil {
			return err
		}
	}
	report := renderBench(cfg, pgb, lifes, recon, info, time.Since(started))
	fmt.Fprint(stdout, report.text)
	if cfg.ResultsMarkdown != "" {
		if err := os.WriteFile(cfg.ResultsMarkdown, []byte(report.markdown), 0o644); err != nil {
			return err
		}
	}
	if cfg.FailOnTargets && report.missed > 0 {
		return fmt.Errorf("%d targets missed", report.missed)
	}
	return nil
}

// runPgbench initializes pgbench at scale 1 in a fresh database and runs
// tpcb-like with n clients and 2 threads, logging every transaction so
// the latency percentiles are computed the same way as Quittance's.
func runPgbench(ctx context.Context, h *harness, n int, d time.Duration) (pgbenchResult, error) {
	url, err := h.createDatabase(ctx, "pgbench")
	if err != nil {
		return pgbenchResult{}, err
	}
	bin, err := findPgbench(h.binDir)
	if err != nil {
		return pgbenchResult{}, err
	}
	init := exec.CommandContext(ctx, bin, "-i", "-s", "1", "-q", url)
	if out, err := init.CombinedOutput(); err != nil {
		return pgbenchResult{}, fmt.Errorf("pgbench -i: %w: %s", err, out)
	}
	logDir := filepath.Join(h.dir, fmt.Sprintf("pgbench-c%d", n))
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return pgbenchResult{}, err
	}
	cmd := exec.CommandContext(ctx, bin, "-b", "tpcb-like", "-c", strconv.Itoa(n), "-j", "2",
		"-T", strconv.Itoa(int(d.Seconds())), "-l", "--log-prefix="+filepath.Join(logDir, "txn"), url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return pgbenchResult{}, fmt.Errorf("pgbench: %w: %s", err, out)
	}
	r := pgbenchResult{Clients: n}
	if m := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`).FindSubmatch(out); m != nil {
		r.TPS, _ = strconv.ParseFloat(string(m[1]), 64)
	} else {
		return r, fmt.Errorf("no tps in the pgbench output: %s", out)
	}
	if m := regexp.MustCompile(`latency average = ([0-9.]+) ms`).FindSubmatch(out); m != nil {
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		r.Avg = time.Duration(v * float64(time.Millisecond))
	}
	// Per-transaction log lines: client_id transaction_no time_us script_no epoch epoch_us.
	files, _ := filepath.Glob(filepath.Join(logDir, "txn*"))
	var lat latencies
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return r, err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 {
				continue
			}
			us, err := strconv.ParseInt(fields[2], 10, 64)
			if err == nil {
				lat = append(lat, time.Duration(us)*time.Microsecond)
			}
		}
		fh.Close()
	}
	r.Txns, r.P50, r.P99 = len(lat), lat.quantile(0.50), lat.quantile(0.99)
	r.Load = loadAverage()
	return r, nil
}

// findPgbench finds the pgbench of the PostgreSQL the cluster runs:
// next to the real postgres executable (binDir may hold symlinks), in
// binDir, or on PATH.
func findPgbench(binDir string) (string, error) {
	var dirs []string
	if real, err := filepath.EvalSymlinks(filepath.Join(binDir, "postgres")); err == nil {
		dirs = append(dirs, filepath.Dir(real))
	}
	dirs = append(dirs, binDir)
	for _, d := range dirs {
		if p := filepath.Join(d, "pgbench"); isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	return "", errors.New("pgbench not found next to postgres or on PATH (Debian: apt-get install postgresql-contrib or postgresql-client)")
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// runLifecycle starts the service on a fresh database and drives n
// clients through create → task-status canceled → signed ack, on one
// budget (mode "hot") or spread over many budgets ("many").
func runLifecycle(ctx context.Context, h *harness, cfg benchConfig, n int, mode string) (lifecycleResult, error) {
	res := lifecycleResult{Clients: n, Mode: mode}
	name := fmt.Sprintf("quittance_%s_c%d", mode, n)
	dbURL, err := h.createDatabase(ctx, name)
	if err != nil {
		return res, err
	}
	addr, err := freeAddr()
	if err != nil {
		return res, err
	}
	bootstrap := ledger.NewTokenSecret()
	env := []string{"QUITTANCE_SWEEP_INTERVAL=1h", "QUITTANCE_A2A_STREAMING=false"}
	var debugAddr string
	if cfg.Pprof {
		if debugAddr, err = freeAddr(); err != nil {
			return res, err
		}
		env = append(env, "QUITTANCE_DEBUG_ADDR="+debugAddr)
	}
	svc, err := startService(ctx, serviceConfig{
		Binary: h.binary, Addr: addr, DatabaseURL: dbURL, Token: bootstrap,
		LogPath: filepath.Join(h.dir, name+".log"), Env: env,
	})
	if err != nil {
		return res, err
	}
	defer svc.stop()
	c := newClient(svc.URL, n)
	admin, admin2, err := twoOncall(ctx, c, bootstrap)
	if err != nil {
		return res, err
	}
	const org = "supplier"
	sig := newSigner("k1")
	budgets := []string{"hot"}
	if mode == "many" {
		budgets = budgets[:0]
		for i := range cfg.ManyBudgets {
			budgets = append(budgets, fmt.Sprintf("b-%03d", i))
		}
	}
	for _, b := range budgets {
		if err := c.must(ctx, http.MethodPut, "/admin/v1/budgets/"+b, admin,
			map[string]any{"currency": "EUR", "funded_minor": int64(1) << 50}, nil, http.StatusCreated); err != nil {
			return res, err
		}
	}
	if err := privileged(ctx, c, http.MethodPut, "/admin/v1/orgs/"+org, admin, admin2,
		map[string]any{"name": "Supplier", "jwks": sig.jwks()}); err != nil {
		return res, err
	}
	orch, err := newToken(ctx, c, admin, admin2, "orchestrator", "bench", "bench-orchestrator")
	if err != nil {
		return res, err
	}

	var (
		measuring atomic.Bool
		ops, errs atomic.Int64
		mu        sync.Mutex
		lat       latencies
		firstErr  atomic.Value
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			local := make(latencies, 0, 1<<14)
			defer func() {
				mu.Lock()
				lat = append(lat, local...)
				mu.Unlock()
			}()
			timed := func(f func() error) bool {
				t0 := time.Now()
				err := f()
				if runCtx.Err() != nil {
					return false
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					return false
				}
				if measuring.Load() {
					ops.Add(1)
					local = append(local, time.Since(t0))
				}
				return true
			}
			for k := 0; runCtx.Err() == nil; k++ {
				op := fmt.Sprintf("c%d-%d", i, k)
				task := "task-" + op
				budget := budgets[(i*7919+k)%len(budgets)]
				var d delegation
				ok := timed(func() error {
					return c.must(runCtx, http.MethodPost, "/v1/delegations", orch, map[string]any{
						"business_operation_id": op, "org_id": org, "task_class": "procurement", "budget_id": budget,
						"hold":   map[string]any{"amount_minor": 1000 + k%1000, "currency": "EUR"},
						"remote": map[string]any{"task_id": task, "context_id": "ctx-" + op},
					}, &d, http.StatusCreated)
				})
				if !ok {
					continue
				}
				ok = timed(func() error {
					return c.must(runCtx, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", orch,
						map[string]any{"state": "TASK_STATE_CANCELED"}, &d, http.StatusOK)
				})
				if !ok {
					continue
				}
				if d.Compensation == nil || d.ObligationState != "revocation_pending_compensation" {
					errs.Add(1)
					continue
				}
				token := sig.sign(typAck, evidenceClaims(org, task, d.Compensation.IdempotencyKey, time.Now()))
				timed(func() error {
					resp, err := c.do(runCtx, http.MethodPost, "/v1/compensation/acks", "", "application/jose", token)
					if err != nil {
						return err
					}
					if resp.Status != http.StatusOK {
						return fmt.Errorf("ack: status %d: %s", resp.Status, resp.Body)
					}
					return nil
				})
			}
		})
	}
	time.Sleep(cfg.Warmup)
	var perf *exec.Cmd
	if cfg.Perf {
		perf = exec.Command("perf", "record", "-F", "499", "-g", "-p", strconv.Itoa(svc.cmd.Process.Pid),
			"-o", filepath.Join(h.dir, name+".perf.data"))
		perf.Stdout, perf.Stderr = io.Discard, io.Discard
		if err := perf.Start(); err != nil {
			return res, fmt.Errorf("perf record: %w", err)
		}
	}
	var pprofDone chan error
	pprofPath := filepath.Join(h.dir, name+".pprof")
	if cfg.Pprof {
		pprofDone = make(chan error, 1)
		go func() { pprofDone <- fetchCPUProfile(ctx, debugAddr, cfg.Duration, pprofPath) }()
	}
	measuring.Store(true)
	t0 := time.Now()
	select {
	case <-time.After(cfg.Duration):
	case <-ctx.Done():
	}
	measuring.Store(false)
	if perf != nil {
		_ = perf.Process.Signal(os.Interrupt)
		_ = perf.Wait()
		fmt.Fprintf(h.stderr, "  CPU profile: perf report -i %s\n", filepath.Join(h.dir, name+".perf.data"))
	}
	if pprofDone != nil {
		if err := <-pprofDone; err != nil {
			return res, err
		}
		fmt.Fprintf(h.stderr, "  CPU profile: go tool pprof %s %s\n", h.binary, pprofPath)
	}
	res.Duration = time.Since(t0)
	res.Ops = ops.Load()
	res.Load = loadAverage()
	stop()
	wg.Wait()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	res.Errors = errs.Load()
	res.OpsPerS = float64(res.Ops) / res.Duration.Seconds()
	res.P50, res.P99 = lat.quantile(0.5), lat.quantile(0.99)
	if res.PeakRSS, err = svc.peakRSS(); err != nil {
		return res, err
	}
	if v := firstErr.Load(); v != nil {
		fmt.Fprintf(h.stderr, "  first error: %s\n", v)
	}
	return res, nil
}

// loadAverage is the machine's 1-minute load average: other work on the
// machine during a run shows there.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// benchReport is the rendered results.
type benchReport struct {
	text, markdown string
	missed         int
}

func renderBench(cfg benchConfig, pgb []pgbenchResult, lifes []lifecycleResult, recon []reconResult, info reconInfo, took time.Duration) benchReport {
	var (
		text, md strings.Builder
		missed   int
	)
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		missed++
		return "MISSED"
	}
	tps := map[int]float64{}
	for _, p := range pgb {
		tps[p.Clients] = p.TPS
	}
	if len(lifes) > 0 {
		tw := tabwriter.NewWriter(&text, 2, 4, 2, ' ', 0)
		fmt.Fprintf(&text, "\nLifecycle throughput (create → task-status canceled → signed ack; %s per run, fsync on)\n\n", cfg.Duration)
		fmt.Fprintln(tw, "clients\tcase\tpgbench tps\tpgbench p50\tpgbench p99\tquittance ops/s\tratio\ttarget\tquittance p50\tquittance p99\tpeak RSS\terrors\tload (pgbench/quittance)\t")
		md.WriteString("| clients | case | pgbench TPS | pgbench p50 / p99 | Quittance ops/s | ratio | target | Quittance p50 / p99 | peak RSS | errors | load avg (pgbench / Quittance) |\n")
		md.WriteString("|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|\n")
		for _, l := range lifes {
			var pg pgbenchResult
			for _, p := range pgb {
				if p.Clients == l.Clients {
					pg = p
				}
			}
			ratio := l.OpsPerS / pg.TPS
			want := targetManyRatio
			name := "many budgets"
			if l.Mode == "hot" {
				want, name = targetHotRatio, "one hot budget"
			}
			v := verdict(ratio >= want)
			rss := mib(l.PeakRSS)
			if l.Clients == 32 {
				rss += " (" + verdict(l.PeakRSS < targetRSS) + ")"
			}
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%s\t%s\t%.0f\t%.2f×\t≥%.1f× %s\t%s\t%s\t%s\t%d\t%s / %s\t\n",
				l.Clients, name, pg.TPS, ms(pg.P50), ms(pg.P99), l.OpsPerS, ratio, want, v, ms(l.P50), ms(l.P99), rss, l.Errors, pg.Load, l.Load)
			fmt.Fprintf(&md, "| %d | %s | %.0f | %s / %s | %.0f | %.2f× | ≥ %.1f× %s | %s / %s | %s | %d | %s / %s |\n",
				l.Clients, name, pg.TPS, ms(pg.P50), ms(pg.P99), l.OpsPerS, ratio, want, v, ms(l.P50), ms(l.P99), rss, l.Errors, pg.Load, l.Load)
		}
		tw.Flush()
	}
	if len(recon) > 0 {
		fmt.Fprintf(&text, "\nReconciliation at %d delegations, %d open (bulk load %s; %d requests each, sequential)\n\n",
			info.Total, info.Open, info.LoadTime.Round(time.Second), cfg.ReconRequests)
		fmt.Fprintf(&md, "\nReconciliation at %d delegations, %d open obligations (%d requests each, sequential):\n\n", info.Total, info.Open, cfg.ReconRequests)
		md.WriteString("| query | p50 | p99 | max | target |\n|---|---:|---:|---:|---|\n")
		tw := tabwriter.NewWriter(&text, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "query\tp50\tp99\tmax\tbytes\ttarget\t")
		for _, r := range recon {
			v := verdict(r.P99 < targetReconP99)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\tp99 < 50 ms %s\t\n", r.Name, ms(r.P50), ms(r.P99), ms(r.Max), r.Bytes, v)
			fmt.Fprintf(&md, "| `%s` | %s | %s | %s | < 50 ms %s |\n", r.Path, ms(r.P50), ms(r.P99), ms(r.Max), v)
		}
		tw.Flush()
	}
	fmt.Fprintf(&text, "\n%d targets missed; took %s\n", missed, took.Round(time.Second))
	return benchReport{text: text.String(), markdown: md.String(), missed: missed}
}

// fetchCPUProfile takes Go's CPU profile of the service over d from its
// profile listener and writes it to path.
func fetchCPUProfile(ctx context.Context, debugAddr string, d time.Duration, path string) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", debugAddr, max(1, int(d.Seconds())))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("take CPU profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("take CPU profile: status %d", resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("write CPU profile: %w", err)
	}
	return f.Close()
}
