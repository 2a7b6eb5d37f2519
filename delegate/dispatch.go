package delegate

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/delegate/egress"
	"github.com/quittance/quittance/internal/text"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/failpoint"
)

// DispatchMessageID is the A2A messageId of the message Quittance sends for
// delegation id. It is derived from the id alone, so every attempt — after
// a timeout, a crash, on another replica — carries the same messageId and
// the remote can deduplicate it.
func DispatchMessageID(id uuid.UUID) string { return "quittance-dispatch-" + id.String() }

// PushPath is the path, under the service's public URL, of the push
// notification receiver of delegation id.
func PushPath(id uuid.UUID) string { return "/a2a/push/" + id.String() }

// maxDispatchParts bounds the parts of a dispatched message.
const maxDispatchParts = 64

// ValidateDispatchMessage checks the message of a delegation Quittance is
// to dispatch: a JSON object with 1 to 64 parts, each with exactly one of
// text, data, url and raw, and metadata, if any, an object (see
// a2a.ParseMessageContent). It is the ledger's ValidateDispatchMessage.
func ValidateDispatchMessage(raw []byte) error {
	_, err := parseDispatchMessage(raw)
	return err
}

// parseDispatchMessage decodes the message an orchestrator asks Quittance to
// send, for a dispatch or a follow-up.
func parseDispatchMessage(raw []byte) (a2a.Message, error) {
	return a2a.ParseMessageContent(raw, maxDispatchParts)
}

// dispatch sends a delegation's message to the org's agent and records the
// task it created (or, for a direct message reply, settles the delegation).
func (w *Worker) dispatch(ctx context.Context, j Job) error {
	d, err := w.store.Delegation(ctx, j.DelegationID)
	if err != nil {
		return err
	}
	if d.Remote.TaskID != "" || d.ObligationState != ledger.ObligationHeld {
		return w.finish(ctx, j, "already_dispatched", nil)
	}
	org, err := w.store.Org(ctx, d.OrgID)
	if err != nil {
		return err
	}
	run := &dispatchRun{j: j, d: d}
	if org.IdentityRevoked() {
		return w.dispatchFailed(ctx, run, "org_identity_revoked", nil)
	}
	msg, err := parseDispatchMessage(j.Payload)
	if err != nil {
		return w.dispatchFailed(ctx, run, "invalid_message", err)
	}
	msg.MessageID, msg.ContextID = DispatchMessageID(d.ID), DispatchContextID(d.ID)
	if err := w.linkMessage(ctx, d, &msg); err != nil {
		return err
	}
	run.contextID = msg.ContextID
	card, client, iface, err := w.agent(ctx, org)
	if err != nil {
		return w.dispatchAgentUnavailable(ctx, run, err)
	}
	run.client, run.iface = client, iface
	if msg.Metadata, err = withCompensationKey(msg.Metadata, d); err != nil {
		return w.dispatchFailed(ctx, run, "invalid_message", err)
	}
	if declared, _ := compensationExtension(card); declared && !slices.Contains(msg.Extensions, compensation.ExtensionURI) {
		msg.Extensions = append(msg.Extensions, compensation.ExtensionURI)
	}
	if run.push, err = w.pushConfig(ctx, d, card); err != nil {
		return err
	}
	failpoint.Inject("before-remote-send") // crash tests: the job is claimed, nothing sent yet
	res, err := client.SendMessage(ctx, a2a.SendRequest{Message: msg, ReturnImmediately: true, Push: run.push})
	return w.takeDispatchAnswer(ctx, run, res, err)
}

// dispatchRun is one attempt of a dispatch job: the delegation, the agent
// it sends to, and the context and push configuration it sends with.
type dispatchRun struct {
	j Job
	d ledger.Delegation
	// client is nil when the agent could not be reached.
	client    *a2a.Client
	iface     a2a.AgentInterface
	contextID string
	push      *a2a.PushConfig
}

