package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/sql/pgstore"
)

// maxSoak bounds a soak run.
const maxSoak = 10 * time.Minute

// soakConfig is the soak subcommand's flags.
type soakConfig struct {
	Duration  time.Duration
	Clients   int
	Replicas  int
	KillEvery time.Duration
	PGEvery   time.Duration
	Drain     time.Duration
	Seed      uint64
	Keep      bool
}

func parseSoakFlags(args []string, stderr io.Writer) (soakConfig, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg soakConfig
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Minute, "how long the clients run (at most 10m)")
	fs.IntVar(&cfg.Clients, "clients", 8, "concurrent clients")
	fs.IntVar(&cfg.Replicas, "replicas", 1, "service processes on the one PostgreSQL; the clients spread their requests over them")
	fs.DurationVar(&cfg.KillEvery, "kill-every", 20*time.Second, "mean time between SIGKILLs of a random replica")
	fs.DurationVar(&cfg.PGEvery, "pg-every", 45*time.Second, "mean time between immediate PostgreSQL restarts")
	fs.DurationVar(&cfg.Drain, "drain", 3*time.Minute, "how long, after the clients stop, the remote work, webhooks and the event stream may take to finish")
	fs.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()), "seed of the clients' and the faults' choices")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the scratch directory (cluster, service logs)")
	if err := fs.Parse(args); err != nil {
		return cfg, errUsage
	}
	if cfg.Duration <= 0 || cfg.Duration > maxSoak {
		return cfg, fmt.Errorf("-duration must be in (0, %s]", maxSoak)
	}
	if cfg.Clients < 1 || cfg.Replicas < 1 || cfg.Drain <= 0 {
		return cfg, errors.New("-clients and -replicas must be positive, -drain a positive duration")
	}
	return cfg, nil
}

// Soak world: the approval threshold the service runs with, the tenant of
// the clients, the demo agents' orgs, and the scenarios a client plays.
const (
	soakThreshold = 100_000
	soakTenant    = "soak"
	// demoFast's tasks complete a moment after they are dispatched;
	// demoSlow's work until canceled, and honour compensation requests.
	demoFast = "demo-fast"
	demoSlow = "demo-slow"
)

type scenario int

const (
	scSettle             scenario = iota // working → completed: settled
	scAck                                // canceled → signed ack: compensated
	scDeclaration                        // failed → signed declaration: released
	scWriteOff                           // canceled → write-off (four eyes above the threshold): written_off
	scRejected                           // rejected: released
	scUngated                            // read_only canceled: released
	scOpen                               // canceled, left waiting: revocation_pending_compensation
	scHeld                               // created and left: held
	scDispatchSettle                     // dispatched to the demo agent, which completes it: settled
	scDispatchCompensate                 // dispatched, canceled through Quittance, compensated over A2A: compensated
	numScenarios
)

var scenarioNames = [numScenarios]string{
	"settle", "ack", "declaration", "write-off", "rejected", "ungated", "left open", "left held",
	"dispatched and completed", "dispatched, canceled and compensated",
}

// replica is one service process of the soak, restarted after each kill
// on the same address.
type replica struct {
	mu  sync.Mutex
	cfg serviceConfig
	svc *service
}

func (r *replica) current() *service {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.svc
}

// soak is the state of a soak run.
type soak struct {
	cfg soakConfig
	h   *harness

	replicas []*replica
	urls     []string  // the replicas' base URLs
	clients  []*client // one per replica
	next     atomic.Uint64

	closers    []func() // what close undoes, in the order started
	stopEvents func()   // stops following the event stream and waits

	admin, oncall2    string
	orch              string
	signers           map[string]*signer
	agents            map[string]*demoAgent
	hooks             *webhookReceiver
	events            *sseClient
	pool              *pgxpool.Pool
	ops, retries      atomic.Int64
	kills, pgRestarts atomic.Int64
	scenarios         [numScenarios]atomic.Int64
	writes            *flushWatch // the replicas' write coalescers

	mu         sync.Mutex
	acked      map[string]ledger.ObligationState // delegation id → last state the API acknowledged
	expect     map[string]ledger.ObligationState // dispatched delegation id → the state the remote's work must bring it to
	violations []string
}

