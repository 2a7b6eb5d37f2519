package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/webhook"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// The orchestrator's tables (migration 00004): links, follow-up messages,
// task snapshots, the commit-ordered event feed, and the webhook outbox.

var (
	_ ledger.Feed   = (*Store)(nil)
	_ webhook.Store = webhookStore{}
)

func (r reader) DelegationLinks(ctx context.Context, id uuid.UUID) ([]ledger.DelegationLink, error) {
	from, err := r.q.LinkListFrom(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list links of delegation %s: %w", id, err)
	}
	to, err := r.q.LinkListTo(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list links to delegation %s: %w", id, err)
	}
	out := make([]ledger.DelegationLink, 0, len(from)+len(to))
	for _, l := range from {
		out = append(out, ledger.DelegationLink{From: l.DelegationID, To: l.LinkedID, Kind: ledger.LinkKind(l.Kind)})
	}
	for _, l := range to {
		out = append(out, ledger.DelegationLink{From: l.DelegationID, To: l.LinkedID, Kind: ledger.LinkKind(l.Kind)})
	}
	return out, nil
}

func (t *tx) InsertDelegationLink(ctx context.Context, l ledger.DelegationLink, at time.Time) error {
	if err := t.q.LinkInsert(ctx, dbsqlc.LinkInsertParams{DelegationID: l.From, LinkedID: l.To, Kind: string(l.Kind), Now: at}); err != nil {
		return fmt.Errorf("insert %s link %s -> %s: %w", l.Kind, l.From, l.To, err)
	}
	return nil
}

func toFollowUp(r dbsqlc.DelegationMessage) delegate.FollowUp {
	return delegate.FollowUp{
		DelegationID: r.DelegationID, MessageID: r.MessageID, A2AMessageID: r.A2aMessageID, RequestHash: r.RequestHash,
		Payload: r.Payload, Status: r.Status, Attempts: int(r.Attempts), Error: deref(r.Error),
		ResultState: ledger.TaskStatus(deref(r.ResultState)), CreatedAt: r.CreatedAt, SentAt: derefTime(r.SentAt),
	}
}

func (r reader) FollowUp(ctx context.Context, id uuid.UUID, messageID string) (delegate.FollowUp, error) {
	row, err := r.q.FollowUpGet(ctx, dbsqlc.FollowUpGetParams{DelegationID: id, MessageID: messageID})
	if err != nil {
		return delegate.FollowUp{}, notFound(err, "message", messageID)
	}
	return toFollowUp(row), nil
}

func (r reader) QueuedFollowUps(ctx context.Context, id uuid.UUID) ([]delegate.FollowUp, error) {
	rows, err := r.q.FollowUpListQueued(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list queued messages of delegation %s: %w", id, err)
	}
	out := make([]delegate.FollowUp, len(rows))
	for i, row := range rows {
		out[i] = toFollowUp(row)
	}
	return out, nil
}

func (t *tx) InsertFollowUp(ctx context.Context, m delegate.FollowUp) error {
	n, err := t.q.FollowUpInsert(ctx, dbsqlc.FollowUpInsertParams{
		DelegationID: m.DelegationID, MessageID: m.MessageID, A2aMessageID: m.A2AMessageID,
		RequestHash: m.RequestHash, Payload: m.Payload, Now: m.CreatedAt,
	})
	if err != nil {
		return fmt.Errorf("queue message %s: %w", m.MessageID, err)
	}
	if n != 1 {
		return fmt.Errorf("queue message %s: %w", m.MessageID, ledger.ErrConcurrentUpdate)
	}
	return nil
}

func (t *tx) FinishFollowUp(ctx context.Context, m delegate.FollowUp, now time.Time) error {
	err := t.q.FollowUpFinish(ctx, dbsqlc.FollowUpFinishParams{
		Status: m.Status, Error: optional(m.Error), ResultState: optional(string(m.ResultState)), Now: now,
		DelegationID: m.DelegationID, MessageID: m.MessageID,
	})
	if err != nil {
		return fmt.Errorf("finish message %s: %w", m.MessageID, err)
	}
	return nil
}