// dispatchFailed gives the dispatch up for reason, with a dispatch_failed
// event: only where nothing can have reached the agent.
func (w *Worker) dispatchFailed(ctx context.Context, run *dispatchRun, reason string, cause error) error {
	data := ledger.DispatchFailedData{Reason: reason, MessageID: DispatchMessageID(run.d.ID), Attempt: run.j.Attempt}
	if cause != nil {
		data.Error = errorText(cause)
	}
	return w.finish(ctx, run.j, "failed", func(tx Tx) error {
		return record(ctx, tx, run.d, ledger.EventTypeDispatchFailed, w.now(), data)
	})
}

// dispatchAgentUnavailable handles an agent whose card could not be had:
// a retry while attempts remain for a retryable error, else a give-up on
// the first attempt, or dispatch_unknown after an attempt that may have
// sent the message.
func (w *Worker) dispatchAgentUnavailable(ctx context.Context, run *dispatchRun, err error) error {
	j := run.j
	reason := "agent_unavailable"
	notUsed := errors.Is(err, ErrAgentCardNotUsed)
	if notUsed {
		// Held off: nothing goes to a card that is not used; the card's
		// state is on the org (ledger/DESIGN.md §4.1).
		reason = "agent_card_not_used"
	}
	if (notUsed || a2a.Retryable(err)) && j.Attempt < w.cfg.DispatchMaxAttempts {
		return w.retryAt(ctx, j, w.now().Add(w.backoff.Wait(j.Attempt)), errorText(err), nil)
	}
	if j.Attempt > 1 {
		// An earlier attempt may have sent the message (attempts count
		// claims, and a crash after the send leaves no record of it):
		// giving up would leave a hold on a task that may exist with
		// nothing listing, polling or alerting on it.
		return w.dispatchUnknown(ctx, run, reason, err)
	}
	return w.dispatchFailed(ctx, run, reason, err)
}

// pushConfig registers a push token for d when the service has a public URL
// and the agent takes push notifications: its hash is stored before the
// token leaves, so a push can never carry a token Quittance does not know.
// Nil when no push is registered.
func (w *Worker) pushConfig(ctx context.Context, d ledger.Delegation, card a2a.AgentCard) (*a2a.PushConfig, error) {
	if w.cfg.PublicURL == "" || !card.PushNotifications {
		return nil, nil
	}
	token := rand.Text()
	sum := sha256.Sum256([]byte(token))
	if err := w.store.InTx(ctx, func(tx Tx) error { return tx.SetPushTokenHash(ctx, d.ID, sum[:], w.now()) }); err != nil {
		return nil, err
	}
	return &a2a.PushConfig{ID: "quittance", URL: strings.TrimSuffix(w.cfg.PublicURL, "/") + PushPath(d.ID), Token: token}, nil
}

// takeDispatchAnswer records what the agent answered the dispatch with:
// the task it created; the end of work that never had a task, only on the
// first attempt; a retry with the same messageId while the failure proves
// nothing; dispatch_unknown when nothing proves whether a task exists
// (ambiguity never releases).
func (w *Worker) takeDispatchAnswer(ctx context.Context, run *dispatchRun, res a2a.SendResult, err error) error {
	j := run.j
	switch {
	case err == nil && res.Task != nil:
		return w.recordDispatched(ctx, run, *res.Task)
	case err == nil && j.Attempt == 1:
		// A direct message reply: the agent did the work without a task.
		return w.endedWithoutTask(ctx, run, "message_reply", compensation.Observation{
			Status: ledger.StatusCompleted, Message: messageText(res.Message), Source: "dispatch_message_reply",
		})
	case err == nil:
		// A message reply to a resend proves nothing about the earlier
		// attempt, which may have created a task: it never settles.
		return w.dispatchUnknown(ctx, run, "message_reply_to_resend", nil)
	case noTaskCreated(err) && j.Attempt == 1:
		// The agent refused the first send outright: no task exists, so no
		// work was done. This is the remote rejecting the work.
		return w.endedWithoutTask(ctx, run, "rejected", compensation.Observation{
			Status: ledger.StatusRejected, Message: text.Truncate(err.Error(), 4000), Source: "dispatch_refused",
		})
	case noTaskCreated(err):
		// A refusal of a resend (say -32602 "duplicate messageId") after an
		// attempt that may have reached the agent proves nothing: the first
		// attempt may have created the task.
		return w.dispatchUnknown(ctx, run, "resend_refused", err)
	case j.Attempt < w.cfg.DispatchMaxAttempts && !errors.Is(err, egress.ErrDenied):
		// Timeouts, 5xx, and errors that do not prove the task was not
		// created: resend with the same messageId.
		return w.retryAt(ctx, j, w.now().Add(w.backoff.Wait(j.Attempt)), errorText(err), nil)
	case j.Attempt == 1 && errors.Is(err, egress.ErrDenied):
		// The request never left: nothing can have reached the agent.
		return w.dispatchFailed(ctx, run, "send_failed", err)
	}
	// Out of attempts, or an error that does not prove the request was not
	// processed (a malformed reply, an HTTP 4xx, a body over the cap).
	return w.dispatchUnknown(ctx, run, "send_failed", err)
}

