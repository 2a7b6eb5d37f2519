package telemetry

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
)

// Evidence kinds and results, the label values of quittance_evidence_total.
const (
	EvidenceAck         = "ack"
	EvidenceDeclaration = "declaration"
	EvidenceTaskStatus  = "task_status"

	ResultAccepted  = "accepted"
	ResultRefused   = "refused"
	ResultLate      = "late"
	ResultDuplicate = "duplicate"
)

// Compensation request outcomes, the label values of
// quittance_compensation_requests_total: the receipt outcomes of ledger/DESIGN.md
// §4, plus error when the request did not complete.
const (
	OutcomeCompensated  = "compensated"
	OutcomeNoEffects    = "no_effects"
	OutcomeFailed       = "failed"
	OutcomeNotSupported = "not_supported"
	OutcomeError        = "error"
)

// httpBuckets cover API latencies from a cache-hot read to a slow export.
var httpBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// a2aBuckets cover remote agents, which may take up to the 90s call timeout.
var a2aBuckets = []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 90}

// Metrics are the in-process metrics. Create one per process with New, on
// the registry that /metrics serves.
type Metrics struct {
	transitions     *prometheus.CounterVec
	evidence        *prometheus.CounterVec
	tokensRefused   *prometheus.CounterVec
	compensationReq *prometheus.CounterVec
	writeOffs       *prometheus.CounterVec
	orgJWKSFetches  *prometheus.CounterVec
	httpDuration    *prometheus.HistogramVec
	a2aDuration     *prometheus.HistogramVec
	streamsOpen     prometheus.Gauge
	streamsRefused  *prometheus.CounterVec
	streamReads     prometheus.Counter
	panics          *prometheus.CounterVec
	writeBatch      prometheus.Histogram
	writeQueueFull  prometheus.Counter
}

// panicWorkers are the workers that recover from panics, the label values
// of quittance_background_panics_total: delegate's Panic* and webhook's
// Panic* names, the event stream hubs', and the loops serve runs.
var panicWorkers = []string{
	"a2a_job", "a2a_stream", "a2a_round", "webhook_delivery", "webhook_round", "event_stream_hub",
	"principals", "compensation_sweep", "a2a_workers", "webhook_deliveries", "org_key_refresh", "checkpoints",
}

// The caps an event stream can be refused by, the label values of
// quittance_event_streams_refused_total.
var streamCaps = []string{"principal", "process"}

// New creates the metrics and registers them on reg. Counters and
// histograms of every label value known in advance (evidence kinds and
// results, compensation outcomes, write-off statuses, the transitions of
// the obligation machine, the A2A methods Quittance calls and their
// outcomes) start at zero, so increase() and rate() count the first event
// and dashboards show zeros, not "No data", on a fresh replica.
func New(reg prometheus.Registerer) *Metrics {
	m := newMetrics()
	reg.MustRegister(m.transitions, m.evidence, m.tokensRefused, m.compensationReq, m.writeOffs, m.orgJWKSFetches, m.httpDuration, m.a2aDuration,
		m.streamsOpen, m.streamsRefused, m.streamReads, m.panics, m.writeBatch, m.writeQueueFull)
	m.initLabels()
	return m
}