func (s *soak) violate(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func (s *soak) ack(id string, st ledger.ObligationState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acked[id] = st
}

func (s *soak) expectState(id string, st ledger.ObligationState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expect[id] = st
}

func runSoak(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseSoakFlags(args, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "soak: %s, %d clients, %d replicas, SIGKILL of a replica every ~%s, PostgreSQL crash every ~%s, seed %d\n",
		cfg.Duration, cfg.Clients, cfg.Replicas, cfg.KillEvery, cfg.PGEvery, cfg.Seed)
	h, err := newHarness(ctx, stderr, cfg.Keep, "")
	if err != nil {
		return err
	}
	defer h.close()
	s := &soak{cfg: cfg, h: h, acked: map[string]ledger.ObligationState{}, expect: map[string]ledger.ObligationState{},
		signers: map[string]*signer{}, agents: map[string]*demoAgent{}}
	defer s.close()
	if err := s.start(ctx); err != nil {
		return err
	}
	started := time.Now()
	if err := s.load(ctx); err != nil {
		return err
	}
	ran := time.Since(started)
	took, err := s.drain(ctx)
	if err != nil {
		return err
	}
	res, err := s.check(ctx)
	if err != nil {
		return err
	}
	return s.print(stdout, ran, took, res)
}

// defers adds f to what close undoes.
func (s *soak) defers(f func()) { s.closers = append(s.closers, f) }

// close undoes what the run started, last started first.
func (s *soak) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// start starts the remote orgs, the replicas and the balancer in front of
// them, the webhook receiver, and registers what the clients use.
func (s *soak) start(ctx context.Context) error {
	// The remote org: the demo agent, twice (one completes its tasks, one
	// waits to be canceled), each behind a proxy that counts messageIds.
	for org, delay := range map[string]time.Duration{demoFast: time.Second, demoSlow: time.Hour} {
		a, err := startDemoAgent(ctx, s.h, org, delay)
		if err != nil {
			return err
		}
		s.defers(a.stop)
		s.agents[org] = a
	}
	if err := s.startReplicas(ctx); err != nil {
		return err
	}
	var err error
	if s.pool, err = pgxpool.New(ctx, s.h.cluster.URL("quittance")); err != nil {
		return err
	}
	s.defers(s.pool.Close)
	// The webhook receiver listens before its endpoint is registered (the
	// registration checks the URL); it learns its secret from the answer.
	s.hooks = &webhookReceiver{accepted: map[int64][32]byte{}}
	hooks, err := serveLoopback(s.hooks)
	if err != nil {
		return err
	}
	s.defers(hooks.close)
	return s.setup(ctx, hooks.URL+"/hook")
}

// soakEnv is the replicas' environment beside their address, database
// and token; publicURL is the balancer's.
func soakEnv(publicURL string) []string {
	return []string{
		"QUITTANCE_SWEEP_INTERVAL=5s", "QUITTANCE_A2A_STREAMING=false", "QUITTANCE_SHUTDOWN_TIMEOUT=5s",
		fmt.Sprintf("QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLD_MINOR=%d", soakThreshold),
		// The remotes and the webhook receiver listen on loopback, over http.
		"QUITTANCE_EGRESS_ALLOW_HTTP=true", "QUITTANCE_EGRESS_ALLOW_CIDRS=127.0.0.1/32",
		"QUITTANCE_PUBLIC_URL=" + publicURL,
		// Short leases and backoffs: the work of a killed replica is taken
		// over within seconds.
		"QUITTANCE_A2A_INTERVAL=200ms", "QUITTANCE_A2A_LEASE=5s", "QUITTANCE_A2A_BACKOFF_BASE=500ms",
		"QUITTANCE_A2A_BACKOFF_MAX=5s", "QUITTANCE_POLL_AFTER=2s",
		"QUITTANCE_WEBHOOK_BACKOFF_BASE=200ms", "QUITTANCE_WEBHOOK_BACKOFF_MAX=5s", "QUITTANCE_STREAM_POLL=500ms",
	}
}

// startReplicas starts the replicas together, as a deployment's do, and
// the balancer in front of them that the agents push their notifications
// to; it makes one client per replica.
func (s *soak) startReplicas(ctx context.Context) error {
	cfg, h := s.cfg, s.h
	addrs := make([]string, cfg.Replicas)
	s.urls = make([]string, cfg.Replicas)
	for i := range addrs {
		var err error
		if addrs[i], err = freeAddr(); err != nil {
			return err
		}
		s.urls[i] = "http://" + addrs[i]
	}
	lb, err := serveLoopback(&balancer{backends: s.urls, hc: &http.Client{Timeout: 20 * time.Second}})
	if err != nil {
		return err
	}
	s.defers(lb.close)
	s.admin = access.NewTokenSecret()
	env := soakEnv(lb.URL)
	s.replicas = make([]*replica, cfg.Replicas)
	s.clients = make([]*client, cfg.Replicas)
	for i := range s.replicas {
		s.replicas[i] = &replica{cfg: serviceConfig{
			Binary: h.binary, Addr: addrs[i], DatabaseURL: h.cluster.URL("quittance"), Token: s.admin, Env: env,
			LogPath: filepath.Join(h.dir, fmt.Sprintf("quittance-r%d.log", i)),
		}}
		s.clients[i] = newClient(s.urls[i], cfg.Clients)
	}
	var (
		startWG   sync.WaitGroup
		startErrs = make([]error, cfg.Replicas)
	)
	for i, r := range s.replicas {
		startWG.Go(func() { r.svc, startErrs[i] = startService(ctx, r.cfg) })
	}
	startWG.Wait()
	s.defers(func() {
		for _, r := range s.replicas {
			if svc := r.current(); svc != nil {
				svc.stop()
			}
		}
	})
	return errors.Join(startErrs...)
}

// load runs the clients, the fault injector and the event watcher for
// -duration, and starts following the event stream, which goes on until
// the end of the drain.
func (s *soak) load(ctx context.Context) error {
	cfg := s.cfg
	runCtx, stopClients := context.WithTimeout(ctx, cfg.Duration)
	s.defers(stopClients)
	s.events = newSSEClient(s.urls, s.admin)
	sseCtx, stopSSE := context.WithCancel(ctx)
	s.defers(stopSSE)
	sseDone := make(chan struct{})
	go func() {
		defer close(sseDone)
		s.events.run(sseCtx)
	}()
	s.stopEvents = func() {
		stopSSE()
		<-sseDone
	}
	s.writes = newFlushWatch(cfg.Replicas)
	watchCtx, stopWatch := context.WithCancel(ctx)
	s.defers(stopWatch)
	go s.writes.run(watchCtx, func() []string { return s.urls }, 500*time.Millisecond)
	var wg sync.WaitGroup
	for i := range cfg.Clients {
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
		wg.Go(func() { s.client(runCtx, i, rng) })
	}
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		s.faults(runCtx, rand.New(rand.NewPCG(cfg.Seed, 1<<32)))
	}()
	eventsDone := make(chan struct{})
	go func() {
		defer close(eventsDone)
		s.watchEvents(runCtx)
	}()
	<-runCtx.Done()
	<-faultsDone
	wg.Wait()
	<-eventsDone
	return ctx.Err()
}

