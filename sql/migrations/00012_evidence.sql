-- +goose Up

-- dispatch_unknown: a dispatch whose outcome nothing proves. An attempt
-- that may have reached the agent (its reply was lost, it timed out) was
-- followed by a refusal of the resend or a direct message reply, or the
-- dispatch gave up after such an attempt: the remote may be running a task
-- Quittance has no id for. The hold stays active; the condition is listed
-- (GET /v1/obligations?condition=dispatch_unknown) and alerted, and is
-- cleared when a task id is recorded for the delegation.
ALTER TABLE delegations
    ADD COLUMN dispatch_unknown_at     timestamptz,
    ADD COLUMN dispatch_unknown_reason text;
CREATE INDEX delegations_dispatch_unknown ON delegations (created_at, id)
    WHERE dispatch_unknown_at IS NOT NULL;

-- +goose Down
DROP INDEX delegations_dispatch_unknown;
ALTER TABLE delegations
    DROP COLUMN dispatch_unknown_reason,
    DROP COLUMN dispatch_unknown_at;