// endedWithoutTask finishes the dispatch job with the end of work that
// never had a task, observed on the locked delegation.
func (w *Worker) endedWithoutTask(ctx context.Context, run *dispatchRun, outcome string, obs compensation.Observation) error {
	return w.finish(ctx, run.j, outcome, func(tx Tx) error {
		d, err := tx.DelegationForUpdate(ctx, run.d.ID)
		if err != nil {
			return err
		}
		d.Remote.ProtocolVersion = run.iface.ProtocolVersion
		_, err = w.cfg.Compensation.ObserveTaskStatus(ctx, tx.Receipts(), d, obs, workerActor, w.now())
		return err
	})
}

// dispatchUnknown finishes the dispatch job leaving the hold active in the
// dispatch_unknown condition, for reason: nothing proves whether the remote
// created a task. Where the agent can be reached, its tasks in the
// message's context are looked up at once; the condition is listed,
// alerted on, and looked up again every PollAfter.
func (w *Worker) dispatchUnknown(ctx context.Context, run *dispatchRun, reason string, cause error) error {
	d := run.d
	data := ledger.DispatchUnknownData{Reason: reason, MessageID: DispatchMessageID(d.ID), Attempt: run.j.Attempt}
	if cause != nil {
		data.Error = errorText(cause)
	}
	var found []a2a.Task
	data.Lookup = "agent_unavailable"
	if run.client != nil {
		// Where the agent lists tasks, the delegation's context may say
		// what the earlier attempts created (never what they did not).
		found, data.Lookup = w.lookupDispatch(ctx, run.client, d, run.contextID)
	}
	return w.finish(ctx, run.j, "dispatch_unknown", func(tx Tx) error {
		d, err := tx.DelegationForUpdate(ctx, d.ID)
		if err != nil {
			return err
		}
		if d.Remote.TaskID != "" || d.ObligationState != ledger.ObligationHeld {
			return nil
		}
		now := w.now()
		if err := setDispatchUnknown(ctx, tx, d, data, now); err != nil {
			return err
		}
		if len(found) == 0 {
			return nil
		}
		return w.resolveFound(ctx, tx, d, found, run.iface, now)
	})
}

// setDispatchUnknown puts d, locked in tx, in the dispatch_unknown
// condition with a dispatch_unknown event carrying data (its "reason"
// names the cause), and counts now as its last lookup: the poller repeats
// the lookup PollAfter from now.
func setDispatchUnknown(ctx context.Context, tx Tx, d ledger.Delegation, data ledger.DispatchUnknownData, now time.Time) error {
	if err := tx.SetDispatchUnknown(ctx, d.ID, data.Reason, now); err != nil {
		return err
	}
	if err := record(ctx, tx, d, ledger.EventTypeDispatchUnknown, now, data); err != nil {
		return err
	}
	return tx.MarkObserved(ctx, d.ID, now)
}

// noTaskCreated reports whether a SendMessage error, on the first attempt,
// proves that the agent created no task: a JSON-RPC error saying the
// request itself was unacceptable. Internal errors prove nothing and are
// retried. On a later attempt the same error proves nothing either: the
// agent may be refusing a duplicate of a message it already turned into
// a task, so the caller reads it so only on attempt 1.
func noTaskCreated(err error) bool {
	var rpcErr *a2a.RPCError
	if !errors.As(err, &rpcErr) {
		return false
	}
	switch rpcErr.Code {
	case -32600, -32601, -32602, -32004, -32005, -32008, -32009:
		return true
	}
	return false
}

