package delegate

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/internal/panics"
	"github.com/quittance/quittance/internal/text"
	"github.com/quittance/quittance/ledger"
)

// Observing remote tasks. Three sources feed
// compensation.Service.ObserveTaskStatus, the one task-status transition
// path (a terminal status is evidence, applied by ApplyEvidence): push notifications (only a hint: each
// one enqueues an observe job that fetches the task with GetTask), the
// poller (observe jobs for dispatched tasks not heard of for PollAfter) and
// streams (SubscribeToTask, for agents whose card declares streaming).

// Errors of the push receiver.
var (
	// ErrPushUnauthorized: the push names no delegation with a registered
	// push token, or its token does not match.
	ErrPushUnauthorized = errors.New("delegate: push notification not authorized")
	// ErrPushTaskMismatch: the push is about another task than the
	// delegation's.
	ErrPushTaskMismatch = errors.New("delegate: push notification names another task")
)

// MaxPushBytes is the largest push notification body ReceivePush accepts.
const MaxPushBytes = 1 << 20

// ReceivePush handles a push notification for delegation id, presenting
// token (see PushTokenFromRequest) with body. The token is compared in
// constant time with the hash registered when the task was dispatched; an
// unknown delegation and a wrong token are both ErrPushUnauthorized. A body
// that is not a task update is ErrMalformedResponse (wrapped); one about
// another task is ErrPushTaskMismatch and is recorded. Otherwise the push
// is accepted as a hint: nothing is applied from it, but an observe job is
// enqueued to fetch the task with GetTask, and the worker is woken.
// Duplicate and out-of-order pushes thus cost one GetTask each at most.
func (w *Worker) ReceivePush(ctx context.Context, id uuid.UUID, token string, body []byte) error {
	tr, err := w.store.Tracking(ctx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return ErrPushUnauthorized
	} else if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(token))
	if token == "" || len(tr.PushTokenHash) != len(sum) || subtle.ConstantTimeCompare(tr.PushTokenHash, sum[:]) != 1 {
		return ErrPushUnauthorized
	}
	if len(body) > MaxPushBytes {
		return fmt.Errorf("%w: push body too large", a2a.ErrMalformedResponse)
	}
	ev, err := a2a.ParsePushNotification(body)
	if err != nil {
		return err
	}
	d, err := w.store.Delegation(ctx, id)
	if err != nil {
		return err
	}
	// A push can outrun the dispatch reply (the remote pushes before it
	// answers SendMessage): the task id is not recorded yet, so the push
	// cannot be checked against it, but it still asks for a look at the
	// task — observe waits for the task id.
	if d.Remote.TaskID != "" && ev.TaskID() != d.Remote.TaskID && ev.TaskID() != "" && ev.ContextID() == DispatchContextID(d.ID) {
		// Another task in the delegation's own context: an extra task
		// (a second one created on a resend). Recorded, and canceled by
		// the observe job the push asks for.
		if err := w.recordEventTask(ctx, id, ev, "push"); err != nil {
			return err
		}
	} else if d.Remote.TaskID != "" && ev.TaskID() != d.Remote.TaskID {
		err := w.store.InTx(ctx, func(tx Tx) error {
			return record(ctx, tx, d, ledger.EventTypePushRefused, w.now(), ledger.PushRefusedData{
				Reason: "task_mismatch", PushedTaskID: text.Truncate(ev.TaskID(), 256),
			})
		})
		if err != nil {
			return err
		}
		return ErrPushTaskMismatch
	}
	now := w.now()
	err = w.store.InTx(ctx, func(tx Tx) error {
		if d.Remote.TaskID == "" {
			// The task id is not recorded yet: the push names the task
			// to confirm, should the dispatch be unknown.
			return enqueueObserveTask(ctx, tx, id, "push", text.Truncate(ev.TaskID(), 1024), now)
		}
		return enqueueObserve(ctx, tx, id, "push", now)
	})
	if err != nil {
		return err
	}
	w.Wake()
	return nil
}

