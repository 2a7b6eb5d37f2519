package delegate

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/internal/backoff"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/internal/panics"
	"github.com/quittance/quittance/internal/text"
	"github.com/quittance/quittance/ledger"
)

// The A2A workers (A2A.md, "The outbox and leases"). Every outbound call is
// a job in a durable outbox (ledger.OutboundJob), enqueued in the
// transaction of the change that calls for it. A Worker claims due jobs
// with a lease, makes the call outside any transaction and records the
// result, with the job's end, in a new one. A call repeated after a lost
// lease carries the same A2A messageId, so the remote can deduplicate it.

// workerActor is the actor of every event the workers append.
const workerActor = "system:a2a"

// ErrLeaseLost reports that a job's lease expired and another worker claimed
// it: the result is not recorded, and the other worker repeats the call.
var ErrLeaseLost = errors.New("delegate: job lease lost")

// Job is an outbound A2A call claimed by a worker.
type Job struct {
	// ID identifies the job.
	ID int64
	// DelegationID is the delegation the call is made for.
	DelegationID uuid.UUID
	// Kind is the call.
	Kind ledger.OutboundKind
	// Payload is the call's input, as enqueued.
	Payload []byte
	// Attempt counts the claims of the job, this one included.
	Attempt int
	// LeaseToken identifies this claim: only its holder may finish or
	// reschedule the job.
	LeaseToken string
	// CreatedAt is when the job was enqueued.
	CreatedAt time.Time
}

// Tracking is what Quittance keeps about a delegation as an A2A client.
type Tracking struct {
	// Dispatched says Quittance sent the delegated work itself.
	Dispatched bool
	// PushTokenHash is the SHA-256 of the push token registered with the
	// remote; the token itself is never stored.
	PushTokenHash []byte
	// ObservedAt is when the remote task was last observed.
	ObservedAt time.Time
	// CompensationTaskID is the remote task answering the current
	// compensation request, once known.
	CompensationTaskID string
	// CompensationRound numbers compensation requests: a new round (and a
	// new messageId) starts only after the remote definitively failed one.
	CompensationRound int
}

// Store is the persistence of the A2A workers, as the sql/ store provides
// it. Error contract: as ledger.Store; a missing row is ledger.ErrNotFound
// (wrapped).
type Store interface {
	// Delegation loads a delegation, as ledger.Reader's does.
	Delegation(ctx context.Context, id uuid.UUID) (ledger.Delegation, error)
	// Org loads an org, as ledger.Reader's does.
	Org(ctx context.Context, id string) (ledger.Org, error)
	// DelegationLinks returns the links from and to a delegation.
	DelegationLinks(ctx context.Context, id uuid.UUID) ([]ledger.DelegationLink, error)
	// InTx runs fn in one database transaction, committing if fn returns
	// nil; it retries fn on serialization failures, so fn must have no
	// effects outside the Tx.
	InTx(ctx context.Context, fn func(Tx) error) error
	// ClaimJobs claims up to limit jobs due at now, leasing them until
	// leaseUntil under leaseToken. Jobs claimed by others and not yet
	// expired are skipped; several workers never claim the same job.
	ClaimJobs(ctx context.Context, now, leaseUntil time.Time, leaseToken string, limit int) ([]Job, error)
	// Tracking returns the delegation's A2A tracking, or ledger.ErrNotFound.
	Tracking(ctx context.Context, id uuid.UUID) (Tracking, error)
	// DelegationsToPoll lists dispatched delegations whose task is not
	// terminal, whose obligation is held, last observed at or before cutoff,
	// and whose org is not backing off at now.
	DelegationsToPoll(ctx context.Context, cutoff, now time.Time, limit int) ([]uuid.UUID, error)
	// DelegationsDispatchUnknown lists held delegations in the
	// dispatch_unknown condition last looked up (observed) at or before
	// cutoff, whose org is not backing off at now.
	DelegationsDispatchUnknown(ctx context.Context, cutoff, now time.Time, limit int) ([]uuid.UUID, error)
	// DelegationsToStream lists dispatched delegations whose task is known
	// and not terminal.
	DelegationsToStream(ctx context.Context, limit int) ([]uuid.UUID, error)
	// QueuedFollowUps lists a delegation's queued follow-up messages, oldest first.
	QueuedFollowUps(ctx context.Context, id uuid.UUID) ([]FollowUp, error)
	// RemoteTasks lists the delegation's extra remote tasks, oldest first.
	RemoteTasks(ctx context.Context, id uuid.UUID) ([]RemoteTask, error)
	// TryLock takes the session-level advisory lock named key on a
	// dedicated connection, without waiting. When acquired, unlock releases
	// it and the connection; the lock also ends if the process dies.
	TryLock(ctx context.Context, key string) (unlock func(), acquired bool, err error)
}

