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
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/ledger"
)

// benchConfig is the bench subcommand's flags.
type benchConfig struct {
	Clients         []int
	Duration        time.Duration
	Warmup          time.Duration
	ManyBudgets     int
	HotScale        int
	ManyScale       int
	Replicas        int
	TxnLog          bool
	Scale           scaleConfig
	SkipLifecycle   bool
	SkipScale       bool
	Keep            bool
	Reuse           string
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
	fs.IntVar(&cfg.HotScale, "hot-scale", 1, "pgbench scale of the one-hot-budget anchor (1: one branch row, as hot as the one budget)")
	fs.IntVar(&cfg.ManyScale, "many-scale", 0, "pgbench scale of the many-budgets anchor, at least the largest -clients (default: the larger of 32 and the largest -clients)")
	fs.IntVar(&cfg.Replicas, "replicas", 3, "service processes of the multi-replica run (many budgets) measured beside one replica; 1 skips it")
	fs.BoolVar(&cfg.TxnLog, "txn-log", true, "log every transaction on both sides (pgbench -l, and the same line per Quittance operation) and take the percentiles from the logs; false logs none on either side and reports mean latencies only")
	cfg.Scale.register(fs)
	fs.BoolVar(&cfg.SkipLifecycle, "skip-lifecycle", false, "skip pgbench and the lifecycle runs")
	fs.BoolVar(&cfg.SkipScale, "skip-scale", false, "skip the data-scale runs (reconciliation and the deadline sweep)")
	fs.BoolVar(&cfg.SkipScale, "skip-recon", false, "the same as -skip-scale")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the scratch directory (cluster, logs)")
	fs.StringVar(&cfg.Reuse, "reuse", "", "run in the scratch directory a kept run (-keep) left, and measure the data set it generated there, when it has the size asked for, instead of generating it again (the directory is kept)")
	fs.BoolVar(&cfg.Quick, "quick", os.Getenv("BENCH_QUICK") == "1", "a quick run: 10s per run and a small data set (also BENCH_QUICK=1); its figures are not the benchmark's")
	fs.BoolVar(&cfg.FailOnTargets, "fail-on-targets", false, "exit non-zero when a target is missed")
	fs.BoolVar(&cfg.Perf, "perf", false, "record a CPU profile of the service with perf(1), kernel included, during each lifecycle run (kept with -keep)")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "take Go's CPU profile of the service (QUITTANCE_DEBUG_ADDR) during each lifecycle run, for go tool pprof (kept with -keep)")
	fs.StringVar(&cfg.ResultsMarkdown, "markdown", "", "also write the machine and the results as Markdown to this file")
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
	maxClients := slices.Max(cfg.Clients)
	if cfg.ManyScale == 0 {
		cfg.ManyScale = max(32, maxClients)
	}
	if cfg.ManyScale < maxClients {
		return cfg, fmt.Errorf("-many-scale %d is below the largest -clients %d: pgbench's clients would share branch rows, a hot-row workload", cfg.ManyScale, maxClients)
	}
	if cfg.HotScale < 1 {
		return cfg, errors.New("-hot-scale must be at least 1")
	}
	if cfg.Replicas < 1 {
		return cfg, errors.New("-replicas must be at least 1")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.Quick {
		if !set["duration"] {
			cfg.Duration = 10 * time.Second
		}
		if !set["warmup"] {
			cfg.Warmup = time.Second
		}
		cfg.Scale.quick(set)
	}
	return cfg, cfg.Scale.check()
}

// Targets of the benchmark.
const (
	// targetRatio32 and targetRatio8 are Quittance's operations per second
	// over its pgbench anchor's TPS, at 32 clients and more, and below.
	targetRatio32 = 0.7
	targetRatio8  = 0.5
	// targetReplicas is the total of the multi-replica run over one replica.
	targetReplicas = 1.0
	targetRSS      = 150 << 20
)

// ratioTarget is the target ratio to the pgbench anchor at n clients.
func ratioTarget(n int) float64 {
	if n >= 32 {
		return targetRatio32
	}
	return targetRatio8
}

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
	Scale    int
	TPS      float64
	Avg      time.Duration
	P50, P99 time.Duration // zero without the transaction log
	Txns     int
	Load     string // the 1-minute load average at the end
}

