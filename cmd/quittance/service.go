package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quittance/quittance/cmd/quittance/internal/app"
	"github.com/quittance/quittance/cmd/quittance/internal/console"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/telemetry"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/internal/panics"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/ledger/webhook"
	"github.com/quittance/quittance/sql/migrations"
	"github.com/quittance/quittance/sql/pgcluster"
)

// version is the build's version, set with -ldflags "-X main.version=…".
var version = "dev"

func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

// migrateDatabase applies pending migrations as the role that owns the
// schema: QUITTANCE_MIGRATION_DATABASE_URL when set, DATABASE_URL otherwise.
func migrateDatabase(ctx context.Context, cfg config, log *slog.Logger) error {
	dbURL, name := cfg.DatabaseURL, "DATABASE_URL"
	if cfg.MigrationDatabaseURL != "" {
		dbURL, name = cfg.MigrationDatabaseURL, "QUITTANCE_MIGRATION_DATABASE_URL"
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return usageError{fmt.Errorf("%s: %w", name, err)}
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := migrations.Up(ctx, db, log); err != nil {
		if cfg.MigrationDatabaseURL == "" {
			// A service role cannot migrate: say where the owner goes.
			return fmt.Errorf("%w (migrations run as DATABASE_URL's role; if that is the service's restricted role, "+
				"set QUITTANCE_MIGRATION_DATABASE_URL to the owner's, or run `quittance migrate` as the owner)", err)
		}
		return err
	}
	return nil
}

// openDatabase migrates (migrateDatabase) and connects the service's pool
// to DATABASE_URL, and the read pool to QUITTANCE_READ_DATABASE_URL when
// it is set (openReadPool; nil otherwise).
func openDatabase(ctx context.Context, cfg config, log *slog.Logger) (pool, readPool *pgxpool.Pool, err error) {
	if err := migrateDatabase(ctx, cfg, log); err != nil {
		return nil, nil, err
	}
	pc, err := poolConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("DATABASE_URL: %w", err)}
	}
	if pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, nil, usageError{fmt.Errorf("DATABASE_URL: %w", err)}
	}
	if readPool, err = openReadPool(ctx, cfg); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, readPool, nil
}

func migrate(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	if cfg.DatabaseURL == "" && cfg.MigrationDatabaseURL == "" {
		return usageError{errors.New("QUITTANCE_MIGRATION_DATABASE_URL or DATABASE_URL is required")}
	}
	log := newLogger(stderr, cfg.LogLevel)
	if err := migrateDatabase(ctx, cfg, log); err != nil {
		return err
	}
	log.Info("migrations applied")
	return nil
}

func serve(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		return usageError{errors.New("DATABASE_URL is required (use `quittance dev` for a local embedded database)")}
	}
	return runService(ctx, cfg, newLogger(stderr, cfg.LogLevel), stdout, nil)
}

// devTokenFile keeps the dev on-call token in the data directory, so the
// README's walk-through works across restarts of `make run`.
const devTokenFile = "dev-oncall-token"

// devSigningKeyFile keeps the dev ledger signing key (a JWK Set) in the data
// directory.
const devSigningKeyFile = "ledger-signing-key.jwks.json"

// devPostgresURLFile keeps, in the data directory, the URL that connects to
// dev's database as the owner of its schema (the embedded cluster's
// superuser, on the port of this start), so that sql/RECONCILIATION.md's
// psql line works wherever the cluster lives (as root it may be under
// /var/lib/quittance/) while dev runs.
const devPostgresURLFile = "postgres-url"