// recordDispatched records the task the remote created for the
// delegation and finishes the job; after a resend it also looks for the
// tasks earlier attempts may have created, and registers the current push
// token on the task.
func (w *Worker) recordDispatched(ctx context.Context, run *dispatchRun, task a2a.Task) error {
	var outcome string
	err := w.store.InTx(ctx, func(tx Tx) error {
		var err error
		if outcome, err = w.applyDispatched(ctx, tx, run, task); err != nil {
			return err
		}
		return tx.Outbox().FinishJob(ctx, run.j, outcome, w.now())
	})
	if err != nil || outcome != "dispatched" || run.j.Attempt <= 1 {
		return err
	}
	// An earlier attempt may have reached the agent, and an agent that
	// does not deduplicate on messageId created a task for each: look
	// the delegation's context up for the others.
	cur, err := w.store.Delegation(ctx, run.d.ID)
	if err != nil {
		return err
	}
	if err := w.findExtraTasks(ctx, run.client, cur); err != nil {
		return err
	}
	if run.push != nil {
		// An earlier attempt may have registered a push token whose hash
		// was replaced since: register the current one on the task.
		if aerr := run.client.SetPushConfig(ctx, task.ID, *run.push); aerr != nil {
			w.log.WarnContext(ctx, "re-register push config failed; polling covers the task",
				"delegation_id", run.d.ID.String(), "error", aerr)
		}
	}
	return nil
}

// applyDispatched records, in tx, the task the remote created: on the
// locked delegation with a task_dispatched event, unless it recorded
// another task already (a conflict) or the tenant recorded this one on
// another delegation (dispatch_unknown). It returns the job's outcome.
func (w *Worker) applyDispatched(ctx context.Context, tx Tx, run *dispatchRun, task a2a.Task) (outcome string, err error) {
	d, err := tx.DelegationForUpdate(ctx, run.d.ID)
	if err != nil {
		return "", err
	}
	now := w.now()
	if d.Remote.TaskID != "" {
		if d.Remote.TaskID != task.ID {
			return "dispatched", record(ctx, tx, d, ledger.EventTypeRemoteTaskConflict, now, ledger.RemoteTaskConflictData{
				RecordedTaskID: d.Remote.TaskID, ReportedTaskID: task.ID, Source: "dispatch",
			})
		}
		return "dispatched", nil
	}
	if other, err := tx.DelegationByRemoteTask(ctx, d.Tenant, d.OrgID, task.ID); err == nil && other.ID != d.ID {
		// The agent reported a task this tenant recorded on another
		// delegation. Which delegation the task is really for, and
		// whether the agent created one for this, nobody knows: the
		// hold stays, listed as dispatch_unknown, until a lookup (the
		// poller makes one PollAfter from now), a push or on-call names
		// this delegation's task.
		if err := record(ctx, tx, d, ledger.EventTypeRemoteTaskConflict, now, ledger.RemoteTaskConflictData{
			ReportedTaskID: task.ID, OtherDelegationID: other.ID.String(), Source: "dispatch",
		}); err != nil {
			return "", err
		}
		return "dispatch_unknown", setDispatchUnknown(ctx, tx, d, ledger.DispatchUnknownData{
			Reason: "remote_task_taken", MessageID: DispatchMessageID(d.ID), Attempt: run.j.Attempt,
			ReportedTaskID: task.ID, Lookup: "not_made",
		}, now)
	} else if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return "", err
	}
	if _, err := tx.ClearDispatchUnknown(ctx, d.ID); err != nil {
		return "", err
	}
	iface := run.iface
	d.Remote = ledger.RemoteTask{TaskID: task.ID, ContextID: task.ContextID, ProtocolVersion: iface.ProtocolVersion}
	d, _, err = ledger.Apply(ctx, tx, d, ledger.Change{Type: ledger.EventTypeTaskDispatched, Actor: workerActor, At: now, Data: ledger.TaskDispatchedData{
		TaskID: task.ID, ContextID: task.ContextID, ProtocolVersion: iface.ProtocolVersion, Binding: iface.Binding,
		MessageID: DispatchMessageID(d.ID), Attempt: run.j.Attempt, PushRegistered: run.push != nil,
	}})
	if err != nil {
		return "", err
	}
	return "dispatched", w.recordTask(ctx, tx, d, task, "dispatch", now)
}