// Tx is a database transaction of the A2A workers: the Orchestrator's
// (OrchestratorTx), the A2A tracking of delegations and their task
// snapshots, and, through accessors, what compensation.Service writes
// through (Receipts), the outbox (Outbox) and the extra remote tasks
// (ExtraTasks). Error contract: as ledger.Store; a missing row is
// ledger.ErrNotFound (wrapped).
type Tx interface {
	OrchestratorTx
	// Receipts is the transaction as compensation.Service's
	// ObserveTaskStatus, ApplyEvidence and ApplyRemoteReceipt write through it.
	Receipts() compensation.ReceiptTx
	// Outbox is the transaction's outbox: job leases, follow-up delivery
	// and the backoff of failing orgs.
	Outbox() OutboxTx
	// ExtraTasks is the transaction's record of extra remote tasks.
	ExtraTasks() ExtraTaskTx
	// SetPushTokenHash records the hash of the push token registered with the remote.
	SetPushTokenHash(ctx context.Context, id uuid.UUID, hash []byte, now time.Time) error
	// MarkObserved records that the remote task was observed at now.
	MarkObserved(ctx context.Context, id uuid.UUID, now time.Time) error
	// SetTaskNotFound puts the delegation in the task_not_found condition
	// with the agent's answer (a TaskNotFoundError for its tracked task),
	// and reports whether that answer is new: false when the delegation
	// was already in the condition with the same answer.
	SetTaskNotFound(ctx context.Context, id uuid.UUID, answer string, now time.Time) (bool, error)
	// ClearTaskNotFound ends the task_not_found condition: the agent
	// returned the task again.
	ClearTaskNotFound(ctx context.Context, id uuid.UUID) error
	// SetCompensationTask records the remote task answering compensation
	// request round ("" when a new round is to be sent).
	SetCompensationTask(ctx context.Context, id uuid.UUID, taskID string, round int, now time.Time) error
	// Tracking returns the delegation's A2A tracking, or ledger.ErrNotFound.
	Tracking(ctx context.Context, id uuid.UUID) (Tracking, error)
	// SetDispatchUnknown puts the delegation in the dispatch_unknown
	// condition (report.ConditionDispatchUnknown) with a reason.
	SetDispatchUnknown(ctx context.Context, id uuid.UUID, reason string, now time.Time) error
	// TaskSnapshotForUpdate returns the delegation's task snapshot, locked
	// for the transaction, or ledger.ErrNotFound.
	TaskSnapshotForUpdate(ctx context.Context, id uuid.UUID) (TaskSnapshot, error)
	// PutTaskSnapshot stores the delegation's task snapshot.
	PutTaskSnapshot(ctx context.Context, id uuid.UUID, s TaskSnapshot, now time.Time) error
}