func dev(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.LogLevel)
	// Local agents (the demo supplier, agents under development) listen on
	// plain http on loopback.
	cfg.EgressAllowHTTP = true
	cfg.dev = true
	if cfg.EgressAllowCIDRs == "" {
		cfg.EgressAllowCIDRs = "127.0.0.1/32"
	}
	// The data directory holds the dev token and signing key even when
	// DATABASE_URL names a database elsewhere.
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", cfg.DataDir, err)
	}
	if cfg.DatabaseURL == "" {
		stop, err := startDevDatabase(ctx, &cfg, log, stdout)
		if err != nil {
			return err
		}
		defer stop()
	}
	ownerURL := cfg.MigrationDatabaseURL
	if ownerURL == "" {
		ownerURL = cfg.DatabaseURL
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, devPostgresURLFile), []byte(ownerURL+"\n"), 0o600); err != nil {
		return fmt.Errorf("save the database URL: %w", err)
	}
	if cfg.SigningKeyFile == "" {
		cfg.SigningKeyFile = filepath.Join(cfg.DataDir, devSigningKeyFile)
		cfg.createSigningKey = true
	}
	if cfg.BootstrapToken == "" {
		if err := devBootstrapToken(&cfg, stdout); err != nil {
			return err
		}
	}
	demo, err := startDevDemo(getenv, &cfg, log, stdout)
	if err != nil {
		return err
	}
	defer demo.close()
	devUI, err := newDevConsole(getenv, cfg, stdout)
	if err != nil {
		return err
	}
	return runService(ctx, cfg, log, stdout, chainHooks(demo.onReady(), devUI.onReady))
}

// startDevDatabase starts dev's embedded PostgreSQL in the data directory
// (installing its binaries when missing) and points cfg at it; the
// returned function stops it.
func startDevDatabase(ctx context.Context, cfg *config, log *slog.Logger, stdout io.Writer) (stop func(), err error) {
	if _, err := pgcluster.FindBinaries(); errors.Is(err, pgcluster.ErrNotInstalled) {
		log.Info("PostgreSQL binaries not found; installing them")
		if err := pgcluster.InstallBinaries(ctx, log); err != nil {
			return nil, err
		}
	}
	clusterDir := filepath.Join(cfg.DataDir, "postgres")
	cluster, err := pgcluster.Start(ctx, pgcluster.Config{DataDir: clusterDir, Log: log})
	if errors.Is(err, pgcluster.ErrDataDirUnreachable) {
		// Root keeps the checkout in a directory the postgres user
		// cannot enter (such as /root): the cluster lives in a
		// directory of its own instead, the same one on every run.
		clusterDir, err = sharedClusterDir(clusterDir)
		if err == nil {
			fmt.Fprintf(stdout, "%s is closed to the postgres user; keeping the cluster in %s\n", cfg.DataDir, clusterDir)
			cluster, err = pgcluster.Start(ctx, pgcluster.Config{DataDir: clusterDir, Log: log})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("start the embedded PostgreSQL: %w", err)
	}
	stop = func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := cluster.Stop(stopCtx); err != nil {
			log.Error("stop the embedded PostgreSQL", slog.Any("error", err))
		}
	}
	// Migrations run as the superuser, which owns the schema; the
	// service connects as its own login role, which cannot rewrite the
	// audit log (ledger/AUDIT.md).
	cfg.MigrationDatabaseURL = cluster.URL(pgcluster.Database)
	cfg.DatabaseURL = cluster.ServiceURL(pgcluster.Database)
	fmt.Fprintf(stdout, "PostgreSQL: %s (migrations as %s; data in %s)\n", cfg.DatabaseURL, pgcluster.Superuser, cluster.DataDir())
	return stop, nil
}

// devBootstrapToken sets cfg.BootstrapToken to the dev on-call token kept
// in the data directory, made on the first start, and prints it.
func devBootstrapToken(cfg *config, stdout io.Writer) error {
	path := filepath.Join(cfg.DataDir, devTokenFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		cfg.BootstrapToken = string(b)
	case errors.Is(err, os.ErrNotExist):
		cfg.BootstrapToken = access.NewTokenSecret()
		if err := os.WriteFile(path, []byte(cfg.BootstrapToken), 0o600); err != nil {
			return fmt.Errorf("save the dev token: %w", err)
		}
	default:
		return fmt.Errorf("read the dev token: %w", err)
	}
	fmt.Fprintf(stdout, "On-call token (also in %s):\n  %s\n", path, cfg.BootstrapToken)
	return nil
}

// readyHook is what `quittance dev` runs once the service listens on addr:
// the listener's address, which names the port chosen when QUITTANCE_ADDR
// asks for port 0 (cfg.Addr does not).
type readyHook func(ctx context.Context, svc *app.App, addr net.Addr) error

