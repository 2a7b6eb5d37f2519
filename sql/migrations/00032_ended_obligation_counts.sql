-- +goose Up

-- The scrape-time collector reports the number of delegations in every
-- obligation state (quittance_obligations). Counting the ended ones at each
-- scrape reads the whole table: 25 s warm at ten million delegations. The
-- active states are few and counted live, off the partial index
-- delegations_active_cover (00029); the ended states' counts are kept here.
--
-- Where the counts are kept. A delegation entering or leaving an ended
-- state (settled, released, compensated, written_off) appends a delta row,
-- +1 or -1, from a trigger in the writer's own transaction: an insert of a
-- new row, never an update of a shared counter, so concurrent transitions
-- never wait on each other (no hot row). The collector folds the deltas
-- into obligation_counts from time to time (a bounded batch per scrape,
-- one replica at a time under an advisory lock): it deletes a batch of
-- deltas and adds their sums to the totals in one statement.
--
-- Why the counts are exact. For every ended state s, in every committed
-- state of the database:
--     count(delegations WHERE obligation_state = s)
--       = obligation_counts.n[s] + sum(obligation_count_deltas.n WHERE state = s)
-- The backfill below makes it true (under a lock that keeps writers out
-- until this migration commits); every write of a delegation's state
-- commits with its delta rows, or neither commits; every fold removes
-- deltas and adds their sum to the totals in one transaction. So one
-- statement, which reads one MVCC snapshot, that adds the totals and the
-- deltas it sees gets the count a full count would give at that snapshot.
-- The trigger counts by the state's value, not by the state machine, so
-- this holds whatever moves a row (the ended states are terminal, but a
-- row deleted or fixed by hand is counted too). A load that skips triggers
-- (session_replication_role = replica) must call
-- quittance_recount_ended_obligations() after it.
CREATE TABLE obligation_counts (
    state text   PRIMARY KEY CHECK (state IN ('settled', 'released', 'compensated', 'written_off')),
    n     bigint NOT NULL
);

CREATE TABLE obligation_count_deltas (
    id    bigint   GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    state text     NOT NULL CHECK (state IN ('settled', 'released', 'compensated', 'written_off')),
    n     smallint NOT NULL CHECK (n IN (-1, 1))
);

-- +goose StatementBegin
CREATE FUNCTION quittance_count_ended_obligations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE')
       AND OLD.obligation_state IN ('settled', 'released', 'compensated', 'written_off') THEN
        INSERT INTO obligation_count_deltas (state, n) VALUES (OLD.obligation_state, -1);
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT')
       AND NEW.obligation_state IN ('settled', 'released', 'compensated', 'written_off') THEN
        INSERT INTO obligation_count_deltas (state, n) VALUES (NEW.obligation_state, 1);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- Recounts the ended states from the delegations, once over the table:
-- the backfill, and the repair after a load that skipped the triggers.
-- The lock keeps every writer of delegations out until the caller's
-- transaction ends, so the count and the emptied deltas agree.
-- +goose StatementBegin
CREATE FUNCTION quittance_recount_ended_obligations() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE delegations IN SHARE ROW EXCLUSIVE MODE;
    LOCK TABLE obligation_count_deltas, obligation_counts IN EXCLUSIVE MODE;
    DELETE FROM obligation_count_deltas;
    DELETE FROM obligation_counts;
    INSERT INTO obligation_counts (state, n)
    SELECT s.state, (SELECT count(*) FROM delegations d WHERE d.obligation_state = s.state)
    FROM unnest(ARRAY['settled', 'released', 'compensated', 'written_off']) s(state);
END;
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION quittance_recount_ended_obligations() FROM PUBLIC;

-- The lock comes first, before the triggers exist: no writer is between
-- the trigger's creation and the count.
LOCK TABLE delegations IN SHARE ROW EXCLUSIVE MODE;
CREATE TRIGGER delegations_count_ended_insert AFTER INSERT ON delegations
    FOR EACH ROW WHEN (NEW.obligation_state IN ('settled', 'released', 'compensated', 'written_off'))
    EXECUTE FUNCTION quittance_count_ended_obligations();
CREATE TRIGGER delegations_count_ended_update AFTER UPDATE OF obligation_state ON delegations
    FOR EACH ROW WHEN (OLD.obligation_state IS DISTINCT FROM NEW.obligation_state)
    EXECUTE FUNCTION quittance_count_ended_obligations();
CREATE TRIGGER delegations_count_ended_delete AFTER DELETE ON delegations
    FOR EACH ROW WHEN (OLD.obligation_state IN ('settled', 'released', 'compensated', 'written_off'))
    EXECUTE FUNCTION quittance_count_ended_obligations();
SELECT quittance_recount_ended_obligations();

-- The service appends deltas (the trigger runs as the writer, so as the
-- service) and folds them: it needs SELECT, INSERT, UPDATE and DELETE on
-- both tables, which the default privileges of 00015 give it. The grants
-- are applied again, as 00028 does, for a role created after them.
SELECT quittance_grant_service_role();

-- +goose Down
DROP TRIGGER delegations_count_ended_delete ON delegations;
DROP TRIGGER delegations_count_ended_update ON delegations;
DROP TRIGGER delegations_count_ended_insert ON delegations;
DROP FUNCTION quittance_recount_ended_obligations();
DROP FUNCTION quittance_count_ended_obligations();
DROP TABLE obligation_count_deltas;
DROP TABLE obligation_counts;