// PollOnce enqueues an observe job for each dispatched task not observed for
// PollAfter, skipping orgs that are backing off, and returns how many.
func (w *Worker) PollOnce(ctx context.Context) (int, error) {
	now := w.now()
	ids, err := w.store.DelegationsToPoll(ctx, now.Add(-w.cfg.PollAfter), now, 100)
	if err != nil {
		return 0, fmt.Errorf("list tasks to poll: %w", err)
	}
	unknown, err := w.store.DelegationsDispatchUnknown(ctx, now.Add(-w.cfg.PollAfter), now, 100)
	if err != nil {
		return 0, fmt.Errorf("list dispatch_unknown delegations: %w", err)
	}
	if len(ids)+len(unknown) == 0 {
		return 0, nil
	}
	err = w.store.InTx(ctx, func(tx Tx) error {
		for _, id := range ids {
			if err := enqueueObserve(ctx, tx, id, "poll", now); err != nil {
				return err
			}
		}
		for _, id := range unknown {
			if err := enqueueObserve(ctx, tx, id, sourceDispatchLookup, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	w.Wake()
	return len(ids) + len(unknown), nil
}

// sourceDispatchLookup is the source of the observe jobs that look a
// dispatch_unknown delegation's context up again (ListTasks), every
// PollAfter, until a task is recorded.
const sourceDispatchLookup = "dispatch_unknown_lookup"

// lookUpUnknown looks the context of d, a delegation in the
// dispatch_unknown condition, up with ListTasks and resolves the
// condition with what it finds (resolveFound); finding nothing changes
// nothing. The lookup counts as an observation, so the next is PollAfter
// later.
func (w *Worker) lookUpUnknown(ctx context.Context, j Job, d ledger.Delegation) error {
	org, err := w.store.Org(ctx, d.OrgID)
	if err != nil {
		return err
	}
	markLookedUp := func(tx Tx) error { return tx.MarkObserved(ctx, d.ID, w.now()) }
	_, client, iface, err := w.agent(ctx, org)
	if err != nil {
		return w.finish(ctx, j, "agent_unavailable", markLookedUp)
	}
	msg := a2a.Message{ContextID: DispatchContextID(d.ID)}
	if err := w.linkMessage(ctx, d, &msg); err != nil {
		return err
	}
	found, outcome := w.lookupDispatch(ctx, client, d, msg.ContextID)
	return w.finish(ctx, j, "lookup_"+outcome, func(tx Tx) error {
		cur, err := tx.DelegationForUpdate(ctx, d.ID)
		if err != nil {
			return err
		}
		if err := markLookedUp(tx); err != nil {
			return err
		}
		if len(found) == 0 || cur.Remote.TaskID != "" || cur.ObligationState != ledger.ObligationHeld {
			return nil
		}
		return w.resolveFound(ctx, tx, cur, found, iface, w.now())
	})
}

// observeMaxAttempts bounds the retries of one observe job; the poller
// enqueues a fresh one later.
const observeMaxAttempts = 5

// observe fetches a delegation's task and applies its status.
func (w *Worker) observe(ctx context.Context, j Job) error {
	source, pushedTaskID := observePayload(j.Payload)
	d, err := w.store.Delegation(ctx, j.DelegationID)
	if err != nil {
		return err
	}
	if handled, err := w.observeUntracked(ctx, j, d, source, pushedTaskID); handled || err != nil {
		return err
	}
	org, err := w.store.Org(ctx, d.OrgID)
	if err != nil {
		return err
	}
	card, client, _, err := w.agent(ctx, org)
	var task a2a.Task
	if err == nil {
		task, err = client.GetTask(ctx, d.Remote.TaskID)
	}
	if errors.Is(err, a2a.ErrTaskNotFound) {
		// The agent answered, so it is not failing; it does not know the
		// task (it may have purged it): never read as an end, and the
		// same answer again is no news.
		return w.finish(ctx, j, "task_not_found", func(tx Tx) error {
			return taskNotFound(ctx, tx, d, notFoundAnswer{source: source, cause: err, attempt: j.Attempt, binding: client.Interface().Binding}, w.now())
		})
	}
	if err != nil {
		return w.observeFailed(ctx, j, d, org, err)
	}
	if task.ID != d.Remote.TaskID {
		return w.finish(ctx, j, "task_mismatch", func(tx Tx) error {
			return record(ctx, tx, d, ledger.EventTypeRemoteTaskConflict, w.now(), ledger.RemoteTaskConflictData{
				RecordedTaskID: d.Remote.TaskID, ReportedTaskID: text.Truncate(task.ID, 256), Source: source,
			})
		})
	}
	// Before the transaction: an atomic receipt on the task may make the
	// org's JWKS URL be fetched.
	if org, err = w.orgForAtomicReceipt(ctx, d, org, card, task); err != nil {
		return err
	}
	answer := taskAnswer{org: org, card: card, task: task, source: source}
	if err := w.finish(ctx, j, "observed", func(tx Tx) error { return w.recordObserved(ctx, tx, d.ID, answer) }); err != nil {
		return err
	}
	// Each observation of the delegation's task also cancels its extra
	// tasks that are not terminal yet (a cancel that failed is sent again).
	_, err = w.accountExtraTasks(ctx, client, d)
	return err
}

// observePayload reads an observe job's payload: what prompted it ("poll"
// when unnamed) and the task a push named, if any.
func observePayload(raw []byte) (source, pushedTaskID string) {
	var payload struct {
		Source string `json:"source"`
		TaskID string `json:"task_id"`
	}
	_ = json.Unmarshal(raw, &payload)
	source = payload.Source
	if source == "" {
		source = "poll"
	}
	return source, payload.TaskID
}

// observeUntracked handles an observe job of a delegation whose task id is
// not recorded: a lookup of an unknown dispatch, a pushed task to confirm,
// a wait for the dispatch reply a push outran, or nothing to observe.
// handled is false when the tracked task is to be fetched.
func (w *Worker) observeUntracked(ctx context.Context, j Job, d ledger.Delegation, source, pushedTaskID string) (handled bool, err error) {
	held := d.ObligationState == ledger.ObligationHeld
	if source == sourceDispatchLookup && d.Remote.TaskID == "" && held {
		return true, w.lookUpUnknown(ctx, j, d)
	}
	if pushedTaskID != "" && d.Remote.TaskID == "" && held {
		if done, err := w.confirmPushedTask(ctx, j, d, pushedTaskID); done || err != nil {
			return true, err
		}
	}
	if d.Remote.TaskID == "" && held && j.Attempt < observeMaxAttempts {
		// Dispatched but the task id is not recorded yet (a push outran
		// the dispatch reply): look again once it is.
		return true, w.retryAt(ctx, j, w.now().Add(w.backoff.Wait(j.Attempt)), "task id not recorded yet", nil)
	}
	if d.Remote.TaskID == "" || d.TaskStatus.Terminal() || !held {
		return true, w.finish(ctx, j, "nothing_to_observe", nil)
	}
	return false, nil
}

// recordObserved records, in tx, the task the agent returned for
// delegation id: the task_not_found condition is over, the task and any
// atomic receipt on it are recorded, and the org's failures are forgotten.
func (w *Worker) recordObserved(ctx context.Context, tx Tx, id uuid.UUID, answer taskAnswer) error {
	d, err := tx.DelegationForUpdate(ctx, id)
	if err != nil {
		return err
	}
	now := w.now()
	if err := tx.ClearTaskNotFound(ctx, d.ID); err != nil {
		return err
	}
	if err := w.recordTaskAndReceipt(ctx, tx, d, answer, now); err != nil {
		return err
	}
	return tx.Outbox().ClearOrgFailures(ctx, d.OrgID)
}

// notFoundAnswer is a TaskNotFoundError the agent answered for a
// delegation's tracked task: the call (source) and job attempt it
// answered, and whether an event is appended even for the same answer
// again (always: the call was the job's own, a cancel).
type notFoundAnswer struct {
	source  string
	cause   error
	attempt int
	always  bool
	binding string // of the call answered so
}

// taskNotFound records, in tx, that d's agent answered a.cause for d's
// tracked task: d enters the task_not_found condition, with a
// remote_task_not_found event when the answer is new (or a.always), and the
// call counts as an observation (the poller's, and d's last_observed_at).
func taskNotFound(ctx context.Context, tx Tx, d ledger.Delegation, a notFoundAnswer, now time.Time) error {
	answer := errorText(a.cause)
	changed, err := tx.SetTaskNotFound(ctx, d.ID, answer, now)
	if err != nil {
		return err
	}
	if changed || a.always {
		attempt := a.attempt
		if err := record(ctx, tx, d, ledger.EventTypeRemoteTaskNotFound, now, ledger.RemoteTaskNotFoundData{
			TaskID: d.Remote.TaskID, Source: a.source, Error: answer, Attempt: &attempt, Binding: a.binding,
		}); err != nil {
			return err
		}
	}
	if err := tx.Receipts().MarkDelegationObserved(ctx, d.ID, now); err != nil {
		return err
	}
	return tx.MarkObserved(ctx, d.ID, now)
}

// observeFailed backs the org off and retries the observe job a few times.
func (w *Worker) observeFailed(ctx context.Context, j Job, d ledger.Delegation, org ledger.Org, cause error) error {
	w.log.WarnContext(ctx, "observe remote task failed", slog.String("delegation_id", d.ID.String()),
		slog.String("org_id", org.ID), slog.Any("error", cause))
	fail := func(tx Tx) error {
		n, err := tx.Outbox().OrgFailures(ctx, org.ID)
		if err != nil {
			return err
		}
		now := w.now()
		return tx.Outbox().FailOrg(ctx, org.ID, now.Add(w.backoff.Wait(n+1)), errorText(cause), now)
	}
	if a2a.Retryable(cause) && j.Attempt < observeMaxAttempts {
		return w.retryAt(ctx, j, w.now().Add(w.backoff.Wait(j.Attempt)), errorText(cause), fail)
	}
	return w.finish(ctx, j, "observe_failed", fail)
}

// taskAnswer is a task an agent returned (fetched with GetTask, or in a
// cancel reply), with the org and card it came from and the call (source).
// org is the one to judge an atomic receipt on the task against:
// orgForAtomicReceipt's, read before the transaction began.
type taskAnswer struct {
	org    ledger.Org
	card   a2a.AgentCard
	task   a2a.Task
	source string
	// binding is the protocol binding of the call, for the events of an
	// error answer (a task notes its own).
	binding string
}

// recordTaskAndReceipt records the task a returned, as recordTask does,
// after the atomic cancel-and-compensate receipt it may carry
// (atomicReceipt, ledger/DESIGN.md §4): applied first, the receipt is kept
// as received evidence that the terminal status then applies. Whichever
// of the cancel reply, a push or a poll reaches the ledger first applies it.
func (w *Worker) recordTaskAndReceipt(ctx context.Context, tx Tx, d ledger.Delegation, a taskAnswer, now time.Time) error {
	if raw, ok := atomicReceipt(d, a.card, a.task); ok {
		if err := w.applyAtomicReceipt(ctx, tx, d, a, raw, now); err != nil {
			return err
		}
	}
	return w.recordTask(ctx, tx, d, a.task, a.source, now)
}

// atomicReceipt returns the atomic cancel-and-compensate receipt that
// recordTaskAndReceipt judges for delegation d: the compensation-receipt
// artifact of a terminal task, from an agent whose card declares
// atomicCancel, while the obligation is held.
func atomicReceipt(d ledger.Delegation, card a2a.AgentCard, task a2a.Task) (json.RawMessage, bool) {
	if _, atomic := compensationExtension(card); !atomic || !observation(task, "cancel").Status.Terminal() || d.ObligationState != ledger.ObligationHeld {
		return nil, false
	}
	return findReceipt(task.Artifacts)
}

// orgForAtomicReceipt returns the org that recordTaskAndReceipt is to
// judge the atomic receipt on a task against, if there is one: org, or,
// when the receipt's jws names a kid the org may just have rotated in at
// its JWKS URL, the org as it is after that URL was fetched
// (judgeReceipt). It is called before the transaction that records the
// task, so that no network call holds one open; the receipt is judged
// again in it.
func (w *Worker) orgForAtomicReceipt(ctx context.Context, d ledger.Delegation, org ledger.Org, card a2a.AgentCard, task a2a.Task) (ledger.Org, error) {
	if org.JWKSURL == "" || w.cfg.RefreshOrgKeysForKid == nil {
		// Nothing to fetch: judgeReceipt would judge the receipt alone,
		// as the transaction does; the task is not kept waiting for it.
		return org, nil
	}
	raw, ok := atomicReceipt(d, card, task)
	if !ok {
		return org, nil
	}
	r, err := compensation.ParseRemoteReceipt(raw)
	if err != nil {
		return org, nil // recorded as refused when the reply is applied
	}
	_, org, err = w.judgeReceipt(ctx, compensation.ReceiptInput{
		Delegation: d, Org: org, Receipt: r, LedgerID: w.cfg.LedgerID, Now: w.now(), Atomic: true,
	})
	return org, err
}

// applyAtomicReceipt judges, in tx, an atomic receipt that came with the
// task a returned and hands it to compensation.Service.ApplyRemoteReceipt.
// What proves nothing, or is refused, is recorded as receipt_refused
// (evidence_conflict for a conflict) and does not stop the task from being
// recorded.
func (w *Worker) applyAtomicReceipt(ctx context.Context, tx Tx, d ledger.Delegation, a taskAnswer, raw []byte, now time.Time) error {
	r, err := compensation.ParseRemoteReceipt(raw)
	verdict := compensation.ReceiptVerdict{}
	if err == nil {
		verdict = compensation.JudgeReceipt(compensation.ReceiptInput{
			Delegation: d, Org: a.org, Receipt: r, LedgerID: w.cfg.LedgerID, Now: now, Atomic: true,
		})
	} else {
		verdict.Problem = text.Truncate(err.Error(), 500)
	}
	if verdict.Event == "" {
		return record(ctx, tx, d, ledger.EventTypeReceiptRefused, now, ledger.ReceiptRefusedData{
			Source: a.source, Problem: verdict.Problem,
		})
	}
	_, err = w.cfg.Compensation.ApplyRemoteReceipt(ctx, tx.Receipts(), d, compensation.JudgedReceipt{Receipt: r, Verdict: verdict},
		ledger.ChannelAtomicCancel, compensation.Stamp{Actor: workerActor, At: now})
	var ref *compensation.RefusalError
	if errors.As(err, &ref) {
		// ApplyEvidence refuses before it writes: the transaction goes on.
		ev := compensation.ReceiptEvidence(r, verdict, ledger.ChannelAtomicCancel, workerActor)
		return compensation.RecordRefusedEvidence(ctx, tx, d, ev, ref, now)
	}
	return err
}

// enqueueObserve queues, in tx, a fetch of the delegation's remote task,
// naming what prompted it (push, poll, stream_reconnect, cancel_refused).
func enqueueObserve(ctx context.Context, tx outboundQueue, id uuid.UUID, source string, now time.Time) error {
	return enqueueObserveTask(ctx, tx, id, source, "", now)
}

// enqueueObserveTask is enqueueObserve naming the task a push was about,
// for a delegation whose task id is not recorded yet ("" for none). An
// observe job already open keeps its own payload.
func enqueueObserveTask(ctx context.Context, tx outboundQueue, id uuid.UUID, source, taskID string, now time.Time) error {
	m := map[string]string{"source": source}
	if taskID != "" {
		m["task_id"] = taskID
	}
	payload, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return tx.EnqueueOutbound(ctx, ledger.OutboundJob{
		DelegationID: id, Kind: ledger.OutboundObserve, Payload: payload, RunAfter: now, At: now,
	})
}

// findReceipt returns the data of the last compensation-receipt
// artifact's data part: an agent that first answered pending appends the
// final receipt after it.
func findReceipt(artifacts []a2a.Artifact) (json.RawMessage, bool) {
	var (
		found json.RawMessage
		ok    bool
	)
	for _, a := range artifacts {
		if a.Name != compensation.ReceiptArtifactName && a.ArtifactID != compensation.ReceiptArtifactName {
			continue
		}
		for _, p := range a.Parts {
			if p.Data != nil {
				found, ok = p.Data, true
				break
			}
		}
	}
	return found, ok
}

// superviseStreams starts a stream for each dispatched task whose agent
// streams and that no replica streams yet (a PostgreSQL advisory lock per
// delegation decides), up to MaxStreams on this replica.
func (w *Worker) superviseStreams(ctx context.Context) error {
	ids, err := w.store.DelegationsToStream(ctx, 200)
	if err != nil {
		return err
	}
	for _, id := range ids {
		w.mu.Lock()
		busy, full := w.streams[id], len(w.streams) >= w.cfg.MaxStreams
		w.mu.Unlock()
		if busy {
			continue
		}
		if full {
			return nil
		}
		d, err := w.store.Delegation(ctx, id)
		if err != nil {
			return err
		}
		org, err := w.store.Org(ctx, d.OrgID)
		if err != nil {
			return err
		}
		card, client, _, err := w.agent(ctx, org)
		if err != nil || !card.Streaming {
			continue
		}
		unlock, ok, err := w.store.TryLock(ctx, "quittance/a2a-stream:"+id.String())
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		w.mu.Lock()
		w.streams[id] = true
		w.mu.Unlock()
		w.running.Go(func() {
			defer func() {
				unlock()
				w.mu.Lock()
				delete(w.streams, id)
				w.mu.Unlock()
			}()
			if p, ok := panics.As(panics.Recover(func() error { w.stream(ctx, id, client); return nil })); ok {
				w.panicked(PanicStream, p, slog.String("delegation_id", id.String()))
			}
		})
	}
	return nil
}

// stream follows one task's updates until it is terminal or ctx ends,
// reconnecting with backoff after each drop. Each drop also enqueues an
// observe job, so an update missed while disconnected is still seen.
func (w *Worker) stream(ctx context.Context, id uuid.UUID, client *a2a.Client) {
	for attempt := 1; ctx.Err() == nil; attempt++ {
		d, err := w.store.Delegation(ctx, id)
		if err != nil || d.Remote.TaskID == "" || d.TaskStatus.Terminal() || d.ObligationState != ledger.ObligationHeld {
			return
		}
		applied, ended := w.followStream(ctx, d, client)
		if applied {
			attempt = 1
		}
		if ended || ctx.Err() != nil {
			return
		}
		now := w.now()
		if err := w.store.InTx(ctx, func(tx Tx) error {
			return enqueueObserve(ctx, tx, id, "stream_reconnect", now)
		}); err != nil {
			w.log.ErrorContext(ctx, "enqueue observe after stream drop failed", slog.String("delegation_id", id.String()), slog.Any("error", err))
		}
		w.Wake()
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.backoff.Wait(attempt)):
		}
	}
}

// followStream applies the events of one subscription to d's task until
// the stream drops, or the task is terminal (ended). applied says a status
// was applied, so the stream is working.
func (w *Worker) followStream(ctx context.Context, d ledger.Delegation, client *a2a.Client) (applied, ended bool) {
	id := d.ID
	for ev, err := range client.Subscribe(ctx, d.Remote.TaskID) {
		if err != nil {
			w.log.InfoContext(ctx, "task stream ended", slog.String("delegation_id", id.String()), slog.Any("error", err))
			break
		}
		var status *a2a.TaskStatus
		switch {
		case ev.TaskID() != d.Remote.TaskID:
			if ev.ContextID() == DispatchContextID(id) {
				w.recordEventTask(ctx, id, ev, "stream")
			}
			continue
		case ev.Task != nil:
			status = &ev.Task.Status
		case ev.StatusUpdate != nil:
			status = &ev.StatusUpdate.Status
		case ev.ArtifactUpdate != nil:
			w.applyStreamedArtifact(ctx, id, *ev.ArtifactUpdate)
			continue
		default:
			continue
		}
		applied = true
		if w.applyStreamedEnd(ctx, d.ID, *status) {
			return applied, true
		}
		after, err := w.applyStreamedStatus(ctx, d, ev, *status, client.Interface().Binding)
		if err != nil {
			w.log.ErrorContext(ctx, "record streamed status failed", slog.String("delegation_id", id.String()), slog.Any("error", err))
			break
		}
		if after.TaskStatus.Terminal() {
			return applied, true
		}
	}
	return applied, false
}

// applyStreamedEnd applies a terminal status the stream reported for the
// task of delegation id as the task GetTask returns, when the agent's card
// declares atomicCancel and the obligation is held: a status update carries
// no artifacts, and the atomic receipt such an agent keeps on the canceled
// task must be read with the status (recordTaskAndReceipt), or the
// obligation would leave held without it and the receipt in the cancel
// reply, arriving after, would no longer be read. So whichever of the
// stream, the cancel reply, a push or a poll reaches the ledger first, the
// receipt applies. It returns false when it applied nothing (another
// status, another agent, an obligation no longer held, or a task that could
// not be fetched or is not terminal yet): the streamed status is applied as
// it came then.
func (w *Worker) applyStreamedEnd(ctx context.Context, id uuid.UUID, status a2a.TaskStatus) bool {
	if !taskStatus(status.State).Terminal() {
		return false
	}
	d, err := w.store.Delegation(ctx, id)
	if err != nil || d.ObligationState != ledger.ObligationHeld || d.Remote.TaskID == "" {
		return false
	}
	org, err := w.store.Org(ctx, d.OrgID)
	if err != nil {
		return false
	}
	card, client, _, err := w.agent(ctx, org)
	if err != nil {
		return false
	}
	if _, atomic := compensationExtension(card); !atomic {
		return false
	}
	task, err := client.GetTask(ctx, d.Remote.TaskID)
	if err != nil || task.ID != d.Remote.TaskID || !taskStatus(task.Status.State).Terminal() {
		return false
	}
	// Before the transaction: the receipt may make the org's JWKS URL be
	// fetched.
	if org, err = w.orgForAtomicReceipt(ctx, d, org, card, task); err != nil {
		return false
	}
	answer := taskAnswer{org: org, card: card, task: task, source: "stream"}
	if err := w.store.InTx(ctx, func(tx Tx) error { return w.recordObserved(ctx, tx, id, answer) }); err != nil {
		w.log.ErrorContext(ctx, "record streamed task end failed", slog.String("delegation_id", id.String()), slog.Any("error", err))
		return false
	}
	return true
}

// applyStreamedArtifact applies an artifact chunk to the task snapshot, in
// the order the stream delivers them.
func (w *Worker) applyStreamedArtifact(ctx context.Context, id uuid.UUID, u a2a.ArtifactUpdate) {
	if err := w.store.InTx(ctx, func(tx Tx) error {
		return w.putSnapshot(ctx, tx, id, func(s TaskSnapshot) TaskSnapshot {
			return s.ApplyArtifactUpdate(u, "stream", w.now(), w.cfg.Snapshot)
		})
	}); err != nil {
		w.log.ErrorContext(ctx, "record streamed artifact failed", slog.String("delegation_id", id.String()), slog.Any("error", err))
	}
}

// applyStreamedStatus records a task or status update of d's task from the
// stream: its snapshot, and the status as an observation
// (compensation.Service.ObserveTaskStatus), read over binding. It returns
// the delegation after.
func (w *Worker) applyStreamedStatus(ctx context.Context, d ledger.Delegation, ev a2a.StreamEvent, status a2a.TaskStatus, binding string) (ledger.Delegation, error) {
	var after ledger.Delegation
	err := w.store.InTx(ctx, func(tx Tx) error {
		cur, err := tx.DelegationForUpdate(ctx, d.ID)
		if err != nil {
			return err
		}
		now := w.now()
		if err := w.putSnapshot(ctx, tx, d.ID, func(s TaskSnapshot) TaskSnapshot {
			if ev.Task != nil {
				return s.ApplyTask(*ev.Task, "stream", now, w.cfg.Snapshot)
			}
			return s.ApplyStatus(*ev.StatusUpdate, "stream", now)
		}); err != nil {
			return err
		}
		obs := observation(a2a.Task{ID: d.Remote.TaskID, Status: status, Binding: binding}, "stream")
		after, err = w.cfg.Compensation.ObserveTaskStatus(ctx, tx.Receipts(), cur, obs, workerActor, now)
		if err != nil {
			return err
		}
		return tx.MarkObserved(ctx, d.ID, now)
	})
	return after, err
}

// recordEventTask records the task a push or stream event names, in the
// delegation's own context, as an extra task of delegation id.
func (w *Worker) recordEventTask(ctx context.Context, id uuid.UUID, ev a2a.StreamEvent, source string) error {
	t := a2a.Task{ID: ev.TaskID(), ContextID: ev.ContextID(), Status: a2a.TaskStatus{State: a2a.TaskStateUnknown}}
	switch {
	case ev.Task != nil:
		t = *ev.Task
	case ev.StatusUpdate != nil:
		t.Status = ev.StatusUpdate.Status
	}
	err := w.store.InTx(ctx, func(tx Tx) error {
		d, err := tx.DelegationForUpdate(ctx, id)
		if err != nil {
			return err
		}
		_, err = w.recordExtraTasks(ctx, tx, d, []a2a.Task{t}, source, w.now())
		return err
	})
	if err != nil {
		w.log.ErrorContext(ctx, "record extra remote task failed", slog.String("delegation_id", id.String()), slog.Any("error", err))
	}
	return err
}

// confirmPushedTask resolves the dispatch_unknown condition of d with the
// task a push named, once GetTask confirms it is d's: in d's own context,
// or with d's dispatch messageId in its history (dispatch_resolved,
// found_by push). The push is only a hint; the agent's answer to GetTask is
// what is recorded; a task that is not d's is recorded as push_refused.
// done is false when the job should go on as usual: the task could not be
// fetched, or the delegation is not in the condition (its dispatch is still
// under way and will record the task).
func (w *Worker) confirmPushedTask(ctx context.Context, j Job, d ledger.Delegation, taskID string) (done bool, err error) {
	org, err := w.store.Org(ctx, d.OrgID)
	if err != nil {
		return true, err
	}
	_, client, iface, err := w.agent(ctx, org)
	var task a2a.Task
	if err == nil {
		task, err = client.GetTask(ctx, taskID)
	}
	if err != nil || task.ID != taskID {
		return false, nil
	}
	if dispatchTaskProof(d, task) == "" {
		// Not the delegation's task: nothing to wait for.
		return true, w.finish(ctx, j, "push_task_not_ours", func(tx Tx) error {
			return record(ctx, tx, d, ledger.EventTypePushRefused, w.now(), ledger.PushRefusedData{
				Reason: "task_not_delegations", PushedTaskID: text.Truncate(task.ID, 256),
				PushedContextID: ptr(text.Truncate(task.ContextID, 256)),
			})
		})
	}
	err = w.finish(ctx, j, "resolved_by_push", func(tx Tx) error {
		cur, err := tx.DelegationForUpdate(ctx, d.ID)
		if err != nil {
			return err
		}
		if cur.Remote.TaskID != "" || cur.ObligationState != ledger.ObligationHeld {
			return nil
		}
		now := w.now()
		if taken, err := remoteTaskTaken(ctx, tx, cur, task.ID, "push"); err != nil {
			return err
		} else if taken != nil {
			return record(ctx, tx, cur, ledger.EventTypeRemoteTaskConflict, now, *taken)
		}
		cur.Remote.ProtocolVersion = iface.ProtocolVersion
		cur, err = resolveDispatchTx(ctx, tx, cur, task, ledger.DispatchResolvedData{
			FoundBy: "push", Reason: "a push named the task; GetTask confirmed it is the delegation's",
			ProvenBy: dispatchTaskProof(cur, task),
		}, compensation.Stamp{Actor: workerActor, At: now})
		if err != nil {
			return err
		}
		return w.recordTask(ctx, tx, cur, task, "push", now)
	})
	if errors.Is(err, ledger.ErrConflict) {
		return false, nil // not dispatch_unknown: the dispatch records its task
	}
	return true, err
}