// OutboxTx is the outbox part of a Tx: finishing and rescheduling leased
// jobs, the delivery of follow-up messages, and the backoff of orgs whose
// agent keeps failing. Error contract: as Tx.
type OutboxTx interface {
	// FinishJob marks a job done with an outcome, or ErrLeaseLost when the
	// caller no longer holds its lease. A job enqueued again while it ran is
	// scheduled once more instead of finished.
	FinishJob(ctx context.Context, j Job, outcome string, now time.Time) error
	// RetryJob reschedules a job to run at runAfter, or returns ErrLeaseLost.
	RetryJob(ctx context.Context, j Job, runAfter time.Time, lastError string, now time.Time) error
	// FinishFollowUp records a follow-up message's final status (sent or
	// failed), error and result state, counting one more attempt.
	FinishFollowUp(ctx context.Context, m FollowUp, now time.Time) error
	// AttemptFollowUp counts a failed attempt that will be retried.
	AttemptFollowUp(ctx context.Context, m FollowUp, problem string, now time.Time) error
	// OrgFailures returns how many consecutive failures the org's agent has
	// had (0 when none).
	OrgFailures(ctx context.Context, orgID string) (int, error)
	// FailOrg records one more failure of the org's agent and leaves the
	// org alone until retryAt.
	FailOrg(ctx context.Context, orgID string, retryAt time.Time, lastError string, now time.Time) error
	// ClearOrgFailures forgets the org's failures.
	ClearOrgFailures(ctx context.Context, orgID string) error
}

// ExtraTaskTx is the part of a Tx that records a delegation's extra remote
// tasks (remotetasks.go): what was found, their status, their cancel and
// their compensation. Error contract: as Tx.
type ExtraTaskTx interface {
	// RemoteTasks lists the delegation's extra remote tasks, oldest first.
	RemoteTasks(ctx context.Context, id uuid.UUID) ([]RemoteTask, error)
	// RecordRemoteTask records an extra remote task of the delegation, and
	// says whether it was new (a task recorded already is left as it is).
	RecordRemoteTask(ctx context.Context, id uuid.UUID, t RemoteTask, now time.Time) (bool, error)
	// SetRemoteTaskStatus records the last known status of an extra task.
	SetRemoteTaskStatus(ctx context.Context, id uuid.UUID, taskID string, status ledger.TaskStatus, now time.Time) error
	// MarkRemoteTaskCancelSent records that a cancel of an extra task was sent.
	MarkRemoteTaskCancelSent(ctx context.Context, id uuid.UUID, taskID string, now time.Time) error
	// SetExtraTaskCompensation records where the compensation request
	// about an extra task of a settled delegation stands (its round,
	// attempts, compensation task and last error).
	SetExtraTaskCompensation(ctx context.Context, id uuid.UUID, taskID string, c compensation.ExtraTaskCompensation, now time.Time) error
	// MarkRemoteTasksNamed records that the compensation request of round
	// named these extra tasks.
	MarkRemoteTasksNamed(ctx context.Context, id uuid.UUID, taskIDs []string, round int, now time.Time) error
}