// drainTimes is how long after the drain started the remote work, the
// webhook deliveries and all (the event stream last) were done.
type drainTimes struct {
	remote, hooks, all time.Duration
}

// drain is the end of the run: every replica must be up again on its own;
// the remote work in flight, the webhook deliveries and the event stream
// then finish (within -drain).
func (s *soak) drain(ctx context.Context) (drainTimes, error) {
	var took drainTimes
	for i, r := range s.replicas {
		if err := r.current().waitReady(ctx, 60*time.Second); err != nil {
			s.violate("replica %d not ready after the run: %v", i, err)
		}
	}
	drained := time.Now()
	drainCtx, stopDrain := context.WithTimeout(ctx, s.cfg.Drain)
	s.defers(stopDrain)
	s.drainRemote(drainCtx)
	took.remote = time.Since(drained)
	s.drainWebhooks(drainCtx)
	took.hooks = time.Since(drained)
	s.drainEvents(drainCtx)
	s.stopEvents()
	took.all = time.Since(drained)
	return took, ctx.Err()
}

// soakChecks is what check found beside the violations it records.
type soakChecks struct {
	rep                           pgstore.InvariantReport
	agents, webhooks, eventStream string
}

// check checks the database's invariants, the acknowledged states, the
// demo agents, the webhook deliveries and the event stream.
func (s *soak) check(ctx context.Context) (soakChecks, error) {
	var res soakChecks
	var err error
	for i, u := range s.urls {
		s.writes.read(ctx, i, u)
	}
	if c, seen := s.writes.total(); !seen || c.flushes == 0 {
		s.violate("the write coalescer: %s", s.writes)
	}
	if res.rep, err = pgstore.CheckInvariants(ctx, s.pool); err != nil {
		return res, err
	}
	for _, v := range res.rep.Violations {
		s.violate("%s", v)
	}
	s.checkAcknowledged(res.rep)
	if res.agents, err = s.checkAgents(ctx); err != nil {
		return res, err
	}
	if res.webhooks, err = s.checkWebhooks(ctx); err != nil {
		return res, err
	}
	res.eventStream, err = s.checkEvents(ctx)
	return res, err
}

// print writes the soak's summary and its violations (at most 50) to
// stdout, and fails when there are violations.
func (s *soak) print(stdout io.Writer, ran time.Duration, took drainTimes, res soakChecks) error {
	cfg, rep := s.cfg, res.rep
	states := map[ledger.ObligationState]int{}
	for _, st := range rep.Delegations {
		states[st]++
	}
	fmt.Fprintf(stdout, "\nsoak finished after %s (seed %d, %d replicas); drained in %s (remote work done at %s, webhooks at %s)\n",
		ran.Round(time.Second), cfg.Seed, cfg.Replicas, took.all.Round(time.Second), took.remote.Round(time.Second), took.hooks.Round(time.Second))
	fmt.Fprintf(stdout, "  operations acknowledged: %d (%d retried requests)\n", s.ops.Load(), s.retries.Load())
	var sc []string
	for i := range numScenarios {
		sc = append(sc, fmt.Sprintf("%s %d", scenarioNames[i], s.scenarios[i].Load()))
	}
	fmt.Fprintf(stdout, "  scenarios: %s\n", strings.Join(sc, ", "))
	fmt.Fprintf(stdout, "  write coalescer: %s\n", s.writes)
	fmt.Fprintf(stdout, "  faults injected: %d SIGKILLs of a replica, %d immediate PostgreSQL restarts\n", s.kills.Load(), s.pgRestarts.Load())
	fmt.Fprintf(stdout, "  database: %d delegations %v, %d budgets, %d events in %d streams\n",
		len(rep.Delegations), sortedCounts(states), rep.Budgets, rep.Events, rep.Streams)
	fmt.Fprintf(stdout, "  demo agent: %s\n", res.agents)
	fmt.Fprintf(stdout, "  webhooks: %s\n", res.webhooks)
	fmt.Fprintf(stdout, "  event stream: %s\n", res.eventStream)
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(stdout, "  acknowledged delegations checked: %d\n", len(s.acked))
	fmt.Fprintf(stdout, "  violations: %d\n", len(s.violations))
	for i, v := range s.violations {
		if i == 50 {
			fmt.Fprintf(stdout, "    … and %d more\n", len(s.violations)-50)
			break
		}
		fmt.Fprintf(stdout, "    %s\n", v)
	}
	if len(s.violations) > 0 {
		return violationsError{len(s.violations)}
	}
	return nil
}

func sortedCounts(m map[ledger.ObligationState]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return "(" + strings.Join(parts, " ") + ")"
}