// runService runs the service on cfg.DatabaseURL until ctx is canceled,
// then shuts down gracefully: stop accepting, drain requests, close the pool.
// onReady, if not nil, runs once the service is listening; its failure is
// logged and does not stop the service.
func runService(ctx context.Context, cfg config, log *slog.Logger, stdout io.Writer, onReady readyHook) error {
	if cfg.Checkpoints != "off" && cfg.SigningKeyFile == "" {
		// Refused before anything is migrated or served: a ledger without
		// checkpoints cannot show that its log lost its last events.
		return usageError{errors.New("QUITTANCE_SIGNING_KEY_FILE is required: the ledger signs the checkpoints that anchor its audit log with it " +
			"(ledger/AUDIT.md); set QUITTANCE_CHECKPOINTS=off to run without checkpoints")}
	}
	pool, readPool, err := openDatabase(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	defer closeReadPool(readPool)
	// The metrics registry is private to this service (never Prometheus's
	// global one) and served at /metrics, on QUITTANCE_METRICS_ADDR when set.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	identity, err := loadIdentity(cfg, log)
	if err != nil {
		return err
	}
	// The service listens before it is built: the worker registers push
	// notifications at PublicURL, which dev takes from the listener.
	listener, err := listen(&cfg, log)
	if err != nil {
		return err
	}
	defer listener.Close()
	streamsDone := make(chan struct{})
	svc, err := newApp(cfg, appParts{pool: pool, readPool: readPool, reg: reg, log: log, identity: identity, streamsDone: streamsDone})
	if err != nil {
		return err
	}
	// Credential revocations reach this replica's authentication cache
	// through LISTEN/NOTIFY; pending changes expire.
	defer runBackground(ctx, log, svc.Metrics, "principals", func(ctx context.Context) error { return svc.Access.Run(ctx, time.Minute) })()
	if err := ensureBootstrapToken(ctx, cfg, svc, log); err != nil {
		return err
	}
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)})
	root := http.NewServeMux()
	if cfg.MetricsAddr == "" {
		// Compatibility with scrape configs that predate
		// QUITTANCE_METRICS_ADDR: metrics on the public address.
		root.Handle("GET /metrics", metrics)
	}
	root.Handle("/", svc.API)
	root.Handle(console.Prefix, svc.Console)
	defer startWorkers(ctx, cfg, log, svc)()

	server := &http.Server{
		Handler:           root,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	// Event streams never end by themselves: shutting down ends them, and
	// clients resume elsewhere with Last-Event-ID.
	server.RegisterOnShutdown(func() { close(streamsDone) })
	stopApart, err := serveDebugAndMetrics(cfg, metrics, log, stdout)
	if err != nil {
		return err
	}
	defer stopApart()
	ready := func() {
		if onReady != nil {
			if err := onReady(ctx, svc, listener.Addr()); err != nil {
				log.Warn("start-up hook failed", slog.Any("error", err))
			}
		}
	}
	fmt.Fprintf(stdout, "Quittance listening on http://%s (ledger id %q)\n", listener.Addr(), cfg.LedgerID)
	if onReady == nil {
		fmt.Fprintf(stdout, "Console: http://%s%s (sign in with an on-call or finance API token)\n", listener.Addr(), console.Prefix)
	}
	log.Info("serving", slog.String("addr", listener.Addr().String()), slog.String("ledger_id", cfg.LedgerID))
	return serveUntilDone(ctx, server, listener, ready, cfg.ShutdownTimeout, log)
}

// loadIdentity loads the ledger's identity from QUITTANCE_SIGNING_KEY_FILE
// (nil when it is not set): it signs outbound compensation requests, and
// its public keys are served at /.well-known/jwks.json.
func loadIdentity(cfg config, log *slog.Logger) (*jose.Identity, error) {
	if cfg.SigningKeyFile == "" {
		log.Warn("QUITTANCE_SIGNING_KEY_FILE is not set: compensation requests are not signed and no JWKS is published")
		return nil, nil
	}
	identity, err := jose.LoadOrCreateIdentityFile(cfg.LedgerID, cfg.SigningKeyFile, cfg.createSigningKey, time.Now())
	if err != nil {
		return nil, usageError{fmt.Errorf("QUITTANCE_SIGNING_KEY_FILE: %w", err)}
	}
	log.Info("ledger signing key loaded", slog.String("kid", identity.ActiveKeyID()))
	return identity, nil
}