// Config wires a Worker. Zero durations take the defaults given.
type Config struct {
	// Store is the persistence.
	Store Store
	// Compensation applies compensation receipts.
	Compensation *compensation.Service
	// HTTPClient makes every outbound call; it must come from egress.NewClient.
	HTTPClient *http.Client
	// Clock tells the time; the system clock when nil.
	Clock ledger.Clock
	// Log receives operational logs; never tokens.
	Log *slog.Logger
	// LedgerID is this ledger's id, the audience of signed receipts.
	LedgerID string
	// PublicURL is the base URL remote agents reach this service at; push
	// notifications are registered at PublicURL/a2a/push/{delegation_id}.
	// Empty disables push registration (the poller still observes tasks).
	PublicURL string
	// Interval is how often due jobs are looked for (default 1s).
	Interval time.Duration
	// Lease is how long a claimed job is reserved for its worker (default 2m).
	Lease time.Duration
	// PollAfter is how long a dispatched task may go unobserved before it
	// is polled (default 60s).
	PollAfter time.Duration
	// PollInterval is how often the poller looks for such tasks (default
	// PollAfter/4, at most 15s).
	PollInterval time.Duration
	// BackoffBase and BackoffMax bound the exponential backoff of retried
	// calls and of orgs whose agent fails (defaults 2s and 5m).
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// CompensationMaxAttempts is how many compensation requests are sent
	// before the obligation becomes compensation_unconfirmed (default 8).
	CompensationMaxAttempts int
	// CompensationPollInterval is how often a running compensation task is
	// fetched for its receipt (default 5s).
	CompensationPollInterval time.Duration
	// DispatchMaxAttempts is how many times an ambiguous dispatch failure
	// is retried before Quittance gives up (default 10).
	DispatchMaxAttempts int
	// CardTTL is how long a fetched agent card is reused (default 5m).
	CardTTL time.Duration
	// Concurrency bounds the jobs worked on at once (default 8).
	Concurrency int
	// Streaming enables subscribing to tasks whose agent card declares
	// streaming.
	Streaming bool
	// StreamInterval is how often tasks to stream are looked for (default 5s).
	StreamInterval time.Duration
	// MaxStreams bounds the streams one replica holds open (default 16).
	MaxStreams int
	// Snapshot bounds the task snapshots kept per delegation.
	Snapshot SnapshotLimits
	// Identity, when set, signs outbound compensation requests (a compact
	// JWS in the request's extension metadata, requestJws).
	Identity *jose.Identity
	// RefreshOrgKeysForKid is asked, when a receipt's jws names a kid none
	// of its org's keys in force has and the org serves its keys at a JWKS
	// URL, to fetch that URL (ledger.Service.RefreshOrgKeysForKid,
	// rate-limited per org); when it reports that the kid came into force,
	// the receipt is judged once more. Nil never refreshes: such a key
	// comes into force with the periodic refresh only.
	RefreshOrgKeysForKid func(ctx context.Context, orgID, kid string) bool
	// ObserveAgentCard records what a check of an org's agent card found
	// and says whether the card is used (ledger.Service.ObserveAgentCard);
	// required.
	ObserveAgentCard func(ctx context.Context, orgID string, obs ledger.CardObservation) (ledger.CardCheck, error)
	// FetchJWKS fetches the JWK Set at a card signature's jku, where the
	// org's registration allows its host; nil never fetches one.
	FetchJWKS func(ctx context.Context, url string) ([]byte, error)
	// OnPanic is told of each panic the worker recovered from, by where it
	// happened (PanicJob, PanicStream, PanicRound); nil counts nothing.
	OnPanic func(worker string)
}

// Where the worker recovers from panics, the worker names OnPanic is given.
const (
	// PanicJob is an outbox job: it is rescheduled with its backoff.
	PanicJob = "a2a_job"
	// PanicStream is a task's stream: it ends, and is opened again later.
	PanicStream = "a2a_stream"
	// PanicRound is a round of the worker's loop (claiming, polling,
	// supervising streams): the loop goes on at its next tick.
	PanicRound = "a2a_round"
)

// panicked logs and counts a panic recovered at where.
func (w *Worker) panicked(where string, p *panics.Error, attrs ...slog.Attr) {
	panics.Log(w.log, where, p, attrs...)
	if w.cfg.OnPanic != nil {
		w.cfg.OnPanic(where)
	}
}

// guard runs one round of the worker's loop, recovering from a panic in it.
func (w *Worker) guard(fn func() error) error {
	err := panics.Recover(fn)
	if p, ok := panics.As(err); ok {
		w.panicked(PanicRound, p)
		return nil
	}
	return err
}

// Worker makes the outbound A2A calls of the outbox, polls and streams
// dispatched tasks, and receives push notifications. Several Workers, in
// one process or many replicas, may run against the same database.
type Worker struct {
	cfg     Config
	store   Store
	clock   ledger.Clock
	log     *slog.Logger
	backoff backoff.Exponential
	cards   *cardCache
	wake    chan struct{}

	mu      sync.Mutex
	streams map[uuid.UUID]bool
	running sync.WaitGroup
}