func (t *tx) AttemptFollowUp(ctx context.Context, m delegate.FollowUp, problem string, now time.Time) error {
	err := t.q.FollowUpAttempt(ctx, dbsqlc.FollowUpAttemptParams{Error: optional(problem), Now: now, DelegationID: m.DelegationID, MessageID: m.MessageID})
	if err != nil {
		return fmt.Errorf("record attempt of message %s: %w", m.MessageID, err)
	}
	return nil
}

func decodeSnapshot(raw []byte) (delegate.TaskSnapshot, error) {
	var s delegate.TaskSnapshot
	if err := json.Unmarshal(raw, &s); err != nil {
		return delegate.TaskSnapshot{}, fmt.Errorf("decode task snapshot: %w", err)
	}
	return s, nil
}

func (r reader) TaskSnapshot(ctx context.Context, id uuid.UUID) (delegate.TaskSnapshot, error) {
	row, err := r.q.TaskSnapshotGet(ctx, id)
	if err != nil {
		return delegate.TaskSnapshot{}, notFound(err, "task snapshot of delegation", id)
	}
	return decodeSnapshot(row.Snapshot)
}

func (t *tx) TaskSnapshotForUpdate(ctx context.Context, id uuid.UUID) (delegate.TaskSnapshot, error) {
	row, err := t.q.TaskSnapshotGetForUpdate(ctx, id)
	if err != nil {
		return delegate.TaskSnapshot{}, notFound(err, "task snapshot of delegation", id)
	}
	return decodeSnapshot(row.Snapshot)
}

func (t *tx) PutTaskSnapshot(ctx context.Context, id uuid.UUID, s delegate.TaskSnapshot, now time.Time) error {
	raw, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode task snapshot: %w", err)
	}
	if err := t.q.TaskSnapshotPut(ctx, dbsqlc.TaskSnapshotPutParams{DelegationID: id, Snapshot: raw, Now: now}); err != nil {
		return fmt.Errorf("store task snapshot of delegation %s: %w", id, err)
	}
	return nil
}

// FeedEvents returns events after a commit-ordered position.
func (s *Store) FeedEvents(ctx context.Context, f ledger.FeedQuery) ([]ledger.FeedEvent, error) {
	p := dbsqlc.FeedListParams{AfterPos: f.AfterPosition, Tenant: optional(f.Tenant), MaxRows: int32(f.Limit)}
	if f.DelegationID != uuid.Nil {
		p.DelegationID = uuid.NullUUID{UUID: f.DelegationID, Valid: true}
	}
	rows, err := s.q.FeedList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("read event feed: %w", err)
	}
	out := make([]ledger.FeedEvent, len(rows))
	for i, r := range rows {
		out[i] = ledger.FeedEvent{Position: r.Pos, Event: toEvent(r.Event)}
	}
	return out, nil
}

// FeedPosition returns the commit-ordered position of event seq.
func (s *Store) FeedPosition(ctx context.Context, seq int64) (int64, error) {
	pos, err := s.q.FeedPositionOf(ctx, seq)
	if err != nil {
		return 0, notFound(err, "event", seq)
	}
	return pos, nil
}

// FeedHead returns the highest committed position.
func (s *Store) FeedHead(ctx context.Context) (int64, error) {
	pos, err := s.q.FeedHead(ctx)
	if err != nil {
		return 0, fmt.Errorf("read event feed head: %w", err)
	}
	return pos, nil
}

// FeedWake subscribes to commits of new events: one LISTEN connection per
// Store, opened while anyone subscribes, fans the notifications
// (quittance_events, sent by the position trigger at commit) out to every
// subscriber. It only wakes readers; it buffers no events.
func (s *Store) FeedWake() (<-chan struct{}, func()) {
	return s.listener().subscribe()
}