// listen listens on cfg.Addr and, when dev asks for it, sets
// cfg.PublicURL to the listener's loopback URL.
func listen(cfg *config, log *slog.Logger) (net.Listener, error) {
	listener, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	if cfg.PublicURL == "" && cfg.publicURLFromListener {
		cfg.PublicURL = loopbackURL(listener.Addr())
	}
	if cfg.PublicURL == "" {
		log.Warn("QUITTANCE_PUBLIC_URL is not set: no push notifications are registered with remote agents; dispatched tasks are polled")
	}
	return listener, nil
}

// appParts are what runService made before the application: the pool,
// the metrics registry, the logger, the ledger's identity (nil: none) and
// the channel closed when the server shuts down, which ends event streams.
type appParts struct {
	pool        *pgxpool.Pool
	readPool    *pgxpool.Pool // nil: no QUITTANCE_READ_DATABASE_URL
	reg         *prometheus.Registry
	log         *slog.Logger
	identity    *jose.Identity
	streamsDone chan struct{}
}

// newApp builds the application from cfg and the parts runService made.
func newApp(cfg config, p appParts) (*app.App, error) {
	var checkpointInterval time.Duration // for the alert rules: 0 when no checkpoints are signed
	if cfg.Checkpoints != "off" {
		checkpointInterval = cfg.CheckpointInterval
	}
	consoleCfg, err := cfg.consoleConfig()
	if err != nil {
		return nil, usageError{err}
	}
	currencyThresholds, err := cfg.currencyThresholds()
	if err != nil {
		return nil, usageError{err}
	}
	return app.New(app.Config{
		Console: consoleCfg,
		Pool:    p.pool, ReadPool: p.readPool, Registry: p.reg, Log: p.log, LedgerID: cfg.LedgerID, Version: version, Identity: p.identity,
		WriteOffApprovalThresholdMinor: cfg.WriteOffApprovalThresholdMinor, WriteOffApprovalThresholdsMinor: currencyThresholds,
		Egress: cfg.egressPolicy(), UnconfirmedAlertGrace: cfg.UnconfirmedAlertGrace, CheckpointInterval: checkpointInterval,
		WriteBatchMax: cfg.WriteBatchMax, WriteQueueMax: cfg.WriteQueueMax, WriteFlushers: cfg.WriteFlushers,
		Dev: cfg.dev, PersonCredentialTTL: cfg.PersonCredentialTTL, PendingChangeTTL: cfg.PendingChangeTTL,
		PersonCredentialMaxTTL:    cfg.PersonCredentialMaxTTL,
		OrgJWKSUnknownKidInterval: cfg.OrgJWKSUnknownKidInterval, EvidenceRefusalTime: cfg.EvidenceRefusalTime,
		A2A: delegate.Config{
			PublicURL: cfg.PublicURL, Interval: cfg.A2AInterval, Lease: cfg.A2ALease, PollAfter: cfg.PollAfter,
			BackoffBase: cfg.A2ABackoffBase, BackoffMax: cfg.A2ABackoffMax,
			CompensationMaxAttempts: cfg.CompensationMaxAttempts, Streaming: cfg.A2AStreaming,
		},
		Webhooks: webhook.Config{
			MaxAttempts: cfg.WebhookMaxAttempts, BackoffBase: cfg.WebhookBackoffBase, BackoffMax: cfg.WebhookBackoffMax,
		},
		RateLimit: httpapi.RateLimit{RPS: cfg.RateLimitRPS, Burst: cfg.RateLimitBurst, MaxBuckets: cfg.RateLimitMaxBuckets, ClientIPHeader: cfg.TrustedProxyHeader},
		Stream: httpapi.StreamConfig{
			Heartbeat: cfg.StreamHeartbeat, Poll: cfg.StreamPoll, Done: p.streamsDone,
			MaxPerPrincipal: cfg.StreamMaxPerPrincipal, MaxOpen: cfg.StreamMaxOpen,
		},
	}), nil
}