// NewWorker returns a Worker.
func NewWorker(cfg Config) *Worker {
	if cfg.Clock == nil {
		cfg.Clock = ledger.SystemClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Interval, time.Second)
	def(&cfg.Lease, 2*time.Minute)
	def(&cfg.PollAfter, 60*time.Second)
	def(&cfg.PollInterval, min(cfg.PollAfter/4, 15*time.Second))
	def(&cfg.BackoffBase, 2*time.Second)
	def(&cfg.BackoffMax, 5*time.Minute)
	def(&cfg.CompensationPollInterval, 5*time.Second)
	def(&cfg.CardTTL, 5*time.Minute)
	def(&cfg.StreamInterval, 5*time.Second)
	if cfg.CompensationMaxAttempts <= 0 {
		cfg.CompensationMaxAttempts = 8
	}
	if cfg.DispatchMaxAttempts <= 0 {
		cfg.DispatchMaxAttempts = 10
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = 16
	}
	if cfg.ObserveAgentCard == nil {
		panic("delegate: Config.ObserveAgentCard is required")
	}
	if cfg.Compensation == nil {
		cfg.Compensation = compensation.NewService(compensation.Config{Clock: cfg.Clock, Log: cfg.Log, LedgerID: cfg.LedgerID})
	}
	return &Worker{
		cfg: cfg, store: cfg.Store, clock: cfg.Clock, log: cfg.Log,
		backoff: backoff.Exponential{Base: cfg.BackoffBase, Max: cfg.BackoffMax},
		cards:   newCardCache(cfg.HTTPClient, cfg.Clock, cfg.CardTTL), wake: make(chan struct{}, 1),
		streams: map[uuid.UUID]bool{},
	}
}

// now is the clock's time at PostgreSQL's precision, as in the ledger.
func (w *Worker) now() time.Time { return ledger.StoredTime(w.clock.Now()) }

// Wake makes the worker look for due jobs now rather than at its next tick.
func (w *Worker) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run works until ctx ends: it claims and runs due jobs, polls tasks not
// heard of for PollAfter, and (when enabled) streams tasks. When ctx ends
// it stops claiming, waits for the calls in flight (each bounded by its own
// timeout) and returns nil; jobs it did not finish are claimed again by
// the next worker once their lease expires.
func (w *Worker) Run(ctx context.Context) error {
	jobs := time.NewTicker(w.cfg.Interval)
	defer jobs.Stop()
	poll := time.NewTicker(w.cfg.PollInterval)
	defer poll.Stop()
	stream := time.NewTicker(w.cfg.StreamInterval)
	defer stream.Stop()
	defer w.running.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-jobs.C:
		case <-w.wake:
		case <-poll.C:
			if err := w.guard(func() error { _, err := w.PollOnce(ctx); return err }); err != nil && ctx.Err() == nil {
				w.log.ErrorContext(ctx, "a2a poll failed", slog.Any("error", err))
			}
			continue
		case <-stream.C:
			if w.cfg.Streaming {
				if err := w.guard(func() error { return w.superviseStreams(ctx) }); err != nil && ctx.Err() == nil {
					w.log.ErrorContext(ctx, "a2a stream supervision failed", slog.Any("error", err))
				}
			}
			continue
		}
		for {
			var n int
			err := w.guard(func() (err error) { n, err = w.RunOnce(ctx); return err })
			if err != nil && ctx.Err() == nil {
				w.log.ErrorContext(ctx, "a2a jobs failed", slog.Any("error", err))
			}
			if n < w.cfg.Concurrency || ctx.Err() != nil {
				break
			}
		}
	}
}

// RunOnce claims up to Concurrency due jobs, runs them concurrently, and
// returns how many it ran once all have finished.
func (w *Worker) RunOnce(ctx context.Context) (int, error) {
	now := w.now()
	jobs, err := w.store.ClaimJobs(ctx, now, now.Add(w.cfg.Lease), rand.Text(), w.cfg.Concurrency)
	if err != nil {
		return 0, fmt.Errorf("claim a2a jobs: %w", err)
	}
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			// A job's call is not abandoned halfway when ctx ends: it
			// finishes within its own timeout and records its result.
			jctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Lease)
			defer cancel()
			err := panics.Recover(func() error { return w.runJob(jctx, j) })
			if p, ok := panics.As(err); ok {
				// Given up, and rescheduled after its attempt's backoff:
				// a job that panics every time is tried ever less often,
				// never in a tight loop, and the other jobs go on.
				w.panicked(PanicJob, p, slog.Int64("job_id", j.ID), slog.String("kind", string(j.Kind)), slog.String("delegation_id", j.DelegationID.String()))
				err = w.retryAt(jctx, j, w.now().Add(w.backoff.Wait(j.Attempt)), p.Error(), nil)
			}
			if err != nil {
				w.log.ErrorContext(ctx, "a2a job failed", slog.Int64("job_id", j.ID), slog.String("kind", string(j.Kind)),
					slog.String("delegation_id", j.DelegationID.String()), slog.Any("error", err))
			}
		})
	}
	wg.Wait()
	return len(jobs), nil
}

