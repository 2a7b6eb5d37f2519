package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/webhook"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

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
	p := dbsqlc.WebhookDeliveryListParams{Tenant: f.Tenant, EndpointID: &f.EndpointID, Status: optional(f.Status), MaxRows: int32(f.Limit)}
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

func (w webhookStore) Redrive(ctx context.Context, tenant, endpointID string, now time.Time, record func(tx ledger.EventAppender, redriven int) error) (int, error) {
	var n int64
	err := w.inTx(ctx, func(t *tx) error {
		q := t.q
		var err error
		n, err = q.WebhookDeliveryRedrive(ctx, dbsqlc.WebhookDeliveryRedriveParams{Now: now, Tenant: optional(tenant), EndpointID: optional(endpointID)})
		if err != nil {
			return err
		}
		if _, err = q.WebhookDeliveryDueNow(ctx, dbsqlc.WebhookDeliveryDueNowParams{Now: now, Tenant: optional(tenant), EndpointID: optional(endpointID)}); err != nil {
			return err
		}
		return record(t, int(n))
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

func (w webhookStore) DeliveryFailed(ctx context.Context, d webhook.Delivery, f webhook.Failure, now time.Time) error {
	n, err := w.q.WebhookDeliveryFail(ctx, dbsqlc.WebhookDeliveryFailParams{
		Dead: f.Dead, NextAttemptAt: f.Next, LastStatus: pgtype.Int4{Int32: int32(f.HTTPStatus), Valid: f.HTTPStatus != 0},
		LastError: optional(f.Problem), Now: now, ID: d.ID, LeaseToken: &d.LeaseToken,
	})
	if err != nil {
		return fmt.Errorf("reschedule webhook delivery %d: %w", d.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("reschedule webhook delivery %d: %w", d.ID, webhook.ErrLeaseLost)
	}
	return nil
}

func toEndpoint(r dbsqlc.WebhookEndpoint) webhook.Endpoint {
	return webhook.Endpoint{Tenant: r.Tenant, ID: r.ID, URL: r.Url, EventTypes: r.EventTypes, Secret: r.Secret, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

func toDelivery(r dbsqlc.WebhookDelivery) webhook.Delivery {
	return webhook.Delivery{
		ID: r.ID, Tenant: r.Tenant, EndpointID: deref(r.EndpointID), PushDelegationID: r.PushDelegationID.UUID, PushConfigID: deref(r.PushConfigID),
		EventSeq: r.EventSeq, Status: r.Status, Attempts: int(r.Attempts),
		NextAttemptAt: r.NextAttemptAt, LastStatus: int(r.LastStatus.Int32), LastError: deref(r.LastError),
		CreatedAt: r.CreatedAt, DeliveredAt: derefTime(r.DeliveredAt), LeaseToken: deref(r.LeaseToken),
	}
}