// newMetrics creates the metrics, unregistered.
func newMetrics() *Metrics {
	return &Metrics{
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quittance_transitions_total",
			Help: "Obligation state transitions committed, by from and to state.",
		}, []string{"from", "to"}),
		evidence: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quittance_evidence_total",
			Help: "Evidence recorded (acks, declarations, task statuses), by kind and result: accepted, refused, late or duplicate.",
		}, []string{"kind", "result"}),
		tokensRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quittance_evidence_tokens_refused_total",
			Help: "Signed acks and declarations refused at the public evidence endpoints, by org (a registered org's id, else \"unknown\") and server-side reason (the refusal code).",
		}, []string{"org", "reason"}),
		compensationReq: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quittance_compensation_requests_total",
			Help: "Compensation requests sent to remote agents, by outcome: compensated, no_effects, failed, not_supported or error.",
		}, []string{"outcome"}),
		writeOffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quittance_write_offs_total",
			Help: "Write-offs by resulting status: pending_approval (requested, awaiting a second approver), executed or void.",
		}, []string{"status"}),
		orgJWKSFetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quittance_org_jwks_fetches_total",
			Help: "Fetches of orgs' JWKS URLs, by outcome: changed, unchanged, or failed (unreachable or an invalid set; the keys in force stay).",
		}, []string{"outcome"}),
		writeBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "quittance_write_batch_size",
			Help:    "Operations carried by each flush of the write coalescer: one transaction, one commit (ledger/DESIGN.md §5).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		}),
		writeQueueFull: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quittance_write_queue_full_total",
			Help: "Writes answered 503 because the write coalescer's queue was full (QUITTANCE_WRITE_QUEUE_MAX).",
		}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "quittance_http_request_duration_seconds",
			Help:    "API request durations by route pattern, method and status code.",
			Buckets: httpBuckets,
		}, []string{"route", "method", "code"}),
		a2aDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "quittance_a2a_request_duration_seconds",
			Help:    "Outbound A2A call durations by JSON-RPC method and outcome.",
			Buckets: a2aBuckets,
		}, []string{"method", "outcome"}),
		streamsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "quittance_event_streams_open",
			Help: "Event streams (Server-Sent Events) this replica serves now.",
		}),
		streamsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quittance_event_streams_refused_total",
			Help: "Event streams refused with 429 too_many_streams, by the cap reached: principal (QUITTANCE_STREAM_MAX_PER_PRINCIPAL) or process (QUITTANCE_STREAM_MAX_OPEN).",
		}, []string{"limit"}),
		streamReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quittance_event_stream_reads_total",
			Help: "Reads of the event feed made for open event streams; the streams of one scope share them.",
		}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quittance_background_panics_total",
			Help: "Panics recovered in background workers, by worker; the job or round that panicked is given up and the worker goes on.",
		}, []string{"worker"}),
	}
}

// initLabels creates the series of every label value known in advance,
// at zero.
func (m *Metrics) initLabels() {
	for _, c := range streamCaps {
		m.streamsRefused.WithLabelValues(c)
	}
	for _, w := range panicWorkers {
		m.panics.WithLabelValues(w)
	}
	for _, o := range []string{ledger.JWKSFetchChanged, ledger.JWKSFetchUnchanged, ledger.JWKSFetchFailed} {
		m.orgJWKSFetches.WithLabelValues(o)
	}
	for _, kind := range []string{EvidenceAck, EvidenceDeclaration, EvidenceTaskStatus} {
		for _, result := range []string{ResultAccepted, ResultRefused, ResultLate, ResultDuplicate} {
			m.evidence.WithLabelValues(kind, result)
		}
	}
	for _, o := range []string{OutcomeCompensated, OutcomeNoEffects, OutcomeFailed, OutcomeNotSupported, OutcomeError} {
		m.compensationReq.WithLabelValues(o)
	}
	for _, s := range []string{"pending_approval", "executed", "void"} {
		m.writeOffs.WithLabelValues(s)
	}
	for _, tr := range ObligationTransitions() {
		m.transitions.WithLabelValues(string(tr[0]), string(tr[1]))
	}
	for _, method := range calledA2AMethods {
		for _, o := range a2aOutcomes {
			m.a2aDuration.WithLabelValues(method, o)
		}
	}
}

// EventStreamsOpen adds delta to the open event streams.
func (m *Metrics) EventStreamsOpen(delta float64) {
	if m != nil {
		m.streamsOpen.Add(delta)
	}
}

// EventStreamRefused counts an event stream refused by cap limit
// ("principal" or "process").
func (m *Metrics) EventStreamRefused(limit string) {
	if m != nil {
		m.streamsRefused.WithLabelValues(limit).Inc()
	}
}

// EventStreamRead counts one read of the feed made for event streams.
func (m *Metrics) EventStreamRead() {
	if m != nil {
		m.streamReads.Inc()
	}
}

// Panic counts a panic recovered in background worker.
func (m *Metrics) Panic(worker string) {
	if m != nil {
		m.panics.WithLabelValues(worker).Inc()
	}
}

// ObligationTransitions returns every (from, to) pair the obligation state
// machine (ledger.NextObligation) allows, in a fixed order: the label values
// of quittance_transitions_total.
func ObligationTransitions() [][2]ledger.ObligationState {
	var out [][2]ledger.ObligationState
	seen := map[[2]ledger.ObligationState]bool{}
	for _, from := range ledger.ObligationStates {
		for _, ev := range ledger.ObligationEvents {
			to, _, err := ledger.NextObligation(from, ev)
			if err != nil || seen[[2]ledger.ObligationState{from, to}] {
				continue
			}
			seen[[2]ledger.ObligationState{from, to}] = true
			out = append(out, [2]ledger.ObligationState{from, to})
		}
	}
	return out
}