func (s *Store) listener() *listener {
	s.listenOnce.Do(func() { s.listen = &listener{store: s, subs: map[int]chan struct{}{}} })
	return s.listen
}

// listener holds the LISTEN connection of a Store.
type listener struct {
	store *Store

	mu     sync.Mutex
	subs   map[int]chan struct{}
	next   int
	cancel context.CancelFunc
	done   chan struct{}
}

func (l *listener) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	id := l.next
	l.next++
	l.subs[id] = ch
	if l.cancel == nil {
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go l.run(ctx, l.done)
	}
	l.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			l.mu.Lock()
			delete(l.subs, id)
			var done chan struct{}
			if len(l.subs) == 0 && l.cancel != nil {
				l.cancel()
				l.cancel, done = nil, l.done
			}
			l.mu.Unlock()
			if done != nil {
				<-done
			}
		})
	}
}

func (l *listener) broadcast() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ch := range l.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// run keeps a LISTEN connection open until ctx ends, reconnecting after
// failures; after each (re)connect it wakes everyone, since notifications
// sent while disconnected are lost.
func (l *listener) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	for wait := 100 * time.Millisecond; ctx.Err() == nil; wait = min(wait*2, 5*time.Second) {
		if err := l.listenOnce(ctx); err != nil && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}
}

func (l *listener) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.store.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN quittance_events"); err != nil {
		return err
	}
	l.broadcast()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		l.broadcast()
	}
}

// Webhooks returns the store as the webhook service's Store.
func (s *Store) Webhooks() webhook.Store { return webhookStore{s} }

// webhookStore adapts Store to webhook.Store.
type webhookStore struct{ *Store }

