-- +goose Up

-- Remote task ids recorded, for one org, by delegations of more than one
-- tenant (shared_remote_tasks in /v1/anomalies): evidence for them is told
-- apart by the compensation idempotency key only, so on-call sees each.
-- Until now they were found at each request by grouping every delegation
-- that records a remote task id, a scan of the whole table (seconds at ten
-- million delegations); they are now kept as they appear, and finance's
-- SQL clients read them too (reporting.shared_remote_tasks_v1).
--
-- How they are kept. A delegation that records a remote task id (an
-- insert, or an update of remote_task_id) looks, by the index
-- delegations_remote_task, for another delegation of its org with the same
-- id; if there is one, the pair is kept. Two delegations recording the
-- same id at once would not see each other's uncommitted rows, so the
-- trigger first takes a transaction lock on the pair: the second waits for
-- the first to commit, and its check (a new statement, so a new snapshot
-- under READ COMMITTED, which every writer uses) then sees it. The lock is
-- per (org, remote task id): unrelated writers never wait for each other.
-- A kept pair is not removed when a delegation's remote task id changes
-- later; readers count the delegations that still share it. A load that
-- skips triggers (session_replication_role = replica) must call
-- quittance_find_shared_remote_tasks() after it.
CREATE TABLE shared_remote_tasks (
    org_id         text        NOT NULL,
    remote_task_id text        NOT NULL,
    found_at       timestamptz NOT NULL,
    PRIMARY KEY (org_id, remote_task_id)
);

-- +goose StatementBegin
CREATE FUNCTION quittance_note_shared_remote_task() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('quittance/remote-task:' || NEW.org_id || '/' || NEW.remote_task_id, 0));
    IF EXISTS (SELECT 1 FROM delegations d
               WHERE d.org_id = NEW.org_id AND d.remote_task_id = NEW.remote_task_id AND d.id <> NEW.id) THEN
        INSERT INTO shared_remote_tasks (org_id, remote_task_id, found_at)
        VALUES (NEW.org_id, NEW.remote_task_id, now())
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- Finds the shared remote task ids among the delegations, once over the
-- table: the backfill below, and the repair after a load that skipped the
-- trigger.
-- +goose StatementBegin
CREATE FUNCTION quittance_find_shared_remote_tasks() RETURNS void LANGUAGE sql AS $$
    INSERT INTO shared_remote_tasks (org_id, remote_task_id, found_at)
    SELECT org_id, remote_task_id, now()
    FROM delegations
    WHERE remote_task_id IS NOT NULL
    GROUP BY org_id, remote_task_id
    HAVING count(*) > 1
    ON CONFLICT DO NOTHING;
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION quittance_find_shared_remote_tasks() FROM PUBLIC;

-- The lock keeps writers of delegations out between the trigger's creation
-- and the backfill, so no pair recorded meanwhile is missed.
LOCK TABLE delegations IN SHARE ROW EXCLUSIVE MODE;

CREATE TRIGGER delegations_shared_remote_task
    AFTER INSERT OR UPDATE OF remote_task_id ON delegations
    FOR EACH ROW WHEN (NEW.remote_task_id IS NOT NULL)
    EXECUTE FUNCTION quittance_note_shared_remote_task();

SELECT quittance_find_shared_remote_tasks();

CREATE VIEW reporting.shared_remote_tasks_v1 AS
SELECT s.org_id, s.remote_task_id, s.found_at,
       array_agg(d.id ORDER BY d.id)     AS delegation_ids,
       array_agg(d.tenant ORDER BY d.id) AS tenants,
       max(d.created_at)                 AS last_created_at
FROM shared_remote_tasks s
JOIN delegations d ON d.org_id = s.org_id AND d.remote_task_id = s.remote_task_id
GROUP BY s.org_id, s.remote_task_id, s.found_at
HAVING count(*) > 1;

COMMENT ON VIEW reporting.shared_remote_tasks_v1 IS
    'Remote task ids recorded, for one org, by delegations of more than one tenant: the delegations and their tenants (in delegation id order), when the sharing was found and when the latest of them was created. Version 1.';

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'quittance_reporting') THEN
        EXECUTE 'GRANT SELECT ON reporting.shared_remote_tasks_v1 TO quittance_reporting';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP VIEW reporting.shared_remote_tasks_v1;
DROP TRIGGER delegations_shared_remote_task ON delegations;
DROP FUNCTION quittance_find_shared_remote_tasks();
DROP FUNCTION quittance_note_shared_remote_task();
DROP TABLE shared_remote_tasks;