// RegisterAlertSettings exports the alert thresholds the service is
// configured with, so that the alerting rules read them instead of
// hard-coding them: quittance_unconfirmed_alert_grace_seconds is how long
// an obligation may stay in compensation_unconfirmed before
// QuittanceObligationUnconfirmed fires; quittance_checkpoint_interval_seconds
// how often the ledger signs checkpoints (0 when it signs none), from which
// QuittanceCheckpointsStalled judges an event left uncovered too long.
func RegisterAlertSettings(reg prometheus.Registerer, unconfirmedGrace, checkpointInterval time.Duration) {
	grace := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quittance_unconfirmed_alert_grace_seconds",
		Help: "How long an obligation may stay in compensation_unconfirmed before QuittanceObligationUnconfirmed fires (QUITTANCE_UNCONFIRMED_ALERT_GRACE).",
	})
	grace.Set(unconfirmedGrace.Seconds())
	interval := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quittance_checkpoint_interval_seconds",
		Help: "How often this replica signs a checkpoint over the streams that moved (QUITTANCE_CHECKPOINT_INTERVAL); 0 when it signs none (QUITTANCE_CHECKPOINTS=off).",
	})
	interval.Set(checkpointInterval.Seconds())
	reg.MustRegister(grace, interval)
}

// ObserveWriteBatch records the size of one flush of the write
// coalescer (pgstore.Coalescing.ObserveBatch).
func (m *Metrics) ObserveWriteBatch(n int) {
	if m != nil {
		m.writeBatch.Observe(float64(n))
	}
}

// WriteQueueFull counts a write refused on a full queue
// (pgstore.Coalescing.Refused).
func (m *Metrics) WriteQueueFull() {
	if m != nil {
		m.writeQueueFull.Inc()
	}
}

// ObserveCommitted counts the transitions and evidence of the events one
// committed transaction appended. It is the pgstore.WithAfterCommit hook:
// nothing is counted for a transaction that rolled back.
func (m *Metrics) ObserveCommitted(events []ledger.Event) {
	if m == nil {
		return
	}
	for _, e := range events {
		if e.ObligationFrom != "" && e.ObligationTo != "" {
			m.transitions.WithLabelValues(string(e.ObligationFrom), string(e.ObligationTo)).Inc()
		}
		if kind, result, ok := ClassifyEvidence(e); ok {
			m.evidence.WithLabelValues(kind, result).Inc()
		}
		if status, ok := writeOffStatus(e.Type); ok {
			m.writeOffs.WithLabelValues(status).Inc()
		}
		if outcome, ok := compensationRequestOutcome(e); ok {
			m.CompensationRequest(outcome)
		}
	}
}

// UnknownOrgLabel is the org label of a refused token that named no
// registered org: label values stay bounded by the orgs an operator
// registered, whatever a stranger puts in iss.
const UnknownOrgLabel = "unknown"

// TokenRefused counts one refused posted token (compensation.Config's
// OnRefusal): in quittance_evidence_tokens_refused_total by org and
// reason, and in quittance_evidence_total as refused evidence of its kind.
// Refused tokens are no events (ledger/DESIGN.md §3), so ObserveCommitted
// never sees them.
func (m *Metrics) TokenRefused(r report.TokenRefusal) {
	if m == nil {
		return
	}
	org := r.OrgID
	if org == "" {
		org = UnknownOrgLabel
	}
	m.tokensRefused.WithLabelValues(org, r.Reason).Inc()
	kind := evidenceKind(r.Kind)
	if kind == "" {
		kind = EvidenceAck
	}
	m.evidence.WithLabelValues(kind, ResultRefused).Inc()
}

// compensationRequestOutcome is the outcome of a compensation request over
// A2A that event e concludes: an accepted receipt (compensation_acked or
// no_compensation_declared with channel a2a_receipt) or a failed attempt.
func compensationRequestOutcome(e ledger.Event) (string, bool) {
	switch e.Type {
	case ledger.EventTypeCompensationAcked, ledger.EventTypeNoCompensationDeclared,
		ledger.EventTypeCompensationRequestFailed, ledger.EventTypeCompensationRetriesExhausted,
		ledger.EventTypeCompensationNotSupported:
	default:
		return "", false
	}
	var data struct {
		Channel string `json:"channel"`
		Outcome string `json:"outcome"`
	}
	if err := json.Unmarshal(e.Data, &data); err != nil {
		return OutcomeError, true
	}
	accepted := e.Type == ledger.EventTypeCompensationAcked || e.Type == ledger.EventTypeNoCompensationDeclared
	// "a2a" is how events before the one evidence path named the channel.
	if accepted && data.Channel != string(ledger.ChannelA2AReceipt) && data.Channel != "a2a" {
		return "", false // an ack posted over HTTP answers no request of ours
	}
	return data.Outcome, true
}