func toEndpoint(r dbsqlc.WebhookEndpoint) webhook.Endpoint {
	return webhook.Endpoint{Tenant: r.Tenant, ID: r.ID, URL: r.Url, EventTypes: r.EventTypes, Secret: r.Secret, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

func toDelivery(r dbsqlc.WebhookDelivery) webhook.Delivery {
	return webhook.Delivery{
		ID: r.ID, Tenant: r.Tenant, EndpointID: r.EndpointID, EventSeq: r.EventSeq, Status: r.Status, Attempts: int(r.Attempts),
		NextAttemptAt: r.NextAttemptAt, LastStatus: int(r.LastStatus.Int32), LastError: deref(r.LastError),
		CreatedAt: r.CreatedAt, DeliveredAt: derefTime(r.DeliveredAt), LeaseToken: deref(r.LeaseToken),
	}
}

func (w webhookStore) PutEndpoint(ctx context.Context, e webhook.Endpoint, now time.Time) (webhook.Endpoint, bool, error) {
	row, err := w.q.WebhookEndpointUpsert(ctx, dbsqlc.WebhookEndpointUpsertParams{
		Tenant: e.Tenant, ID: e.ID, Url: e.URL, EventTypes: e.EventTypes, Secret: e.Secret, Now: now,
	})
	if err != nil {
		return webhook.Endpoint{}, false, fmt.Errorf("store webhook endpoint %s: %w", e.ID, err)
	}
	return toEndpoint(dbsqlc.WebhookEndpoint{
		Tenant: row.Tenant, ID: row.ID, Url: row.Url, EventTypes: row.EventTypes, Secret: row.Secret, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt,
	}), row.Inserted, nil
}

func (w webhookStore) Endpoint(ctx context.Context, tenant, id string) (webhook.Endpoint, error) {
	row, err := w.q.WebhookEndpointGet(ctx, dbsqlc.WebhookEndpointGetParams{Tenant: tenant, ID: id})
	if err != nil {
		return webhook.Endpoint{}, notFound(err, "webhook endpoint", id)
	}
	return toEndpoint(row), nil
}

func (w webhookStore) Deliveries(ctx context.Context, f webhook.DeliveryFilter) ([]webhook.Delivery, error) {
	p := dbsqlc.WebhookDeliveryListParams{Tenant: f.Tenant, EndpointID: f.EndpointID, Status: optional(f.Status), MaxRows: int32(f.Limit)}
	if f.Before > 0 {
		p.BeforeID = pgtype.Int8{Int64: f.Before, Valid: true}
	}
	rows, err := w.q.WebhookDeliveryList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list webhook deliveries: %w", err)
	}
	out := make([]webhook.Delivery, len(rows))
	for i, r := range rows {
		out[i] = toDelivery(r)
	}
	return out, nil
}

func (w webhookStore) Redrive(ctx context.Context, tenant, endpointID string, now time.Time) (int, error) {
	var n int64
	err := w.InTx(ctx, func(t ledger.Tx) error {
		q := t.(*tx).q
		var err error
		n, err = q.WebhookDeliveryRedrive(ctx, dbsqlc.WebhookDeliveryRedriveParams{Now: now, Tenant: optional(tenant), EndpointID: optional(endpointID)})
		if err != nil {
			return err
		}
		_, err = q.WebhookDeliveryDueNow(ctx, dbsqlc.WebhookDeliveryDueNowParams{Now: now, Tenant: optional(tenant), EndpointID: optional(endpointID)})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("redrive webhook deliveries: %w", err)
	}
	return int(n), nil
}

func (w webhookStore) ClaimDeliveries(ctx context.Context, now, leaseUntil time.Time, leaseToken string, limit int) ([]webhook.Delivery, error) {
	rows, err := w.q.WebhookDeliveryClaim(ctx, dbsqlc.WebhookDeliveryClaimParams{
		Now: now, MaxRows: int32(limit), LeaseUntil: &leaseUntil, LeaseToken: &leaseToken,
	})
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", err)
	}
	out := make([]webhook.Delivery, len(rows))
	for i, r := range rows {
		out[i] = toDelivery(r)
	}
	return out, nil
}

func (w webhookStore) DeliveryDone(ctx context.Context, d webhook.Delivery, httpStatus int, now time.Time) error {
	n, err := w.q.WebhookDeliveryDone(ctx, dbsqlc.WebhookDeliveryDoneParams{
		LastStatus: pgtype.Int4{Int32: int32(httpStatus), Valid: httpStatus != 0}, Now: &now, ID: d.ID, LeaseToken: &d.LeaseToken,
	})
	if err != nil {
		return fmt.Errorf("finish webhook delivery %d: %w", d.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("finish webhook delivery %d: %w", d.ID, webhook.ErrLeaseLost)
	}
	return nil
}

func (w webhookStore) DeliveryFailed(ctx context.Context, d webhook.Delivery, dead bool, next time.Time, httpStatus int, problem string, now time.Time) error {
	n, err := w.q.WebhookDeliveryFail(ctx, dbsqlc.WebhookDeliveryFailParams{
		Dead: dead, NextAttemptAt: next, LastStatus: pgtype.Int4{Int32: int32(httpStatus), Valid: httpStatus != 0},
		LastError: optional(problem), Now: now, ID: d.ID, LeaseToken: &d.LeaseToken,
	})
	if err != nil {
		return fmt.Errorf("reschedule webhook delivery %d: %w", d.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("reschedule webhook delivery %d: %w", d.ID, webhook.ErrLeaseLost)
	}
	return nil
}

func (w webhookStore) Event(ctx context.Context, seq int64) (ledger.Event, error) {
	row, err := w.q.EventGetBySeq(ctx, seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Event{}, fmt.Errorf("event %d: %w", seq, ledger.ErrNotFound)
	}
	if err != nil {
		return ledger.Event{}, fmt.Errorf("load event %d: %w", seq, err)
	}
	return toEvent(row), nil
}