// ensureBootstrapToken makes QUITTANCE_BOOTSTRAP_TOKEN, when set, an
// on-call token; one revoked on purpose stays refused.
func ensureBootstrapToken(ctx context.Context, cfg config, svc *app.App, log *slog.Logger) error {
	if cfg.BootstrapToken == "" {
		return nil
	}
	_, err := svc.Access.EnsureToken(ctx, access.TokenInput{Role: ledger.RoleOncall, Name: "bootstrap"}, cfg.BootstrapToken)
	switch {
	case errors.Is(err, access.ErrCredentialRetired):
		// Retired on purpose: it stays refused, and the service starts.
		log.Warn("the bootstrap token is revoked; QUITTANCE_BOOTSTRAP_TOKEN can be removed from the configuration")
	case err != nil:
		return fmt.Errorf("bootstrap token: %w", err)
	}
	return nil
}

// startWorkers starts the background loops every replica runs and
// returns the function that stops them, last started first, each
// finishing what it is doing.
func startWorkers(ctx context.Context, cfg config, log *slog.Logger, svc *app.App) (stop func()) {
	var stops []func()
	// The deadline sweep runs on every replica; FOR UPDATE SKIP LOCKED keeps
	// them from moving the same obligation twice.
	stops = append(stops, runBackground(ctx, log, svc.Metrics, "compensation sweep", svc.Compensation.Sweeper(cfg.SweepInterval).Run))
	// The A2A workers run on every replica too: the outbox is claimed with
	// FOR UPDATE SKIP LOCKED and leases, streams under advisory locks. On
	// shutdown they stop claiming and finish the calls in flight.
	stops = append(stops, runBackground(ctx, log, svc.Metrics, "a2a workers", svc.Worker.Run))
	stops = append(stops, runBackground(ctx, log, svc.Metrics, "webhook deliveries", svc.Webhooks.Run))
	// Every replica refreshes the keys of orgs registered by JWKS URL; an
	// org another replica fetched less than an interval ago is skipped.
	stops = append(stops, runBackground(ctx, log, svc.Metrics, "org key refresh", func(ctx context.Context) error {
		return svc.Ledger.RunOrgKeyRefresh(ctx, cfg.OrgJWKSRefresh)
	}))
	// Every replica signs checkpoints; an advisory lock makes them take
	// turns, and one finding the heads already signed signs nothing.
	if cfg.Checkpoints != "off" {
		stops = append(stops, runBackground(ctx, log, svc.Metrics, "checkpoints", func(ctx context.Context) error {
			return svc.Checkpoints.Run(ctx, cfg.CheckpointInterval)
		}))
	} else {
		log.Warn("QUITTANCE_CHECKPOINTS=off: no checkpoints are signed, so a tail removed from the audit log goes undetected")
	}
	return func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
}

// serveDebugAndMetrics serves the profiles on QUITTANCE_DEBUG_ADDR and
// the metrics on QUITTANCE_METRICS_ADDR, each when set, and returns the
// function that stops both.
func serveDebugAndMetrics(cfg config, metrics http.Handler, log *slog.Logger, stdout io.Writer) (stop func(), err error) {
	stopDebug, stopMetrics := func() {}, func() {}
	if cfg.DebugAddr != "" {
		if stopDebug, err = serveDebug(cfg.DebugAddr, log, stdout); err != nil {
			return nil, err
		}
	}
	if cfg.MetricsAddr != "" {
		if stopMetrics, err = serveMetrics(cfg.MetricsAddr, metrics, log, stdout); err != nil {
			stopDebug()
			return nil, err
		}
	}
	return func() {
		stopMetrics()
		stopDebug()
	}, nil
}

