-- +goose Up

-- The A2A gateway's push notification configs
-- (cmd/quittance/internal/gateway/GATEWAY.md, "Push notifications"): an
-- orchestrator's URL that receives its task (a delegation of its tenant)
-- each time the task changes. token and auth_credentials are the
-- orchestrator's secrets, kept as webhook_endpoints keeps its signing
-- secret: shown once, in the answer that registered them, never again and
-- never logged. At most 10 per delegation, checked by the store under a
-- lock of the delegation's. protocol_version is the A2A version of the
-- interface that registered the config, which its pushes speak: 1.0's
-- StreamResponse with A2A-Notification-Token, or 0.3's task with
-- X-A2A-Notification-Token.
CREATE TABLE gateway_push_configs (
    delegation_id    uuid        NOT NULL REFERENCES delegations (id),
    id               text        NOT NULL CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'),
    tenant           text        NOT NULL,
    url              text        NOT NULL CHECK (length(url) <= 2048),
    token            text        NOT NULL CHECK (length(token) BETWEEN 1 AND 512),
    auth_scheme      text        CHECK (length(auth_scheme) <= 64),
    auth_credentials text        CHECK (length(auth_credentials) <= 4096),
    protocol_version text        NOT NULL DEFAULT '1.0' CHECK (protocol_version IN ('1.0', '0.3')),
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    PRIMARY KEY (delegation_id, id)
);

-- A push is a webhook delivery of its own kind: one outbox row per (push
-- config, event), queued by the statement that appends the delegation's
-- event (EventInsert), claimed, retried, dead-lettered and redriven as
-- every delivery is. A row targets a webhook endpoint or a push config,
-- never both. Deleting a push config drops its deliveries.
ALTER TABLE webhook_deliveries
    ALTER COLUMN endpoint_id DROP NOT NULL,
    ADD COLUMN push_delegation_id uuid,
    ADD COLUMN push_config_id     text,
    ADD CONSTRAINT webhook_deliveries_push_config FOREIGN KEY (push_delegation_id, push_config_id)
        REFERENCES gateway_push_configs (delegation_id, id) ON DELETE CASCADE,
    ADD CONSTRAINT webhook_deliveries_push_once UNIQUE (push_delegation_id, push_config_id, event_seq),
    ADD CONSTRAINT webhook_deliveries_one_target CHECK (
        (endpoint_id IS NOT NULL AND push_config_id IS NULL AND push_delegation_id IS NULL)
        OR (endpoint_id IS NULL AND push_config_id IS NOT NULL AND push_delegation_id IS NOT NULL));

-- +goose Down
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_one_target;
DELETE FROM webhook_deliveries WHERE endpoint_id IS NULL;
ALTER TABLE webhook_deliveries
    DROP CONSTRAINT webhook_deliveries_push_once,
    DROP CONSTRAINT webhook_deliveries_push_config,
    DROP COLUMN push_config_id,
    DROP COLUMN push_delegation_id,
    ALTER COLUMN endpoint_id SET NOT NULL;
DROP TABLE gateway_push_configs;