// setup registers budgets, three orgs reported on by the clients (two
// gated with their own keys, one with a shared coordinator), the two demo
// agents' orgs, an orchestrator with a webhook endpoint at hookURL, and
// the second on-call principal.
func (s *soak) setup(ctx context.Context, hookURL string) error {
	c := s.clients[0]
	// The bootstrap token creates the two on-call principals; from then on
	// the first administers and the second approves privileged changes.
	admin, oncall2, err := twoOncall(ctx, c, s.admin)
	if err != nil {
		return err
	}
	s.admin, s.oncall2 = admin, oncall2
	oc := onCall{c: c, token: s.admin, approver: s.oncall2}
	for i := range 4 {
		if err := oc.privileged(ctx, http.MethodPut, fmt.Sprintf("/admin/v1/budgets/soak-%d", i),
			map[string]any{"currency": "EUR", "funded_minor": int64(1) << 45, "tenants": []string{soakTenant}}); err != nil {
			return err
		}
	}
	for _, o := range []struct {
		id     string
		shared bool
	}{{"org-a", false}, {"org-b", false}, {"org-shared", true}} {
		sig := newSigner(o.id + "-k1")
		s.signers[o.id] = sig
		if err := oc.privileged(ctx, http.MethodPut, "/admin/v1/orgs/"+o.id,
			map[string]any{"name": o.id, "shared_coordinator": o.shared, "jwks": sig.jwks()}); err != nil {
			return err
		}
	}
	for org, a := range s.agents {
		jwks, err := a.jwks(ctx)
		if err != nil {
			return fmt.Errorf("the demo agent's JWK Set: %w", err)
		}
		if err := oc.privileged(ctx, http.MethodPut, "/admin/v1/orgs/"+org, map[string]any{
			"name": "Demo supplier " + org, "agent_card_url": a.cardURL(), "allowed_hosts": []string{"127.0.0.1"},
			"jwks": jwks, "require_signed_receipts": true,
		}); err != nil {
			return err
		}
	}
	if s.orch, err = oc.newToken(ctx, "orchestrator", soakTenant, "soak-orchestrator"); err != nil {
		return err
	}
	var hook struct {
		Secret string `json:"secret"`
	}
	if err := c.must(ctx, request{http.MethodPut, "/v1/webhooks/soak-hook", s.orch, map[string]any{"url": hookURL}}, &hook, http.StatusCreated); err != nil {
		return err
	}
	s.hooks.setSecret(hook.Secret)
	return nil
}

// faults SIGKILLs and restarts a random replica, and crashes PostgreSQL
// (immediate restart), at random intervals around the configured means,
// one fault at a time.
func (s *soak) faults(ctx context.Context, rng *rand.Rand) {
	jitter := func(mean time.Duration) time.Duration {
		return mean/2 + time.Duration(rng.Int64N(int64(mean)))
	}
	nextKill := time.Now().Add(jitter(s.cfg.KillEvery))
	nextPG := time.Now().Add(jitter(s.cfg.PGEvery))
	for {
		next := nextKill
		if nextPG.Before(nextKill) {
			next = nextPG
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		if !nextPG.Before(nextKill) {
			i := rng.IntN(len(s.replicas))
			r := s.replicas[i]
			r.mu.Lock()
			r.svc.kill()
			s.kills.Add(1)
			s.events.killed(i)
			time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
			// A restart that fails is retried: the clients keep retrying,
			// on the other replicas, meanwhile.
			for {
				svc, err := startService(context.WithoutCancel(ctx), r.cfg)
				if err == nil {
					r.svc = svc
					break
				}
				fmt.Fprintf(s.h.stderr, "soak: restart replica %d: %v\n", i, err)
				time.Sleep(time.Second)
			}
			r.mu.Unlock()
			fmt.Fprintf(s.h.stderr, "soak: SIGKILL #%d, of replica %d, restarted\n", s.kills.Load(), i)
			nextKill = time.Now().Add(jitter(s.cfg.KillEvery))
		} else {
			t0 := time.Now()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			err := s.h.cluster.Restart(rctx, "immediate")
			cancel()
			if err != nil {
				s.violate("PostgreSQL did not restart: %v", err)
				return
			}
			s.pgRestarts.Add(1)
			// Every replica must recover on its own, without a restart.
			for i, r := range s.replicas {
				if err := r.current().waitReady(ctx, 60*time.Second); err != nil && ctx.Err() == nil {
					s.violate("replica %d not ready 60s after PostgreSQL restart #%d: %v", i, s.pgRestarts.Load(), err)
				}
			}
			fmt.Fprintf(s.h.stderr, "soak: PostgreSQL immediate restart #%d, every replica ready again after %s\n",
				s.pgRestarts.Load(), time.Since(t0).Round(time.Millisecond))
			nextPG = time.Now().Add(jitter(s.cfg.PGEvery))
		}
	}
}

// watchEvents samples the number of events and the highest seq: both
// only ever grow (invariant 4: events are never deleted).
func (s *soak) watchEvents(ctx context.Context) {
	var lastCount, lastSeq int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var count, seq int64
		err := s.pool.QueryRow(qctx, `SELECT count(*), coalesce(max(seq), 0) FROM events`).Scan(&count, &seq)
		cancel()
		if err != nil {
			continue // PostgreSQL is restarting
		}
		if count < lastCount || seq < lastSeq {
			s.violate("events shrank: count %d → %d, max seq %d → %d", lastCount, count, lastSeq, seq)
		}
		lastCount, lastSeq = count, seq
	}
}

// checkAcknowledged: every delegation the API acknowledged exists, and is
// in the state the API last acknowledged — or, for an open state, in a
// state reachable from it.
func (s *soak) checkAcknowledged(rep pgstore.InvariantReport) {
	s.mu.Lock()
	acked := make(map[string]ledger.ObligationState, len(s.acked))
	for k, v := range s.acked {
		acked[k] = v
	}
	s.mu.Unlock()
	for id, want := range acked {
		got, ok := rep.Delegations[uuid.MustParse(id)]
		switch {
		case !ok:
			s.violate("delegation %s was acknowledged (%s) but is not in the database", id, want)
		case want.Terminal() && got != want:
			s.violate("delegation %s: the API acknowledged %s, the database says %s", id, want, got)
		case !want.Terminal() && got != want && got != ledger.ObligationCompensationUnconfirmed:
			s.violate("delegation %s: the API acknowledged %s, the database says %s", id, want, got)
		}
	}
}