// lifecycleResult is one Quittance lifecycle run.
type lifecycleResult struct {
	Clients  int
	Mode     string // "hot" or "many"
	Replicas int
	Ops      int64
	Errors   int64
	OpsPerS  float64
	Avg      time.Duration
	P50, P99 time.Duration // zero without the transaction log
	PeakRSS  int64         // the largest of the replicas'
	Duration time.Duration
	Load     string // the 1-minute load average at the end
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseBenchFlags(args, stderr)
	if err != nil {
		return err
	}
	started := time.Now()
	h, err := newHarness(ctx, stderr, cfg.Keep, cfg.Reuse)
	if err != nil {
		return err
	}
	defer h.close()
	m := describeMachine(ctx, h)
	fmt.Fprintf(stderr, "machine: %s\n", m)

	var (
		pgb   []pgbenchResult
		lifes []lifecycleResult
		sc    *scaleResult
	)
	if !cfg.SkipLifecycle {
		for _, n := range cfg.Clients {
			// Each anchor is run right before the Quittance case it anchors,
			// so both see the machine in the same state.
			for _, mode := range []string{"many", "hot"} {
				scale := cfg.ManyScale
				if mode == "hot" {
					scale = cfg.HotScale
				}
				r, err := runPgbench(ctx, h, n, scale, cfg.Duration, cfg.TxnLog)
				if err != nil {
					return err
				}
				fmt.Fprintf(stderr, "pgbench   c=%-3d scale %-3d %8.1f tps  mean %s p50 %s p99 %s load %s\n",
					n, scale, r.TPS, ms(r.Avg), ms(r.P50), ms(r.P99), r.Load)
				pgb = append(pgb, r)
				replicas := []int{1}
				if mode == "many" && cfg.Replicas > 1 {
					replicas = append(replicas, cfg.Replicas)
				}
				for _, rep := range replicas {
					l, err := runLifecycle(ctx, h, cfg, n, mode, rep)
					if err != nil {
						return err
					}
					fmt.Fprintf(stderr, "quittance c=%-3d %-4s ×%d %8.1f ops/s mean %s p50 %s p99 %s rss %s errors %d load %s\n",
						n, mode, rep, l.OpsPerS, ms(l.Avg), ms(l.P50), ms(l.P99), mib(l.PeakRSS), l.Errors, l.Load)
					lifes = append(lifes, l)
				}
			}
		}
	}
	if !cfg.SkipScale {
		if sc, err = runScale(ctx, h, cfg.Scale); err != nil {
			return err
		}
	}
	report := renderBench(cfg, m, pgb, lifes, sc, time.Since(started))
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

// checkpoint forces a checkpoint, so that no run pays for the writes of
// the set-up before it.
func checkpoint(ctx context.Context, h *harness) error {
	conn, err := pgx.Connect(ctx, h.cluster.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "CHECKPOINT")
	return err
}

// runPgbench initializes pgbench at scale in a fresh database and runs
// tpcb-like with n clients and 2 threads. With txnLog every transaction is
// logged (-l), and the percentiles are computed from the log the same way
// as Quittance's; without it neither side logs.
func runPgbench(ctx context.Context, h *harness, n, scale int, d time.Duration, txnLog bool) (pgbenchResult, error) {
	url, err := h.createDatabase(ctx, "pgbench")
	if err != nil {
		return pgbenchResult{}, err
	}
	bin, err := findPgbench(h.binDir)
	if err != nil {
		return pgbenchResult{}, err
	}
	// Server-side data generation (-I G): the same tables, faster at scale.
	init := exec.CommandContext(ctx, bin, "-i", "-s", strconv.Itoa(scale), "-q", "-I", "dtGvp", url)
	if out, err := init.CombinedOutput(); err != nil {
		return pgbenchResult{}, fmt.Errorf("pgbench -i -s %d: %w: %s", scale, err, out)
	}
	if err := checkpoint(ctx, h); err != nil {
		return pgbenchResult{}, err
	}
	logDir := filepath.Join(h.dir, fmt.Sprintf("pgbench-s%d-c%d", scale, n))
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return pgbenchResult{}, err
	}
	args := []string{"-b", "tpcb-like", "-c", strconv.Itoa(n), "-j", "2", "-T", strconv.Itoa(int(d.Seconds()))}
	if txnLog {
		args = append(args, "-l", "--log-prefix="+filepath.Join(logDir, "txn"))
	}
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return pgbenchResult{}, fmt.Errorf("pgbench: %w: %s", err, out)
	}
	r := pgbenchResult{Clients: n, Scale: scale}
	if m := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`).FindSubmatch(out); m != nil {
		r.TPS, _ = strconv.ParseFloat(string(m[1]), 64)
	} else {
		return r, fmt.Errorf("no tps in the pgbench output: %s", out)
	}
	if m := regexp.MustCompile(`latency average = ([0-9.]+) ms`).FindSubmatch(out); m != nil {
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		r.Avg = time.Duration(v * float64(time.Millisecond))
	}
	if txnLog {
		lat, err := readTxnLogs(filepath.Join(logDir, "txn*"))
		if err != nil {
			return r, err
		}
		r.Txns, r.P50, r.P99 = len(lat), lat.quantile(0.50), lat.quantile(0.99)
	}
	r.Load = loadAverage()
	return r, nil
}

// readTxnLogs reads per-transaction logs in pgbench's format (client_id
// transaction_no time_us script_no epoch epoch_us), which the lifecycle
// runs write too, and returns the latencies.
func readTxnLogs(glob string) (latencies, error) {
	files, err := filepath.Glob(glob)
	if err != nil {
		return nil, err
	}
	var lat latencies
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 {
				continue
			}
			if us, err := strconv.ParseInt(fields[2], 10, 64); err == nil {
				lat = append(lat, time.Duration(us)*time.Microsecond)
			}
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
	}
	return lat, nil
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

// startReplicas starts n `quittance serve` processes on dbURL at the same
// moment and waits until all are ready. env(i) is replica i's extra
// environment.
func startReplicas(ctx context.Context, h *harness, n int, dbURL, token, name string, env func(i int) []string) ([]*service, error) {
	svcs := make([]*service, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			svcs[i], errs[i] = startService(ctx, serviceConfig{
				Binary: h.binary, Addr: addr, DatabaseURL: dbURL, Token: token,
				LogPath: filepath.Join(h.dir, fmt.Sprintf("%s-r%d.log", name, i)), Env: env(i),
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, s := range svcs {
			if s != nil {
				s.stop()
			}
		}
		return nil, err
	}
	return svcs, nil
}

// runLifecycle starts replicas service processes on a fresh database and
// drives n clients through create → task-status canceled → signed ack, on
// one budget (mode "hot") or spread over many budgets ("many"). Each
// client sends its successive requests to successive replicas.
func runLifecycle(ctx context.Context, h *harness, cfg benchConfig, n int, mode string, replicas int) (lifecycleResult, error) {
	res := lifecycleResult{Clients: n, Mode: mode, Replicas: replicas}
	name := fmt.Sprintf("quittance_%s_c%d_r%d", mode, n, replicas)
	dbURL, err := h.createDatabase(ctx, name)
	if err != nil {
		return res, err
	}
	admin := ledger.NewTokenSecret()
	env := []string{"QUITTANCE_SWEEP_INTERVAL=1h", "QUITTANCE_A2A_STREAMING=false"}
	var debugAddr string
	if cfg.Pprof {
		if debugAddr, err = freeAddr(); err != nil {
			return res, err
		}
	}
	svcs, err := startReplicas(ctx, h, replicas, dbURL, admin, name, func(i int) []string {
		if i == 0 && debugAddr != "" {
			// Only the first replica is profiled.
			return append(slices.Clone(env), "QUITTANCE_DEBUG_ADDR="+debugAddr)
		}
		return env
	})
	if err != nil {
		return res, err
	}
	defer func() {
		for _, s := range svcs {
			s.stop()
		}
	}()
	clients := make([]*client, replicas)
	for i, s := range svcs {
		clients[i] = newClient(s.URL, n)
	}
	c := clients[0]
	// The bootstrap token creates the two on-call principals; from then on
	// the first administers and the second approves privileged changes.
	admin, admin2, err := twoOncall(ctx, c, admin)
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
		// Funded at once; the tenant, by a second on-call's approval.
		if err := privileged(ctx, c, http.MethodPut, "/admin/v1/budgets/"+b, admin, admin2,
			map[string]any{"currency": "EUR", "funded_minor": int64(1) << 50, "tenants": []string{"bench"}}); err != nil {
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
	if err := checkpoint(ctx, h); err != nil {
		return res, err
	}
	logDir := filepath.Join(h.dir, name+"-txn")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return res, err
	}

	var (
		measuring atomic.Bool
		ops, errs atomic.Int64
		totalNs   atomic.Int64
		firstErr  atomic.Value
		logErr    atomic.Value
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for i := range n {
		var txnLog *bufio.Writer
		if cfg.TxnLog {
			f, err := os.Create(filepath.Join(logDir, fmt.Sprintf("txn.%d", i)))
			if err != nil {
				return res, err
			}
			txnLog = bufio.NewWriterSize(f, 64<<10)
			defer f.Close()
		}
		wg.Go(func() {
			var seq int64
			next := i
			// do sends one request to the next replica in turn.
			do := func(f func(c *client) error) bool {
				c := clients[next%replicas]
				next++
				t0 := time.Now()
				err := f(c)
				if runCtx.Err() != nil {
					return false
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					return false
				}
				if measuring.Load() {
					end := time.Now()
					d := end.Sub(t0)
					ops.Add(1)
					totalNs.Add(int64(d))
					if txnLog != nil {
						// pgbench's -l line: client_id transaction_no time_us script_no epoch epoch_us.
						fmt.Fprintf(txnLog, "%d %d %d 0 %d %d\n", i, seq, d.Microseconds(), end.Unix(), end.Nanosecond()/1000)
					}
					seq++
				}
				return true
			}
			defer func() {
				if txnLog != nil {
					if err := txnLog.Flush(); err != nil {
						logErr.CompareAndSwap(nil, err.Error())
					}
				}
			}()
			for k := 0; runCtx.Err() == nil; k++ {
				op := fmt.Sprintf("c%d-%d", i, k)
				task := "task-" + op
				budget := budgets[(i*7919+k)%len(budgets)]
				var d delegation
				ok := do(func(c *client) error {
					return c.must(runCtx, http.MethodPost, "/v1/delegations", orch, map[string]any{
						"business_operation_id": op, "org_id": org, "task_class": "procurement", "budget_id": budget,
						"hold":   map[string]any{"amount_minor": 1000 + k%1000, "currency": "EUR"},
						"remote": map[string]any{"task_id": task, "context_id": "ctx-" + op},
					}, &d, http.StatusCreated)
				})
				if !ok {
					continue
				}
				ok = do(func(c *client) error {
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
				do(func(c *client) error {
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
		perf = exec.Command("perf", "record", "-F", "499", "-g", "-p", strconv.Itoa(svcs[0].cmd.Process.Pid),
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
	res.Duration = time.Since(t0)
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
	res.Ops = ops.Load()
	res.Load = loadAverage()
	stop()
	wg.Wait()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if v := logErr.Load(); v != nil {
		return res, fmt.Errorf("write the transaction log: %s", v)
	}
	res.Errors = errs.Load()
	res.OpsPerS = float64(res.Ops) / res.Duration.Seconds()
	if res.Ops > 0 {
		res.Avg = time.Duration(totalNs.Load() / res.Ops)
	}
	if cfg.TxnLog {
		lat, err := readTxnLogs(filepath.Join(logDir, "txn.*"))
		if err != nil {
			return res, err
		}
		res.P50, res.P99 = lat.quantile(0.5), lat.quantile(0.99)
	}
	for _, s := range svcs {
		rss, err := s.peakRSS()
		if err != nil {
			return res, err
		}
		res.PeakRSS = max(res.PeakRSS, rss)
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

func ms(d time.Duration) string {
	if d == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

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
