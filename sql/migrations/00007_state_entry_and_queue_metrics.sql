-- +goose Up

-- What the scrape-time collector needs to say how long things have waited,
-- cheaply at millions of delegations, outbox jobs and webhook deliveries.

-- When a delegation entered its current obligation state. updated_at is
-- not it (it moves on every update: a task status, a cancel request), and
-- finding the last transition in events costs one index probe per open
-- delegation. The column is kept by the triggers below, so every writer of
-- delegations keeps it right without knowing about it: an insert enters
-- the state at created_at, and an update that changes obligation_state
-- enters the new one at the update's updated_at, which ledger.Apply sets to
-- the time of the transition's event.
--
-- Delegations that were already in a terminal state when this migration
-- ran keep NULL: only open states are measured, and the backfill below
-- covers every open delegation (from its last transition event, or its
-- creation when it never moved).
ALTER TABLE delegations ADD COLUMN obligation_state_since timestamptz;

UPDATE delegations d SET obligation_state_since = coalesce(
    (SELECT max(e.at) FROM events e
     WHERE e.delegation_id = d.id AND e.obligation_to = d.obligation_state),
    d.created_at)
WHERE d.obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated');

-- +goose StatementBegin
CREATE FUNCTION delegations_state_since_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.obligation_state_since := coalesce(NEW.obligation_state_since, NEW.created_at);
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION delegations_state_since_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.obligation_state_since := NEW.updated_at;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER delegations_state_since_insert
    BEFORE INSERT ON delegations
    FOR EACH ROW EXECUTE FUNCTION delegations_state_since_insert();
CREATE TRIGGER delegations_state_since_update
    BEFORE UPDATE ON delegations
    FOR EACH ROW WHEN (OLD.obligation_state IS DISTINCT FROM NEW.obligation_state)
    EXECUTE FUNCTION delegations_state_since_update();

-- The oldest entry into each open state is the first entry of this index
-- under that state.
CREATE INDEX delegations_open_since ON delegations (obligation_state, obligation_state_since)
    WHERE obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated');

-- How many times a job was claimed again after its lease ran out: its
-- worker crashed, hung, or failed to record the result (a transaction that
-- keeps failing, such as one storing text PostgreSQL refuses). A claim that
-- replaces a lease token still set is exactly that, because finishing and
-- rescheduling a job both clear the token. Kept by a trigger so the claim
-- query stays as it is.
ALTER TABLE a2a_outbox ADD COLUMN lease_expiries integer NOT NULL DEFAULT 0;

-- +goose StatementBegin
CREATE FUNCTION a2a_outbox_count_lease_expiry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.lease_expiries := OLD.lease_expiries + 1;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER a2a_outbox_lease_expiry
    BEFORE UPDATE ON a2a_outbox
    FOR EACH ROW WHEN (OLD.lease_token IS NOT NULL AND NEW.lease_token IS NOT NULL
                       AND OLD.lease_token IS DISTINCT FROM NEW.lease_token)
    EXECUTE FUNCTION a2a_outbox_count_lease_expiry();

-- The lease-expiry total is a sum over the few jobs that ever had one, done
-- or not; the index keeps it from reading the whole outbox.
CREATE INDEX a2a_outbox_lease_expired ON a2a_outbox (kind, lease_expiries) WHERE lease_expiries > 0;

-- Dead-lettered webhook deliveries are counted at every scrape; pending ones
-- already have webhook_deliveries_due.
CREATE INDEX webhook_deliveries_dead ON webhook_deliveries (tenant, endpoint_id) WHERE status = 'dead';

-- +goose Down
DROP INDEX webhook_deliveries_dead;
DROP INDEX a2a_outbox_lease_expired;
DROP TRIGGER a2a_outbox_lease_expiry ON a2a_outbox;
DROP FUNCTION a2a_outbox_count_lease_expiry();
ALTER TABLE a2a_outbox DROP COLUMN lease_expiries;
DROP INDEX delegations_open_since;
DROP TRIGGER delegations_state_since_update ON delegations;
DROP TRIGGER delegations_state_since_insert ON delegations;
DROP FUNCTION delegations_state_since_update();
DROP FUNCTION delegations_state_since_insert();
ALTER TABLE delegations DROP COLUMN obligation_state_since;