// serveUntilDone serves on listener until the server fails or ctx is canceled,
// running ready once it serves, then shuts the server down, draining
// requests for at most shutdownTimeout.
func serveUntilDone(ctx context.Context, server *http.Server, listener net.Listener, ready func(), shutdownTimeout time.Duration, log *slog.Logger) error {
	serveErr := make(chan error, 1)
	go func() { serveErr <- server.Serve(listener) }()
	ready()
	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := server.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("drain requests: %w", err)
	}
	return nil
}

// loopbackURL is the http URL of a listen address, naming 127.0.0.1 for
// an unspecified host (":8080"): what a local agent reaches it at.
func loopbackURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// runBackground runs a worker loop until the returned function, deferred
// by the caller, stops it and waits for it: workers stop, and finish what
// they are doing, before the connection pool closes. ctx's values reach
// run, its cancellation does not: shutdown is the stop function's to call.
// A panic that escapes the loop is logged with its stack and counted
// (quittance_background_panics_total, the name in snake case), and the
// loop starts again after a wait that doubles up to a minute: the replica
// stays up, and a loop that panics at once is not restarted in a tight loop.
func runBackground(ctx context.Context, log *slog.Logger, metrics *telemetry.Metrics, name string, run func(context.Context) error) (stop func()) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	worker := strings.ReplaceAll(name, " ", "_")
	go func() {
		defer close(done)
		for wait := time.Second; ; wait = min(2*wait, time.Minute) {
			err := panics.Recover(func() error { return run(runCtx) })
			p, panicked := panics.As(err)
			if !panicked {
				if err != nil {
					log.Error(name+" stopped", slog.Any("error", err))
				}
				return
			}
			panics.Log(log, worker, p)
			metrics.Panic(worker)
			select {
			case <-runCtx.Done():
				return
			case <-time.After(wait):
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// serveDebug serves Go's runtime profiles (net/http/pprof) on addr, apart
// from the API, until the returned function stops it. (Importing
// net/http/pprof also registers them on http.DefaultServeMux, which
// Quittance never serves.)
func serveDebug(addr string, log *slog.Logger, stdout io.Writer) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return serveApart(apartServer{addr, "QUITTANCE_DEBUG_ADDR", "profiles", "/debug/pprof/", mux}, log, stdout)
}

// serveMetrics serves metrics at /metrics on addr, apart from the API,
// until the returned function stops it. Apart because a metric says what
// the API keeps from its callers: quittance_evidence_tokens_refused_total
// counts each refused token by the org it named and the real reason, which
// the public endpoints' uniform 401 hides.
func serveMetrics(addr string, metrics http.Handler, log *slog.Logger, stdout io.Writer) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	return serveApart(apartServer{addr, "QUITTANCE_METRICS_ADDR", "metrics", "/metrics", mux}, log, stdout)
}

// apartServer is what serveApart serves: handler on addr, from the
// setting named setting, announced as what is served at path.
type apartServer struct {
	addr, setting, what, path string
	handler                   http.Handler
}

// serveApart serves a.handler on a listener of its own, and announces
// what it serves on stdout and in the log. The returned function closes
// it: a profile being taken or a scrape in flight is cut short, not
// drained (Prometheus scrapes the next replica).
func serveApart(a apartServer, log *slog.Logger, stdout io.Writer) (stop func(), err error) {
	addr, setting, what, path, handler := a.addr, a.setting, a.what, a.path, a.handler
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (%s): %w", addr, setting, err)
	}
	server := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	fmt.Fprintf(stdout, "Quittance %s on http://%s%s\n", what, listener.Addr(), path)
	log.Info("serving "+what, slog.String("addr", listener.Addr().String()))
	go func() {
		if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(what+" listener stopped", slog.Any("error", err))
		}
	}()
	return func() { _ = server.Close() }, nil
}

// sharedClusterDir is where dev keeps the cluster for a data directory the
// server's user cannot reach: under /var/lib/quittance, named after the
// absolute path it stands in for, so each checkout keeps its own data.
func sharedClusterDir(dataDir string) (string, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(abs))
	dir := filepath.Join("/var/lib/quittance", filepath.Base(filepath.Dir(filepath.Dir(abs)))+"-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	return filepath.Join(dir, "postgres"), nil
}