// CompensationRequest counts one compensation request by its outcome (one
// of the Outcome constants).
func (m *Metrics) CompensationRequest(outcome string) {
	if m == nil {
		return
	}
	switch outcome {
	case OutcomeCompensated, OutcomeNoEffects, OutcomeFailed, OutcomeNotSupported:
	default:
		outcome = OutcomeError
	}
	m.compensationReq.WithLabelValues(outcome).Inc()
}

// OrgJWKSFetch counts one fetch of an org's JWKS URL by its outcome
// (ledger.Config.ObserveOrgJWKSFetch).
func (m *Metrics) OrgJWKSFetch(outcome string) {
	if m == nil {
		return
	}
	m.orgJWKSFetches.WithLabelValues(outcome).Inc()
}

// ObserveHTTP records one API request. route is the mux pattern, never the
// raw path.
func (m *Metrics) ObserveHTTP(route, method string, code int, d time.Duration) {
	if m == nil {
		return
	}
	m.httpDuration.WithLabelValues(route, method, strconv.Itoa(code)).Observe(d.Seconds())
}

// ObserveA2A records one outbound A2A call.
func (m *Metrics) ObserveA2A(method, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.a2aDuration.WithLabelValues(method, outcome).Observe(d.Seconds())
}

func writeOffStatus(eventType ledger.EventType) (string, bool) {
	switch eventType {
	case ledger.EventTypeWriteOffRequested:
		return "pending_approval", true
	case ledger.EventTypeWriteOffExecuted:
		return "executed", true
	case ledger.EventTypeWriteOffVoided:
		return "void", true
	}
	return "", false
}

// evidenceTypes maps the event types that record evidence without moving
// the obligation to their kind and result.
var evidenceTypes = map[ledger.EventType][2]string{
	ledger.EventTypeTaskStatusChanged:   {EvidenceTaskStatus, ResultAccepted},
	ledger.EventTypeTaskStatusDuplicate: {EvidenceTaskStatus, ResultDuplicate},
	ledger.EventTypeTaskStatusStale:     {EvidenceTaskStatus, ResultLate},
	// A different status after a terminal one is a status that came too
	// late to apply (ledger/DESIGN.md §2.2 invariant 5).
	ledger.EventTypeStatusConflict: {EvidenceTaskStatus, ResultLate},
}

// ClassifyEvidence returns the evidence kind and result an event records,
// and false for events that record no evidence (a delegation created, a
// cancel request, an admin change).
//
// Task status events are classified by type. Acks and declarations are
// classified by the obligation event that applied them, and otherwise
// (duplicates, late arrivals, refusals) by the "evidence" member of the
// event data, which the compensation package sets to "ack" or
// "declaration".
func ClassifyEvidence(e ledger.Event) (kind, result string, ok bool) {
	if kr, ok := evidenceTypes[e.Type]; ok {
		return kr[0], kr[1], true
	}
	var data struct {
		ObligationEvent string `json:"obligation_event"`
		Evidence        string `json:"evidence"`
		Kind            string `json:"kind"`
		Duplicate       bool   `json:"duplicate"`
	}
	_ = json.Unmarshal(e.Data, &data)
	switch ledger.ObligationEvent(data.ObligationEvent) {
	case ledger.EventCompensationAck, ledger.EventTaskEndedAcked:
		return EvidenceAck, ResultAccepted, true
	case ledger.EventDeclarationVerified, ledger.EventTaskEndedDeclared:
		return EvidenceDeclaration, ResultAccepted, true
	}
	kind = evidenceKind(data.Evidence)
	if kind == "" {
		kind = evidenceKind(data.Kind)
	}
	switch e.Type {
	case ledger.EventTypeTokenRefused, ledger.EventTypeEvidenceConflict:
		if kind == "" {
			kind = EvidenceAck
		}
		return kind, ResultRefused, true
	case ledger.EventTypeLateEvidence:
		if kind == "" {
			kind = EvidenceAck
		}
		return kind, ResultLate, true
	}
	if kind != "" && data.Duplicate {
		return kind, ResultDuplicate, true
	}
	return "", "", false
}

// evidenceKind normalizes the ways events name signed evidence.
func evidenceKind(s string) string {
	switch s {
	case "ack", "compensation_ack", "compensation-ack+jwt", "receipt":
		return EvidenceAck
	case "declaration", "declaration_verified", "no_compensation_required", "no-compensation-required+jwt":
		return EvidenceDeclaration
	}
	return ""
}