func (w *Worker) runJob(ctx context.Context, j Job) error {
	switch j.Kind {
	case ledger.OutboundDispatch:
		return w.dispatch(ctx, j)
	case ledger.OutboundCancel:
		return w.cancel(ctx, j)
	case ledger.OutboundCompensationRequest:
		return w.compensate(ctx, j)
	case ledger.OutboundObserve:
		return w.observe(ctx, j)
	case ledger.OutboundMessage:
		return w.sendFollowUps(ctx, j)
	}
	return w.finish(ctx, j, "unknown_kind", nil)
}

// finish records fn's changes and finishes the job, in one transaction.
func (w *Worker) finish(ctx context.Context, j Job, outcome string, fn func(Tx) error) error {
	return w.store.InTx(ctx, func(tx Tx) error {
		if fn != nil {
			if err := fn(tx); err != nil {
				return err
			}
		}
		return tx.Outbox().FinishJob(ctx, j, outcome, w.now())
	})
}

// retryAt records fn's changes and reschedules the job for at, in one transaction.
func (w *Worker) retryAt(ctx context.Context, j Job, at time.Time, cause string, fn func(Tx) error) error {
	return w.store.InTx(ctx, func(tx Tx) error {
		if fn != nil {
			if err := fn(tx); err != nil {
				return err
			}
		}
		return tx.Outbox().RetryJob(ctx, j, at, text.Truncate(cause, 1000), w.now())
	})
}

// record appends an event to d's stream without changing it.
func record(ctx context.Context, tx Tx, d ledger.Delegation, typ ledger.EventType, at time.Time, data ledger.EventPayload) error {
	_, err := ledger.Record(ctx, tx, d, ledger.Change{Type: typ, Actor: workerActor, At: at, Data: data})
	return err
}

// ptr is a pointer to v: an event member that is present even when empty.
func ptr[T any](v T) *T { return &v }

// errorText is an error's message for events and last_error columns. Remote
// error messages are the remote's words; they are kept short.
func errorText(err error) string { return text.Truncate(err.Error(), 500) }

// FetchTask asks org's agent for task taskID with GetTask, which asks for
// the task's whole history (no historyLength), and returns it with the
// interface that answered. It is the Orchestrator's FetchTask: on-call's
// ResolveDispatch checks the task it names with it, outside any
// transaction.
func (w *Worker) FetchTask(ctx context.Context, org ledger.Org, taskID string) (a2a.Task, a2a.AgentInterface, error) {
	_, client, iface, err := w.agent(ctx, org)
	if err != nil {
		return a2a.Task{}, a2a.AgentInterface{}, err
	}
	task, err := client.GetTask(ctx, taskID)
	return task, iface, err
}

// agent returns the org's agent card, the interface to call — the first
// of the card's declared order the client speaks
// (a2a.AgentCard.PreferredInterface) — and a client for it.
func (w *Worker) agent(ctx context.Context, org ledger.Org) (a2a.AgentCard, *a2a.Client, a2a.AgentInterface, error) {
	if org.AgentCardURL == "" {
		return a2a.AgentCard{}, nil, a2a.AgentInterface{}, fmt.Errorf("org %s has no agent card URL", org.ID)
	}
	card, err := w.cards.get(ctx, org, func(card a2a.AgentCard) (ledger.CardObservation, error) { return w.checkCard(ctx, org, card) })
	if err != nil {
		return a2a.AgentCard{}, nil, a2a.AgentInterface{}, err
	}
	iface, err := card.PreferredInterface()
	if err != nil {
		return a2a.AgentCard{}, nil, a2a.AgentInterface{}, err
	}
	return card, a2a.NewClient(w.cfg.HTTPClient, iface), iface, nil
}

