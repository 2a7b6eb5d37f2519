-- name: OutboxJobEnqueue :exec
-- Enqueues a job unless one of the same kind is open for the delegation. An
-- open job is brought forward to the new run_after if that is earlier, and
-- marked for one more run if it is being worked on right now. An observe
-- job that names a task (a push about a task not recorded yet) replaces
-- the open observe job's payload, so the hint is not lost.
INSERT INTO a2a_outbox (delegation_id, kind, payload, run_after, created_at, updated_at)
VALUES (@delegation_id, @kind, @payload, @run_after, @now, @now)
ON CONFLICT (delegation_id, kind) WHERE done_at IS NULL DO UPDATE SET
    payload    = CASE WHEN a2a_outbox.kind = 'observe' AND EXCLUDED.payload ? 'task_id'
                      THEN EXCLUDED.payload ELSE a2a_outbox.payload END,
    run_after  = LEAST(a2a_outbox.run_after, EXCLUDED.run_after),
    requeue    = a2a_outbox.requeue OR (a2a_outbox.locked_until IS NOT NULL AND a2a_outbox.locked_until > EXCLUDED.created_at),
    updated_at = EXCLUDED.updated_at;

-- name: OutboxJobClaim :many
-- Claims up to max_jobs due jobs for lease_until. Rows locked by another
-- claimer are skipped, and rows under an unexpired lease are not due.
WITH due AS (
    SELECT id FROM a2a_outbox
    WHERE done_at IS NULL
      AND run_after <= @now
      AND (locked_until IS NULL OR locked_until <= @now)
    ORDER BY run_after, id
    LIMIT @max_jobs
    FOR UPDATE SKIP LOCKED
)
UPDATE a2a_outbox o SET
    locked_until = @lease_until,
    lease_token  = @lease_token,
    attempts     = o.attempts + 1,
    updated_at   = @now
FROM due
WHERE o.id = due.id
RETURNING o.id, o.delegation_id, o.kind, o.payload, o.attempts, o.created_at;

-- name: OutboxJobFinish :execrows
-- Finishes a job the caller holds the lease of; a job asked for again while
-- it ran is scheduled once more instead.
UPDATE a2a_outbox SET
    done_at      = CASE WHEN requeue THEN NULL ELSE @now::timestamptz END,
    outcome      = @outcome,
    run_after    = @now,
    requeue      = false,
    locked_until = NULL,
    lease_token  = NULL,
    updated_at   = @now
WHERE id = @id AND lease_token = @lease_token AND done_at IS NULL;

-- name: OutboxJobRetry :execrows
-- Releases a job the caller holds the lease of, to run again at run_after.
UPDATE a2a_outbox SET
    run_after    = @run_after,
    last_error   = @last_error,
    requeue      = false,
    locked_until = NULL,
    lease_token  = NULL,
    updated_at   = @now
WHERE id = @id AND lease_token = @lease_token AND done_at IS NULL;

-- name: OutboxJobOpen :one
-- Whether a job of the kind is open (not done) for the delegation: queued,
-- waiting for a retry, or being worked on.
SELECT EXISTS (
    SELECT 1 FROM a2a_outbox WHERE delegation_id = @delegation_id AND kind = @kind AND done_at IS NULL
) AS open;

-- name: OutboxDispatchMessage :one
-- The message a delegation was dispatched with, as queued: the payload of
-- its first dispatch job (jobs are kept once done).
SELECT payload, created_at FROM a2a_outbox
WHERE delegation_id = @delegation_id AND kind = 'dispatch'
ORDER BY id LIMIT 1;
