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

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
)

// maxSoak bounds a soak run.
const maxSoak = 10 * time.Minute

// soakConfig is the soak subcommand's flags.
type soakConfig struct {
	Duration  time.Duration
	Clients   int
	KillEvery time.Duration
	PGEvery   time.Duration
	Seed      uint64
	Keep      bool
}

func parseSoakFlags(args []string, stderr io.Writer) (soakConfig, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg soakConfig
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Minute, "how long the clients run (at most 10m)")
	fs.IntVar(&cfg.Clients, "clients", 8, "concurrent clients")
	fs.DurationVar(&cfg.KillEvery, "kill-every", 20*time.Second, "mean time between SIGKILLs of the service")
	fs.DurationVar(&cfg.PGEvery, "pg-every", 45*time.Second, "mean time between immediate PostgreSQL restarts")
	fs.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()), "seed of the clients' and the faults' choices")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the scratch directory (cluster, service logs)")
	if err := fs.Parse(args); err != nil {
		return cfg, errUsage
	}
	if cfg.Duration <= 0 || cfg.Duration > maxSoak {
		return cfg, fmt.Errorf("-duration must be in (0, %s]", maxSoak)
	}
	if cfg.Clients < 1 {
		return cfg, errors.New("-clients must be positive")
	}
	return cfg, nil
}

// Soak world: the approval threshold the service runs with, and the
// scenarios a client plays.
const soakThreshold = 100_000

type scenario int

const (
	scSettle      scenario = iota // working → completed: settled
	scAck                         // canceled → signed ack: compensated
	scDeclaration                 // failed → signed declaration: released
	scWriteOff                    // canceled → write-off (four eyes above the threshold): written_off
	scRejected                    // rejected: released
	scUngated                     // read_only canceled: released
	scOpen                        // canceled, left waiting: revocation_pending_compensation
	scHeld                        // created and left: held
	numScenarios
)

