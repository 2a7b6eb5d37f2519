-- +goose Up

-- An event's data exactly as it was hashed. jsonb rewrites what it stores:
-- numbers are normalised (1e2 reads back as 100, -0 as 0), keys reordered,
-- duplicates dropped. An event whose data held such a number (a remote
-- receipt written 1e2) could not be re-hashed from its jsonb copy, and its
-- stream's chain no longer verified. hashed_data is the canonical JSON text
-- the hash was computed over, kept byte for byte by the json type; the
-- hash is recomputed from it, and data stays the jsonb copy that views and
-- queries read. Events appended before this migration have no hashed_data:
-- their hash was computed over their jsonb data as it reads back, and is
-- recomputed from that, as before.
ALTER TABLE events ADD COLUMN hashed_data json;

-- Every event appended from now on keeps its hashed data. NOT VALID: the
-- rows already there are not checked (they have none, see above), and
-- adding the constraint takes no scan of the audit log.
ALTER TABLE events ADD CONSTRAINT events_hashed_data_kept
    CHECK (hashed_data IS NOT NULL) NOT VALID;

-- When Quittance last received an observation of the remote task, whether
-- or not it changed anything: an observation that repeats the current
-- status and message moves only this column, and appends no event (it used
-- to append a task_status_duplicate event each time). Filled for existing
-- delegations from their last status event and the A2A workers' last
-- observation.
ALTER TABLE delegations ADD COLUMN last_observed_at timestamptz;

UPDATE delegations d SET last_observed_at = greatest(
    (SELECT max(e.at) FROM events e
     WHERE e.delegation_id = d.id
       AND e.type IN ('task_status_changed', 'task_status_duplicate', 'task_status_stale', 'status_conflict')),
    (SELECT a.observed_at FROM a2a_delegations a WHERE a.delegation_id = d.id));

-- +goose Down
ALTER TABLE delegations DROP COLUMN last_observed_at;
ALTER TABLE events DROP CONSTRAINT events_hashed_data_kept;
ALTER TABLE events DROP COLUMN hashed_data;
