-- name: A2AJobEnqueue :exec
-- Enqueues a job unless one of the same kind is open for the delegation. An
-- open job is brought forward to the new run_after if that is earlier, and
-- marked for one more run if it is being worked on right now.
INSERT INTO a2a_outbox (delegation_id, kind, payload, run_after, created_at, updated_at)
VALUES (@delegation_id, @kind, @payload, @run_after, @now, @now)
ON CONFLICT (delegation_id, kind) WHERE done_at IS NULL DO UPDATE SET
    run_after  = LEAST(a2a_outbox.run_after, EXCLUDED.run_after),
    requeue    = a2a_outbox.requeue OR (a2a_outbox.locked_until IS NOT NULL AND a2a_outbox.locked_until > EXCLUDED.created_at),
    updated_at = EXCLUDED.updated_at;

-- name: A2AJobClaim :many
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

-- name: A2AJobFinish :execrows
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

-- name: A2AJobRetry :execrows
-- Releases a job the caller holds the lease of, to run again at run_after.
UPDATE a2a_outbox SET
    run_after    = @run_after,
    last_error   = @last_error,
    requeue      = false,
    locked_until = NULL,
    lease_token  = NULL,
    updated_at   = @now
WHERE id = @id AND lease_token = @lease_token AND done_at IS NULL;

-- name: A2ADelegationEnsure :exec
INSERT INTO a2a_delegations (delegation_id, dispatched, created_at, updated_at)
VALUES (@delegation_id, @dispatched, @now, @now)
ON CONFLICT (delegation_id) DO UPDATE SET
    dispatched = a2a_delegations.dispatched OR EXCLUDED.dispatched,
    updated_at = EXCLUDED.updated_at;

-- name: A2ADelegationGet :one
SELECT * FROM a2a_delegations WHERE delegation_id = $1;

-- The setters below create the delegation's tracking row when it has none
-- (a delegation Quittance did not dispatch), in the same statement.

-- name: A2ADelegationSetPushToken :exec
INSERT INTO a2a_delegations (delegation_id, push_token_hash, created_at, updated_at)
VALUES (@delegation_id, @push_token_hash, @now, @now)
ON CONFLICT (delegation_id) DO UPDATE SET
    push_token_hash = EXCLUDED.push_token_hash,
    updated_at      = EXCLUDED.updated_at;

-- name: A2ADelegationObserved :exec
INSERT INTO a2a_delegations (delegation_id, observed_at, created_at, updated_at)
VALUES (@delegation_id, @now::timestamptz, @now, @now)
ON CONFLICT (delegation_id) DO UPDATE SET
    observed_at = GREATEST(a2a_delegations.observed_at, EXCLUDED.observed_at),
    updated_at  = EXCLUDED.updated_at;

-- name: A2ADelegationSetCompensationTask :exec
INSERT INTO a2a_delegations (delegation_id, compensation_task_id, compensation_round, created_at, updated_at)
VALUES (@delegation_id, @compensation_task_id, @compensation_round, @now, @now)
ON CONFLICT (delegation_id) DO UPDATE SET
    compensation_task_id = EXCLUDED.compensation_task_id,
    compensation_round   = EXCLUDED.compensation_round,
    updated_at           = EXCLUDED.updated_at;

-- name: A2ADelegationsToPoll :many
-- Dispatched delegations whose remote task is not terminal, whose obligation
-- is open, whose last observation is at or before cutoff, and whose org is
-- not backing off. Never observed first.
SELECT d.id FROM delegations d
JOIN a2a_delegations a ON a.delegation_id = d.id
LEFT JOIN a2a_org_backoff b ON b.org_id = d.org_id
WHERE a.dispatched
  AND d.remote_task_id IS NOT NULL
  AND d.task_status IN ('unknown', 'submitted', 'working', 'input_required', 'auth_required')
  AND d.obligation_state = 'held'
  AND (a.observed_at IS NULL OR a.observed_at <= @cutoff)
  AND (b.retry_at IS NULL OR b.retry_at <= @now)
ORDER BY a.observed_at NULLS FIRST, d.id
LIMIT @max_rows;

-- name: A2ADelegationsToStream :many
-- Dispatched delegations whose remote task is known and not terminal.
SELECT d.id FROM delegations d
JOIN a2a_delegations a ON a.delegation_id = d.id
WHERE a.dispatched
  AND d.remote_task_id IS NOT NULL
  AND d.task_status IN ('unknown', 'submitted', 'working', 'input_required', 'auth_required')
  AND d.obligation_state = 'held'
ORDER BY d.id
LIMIT @max_rows;

-- name: A2AOrgBackoffFail :exec
INSERT INTO a2a_org_backoff (org_id, failures, retry_at, last_error, updated_at)
VALUES (@org_id, 1, @retry_at, @last_error, @now)
ON CONFLICT (org_id) DO UPDATE SET
    failures   = a2a_org_backoff.failures + 1,
    retry_at   = EXCLUDED.retry_at,
    last_error = EXCLUDED.last_error,
    updated_at = EXCLUDED.updated_at;

-- name: A2AOrgBackoffGet :one
SELECT * FROM a2a_org_backoff WHERE org_id = $1;

-- name: A2AOrgBackoffClear :exec
DELETE FROM a2a_org_backoff WHERE org_id = $1;

-- name: A2AStreamTryLock :one
-- Takes the session-level advisory lock that lets one replica stream a task.
SELECT pg_try_advisory_lock(hashtextextended(@lock_key::text, 0));

-- name: A2AStreamUnlock :one
SELECT pg_advisory_unlock(hashtextextended(@lock_key::text, 0));