// soak is the state of a soak run.
type soak struct {
	cfg    soakConfig
	h      *harness
	svcCfg serviceConfig

	svcMu sync.Mutex
	svc   *service

	c                 *client
	admin, oncall2    string
	orch              string
	signers           map[string]*signer
	pool              *pgxpool.Pool
	ops, retries      atomic.Int64
	kills, pgRestarts atomic.Int64
	scenarios         [numScenarios]atomic.Int64

	mu         sync.Mutex
	acked      map[string]ledger.ObligationState // delegation id → last state the API acknowledged
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

func runSoak(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseSoakFlags(args, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "soak: %s, %d clients, SIGKILL every ~%s, PostgreSQL crash every ~%s, seed %d\n",
		cfg.Duration, cfg.Clients, cfg.KillEvery, cfg.PGEvery, cfg.Seed)
	h, err := newHarness(ctx, stderr, cfg.Keep)
	if err != nil {
		return err
	}
	defer h.close()
	s := &soak{cfg: cfg, h: h, acked: map[string]ledger.ObligationState{}, signers: map[string]*signer{}}
	dbURL := h.cluster.URL("quittance")
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	s.admin = ledger.NewTokenSecret()
	s.svcCfg = serviceConfig{
		Binary: h.binary, Addr: addr, DatabaseURL: dbURL, Token: s.admin, LogPath: filepath.Join(h.dir, "quittance.log"),
		Env: []string{
			"QUITTANCE_SWEEP_INTERVAL=5s", "QUITTANCE_A2A_STREAMING=false", "QUITTANCE_SHUTDOWN_TIMEOUT=5s",
			fmt.Sprintf("QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLD_MINOR=%d", soakThreshold),
		},
	}
	if s.svc, err = startService(ctx, s.svcCfg); err != nil {
		return err
	}
	defer func() { s.current().stop() }()
	s.c = newClient(s.svc.URL, cfg.Clients)
	if s.pool, err = pgxpool.New(ctx, dbURL); err != nil {
		return err
	}
	defer s.pool.Close()
	if err := s.setup(ctx); err != nil {
		return err
	}

	started := time.Now()
	runCtx, stopClients := context.WithTimeout(ctx, cfg.Duration)
	defer stopClients()
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
	if ctx.Err() != nil {
		return ctx.Err()
	}
	ran := time.Since(started)

	// The end: the service must be up again on its own, then every
	// invariant is checked in the database.
	if err := s.current().waitReady(ctx, 60*time.Second); err != nil {
		s.violate("service not ready after the run: %v", err)
	}
	rep, err := pgstore.CheckInvariants(ctx, s.pool)
	if err != nil {
		return err
	}
	for _, v := range rep.Violations {
		s.violate("%s", v)
	}
	s.checkAcknowledged(rep)

	states := map[ledger.ObligationState]int{}
	for _, st := range rep.Delegations {
		states[st]++
	}
	fmt.Fprintf(stdout, "\nsoak finished after %s (seed %d)\n", ran.Round(time.Second), cfg.Seed)
	fmt.Fprintf(stdout, "  operations acknowledged: %d (%d retried requests)\n", s.ops.Load(), s.retries.Load())
	fmt.Fprintf(stdout, "  scenarios: settle %d, ack %d, declaration %d, write-off %d, rejected %d, ungated %d, left open %d, left held %d\n",
		s.scenarios[scSettle].Load(), s.scenarios[scAck].Load(), s.scenarios[scDeclaration].Load(), s.scenarios[scWriteOff].Load(),
		s.scenarios[scRejected].Load(), s.scenarios[scUngated].Load(), s.scenarios[scOpen].Load(), s.scenarios[scHeld].Load())
	fmt.Fprintf(stdout, "  faults injected: %d SIGKILLs of the service, %d immediate PostgreSQL restarts\n", s.kills.Load(), s.pgRestarts.Load())
	fmt.Fprintf(stdout, "  database: %d delegations %v, %d budgets, %d events in %d streams\n",
		len(rep.Delegations), sortedCounts(states), rep.Budgets, rep.Events, rep.Streams)
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

func (s *soak) current() *service {
	s.svcMu.Lock()
	defer s.svcMu.Unlock()
	return s.svc
}

// setup registers budgets, three orgs (two gated with their own keys, one
// with a shared coordinator), an orchestrator and a second on-call token.
func (s *soak) setup(ctx context.Context) error {
	// The bootstrap token creates the two on-call principals; from then on
	// the first administers and the second approves.
	admin, oncall2, err := twoOncall(ctx, s.c, s.admin)
	if err != nil {
		return err
	}
	s.admin, s.oncall2 = admin, oncall2
	for i := range 4 {
		if err := s.c.must(ctx, http.MethodPut, fmt.Sprintf("/admin/v1/budgets/soak-%d", i), s.admin,
			map[string]any{"currency": "EUR", "funded_minor": int64(1) << 45}, nil, http.StatusCreated); err != nil {
			return err
		}
	}
	for _, o := range []struct {
		id     string
		shared bool
	}{{"org-a", false}, {"org-b", false}, {"org-shared", true}} {
		sig := newSigner(o.id + "-k1")
		s.signers[o.id] = sig
		if err := privileged(ctx, s.c, http.MethodPut, "/admin/v1/orgs/"+o.id, s.admin, s.oncall2,
			map[string]any{"name": o.id, "shared_coordinator": o.shared, "jwks": sig.jwks()}); err != nil {
			return err
		}
	}
	s.orch, err = newToken(ctx, s.c, s.admin, s.oncall2, "orchestrator", "soak", "soak-orchestrator")
	return err
}

// faults SIGKILLs and restarts the service, and crashes PostgreSQL
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
			s.svcMu.Lock()
			s.svc.kill()
			s.kills.Add(1)
			time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
			// A restart that fails is retried: the clients keep retrying meanwhile.
			for {
				svc, err := startService(context.WithoutCancel(ctx), s.svcCfg)
				if err == nil {
					s.svc = svc
					break
				}
				fmt.Fprintf(s.h.stderr, "soak: restart the service: %v\n", err)
				time.Sleep(time.Second)
			}
			s.svcMu.Unlock()
			fmt.Fprintf(s.h.stderr, "soak: SIGKILL #%d of the service, restarted\n", s.kills.Load())
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
			// The service must recover on its own, without a restart.
			if err := s.current().waitReady(ctx, 60*time.Second); err != nil && ctx.Err() == nil {
				s.violate("service not ready 60s after PostgreSQL restart #%d: %v", s.pgRestarts.Load(), err)
			}
			fmt.Fprintf(s.h.stderr, "soak: PostgreSQL immediate restart #%d, service ready again after %s\n",
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

// errGiveUp is a request that got no definitive answer in time.
var errGiveUp = errors.New("no definitive answer")

// call sends a request until it gets a definitive answer (any 2xx or 4xx
// other than 429), retrying the identical request on connection errors,
// 5xx and 429. attempts says how many were sent.
func (s *soak) call(ctx context.Context, method, path, token, contentType string, body any) (resp response, attempts int, err error) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		attempts++
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		resp, err = s.c.do(rctx, method, path, token, contentType, body)
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
	org := []string{"org-a", "org-b"}[rng.IntN(2)]
	class := "procurement"
	switch sc {
	case scUngated:
		class = "read_only"
	case scSettle, scRejected:
		if rng.IntN(3) == 0 {
			org = "org-shared"
		}
	case scAck, scDeclaration, scWriteOff, scOpen, scHeld:
	}
	op := fmt.Sprintf("soak-%d-%d-%d", s.cfg.Seed%100000, i, k)
	task := "task-" + op
	amount := 100 + rng.Int64N(2*soakThreshold)
	if sc == scWriteOff && rng.IntN(2) == 0 {
		amount = 100 + rng.Int64N(soakThreshold-100)
	}
	var d delegation
	// Create.
	resp, n, err := s.call(ctx, http.MethodPost, "/v1/delegations", s.orch, "", map[string]any{
		"business_operation_id": op, "org_id": org, "task_class": class,
		"budget_id": fmt.Sprintf("soak-%d", rng.IntN(4)),
		"hold":      map[string]any{"amount_minor": amount, "currency": "EUR"},
		"remote":    map[string]any{"task_id": task, "context_id": "ctx-" + op},
	})
	if err != nil {
		return err
	}
	if resp.Status != http.StatusCreated && !(n > 1 && resp.Status == http.StatusOK) {
		return fmt.Errorf("create: status %d (attempt %d): %s", resp.Status, n, resp.Body)
	}
	if err := json.Unmarshal(resp.Body, &d); err != nil {
		return err
	}
	if d.ObligationState != string(ledger.ObligationHeld) {
		return fmt.Errorf("create: obligation %s, want held", d.ObligationState)
	}
	s.ops.Add(1)
	s.ack(d.ID, ledger.ObligationHeld)

	report := func(state string, want ledger.ObligationState) error {
		resp, n, err := s.call(ctx, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", s.orch, "", map[string]any{"state": state})
		if err != nil {
			return err
		}
		if resp.Status != http.StatusOK {
			return fmt.Errorf("task-status %s: status %d (attempt %d): %s", state, resp.Status, n, resp.Body)
		}
		if err := json.Unmarshal(resp.Body, &d); err != nil {
			return err
		}
		if d.ObligationState != string(want) {
			return fmt.Errorf("task-status %s: obligation %s, want %s", state, d.ObligationState, want)
		}
		s.ops.Add(1)
		s.ack(d.ID, want)
		return nil
	}
	evidence := func(path, typ string, idem string, want ledger.ObligationState) error {
		token := s.signers[org].sign(typ, evidenceClaims(org, task, idem, time.Now()))
		// A lost answer is answered by re-sending the same token: the
		// service answers "duplicate" if the first one was applied.
		resp, n, err := s.call(ctx, http.MethodPost, path, "", "application/jose", token)
		if err != nil {
			return err
		}
		if resp.Status != http.StatusOK {
			return fmt.Errorf("POST %s: status %d (attempt %d): %s", path, resp.Status, n, resp.Body)
		}
		var out struct {
			delegation
			Evidence struct {
				Outcome string `json:"outcome"`
			} `json:"evidence"`
		}
		if err := json.Unmarshal(resp.Body, &out); err != nil {
			return err
		}
		if out.ObligationState != string(want) || (out.Evidence.Outcome != "applied" && !(n > 1 && out.Evidence.Outcome == "duplicate")) {
			return fmt.Errorf("POST %s (attempt %d): obligation %s outcome %s, want %s", path, n, out.ObligationState, out.Evidence.Outcome, want)
		}
		s.ops.Add(1)
		s.ack(d.ID, want)
		return nil
	}

	switch sc {
	case scHeld:
		return nil
	case scSettle:
		if err := report("TASK_STATE_WORKING", ledger.ObligationHeld); err != nil {
			return err
		}
		return report("completed", ledger.ObligationSettled)
	case scRejected:
		return report("TASK_STATE_REJECTED", ledger.ObligationReleased)
	case scUngated:
		return report("canceled", ledger.ObligationReleased)
	case scOpen:
		return report("TASK_STATE_CANCELED", ledger.ObligationRevocationPendingCompensation)
	case scAck:
		if err := report("TASK_STATE_CANCELED", ledger.ObligationRevocationPendingCompensation); err != nil {
			return err
		}
		return evidence("/v1/compensation/acks", typAck, d.Compensation.IdempotencyKey, ledger.ObligationCompensated)
	case scDeclaration:
		if err := report("TASK_STATE_FAILED", ledger.ObligationRevocationPendingCompensation); err != nil {
			return err
		}
		return evidence("/v1/compensation/declarations", typDeclaration, "", ledger.ObligationReleased)
	case scWriteOff:
		if err := report("TASK_STATE_CANCELED", ledger.ObligationRevocationPendingCompensation); err != nil {
			return err
		}
		return s.writeOff(ctx, &d, amount)
	case numScenarios:
	}
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
