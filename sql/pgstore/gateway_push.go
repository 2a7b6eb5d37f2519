package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/quittance/quittance/ledger/webhook"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// PutPushConfig counts the delegation's other configs and writes this one
// in a transaction of its own, under a transaction lock of the
// delegation's configs, so that two registrations at once cannot both
// take the last place; and queues a push of the task as it stands to it.
func (w webhookStore) PutPushConfig(ctx context.Context, c webhook.PushConfig, limit int, now time.Time) (webhook.PushConfig, error) {
	var out webhook.PushConfig
	err := w.inTxAlone(ctx, func(t *tx) error {
		if err := t.q.AdvisoryXactLock(ctx, "gateway_push:"+c.DelegationID.String()); err != nil {
			return err
		}
		n, err := t.q.GatewayPushConfigCount(ctx, dbsqlc.GatewayPushConfigCountParams{DelegationID: c.DelegationID, ID: c.ID})
		if err != nil {
			return err
		}
		if int(n) >= limit {
			return webhook.ErrPushConfigLimit
		}
		row, err := t.q.GatewayPushConfigUpsert(ctx, dbsqlc.GatewayPushConfigUpsertParams{
			DelegationID: c.DelegationID, ID: c.ID, Tenant: c.Tenant, Url: c.URL, Token: c.Token,
			AuthScheme: optional(c.AuthScheme), AuthCredentials: optional(c.AuthCredentials), ProtocolVersion: c.ProtocolVersion, Now: now,
		})
		if err != nil {
			return err
		}
		out = toPushConfig(row)
		return t.q.GatewayPushQueueCurrent(ctx, dbsqlc.GatewayPushQueueCurrentParams{
			Tenant: c.Tenant, DelegationID: c.DelegationID, ID: c.ID, Now: now,
		})
	})
	if err != nil {
		return webhook.PushConfig{}, fmt.Errorf("store push config %s of %s: %w", c.ID, c.DelegationID, err)
	}
	return out, nil
}

func (w webhookStore) PushConfig(ctx context.Context, delegationID uuid.UUID, id string) (webhook.PushConfig, error) {
	row, err := w.q.GatewayPushConfigGet(ctx, dbsqlc.GatewayPushConfigGetParams{DelegationID: delegationID, ID: id})
	if err != nil {
		return webhook.PushConfig{}, notFound(err, "push config", id)
	}
	return toPushConfig(row), nil
}

func (w webhookStore) PushConfigs(ctx context.Context, delegationID uuid.UUID) ([]webhook.PushConfig, error) {
	rows, err := w.q.GatewayPushConfigList(ctx, delegationID)
	if err != nil {
		return nil, fmt.Errorf("list push configs of %s: %w", delegationID, err)
	}
	out := make([]webhook.PushConfig, len(rows))
	for i, r := range rows {
		out[i] = toPushConfig(r)
	}
	return out, nil
}

func (w webhookStore) DeletePushConfig(ctx context.Context, tenant string, delegationID uuid.UUID, id string) error {
	if _, err := w.q.GatewayPushConfigDelete(ctx, dbsqlc.GatewayPushConfigDeleteParams{Tenant: tenant, DelegationID: delegationID, ID: id}); err != nil {
		return fmt.Errorf("delete push config %s of %s: %w", id, delegationID, err)
	}
	return nil
}

func (w webhookStore) PendingPushes(ctx context.Context, d webhook.Delivery) ([]int64, error) {
	ids, err := w.q.GatewayPushPending(ctx, dbsqlc.GatewayPushPendingParams{
		DelegationID: uuid.NullUUID{UUID: d.PushDelegationID, Valid: true}, ID: &d.PushConfigID, ClaimedID: d.ID,
	})
	if err != nil {
		return nil, fmt.Errorf("read pending pushes besides delivery %d: %w", d.ID, err)
	}
	return ids, nil
}

func (w webhookStore) SupersedePushes(ctx context.Context, ids []int64, httpStatus int, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := w.q.GatewayPushSupersede(ctx, dbsqlc.GatewayPushSupersedeParams{
		LastStatus: pgtype.Int4{Int32: int32(httpStatus), Valid: httpStatus != 0}, Now: &now, Ids: ids,
	})
	if err != nil {
		return fmt.Errorf("supersede pushes %v: %w", ids, err)
	}
	return nil
}

func toPushConfig(r dbsqlc.GatewayPushConfig) webhook.PushConfig {
	return webhook.PushConfig{
		Tenant: r.Tenant, DelegationID: r.DelegationID, ID: r.ID, URL: r.Url, Token: r.Token,
		AuthScheme: deref(r.AuthScheme), AuthCredentials: deref(r.AuthCredentials), ProtocolVersion: r.ProtocolVersion,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}