// cardCache keeps fetched agent cards that passed their check for a
// while, per org. A change of the org's card URL, allowed hosts or card
// requirements fetches and checks again, and so does a pin the cached card
// does not match (on-call accepted another card); the pin its own first
// check set matches it. A card that did not pass is not kept: the next
// call fetches it again.
type cardCache struct {
	hc    *http.Client
	clock ledger.Clock
	ttl   time.Duration
	mu    sync.Mutex
	m     map[string]cachedCard
}

type cachedCard struct {
	key     string
	card    a2a.AgentCard
	obs     ledger.CardObservation
	fetched time.Time
}

func newCardCache(hc *http.Client, clock ledger.Clock, ttl time.Duration) *cardCache {
	return &cardCache{hc: hc, clock: clock, ttl: ttl, m: map[string]cachedCard{}}
}

func (c *cardCache) get(ctx context.Context, org ledger.Org, check func(a2a.AgentCard) (ledger.CardObservation, error)) (a2a.AgentCard, error) {
	key := fmt.Sprint(org.AgentCardURL, "\x00", org.AllowedHosts, "\x00", org.RequireSignedCard, org.CardJKUHosts)
	c.mu.Lock()
	e, ok := c.m[org.ID]
	c.mu.Unlock()
	if ok && e.key == key && c.clock.Now().Sub(e.fetched) < c.ttl && (org.CardPin.IsZero() || org.CardPin.Admits(e.obs)) {
		return e.card, nil
	}
	card, err := a2a.FetchAgentCard(ctx, c.hc, org.AgentCardURL, org.AllowedHosts)
	if err != nil {
		return a2a.AgentCard{}, err
	}
	obs, err := check(card)
	if err != nil {
		return a2a.AgentCard{}, err
	}
	c.mu.Lock()
	c.m[org.ID] = cachedCard{key: key, card: card, obs: obs, fetched: c.clock.Now()}
	c.mu.Unlock()
	return card, nil
}

// compensationExtension reports whether the card declares the compensation
// extension, and whether with params.atomicCancel true.
func compensationExtension(card a2a.AgentCard) (declared, atomicCancel bool) {
	ext, ok := card.Extension(compensation.ExtensionURI)
	if !ok {
		return false, false
	}
	var params struct {
		AtomicCancel bool `json:"atomicCancel"`
	}
	if len(ext.Params) > 0 {
		_ = json.Unmarshal(ext.Params, &params)
	}
	return true, params.AtomicCancel
}

// recordTask records, in tx with d locked, what a fetched or returned task
// says: its snapshot, its status (through
// compensation.Service.ObserveTaskStatus) and
// when it was observed. source names where the task came from.
func (w *Worker) recordTask(ctx context.Context, tx Tx, d ledger.Delegation, task a2a.Task, source string, now time.Time) error {
	if err := w.putSnapshot(ctx, tx, d.ID, func(s TaskSnapshot) TaskSnapshot {
		return s.ApplyTask(task, source, now, w.cfg.Snapshot)
	}); err != nil {
		return err
	}
	if _, err := w.cfg.Compensation.ObserveTaskStatus(ctx, tx.Receipts(), d, observation(task, source), workerActor, now); err != nil {
		return err
	}
	return tx.MarkObserved(ctx, d.ID, now)
}

// putSnapshot updates the delegation's task snapshot inside tx (the row is
// locked, so concurrent updates apply in turn).
func (w *Worker) putSnapshot(ctx context.Context, tx Tx, id uuid.UUID, fn func(TaskSnapshot) TaskSnapshot) error {
	cur, err := tx.TaskSnapshotForUpdate(ctx, id)
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return err
	}
	return tx.PutTaskSnapshot(ctx, id, fn(cur), w.now())
}