// drainRemote waits until every dispatched delegation has reached the
// state its remote's work brings it to, acknowledging it then.
func (s *soak) drainRemote(ctx context.Context) {
	s.mu.Lock()
	want := make(map[uuid.UUID]ledger.ObligationState, len(s.expect))
	for id, st := range s.expect {
		want[uuid.MustParse(id)] = st
	}
	s.mu.Unlock()
	ids := make([]uuid.UUID, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	got := map[uuid.UUID]ledger.ObligationState{}
	for {
		rows, err := s.pool.Query(ctx, `SELECT id, obligation_state FROM delegations WHERE id = ANY ($1)`, ids)
		if err == nil {
			for rows.Next() {
				var id uuid.UUID
				var st string
				if rows.Scan(&id, &st) == nil {
					got[id] = ledger.ObligationState(st)
				}
			}
			rows.Close()
		}
		pending := 0
		for id, st := range want {
			if got[id] != st {
				pending++
			}
		}
		if pending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			for id, st := range want {
				if got[id] != st {
					s.violate("dispatched delegation %s is %s at the end of the drain; its remote's work should have made it %s", id, got[id], st)
				}
			}
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
	for id, st := range want {
		s.ack(id.String(), st)
	}
}

// drainWebhooks waits until no delivery is pending.
func (s *soak) drainWebhooks(ctx context.Context) {
	for {
		var pending int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'`).Scan(&pending)
		if err == nil && pending == 0 {
			return
		}
		select {
		case <-ctx.Done():
			s.violate("%d webhook deliveries still pending at the end of the drain", pending)
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// drainEvents waits until the event stream client has received as many
// events as the database holds.
func (s *soak) drainEvents(ctx context.Context) {
	for {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n)
		if err == nil && s.events.received() >= n {
			return
		}
		select {
		case <-ctx.Done():
			s.violate("event stream: %v: %d events received of %d at the end of the drain", errNotCaughtUp, s.events.received(), n)
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// checkAgents: the demo agents saw exactly one task per dispatched
// delegation, the one the delegation names, whatever the kills and
// restarts made Quittance send again.
func (s *soak) checkAgents(ctx context.Context) (string, error) {
	type dispatched struct {
		org  string
		task *string
	}
	all := map[string]dispatched{} // dispatch messageId → delegation
	rows, err := s.pool.Query(ctx, `SELECT id, org_id, remote_task_id FROM delegations WHERE org_id = ANY ($1)`,
		[]string{demoFast, demoSlow})
	if err != nil {
		return "", err
	}
	for rows.Next() {
		var id uuid.UUID
		var d dispatched
		if err := rows.Scan(&id, &d.org, &d.task); err != nil {
			rows.Close()
			return "", err
		}
		all[delegate.DispatchMessageID(id)] = d
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", err
	}
	var sends, messages, tasks int
	seen := map[string]bool{} // messageIds some agent was sent
	for org, a := range s.agents {
		perMessage, answered := a.counts()
		for m := range perMessage {
			seen[m] = true
		}
		for m, n := range perMessage {
			sends += n
			messages++
			if !strings.HasPrefix(m, "quittance-dispatch-") {
				continue // compensation requests
			}
			d, ok := all[m]
			switch {
			case !ok || d.org != org:
				s.violate("demo agent %s: dispatch %s names no delegation of its org", org, m)
			case len(answered[m]) != 1:
				s.violate("demo agent %s: dispatch %s created %d tasks %v (%d sends); want exactly one", org, m, len(answered[m]), answered[m], n)
			case d.task == nil || *d.task != answered[m][0]:
				s.violate("demo agent %s: dispatch %s created task %s; the delegation names %v", org, m, answered[m][0], d.task)
			default:
				tasks++
			}
		}
	}
	for m := range all {
		if !seen[m] {
			s.violate("dispatched delegation %s never reached its agent", strings.TrimPrefix(m, "quittance-dispatch-"))
		}
	}
	return fmt.Sprintf("%d dispatched delegations, %d tasks (one each: %v), %d SendMessage requests for %d messageIds",
		len(all), tasks, tasks == len(all), sends, messages), nil
}

// checkWebhooks: every event of the soak tenant's delegations was
// accepted by the receiver once, and nothing else was delivered.
func (s *soak) checkWebhooks(ctx context.Context) (string, error) {
	want := map[int64]bool{}
	rows, err := s.pool.Query(ctx, `SELECT e.seq FROM events e JOIN delegations d ON d.id = e.delegation_id WHERE d.tenant = $1`, soakTenant)
	if err != nil {
		return "", err
	}
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			rows.Close()
			return "", err
		}
		want[seq] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", err
	}
	var dead int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status = 'dead'`).Scan(&dead); err != nil {
		return "", err
	}
	if dead > 0 {
		s.violate("%d webhook deliveries dead-lettered", dead)
	}
	h := s.hooks
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.problems {
		s.violate("%s", p)
	}
	missing := 0
	for seq := range want {
		if _, ok := h.accepted[seq]; !ok {
			missing++
			if missing <= 20 {
				s.violate("webhook: event %d of the tenant's delegations was never accepted", seq)
			}
		}
	}
	if missing > 20 {
		s.violate("webhook: … %d events in all never accepted", missing)
	}
	for seq := range h.accepted {
		if !want[seq] {
			s.violate("webhook: event %d accepted but it is no committed event of the tenant's delegations", seq)
		}
	}
	return fmt.Sprintf("%d events of the tenant's delegations, %d accepted once each, %d redeliveries answered and not accepted again",
		len(want), len(h.accepted), h.redelivered), nil
}

// checkEvents: the event stream client, reconnecting to another replica
// after every kill, received every committed event exactly once.
func (s *soak) checkEvents(ctx context.Context) (string, error) {
	var seqs []int64
	rows, err := s.pool.Query(ctx, `SELECT seq FROM events`)
	if err != nil {
		return "", err
	}
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			rows.Close()
			return "", err
		}
		seqs = append(seqs, seq)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", err
	}
	c := s.events
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.problems {
		s.violate("%s", p)
	}
	missing := 0
	for _, seq := range seqs {
		if c.seen[seq] == 0 {
			missing++
			if missing <= 20 {
				s.violate("event stream: event %d never received", seq)
			}
		}
	}
	if missing > 20 {
		s.violate("event stream: … %d events in all never received", missing)
	}
	if extra := len(c.seen) - (len(seqs) - missing); extra > 0 {
		s.violate("event stream: %d events received that the database does not hold", extra)
	}
	how := "on another replica after each of the kills"
	if len(c.replicas) == 1 {
		how = "on the one replica"
	}
	return fmt.Sprintf("%d events in the database, %d received; the stream resumed %d times with Last-Event-ID, %s (%d kills)",
		len(seqs), len(c.seen), c.resumed, how, s.kills.Load()), nil
}

// pick returns the client of the replica the next request goes to.
func (s *soak) pick() *client {
	return s.clients[int(s.next.Add(1)-1)%len(s.clients)]
}

// dispatchBody is the work a dispatched delegation sends the demo agent.
func dispatchBody(op string) map[string]any {
	return map[string]any{"message": map[string]any{
		"parts": []any{map[string]any{"text": "soak order " + op}},
	}}
}

// waitDispatched polls the delegation until its remote task is known.
func (s *soak) waitDispatched(ctx context.Context, d *delegation) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var cur struct {
			delegation
			Remote struct {
				TaskID string `json:"task_id"`
			} `json:"remote"`
		}
		if err := s.get(ctx, "/v1/delegations/"+d.ID, s.orch, &cur); err != nil {
			return err
		}
		if cur.Remote.TaskID != "" {
			*d = cur.delegation
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("delegation %s not dispatched after 2 minutes (task %s, obligation %s)", d.ID, cur.TaskStatus, cur.ObligationState)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// errGiveUp is a request that got no definitive answer in time.
var errGiveUp = errors.New("no definitive answer")

// call sends a request until it gets a definitive answer (any 2xx or 4xx
// other than 429), retrying the identical request on connection errors,
// 5xx and 429. Each attempt goes to the next replica. attempts says how
// many were sent.
func (s *soak) call(ctx context.Context, method, path, token, contentType string, body any) (resp response, attempts int, err error) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		attempts++
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		resp, err = s.pick().do(rctx, method, path, token, contentType, body)
		cancel()
		if err == nil && resp.Status < 500 && resp.Status != http.StatusTooManyRequests {
			return resp, attempts, nil
		}
		s.retries.Add(1)
		if time.Now().After(deadline) {
			return resp, attempts, fmt.Errorf("%s %s: %w after %d attempts (last: %v, status %d)", method, path, errGiveUp, attempts, err, resp.Status)
		}
		time.Sleep(time.Duration(50+rand.IntN(200)) * time.Millisecond)
	}
}

// problemCode is the code of a problem+json answer.
func problemCode(body []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &p)
	return p.Code
}

// client plays scenarios until ctx ends. A scenario that starts finishes
// (its requests are retried past ctx's end), so no answer is cut off.
func (s *soak) client(ctx context.Context, i int, rng *rand.Rand) {
	for k := 0; ctx.Err() == nil; k++ {
		sc := scenario(rng.IntN(int(numScenarios)))
		if err := s.play(ctx, i, k, sc, rng); err != nil {
			s.violate("client %d scenario %d (%d): %v", i, k, sc, err)
			if errors.Is(err, errGiveUp) {
				return
			}
			continue
		}
		s.scenarios[sc].Add(1)
	}
}

// play runs one scenario on a new delegation.
func (s *soak) play(ctx context.Context, i, k int, sc scenario, rng *rand.Rand) error {
	p, amount, err := s.create(ctx, soakOp{i: i, k: k, sc: sc}, rng)
	if err != nil {
		return err
	}
	d := &p.d
	switch sc {
	case scHeld:
		return nil
	case scDispatchSettle:
		// The agent completes the task; Quittance learns it by push or poll.
		s.expectState(d.ID, ledger.ObligationSettled)
		return nil
	case scDispatchCompensate:
		return s.cancelDispatched(ctx, d)
	case scSettle:
		if err := p.report(ctx, "TASK_STATE_WORKING", ledger.ObligationHeld); err != nil {
			return err
		}
		return p.report(ctx, "completed", ledger.ObligationSettled)
	case scRejected:
		return p.report(ctx, "TASK_STATE_REJECTED", ledger.ObligationReleased)
	case scUngated:
		return p.report(ctx, "canceled", ledger.ObligationReleased)
	case scOpen:
		return p.report(ctx, "TASK_STATE_CANCELED", ledger.ObligationRevocationPendingCompensation)
	case scAck:
		if err := p.report(ctx, "TASK_STATE_CANCELED", ledger.ObligationRevocationPendingCompensation); err != nil {
			return err
		}
		return p.evidence(ctx, soakEvidence{"/v1/compensation/acks", typAck, d.Compensation.IdempotencyKey, ledger.ObligationCompensated})
	case scDeclaration:
		if err := p.report(ctx, "TASK_STATE_FAILED", ledger.ObligationRevocationPendingCompensation); err != nil {
			return err
		}
		return p.evidence(ctx, soakEvidence{"/v1/compensation/declarations", typDeclaration, "", ledger.ObligationReleased})
	case scWriteOff:
		if err := p.report(ctx, "TASK_STATE_CANCELED", ledger.ObligationRevocationPendingCompensation); err != nil {
			return err
		}
		return s.writeOff(ctx, d, amount)
	case numScenarios:
	}
	return nil
}

// soakOp names one operation of play: client i's k-th, in scenario sc.
type soakOp struct {
	i, k int
	sc   scenario
}

// playedDelegation is a delegation play created, with the org and remote
// task it names.
type playedDelegation struct {
	s         *soak
	org, task string
	d         delegation
}

// create creates the delegation of op, with an org, task class and held
// amount fitting its scenario: reported (the orchestrator made the remote
// task itself), or dispatched by Quittance to a demo agent. It returns the
// amount held.
func (s *soak) create(ctx context.Context, op soakOp, rng *rand.Rand) (*playedDelegation, int64, error) {
	org := []string{"org-a", "org-b"}[rng.IntN(2)]
	class := "procurement"
	switch op.sc {
	case scUngated:
		class = "read_only"
	case scSettle, scRejected:
		if rng.IntN(3) == 0 {
			org = "org-shared"
		}
	case scDispatchSettle:
		org = demoFast
	case scDispatchCompensate:
		org = demoSlow
	case scAck, scDeclaration, scWriteOff, scOpen, scHeld, numScenarios:
	}
	id := fmt.Sprintf("soak-%d-%d-%d", s.cfg.Seed%100000, op.i, op.k)
	p := &playedDelegation{s: s, org: org, task: "task-" + id}
	amount := 100 + rng.Int64N(2*soakThreshold)
	if op.sc == scWriteOff && rng.IntN(2) == 0 {
		amount = 100 + rng.Int64N(soakThreshold-100)
	}
	body := map[string]any{
		"business_operation_id": id, "org_id": org, "task_class": class,
		"budget_id": fmt.Sprintf("soak-%d", rng.IntN(4)),
		"hold":      map[string]any{"amount_minor": amount, "currency": "EUR"},
	}
	if op.sc == scDispatchSettle || op.sc == scDispatchCompensate {
		body["dispatch"] = dispatchBody(id)
	} else {
		body["remote"] = map[string]any{"task_id": p.task, "context_id": "ctx-" + id}
	}
	resp, n, err := s.call(ctx, http.MethodPost, "/v1/delegations", s.orch, "", body)
	if err != nil {
		return nil, 0, err
	}
	if resp.Status != http.StatusCreated && !(n > 1 && resp.Status == http.StatusOK) {
		return nil, 0, fmt.Errorf("create: status %d (attempt %d): %s", resp.Status, n, resp.Body)
	}
	if err := json.Unmarshal(resp.Body, &p.d); err != nil {
		return nil, 0, err
	}
	if p.d.ObligationState != string(ledger.ObligationHeld) {
		return nil, 0, fmt.Errorf("create: obligation %s, want held", p.d.ObligationState)
	}
	s.ops.Add(1)
	s.ack(p.d.ID, ledger.ObligationHeld)
	return p, amount, nil
}

// cancelDispatched cancels a dispatched delegation once it is dispatched:
// Quittance cancels the remote task and requests compensation over A2A;
// the agent's signed receipt discharges the obligation.
func (s *soak) cancelDispatched(ctx context.Context, d *delegation) error {
	if err := s.waitDispatched(ctx, d); err != nil {
		return err
	}
	resp, n, err := s.call(ctx, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", s.orch, "", nil)
	if err != nil {
		return err
	}
	if resp.Status != http.StatusOK {
		return fmt.Errorf("cancel: status %d (attempt %d): %s", resp.Status, n, resp.Body)
	}
	s.ops.Add(1)
	s.expectState(d.ID, ledger.ObligationCompensated)
	return nil
}

// report reports the remote task's state and checks the obligation
// state the answer gives.
func (p *playedDelegation) report(ctx context.Context, state string, want ledger.ObligationState) error {
	s, d := p.s, &p.d
	resp, n, err := s.call(ctx, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", s.orch, "", map[string]any{"state": state})
	if err != nil {
		return err
	}
	if resp.Status != http.StatusOK {
		return fmt.Errorf("task-status %s: status %d (attempt %d): %s", state, resp.Status, n, resp.Body)
	}
	if err := json.Unmarshal(resp.Body, d); err != nil {
		return err
	}
	if d.ObligationState != string(want) {
		return fmt.Errorf("task-status %s: obligation %s, want %s", state, d.ObligationState, want)
	}
	s.ops.Add(1)
	s.ack(d.ID, want)
	return nil
}

// soakEvidence is signed evidence to post: where, of which token type,
// for which compensation request (none for a declaration), and the
// obligation state it brings.
type soakEvidence struct {
	path, typ, idem string
	want            ledger.ObligationState
}

// evidence posts evidence signed by the delegation's org and checks the
// service applied it.
func (p *playedDelegation) evidence(ctx context.Context, e soakEvidence) error {
	s, d, path := p.s, &p.d, e.path
	token := s.signers[p.org].sign(e.typ, evidenceClaims(p.org, p.task, e.idem, time.Now()))
	// A lost answer is answered by re-sending the same token: the
	// service answers "duplicate" if the first one was applied.
	resp, n, err := s.call(ctx, http.MethodPost, path, "", "application/jose", token)
	if err != nil {
		return err
	}
	if resp.Status != http.StatusOK {
		return fmt.Errorf("POST %s: status %d (attempt %d): %s", path, resp.Status, n, resp.Body)
	}
	// The signer is told the delegation's id and the outcome only; the
	// state the answer promises is checked with the others at the end.
	var out struct {
		ID       string `json:"id"`
		Evidence struct {
			Outcome string `json:"outcome"`
		} `json:"evidence"`
	}
	if err := json.Unmarshal(resp.Body, &out); err != nil {
		return err
	}
	if out.ID != d.ID || (out.Evidence.Outcome != "applied" && !(n > 1 && out.Evidence.Outcome == "duplicate")) {
		return fmt.Errorf("POST %s (attempt %d): delegation %s outcome %s, want %s applied", path, n, out.ID, out.Evidence.Outcome, d.ID)
	}
	s.ops.Add(1)
	s.ack(d.ID, e.want)
	return nil
}

// writeOffBody is the part of a write-off answer the soak reads.
type writeOffBody struct {
	ID         string      `json:"id"`
	Status     string      `json:"status"`
	Delegation *delegation `json:"delegation"`
}

// writeOff writes d off; above the threshold the second on-call token
// approves. A request whose answer was lost is reconciled from the
// delegation and its events, never sent as a second write-off.
func (s *soak) writeOff(ctx context.Context, d *delegation, amount int64) error {
	resp, n, err := s.call(ctx, http.MethodPost, "/admin/v1/delegations/"+d.ID+"/write-offs", s.admin, "",
		map[string]any{"reason": "soak: remote org unresponsive", "reference": "SOAK-1"})
	if err != nil {
		return err
	}
	var w writeOffBody
	switch {
	case resp.Status == http.StatusCreated:
		if err := json.Unmarshal(resp.Body, &w); err != nil {
			return err
		}
	case n > 1 && resp.Status == http.StatusConflict:
		// The first attempt committed: find out what it did.
		if w, err = s.recoverWriteOff(ctx, d.ID); err != nil {
			return err
		}
	default:
		return fmt.Errorf("write-off: status %d (attempt %d): %s", resp.Status, n, resp.Body)
	}
	switch {
	case w.Status == "executed" && amount <= soakThreshold:
		s.ops.Add(1)
		s.ack(d.ID, ledger.ObligationWrittenOff)
		return nil
	case w.Status == "pending_approval" && amount > soakThreshold:
		s.ops.Add(1)
	default:
		return fmt.Errorf("write-off of %d: status %s", amount, w.Status)
	}
	resp, n, err = s.call(ctx, http.MethodPost, "/admin/v1/write-offs/"+w.ID+"/approve", s.oncall2, "", nil)
	if err != nil {
		return err
	}
	switch {
	case resp.Status == http.StatusOK:
		if err := json.Unmarshal(resp.Body, &w); err != nil {
			return err
		}
		if w.Status != "executed" || w.Delegation == nil || w.Delegation.ObligationState != string(ledger.ObligationWrittenOff) {
			return fmt.Errorf("approve: write-off %s, delegation %+v", w.Status, w.Delegation)
		}
	case n > 1 && resp.Status == http.StatusConflict && problemCode(resp.Body) == "write_off_not_pending":
		var cur delegation
		if err := s.get(ctx, "/v1/delegations/"+d.ID, s.admin, &cur); err != nil {
			return err
		}
		if cur.ObligationState != string(ledger.ObligationWrittenOff) {
			return fmt.Errorf("approve retried: write-off not pending, but the obligation is %s", cur.ObligationState)
		}
	default:
		return fmt.Errorf("approve: status %d (attempt %d): %s", resp.Status, n, resp.Body)
	}
	s.ops.Add(1)
	s.ack(d.ID, ledger.ObligationWrittenOff)
	return nil
}

// recoverWriteOff reconstructs the write-off a lost answer created, from
// the delegation's events.
func (s *soak) recoverWriteOff(ctx context.Context, id string) (writeOffBody, error) {
	var evs struct {
		Events []struct {
			Type ledger.EventType `json:"type"`
			Data struct {
				WriteOffID string `json:"write_off_id"`
				Status     string `json:"status"`
			} `json:"data"`
		} `json:"events"`
	}
	if err := s.get(ctx, "/v1/delegations/"+id+"/events", s.admin, &evs); err != nil {
		return writeOffBody{}, err
	}
	for i := len(evs.Events) - 1; i >= 0; i-- {
		switch ev := evs.Events[i]; ev.Type {
		case ledger.EventTypeWriteOffExecuted:
			return writeOffBody{ID: ev.Data.WriteOffID, Status: "executed"}, nil
		case ledger.EventTypeWriteOffRequested:
			return writeOffBody{ID: ev.Data.WriteOffID, Status: "pending_approval"}, nil
		}
	}
	return writeOffBody{}, fmt.Errorf("write-off retried and refused, but delegation %s has no write-off event", id)
}

// get reads a resource, retrying until it answers 200.
func (s *soak) get(ctx context.Context, path, token string, out any) error {
	resp, _, err := s.call(ctx, http.MethodGet, path, token, "", nil)
	if err != nil {
		return err
	}
	if resp.Status != http.StatusOK {
		return fmt.Errorf("GET %s: status %d: %s", path, resp.Status, resp.Body)
	}
	return json.Unmarshal(resp.Body, out)
}
