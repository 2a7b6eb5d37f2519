package main

import (
	"bufio"
	"bytes"
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
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/ledger/access"
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
	BatchSize       int
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
	// ServiceEnv are extra NAME=value settings of the lifecycle runs'
	// service processes (-service-env), for trying a setting side by side.
	ServiceEnv []string
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
	fs.IntVar(&cfg.BatchSize, "batch-size", 100, "items per batch request of the batch-endpoint run (many budgets, one replica) measured beside the per-call run; 0 skips it")
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
	fs.Func("service-env", "NAME=value for the lifecycle runs' service processes (repeatable), e.g. QUITTANCE_WRITE_FLUSHERS=1 or GOGC=200", func(v string) error {
		if name, _, ok := strings.Cut(v, "="); !ok || name == "" {
			return fmt.Errorf("%q is not NAME=value", v)
		}
		cfg.ServiceEnv = append(cfg.ServiceEnv, v)
		return nil
	})
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
	if cfg.BatchSize < 0 || cfg.BatchSize > 1000 {
		return cfg, errors.New("-batch-size must be 0 (no batch run) to 1000, the batch endpoints' most items")
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

// Targets of the benchmark (the batching write path's issue).
const (
	// targetReplicas is the total of the multi-replica run over one replica.
	targetReplicas = 1.0
	targetRSS      = 150 << 20
	// targetP99Below32 is the most a lifecycle call's p99 latency may be
	// below 32 clients: the write coalescer may not make a caller wait
	// longer than it did alone (about 18 ms at 8 clients before it).
	targetP99Below32 = 18 * time.Millisecond
)

// ratioTarget is the target ratio of Quittance's operations per second
// to its pgbench anchor's TPS in mode ("hot" against scale 1, "many"
// against the many-budgets scale) at n clients (32 and more, or fewer). A
// hot budget is where batching wins most: pgbench queues on its one
// branch row, a flush writes the budget once.
func ratioTarget(mode string, n int) float64 {
	switch {
	case mode == "hot" && n >= 32:
		return 1.5
	case mode == "hot":
		return 0.8
	case n >= 32:
		return 0.8
	}
	return 0.5
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
	Cost     windowCost
	// Flushes are the replicas' write coalescer figures in the window:
	// how many operations a commit carried.
	Flushes flushCounts
}

// lifecycleCase is one Quittance run measured after an anchor.
type lifecycleCase struct {
	mode     string
	replicas int
}

// lifecycleResult is one Quittance lifecycle run.
type lifecycleResult struct {
	Clients int
	// Mode is "hot" (one budget), "many" (many budgets) or "batch" (many
	// budgets, creates and acks in batch requests).
	Mode     string
	Replicas int
	Ops      int64
	Errors   int64
	OpsPerS  float64
	Avg      time.Duration
	P50, P99 time.Duration // zero without the transaction log
	PeakRSS  int64         // the largest of the replicas'
	Duration time.Duration
	Load     string // the 1-minute load average at the end
	Cost     windowCost
	// Flushes are the replicas' write coalescer figures in the window:
	// how many operations a commit carried.
	Flushes flushCounts
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
		if h.cost, err = newCostMeter(ctx, h); err != nil {
			return err
		}
		defer h.cost.close()
		if pgb, lifes, err = runLifecycles(ctx, h, cfg, stderr); err != nil {
			return err
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

// runLifecycles runs, for each number of clients, each pgbench anchor and
// right after it the Quittance runs it anchors (one replica and, on many
// budgets, several and the batch endpoints), printing each as it ends.
func runLifecycles(ctx context.Context, h *harness, cfg benchConfig, stderr io.Writer) ([]pgbenchResult, []lifecycleResult, error) {
	var (
		pgb   []pgbenchResult
		lifes []lifecycleResult
	)
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
				return nil, nil, err
			}
			fmt.Fprintf(stderr, "pgbench   c=%-3d scale %-3d %8.1f tps  mean %s p50 %s p99 %s load %s\n  %s\n",
				n, scale, r.TPS, ms(r.Avg), ms(r.P50), ms(r.P99), r.Load, r.Cost)
			pgb = append(pgb, r)
			replicas := []int{1}
			if mode == "many" && cfg.Replicas > 1 {
				replicas = append(replicas, cfg.Replicas)
			}
			runs := []lifecycleCase{}
			for _, rep := range replicas {
				runs = append(runs, lifecycleCase{mode: mode, replicas: rep})
			}
			if mode == "many" && cfg.BatchSize > 0 {
				runs = append(runs, lifecycleCase{mode: "batch", replicas: 1})
			}
			for _, c := range runs {
				l, err := runLifecycle(ctx, h, cfg, n, c.mode, c.replicas)
				if err != nil {
					return nil, nil, err
				}
				fmt.Fprintf(stderr, "quittance c=%-3d %-5s ×%d %8.1f ops/s mean %s p50 %s p99 %s rss %s errors %d load %s\n  %s\n  %s\n",
					n, c.mode, c.replicas, l.OpsPerS, ms(l.Avg), ms(l.P50), ms(l.P99), mib(l.PeakRSS), l.Errors, l.Load, l.Cost, l.Flushes)
				lifes = append(lifes, l)
			}
		}
	}
	// The runs after these pay nothing for counting statements.
	if err := h.cost.track(ctx, "none"); err != nil {
		return nil, nil, err
	}
	return pgb, lifes, nil
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
// tpcb-like with n clients and 2 threads, measuring what its transactions
// cost (pgbench's own CPU time is the load generator's). With txnLog every
// transaction is logged (-l), and the percentiles are computed from the
// log the same way as Quittance's; without it neither side logs.
func runPgbench(ctx context.Context, h *harness, n, scale int, d time.Duration, txnLog bool) (pgbenchResult, error) {
	bin, url, err := initPgbench(ctx, h, scale)
	if err != nil {
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
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	w, err := h.cost.begin(ctx, "pgbench", nil)
	if err != nil {
		return pgbenchResult{}, err
	}
	if err := cmd.Run(); err != nil {
		return pgbenchResult{}, fmt.Errorf("pgbench: %w: %s", err, out.Bytes())
	}
	r := pgbenchResult{Clients: n, Scale: scale}
	if r.Cost, err = w.end(ctx, true); err != nil {
		return r, err
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.Cost.Load = rusageCPU(ru)
	}
	if err := parsePgbench(out.Bytes(), &r); err != nil {
		return r, err
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

// initPgbench creates the pgbench database, initializes it at scale and
// checkpoints, and returns pgbench's executable and the database's URL.
func initPgbench(ctx context.Context, h *harness, scale int) (bin, url string, err error) {
	if url, err = h.createDatabase(ctx, "pgbench"); err != nil {
		return "", "", err
	}
	if bin, err = findPgbench(h.binDir); err != nil {
		return "", "", err
	}
	// Server-side data generation (-I G): the same tables, faster at scale.
	init := exec.CommandContext(ctx, bin, "-i", "-s", strconv.Itoa(scale), "-q", "-I", "dtGvp", url)
	if out, err := init.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("pgbench -i -s %d: %w: %s", scale, err, out)
	}
	return bin, url, checkpoint(ctx, h)
}

// parsePgbench reads the TPS, the mean latency and the transactions
// processed from pgbench's output into r.
func parsePgbench(out []byte, r *pgbenchResult) error {
	if m := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`).FindSubmatch(out); m != nil {
		r.TPS, _ = strconv.ParseFloat(string(m[1]), 64)
	} else {
		return fmt.Errorf("no tps in the pgbench output: %s", out)
	}
	if m := regexp.MustCompile(`latency average = ([0-9.]+) ms`).FindSubmatch(out); m != nil {
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		r.Avg = time.Duration(v * float64(time.Millisecond))
	}
	m := regexp.MustCompile(`number of transactions actually processed: ([0-9]+)`).FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("no transaction count in the pgbench output: %s", out)
	}
	r.Cost.Ops, _ = strconv.ParseInt(string(m[1]), 10, 64)
	return nil
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

// replicaSet is what startReplicas starts: n `quittance serve` processes
// on dbURL, bootstrapped with token, whose logs are named after name;
// env(i) is replica i's extra environment.
type replicaSet struct {
	n            int
	dbURL, token string
	name         string
	env          func(i int) []string
}

// startReplicas starts the replicas of rs at the same moment and waits
// until all are ready.
func startReplicas(ctx context.Context, h *harness, rs replicaSet) ([]*service, error) {
	svcs := make([]*service, rs.n)
	errs := make([]error, rs.n)
	var wg sync.WaitGroup
	for i := range rs.n {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			svcs[i], errs[i] = startService(ctx, serviceConfig{
				Binary: h.binary, Addr: addr, DatabaseURL: rs.dbURL, Token: rs.token,
				LogPath: filepath.Join(h.dir, fmt.Sprintf("%s-r%d.log", rs.name, i)), Env: rs.env(i),
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

// lifecycleRun is one runLifecycle: the replicas, what every client uses
// (org, signing key, budgets, orchestrator token) and the counters the
// clients add to.
type lifecycleRun struct {
	h         *harness
	cfg       benchConfig
	name      string
	mode      string
	debugAddr string // the profiled replica's debug listener, with -pprof
	dbURL     string
	svcs      []*service
	clients   []*client // one per replica
	org       string
	sig       *signer
	budgets   []string
	orch      string
	logDir    string

	measuring atomic.Bool
	ops, errs atomic.Int64
	totalNs   atomic.Int64
	firstErr  atomic.Value
	logErr    atomic.Value
}

// runLifecycle starts replicas service processes on a fresh database and
// drives n clients through create → task-status canceled → signed ack, on
// one budget (mode "hot") or spread over many budgets ("many"). Each
// client sends its successive requests to successive replicas.
func runLifecycle(ctx context.Context, h *harness, cfg benchConfig, n int, mode string, replicas int) (lifecycleResult, error) {
	res := lifecycleResult{Clients: n, Mode: mode, Replicas: replicas}
	r := &lifecycleRun{h: h, cfg: cfg, name: fmt.Sprintf("quittance_%s_c%d_r%d", mode, n, replicas), mode: mode}
	admin, err := r.startReplicas(ctx, replicas, n)
	if err != nil {
		return res, err
	}
	defer func() {
		for _, s := range r.svcs {
			s.stop()
		}
	}()
	if err := r.setup(ctx, admin, mode); err != nil {
		return res, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	if err := r.startClients(runCtx, &wg, n); err != nil {
		return res, err
	}
	time.Sleep(cfg.Warmup)
	if err := r.analyze(ctx); err != nil {
		return res, err
	}
	if err := r.measure(ctx, &res); err != nil {
		return res, err
	}
	res.Ops = r.ops.Load()
	res.Cost.Ops = res.Ops
	res.Load = loadAverage()
	stop()
	wg.Wait()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, r.results(&res)
}

// analyze gives the planner statistics of the tables the warm-up filled,
// as autovacuum does in a ledger in use, and as pgbench's initialization
// does for its tables. Without them, a run on a fresh database measures
// plans made for empty tables: the replicas' connections keep the generic
// plan of each statement they made while the tables were empty, sequential
// scans of a table that then grows through the run, since no statistics
// change to invalidate them in a run shorter than autovacuum's first look
// (ledger/DESIGN.md §5, "The write path"). ANALYZE invalidates those
// plans; the measured window then runs plans made for tables of the
// warm-up's size.
func (r *lifecycleRun) analyze(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("analyze after the warm-up: %w", err)
	}
	return nil
}

// startReplicas creates the run's database and starts its replicas with a
// fresh bootstrap token, which it returns; with -pprof the first replica
// gets a debug listener. Each replica's client keeps up to 2×conns idle
// connections.
func (r *lifecycleRun) startReplicas(ctx context.Context, replicas, conns int) (string, error) {
	dbURL, err := r.h.createDatabase(ctx, r.name)
	if err != nil {
		return "", err
	}
	r.dbURL = dbURL
	admin := access.NewTokenSecret()
	env := append([]string{"QUITTANCE_SWEEP_INTERVAL=1h", "QUITTANCE_A2A_STREAMING=false"}, r.cfg.ServiceEnv...)
	if r.cfg.Pprof {
		if r.debugAddr, err = freeAddr(); err != nil {
			return "", err
		}
	}
	r.svcs, err = startReplicas(ctx, r.h, replicaSet{n: replicas, dbURL: dbURL, token: admin, name: r.name, env: func(i int) []string {
		if i == 0 && r.debugAddr != "" {
			// Only the first replica is profiled.
			return append(slices.Clone(env), "QUITTANCE_DEBUG_ADDR="+r.debugAddr)
		}
		return env
	}})
	if err != nil {
		return "", err
	}
	r.clients = make([]*client, replicas)
	for i, s := range r.svcs {
		r.clients[i] = newClient(s.URL, conns)
	}
	return admin, nil
}

// setup creates, with the bootstrap token, the on-call principals, the
// budgets of mode, the supplier org and the orchestrator token, then
// checkpoints the cluster and makes the transaction log directory.
func (r *lifecycleRun) setup(ctx context.Context, bootstrap, mode string) error {
	c := r.clients[0]
	// The bootstrap token creates the two on-call principals; from then on
	// the first administers and the second approves privileged changes.
	admin, admin2, err := twoOncall(ctx, c, bootstrap)
	if err != nil {
		return err
	}
	oc := onCall{c: c, token: admin, approver: admin2}
	r.org = "supplier"
	r.sig = newSigner("k1")
	r.budgets = []string{"hot"}
	if mode != "hot" {
		r.budgets = r.budgets[:0]
		for i := range r.cfg.ManyBudgets {
			r.budgets = append(r.budgets, fmt.Sprintf("b-%03d", i))
		}
	}
	for _, b := range r.budgets {
		// Funded at once; the tenant, by a second on-call's approval.
		if err := oc.privileged(ctx, http.MethodPut, "/admin/v1/budgets/"+b,
			map[string]any{"currency": "EUR", "funded_minor": int64(1) << 50, "tenants": []string{"bench"}}); err != nil {
			return err
		}
	}
	if err := oc.privileged(ctx, http.MethodPut, "/admin/v1/orgs/"+r.org,
		map[string]any{"name": "Supplier", "jwks": r.sig.jwks()}); err != nil {
		return err
	}
	if r.orch, err = oc.newToken(ctx, "orchestrator", "bench", "bench-orchestrator"); err != nil {
		return err
	}
	if err := checkpoint(ctx, r.h); err != nil {
		return err
	}
	r.logDir = filepath.Join(r.h.dir, r.name+"-txn")
	return os.MkdirAll(r.logDir, 0o755)
}

// startClients starts n clients that run lifecycles until ctx ends, each
// with its own transaction log when -txn-log is on.
func (r *lifecycleRun) startClients(ctx context.Context, wg *sync.WaitGroup, n int) error {
	for i := range n {
		lc := &lifecycleClient{run: r, id: i, next: i}
		var f *os.File
		if r.cfg.TxnLog {
			var err error
			if f, err = os.Create(filepath.Join(r.logDir, fmt.Sprintf("txn.%d", i))); err != nil {
				return err
			}
			lc.txnLog = bufio.NewWriterSize(f, 64<<10)
		}
		wg.Go(func() {
			defer func() {
				if f == nil {
					return
				}
				if err := lc.txnLog.Flush(); err != nil {
					r.logErr.CompareAndSwap(nil, err.Error())
				}
				f.Close()
			}()
			for k := 0; ctx.Err() == nil; k++ {
				if r.mode == "batch" {
					lc.batchLifecycle(ctx, k)
				} else {
					lc.lifecycle(ctx, k)
				}
			}
		})
	}
	return nil
}

// lifecycleClient is one client of a lifecycle run.
type lifecycleClient struct {
	run    *lifecycleRun
	id     int
	next   int   // the replica the next request goes to, modulo replicas
	seq    int64 // the next transaction number in the log
	txnLog *bufio.Writer
}

// do sends one request to the next replica in turn and, while the run
// measures, counts it as one operation and logs it; it reports whether the
// request succeeded.
func (lc *lifecycleClient) do(ctx context.Context, f func(c *client) error) bool {
	return lc.doN(ctx, 1, f)
}

// doN is do for a request that carries ops operations (a batch): they
// count as ops operations, and the request as one line of the log.
func (lc *lifecycleClient) doN(ctx context.Context, ops int, f func(c *client) error) bool {
	r := lc.run
	c := r.clients[lc.next%len(r.clients)]
	lc.next++
	t0 := time.Now()
	err := f(c)
	if ctx.Err() != nil {
		return false
	}
	if err != nil {
		r.errs.Add(1)
		r.firstErr.CompareAndSwap(nil, err.Error())
		return false
	}
	if r.measuring.Load() {
		end := time.Now()
		d := end.Sub(t0)
		r.ops.Add(int64(ops))
		r.totalNs.Add(int64(d) * int64(ops))
		if lc.txnLog != nil {
			// pgbench's -l line: client_id transaction_no time_us script_no epoch epoch_us.
			fmt.Fprintf(lc.txnLog, "%d %d %d 0 %d %d\n", lc.id, lc.seq, d.Microseconds(), end.Unix(), end.Nanosecond()/1000)
		}
		lc.seq++
	}
	return true
}

// lifecycle runs the client's k-th delegation through create → task-status
// canceled → signed ack.
func (lc *lifecycleClient) lifecycle(ctx context.Context, k int) {
	r := lc.run
	op := fmt.Sprintf("c%d-%d", lc.id, k)
	task := "task-" + op
	budget := r.budgets[(lc.id*7919+k)%len(r.budgets)]
	var d delegation
	ok := lc.do(ctx, func(c *client) error {
		return c.must(ctx, request{http.MethodPost, "/v1/delegations", r.orch, map[string]any{
			"business_operation_id": op, "org_id": r.org, "task_class": "procurement", "budget_id": budget,
			"hold":   map[string]any{"amount_minor": 1000 + k%1000, "currency": "EUR"},
			"remote": map[string]any{"task_id": task, "context_id": "ctx-" + op},
		}}, &d, http.StatusCreated)
	})
	if !ok {
		return
	}
	ok = lc.do(ctx, func(c *client) error {
		return c.must(ctx, request{http.MethodPost, "/v1/delegations/" + d.ID + "/task-status", r.orch,
			map[string]any{"state": "TASK_STATE_CANCELED"}}, &d, http.StatusOK)
	})
	if !ok {
		return
	}
	if d.Compensation == nil || d.ObligationState != "revocation_pending_compensation" {
		r.errs.Add(1)
		return
	}
	token := r.sig.sign(typAck, evidenceClaims(r.org, task, d.Compensation.IdempotencyKey, time.Now()))
	lc.do(ctx, func(c *client) error {
		resp, err := c.do(ctx, http.MethodPost, "/v1/compensation/acks", "", "application/jose", token)
		if err != nil {
			return err
		}
		if resp.Status != http.StatusOK {
			return fmt.Errorf("ack: status %d: %s", resp.Status, resp.Body)
		}
		return nil
	})
}

// batchLifecycle runs the client's k-th batch of BatchSize delegations
// through the same lifecycle: the creates in one POST /v1/delegations/batch,
// each task status in a call of its own (there is no batch for them), the
// signed acks in one POST /v1/compensation/evidence/batch. Every item
// counts as one operation; an item the batch answered with a problem is
// an error.
func (lc *lifecycleClient) batchLifecycle(ctx context.Context, k int) {
	r := lc.run
	n := r.cfg.BatchSize
	items := make([]map[string]any, n)
	for i := range items {
		op := fmt.Sprintf("c%d-%d-%d", lc.id, k, i)
		items[i] = map[string]any{
			"business_operation_id": op, "org_id": r.org, "task_class": "procurement",
			"budget_id": r.budgets[(lc.id*7919+k*n+i)%len(r.budgets)],
			"hold":      map[string]any{"amount_minor": 1000 + i, "currency": "EUR"},
			"remote":    map[string]any{"task_id": "task-" + op, "context_id": "ctx-" + op},
		}
	}
	var created struct {
		Results []struct {
			Status     int         `json:"status"`
			Delegation *delegation `json:"delegation"`
		} `json:"results"`
	}
	if !lc.doN(ctx, n, func(c *client) error {
		return c.must(ctx, request{http.MethodPost, "/v1/delegations/batch", r.orch, map[string]any{"delegations": items}}, &created, http.StatusOK)
	}) {
		return
	}
	tokens := make([]string, 0, n)
	for i, res := range created.Results {
		if res.Status != http.StatusCreated || res.Delegation == nil {
			r.itemRefused(fmt.Errorf("delegation batch: item %d answered %d", i, res.Status))
			continue
		}
		d := *res.Delegation
		if !lc.do(ctx, func(c *client) error {
			return c.must(ctx, request{http.MethodPost, "/v1/delegations/" + d.ID + "/task-status", r.orch,
				map[string]any{"state": "TASK_STATE_CANCELED"}}, &d, http.StatusOK)
		}) {
			if ctx.Err() != nil {
				return // the run is over: what was not sent is no error
			}
			continue // do counted the error
		}
		if d.Compensation == nil || d.ObligationState != "revocation_pending_compensation" {
			r.itemRefused(fmt.Errorf("task status: delegation %s is %s with no compensation asked", d.ID, d.ObligationState))
			continue
		}
		task := items[i]["remote"].(map[string]any)["task_id"].(string)
		tokens = append(tokens, string(r.sig.sign(typAck, evidenceClaims(r.org, task, d.Compensation.IdempotencyKey, time.Now()))))
	}
	if len(tokens) == 0 {
		return
	}
	var acked struct {
		Results []struct {
			Status int `json:"status"`
		} `json:"results"`
	}
	lc.doN(ctx, len(tokens), func(c *client) error {
		if err := c.must(ctx, request{http.MethodPost, "/v1/compensation/evidence/batch", "", map[string]any{"tokens": tokens}}, &acked, http.StatusOK); err != nil {
			return err
		}
		for _, res := range acked.Results {
			if res.Status != http.StatusOK {
				return fmt.Errorf("evidence batch: an item answered %d", res.Status)
			}
		}
		return nil
	})
}

// itemRefused counts an item of a batch that was answered, but not as
// the lifecycle expects, as one error.
func (r *lifecycleRun) itemRefused(err error) {
	r.errs.Add(1)
	r.firstErr.CompareAndSwap(nil, err.Error())
}

// measure counts the clients' operations for the configured duration (or
// until ctx ends), under perf(1) or Go's CPU profiler when asked, and
// sets res.Duration.
func (r *lifecycleRun) measure(ctx context.Context, res *lifecycleResult) error {
	h, cfg := r.h, r.cfg
	var perf *exec.Cmd
	if cfg.Perf {
		perf = exec.Command("perf", "record", "-F", "499", "-g", "-p", strconv.Itoa(r.svcs[0].cmd.Process.Pid),
			"-o", filepath.Join(h.dir, r.name+".perf.data"))
		perf.Stdout, perf.Stderr = io.Discard, io.Discard
		if err := perf.Start(); err != nil {
			return fmt.Errorf("perf record: %w", err)
		}
	}
	var pprofDone chan error
	pprofPath := filepath.Join(h.dir, r.name+".pprof")
	if cfg.Pprof {
		pprofDone = make(chan error, 1)
		go func() { pprofDone <- fetchCPUProfile(ctx, r.debugAddr, cfg.Duration, pprofPath) }()
	}
	pids := make([]int, len(r.svcs))
	for i, s := range r.svcs {
		pids[i] = s.cmd.Process.Pid
	}
	flushesBefore := r.flushCounts(ctx)
	w, err := h.cost.begin(ctx, r.name, pids)
	if err != nil {
		return err
	}
	r.measuring.Store(true)
	t0 := time.Now()
	select {
	case <-time.After(cfg.Duration):
	case <-ctx.Done():
	}
	r.measuring.Store(false)
	res.Duration = time.Since(t0)
	if res.Cost, err = w.end(ctx, false); err != nil {
		return err
	}
	res.Flushes = r.flushCounts(ctx).sub(flushesBefore)
	if perf != nil {
		_ = perf.Process.Signal(os.Interrupt)
		_ = perf.Wait()
		fmt.Fprintf(h.stderr, "  CPU profile: perf report -i %s\n", filepath.Join(h.dir, r.name+".perf.data"))
	}
	if pprofDone != nil {
		if err := <-pprofDone; err != nil {
			return err
		}
		fmt.Fprintf(h.stderr, "  CPU profile: go tool pprof %s %s\n", h.binary, pprofPath)
	}
	return nil
}

// flushCounts are the replicas' write coalescer figures now, added up.
func (r *lifecycleRun) flushCounts(ctx context.Context) flushCounts {
	w := newFlushWatch(len(r.svcs))
	for i, s := range r.svcs {
		w.read(ctx, i, s.URL)
	}
	c, _ := w.total()
	return c
}

// results fills in res, after the clients stopped, from the counters, the
// transaction logs and the replicas' peak memory, and prints the first
// error a client saw.
func (r *lifecycleRun) results(res *lifecycleResult) error {
	if v := r.logErr.Load(); v != nil {
		return fmt.Errorf("write the transaction log: %s", v)
	}
	res.Errors = r.errs.Load()
	res.OpsPerS = float64(res.Ops) / res.Duration.Seconds()
	if res.Ops > 0 {
		res.Avg = time.Duration(r.totalNs.Load() / res.Ops)
	}
	if r.cfg.TxnLog {
		lat, err := readTxnLogs(filepath.Join(r.logDir, "txn.*"))
		if err != nil {
			return err
		}
		res.P50, res.P99 = lat.quantile(0.5), lat.quantile(0.99)
	}
	for _, s := range r.svcs {
		rss, err := s.peakRSS()
		if err != nil {
			return err
		}
		res.PeakRSS = max(res.PeakRSS, rss)
	}
	if v := r.firstErr.Load(); v != nil {
		fmt.Fprintf(r.h.stderr, "  first error: %s\n", v)
	}
	return nil
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