// taskStatus is the ledger's name for a task state the remote reported. The
// A2A client normalizes every state to the names the ledger stores (one
// test holds the two lists together), so the name carries over as it is.
func taskStatus(s a2a.TaskState) ledger.TaskStatus { return ledger.TaskStatus(s) }

// observation is what a fetched task says about its status.
func observation(t a2a.Task, source string) compensation.Observation {
	return compensation.Observation{
		Status: taskStatus(t.Status.State), Timestamp: t.Status.Timestamp, Message: messageText(t.Status.Message), Source: source,
		Binding: t.Binding,
	}
}

// messageText joins the text parts of a message, bounded to what the ledger keeps.
func messageText(m *a2a.Message) string {
	if m == nil {
		return ""
	}
	var texts []string
	for _, p := range m.Parts {
		if p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return text.Truncate(strings.Join(texts, "\n"), 4000)
}

// ValidateAgentEndpoint checks what an admin registers for an org's agent:
// the agent card URL must pass p.ValidateURL, and allowed_hosts must
// list at least one host name or IP address (no scheme, port or path) —
// the hosts the card's interface URLs may point at. It is the ledger's
// ValidateAgentEndpoint.
func ValidateAgentEndpoint(p egress.Policy, cardURL string, allowedHosts []string) error {
	if err := p.ValidateURL(cardURL); err != nil {
		return fmt.Errorf("agent card URL refused: %w", err)
	}
	if len(allowedHosts) == 0 {
		return errors.New("allowed_hosts must list at least one host the agent's interfaces may be on")
	}
	for _, h := range allowedHosts {
		if h == "" || strings.ContainsAny(h, "/:@ ") && !strings.Contains(h, "::") {
			return fmt.Errorf("allowed host %q must be a bare host name or IP address", h)
		}
		if err := p.ValidateURL("https://" + hostForURL(h) + "/"); err != nil {
			return fmt.Errorf("allowed host %q refused: %w", h, err)
		}
	}
	return nil
}

// hostForURL brackets an IPv6 literal for use in a URL.
func hostForURL(h string) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]"
	}
	return h
}

// withCompensationKey returns a dispatched message's metadata with the
// delegation's compensation idempotency key under the compensation
// extension's URI: {"<uri>": {"idempotencyKey": "qc_…"}}. The key exists
// from the delegation's creation, so the remote can send an ack or a
// declaration for it at any time, even before Quittance observes the task
// end (early evidence, ledger/DESIGN.md §3). The orchestrator's own
// metadata is kept; the extension's member is Quittance's.
func withCompensationKey(meta json.RawMessage, d ledger.Delegation) (json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	if len(meta) > 0 && !bytes.Equal(bytes.TrimSpace(meta), []byte("null")) {
		if err := json.Unmarshal(meta, &m); err != nil {
			return nil, fmt.Errorf("message metadata: %w", err)
		}
	}
	ext, err := json.Marshal(map[string]string{"idempotencyKey": ledger.CompensationKey(d)})
	if err != nil {
		return nil, err
	}
	m[compensation.ExtensionURI] = ext
	return json.Marshal(m)
}

// linkMessage sends a delegation created with context_from in the linked
// delegation's remote context, and sets referenceTaskIds to the remote
// tasks of the delegations it references.
func (w *Worker) linkMessage(ctx context.Context, d ledger.Delegation, msg *a2a.Message) error {
	links, err := w.store.DelegationLinks(ctx, d.ID)
	if err != nil {
		return err
	}
	for _, l := range links {
		if l.From != d.ID {
			continue
		}
		other, err := w.store.Delegation(ctx, l.To)
		if err != nil {
			return err
		}
		switch l.Kind {
		case ledger.LinkContextFrom:
			msg.ContextID = other.Remote.ContextID
		case ledger.LinkReference:
			msg.ReferenceTaskIDs = append(msg.ReferenceTaskIDs, other.Remote.TaskID)
		}
	}
	return nil
}
