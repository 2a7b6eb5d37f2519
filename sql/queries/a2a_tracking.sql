-- name: A2ATrackingEnsure :exec
INSERT INTO a2a_delegations (delegation_id, dispatched, created_at, updated_at)
VALUES (@delegation_id, @dispatched, @now, @now)
ON CONFLICT (delegation_id) DO UPDATE SET
    dispatched = a2a_delegations.dispatched OR EXCLUDED.dispatched,
    updated_at = EXCLUDED.updated_at;

-- name: A2ATrackingGet :one
SELECT * FROM a2a_delegations WHERE delegation_id = $1;

-- The setters below create the delegation's tracking row when it has none
-- (a delegation Quittance did not dispatch), in the same statement.

-- name: A2ATrackingSetPushToken :exec
INSERT INTO a2a_delegations (delegation_id, push_token_hash, created_at, updated_at)
VALUES (@delegation_id, @push_token_hash, @now, @now)
ON CONFLICT (delegation_id) DO UPDATE SET
    push_token_hash = EXCLUDED.push_token_hash,
    updated_at      = EXCLUDED.updated_at;

-- name: A2ATrackingObserved :exec
INSERT INTO a2a_delegations (delegation_id, observed_at, created_at, updated_at)
VALUES (@delegation_id, @now::timestamptz, @now, @now)
ON CONFLICT (delegation_id) DO UPDATE SET
    observed_at = GREATEST(a2a_delegations.observed_at, EXCLUDED.observed_at),
    updated_at  = EXCLUDED.updated_at;

-- name: A2ATrackingSetCompensationTask :exec
INSERT INTO a2a_delegations (delegation_id, compensation_task_id, compensation_round, created_at, updated_at)
VALUES (@delegation_id, @compensation_task_id, @compensation_round, @now, @now)
ON CONFLICT (delegation_id) DO UPDATE SET
    compensation_task_id = EXCLUDED.compensation_task_id,
    compensation_round   = EXCLUDED.compensation_round,
    updated_at           = EXCLUDED.updated_at;

-- name: A2ATrackingListToPoll :many
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

-- name: A2ATrackingListToStream :many
-- Dispatched delegations whose remote task is known and not terminal.
SELECT d.id FROM delegations d
JOIN a2a_delegations a ON a.delegation_id = d.id
WHERE a.dispatched
  AND d.remote_task_id IS NOT NULL
  AND d.task_status IN ('unknown', 'submitted', 'working', 'input_required', 'auth_required')
  AND d.obligation_state = 'held'
ORDER BY d.id
LIMIT @max_rows;

-- name: RemoteTaskInsert :execrows
-- Records a remote task found for a delegation; a task already recorded is
-- left as it is (0 rows).
INSERT INTO delegation_remote_tasks (delegation_id, task_id, purpose, context_id, found_by, status, found_at, updated_at)
VALUES (@delegation_id, @task_id, @purpose, @context_id, @found_by, @status, @now, @now)
ON CONFLICT (delegation_id, task_id) DO NOTHING;

-- name: RemoteTaskList :many
SELECT delegation_id, task_id, purpose, context_id, found_by, status, found_at, cancel_sent_at, named_round, updated_at,
       compensation_required_at, compensation_round, compensation_attempts, compensation_task_id,
       compensation_last_error, compensation_resolved_at, compensation_resolution
FROM delegation_remote_tasks WHERE delegation_id = $1 ORDER BY found_at, task_id;

-- name: RemoteTaskSetStatus :exec
UPDATE delegation_remote_tasks SET status = @status, updated_at = @now
WHERE delegation_id = @delegation_id AND task_id = @task_id;

-- name: RemoteTaskCancelSent :exec
UPDATE delegation_remote_tasks SET cancel_sent_at = @now, updated_at = @now
WHERE delegation_id = @delegation_id AND task_id = @task_id;

-- name: RemoteTaskNamed :exec
-- Records that the compensation request of round named these extra tasks
-- of the delegation.
UPDATE delegation_remote_tasks SET named_round = @round, updated_at = @now
WHERE delegation_id = @delegation_id AND task_id = ANY(@task_ids::text[])
  AND (named_round IS NULL OR named_round < @round);

-- name: RemoteTaskRequireCompensation :exec
-- Marks an extra task of a completed delegation as needing compensation
-- (ledger/DESIGN.md §2.2); a task already marked keeps its time.
UPDATE delegation_remote_tasks
SET compensation_required_at = coalesce(compensation_required_at, @now), updated_at = @now
WHERE delegation_id = @delegation_id AND task_id = @task_id;

-- name: RemoteTaskSetCompensation :exec
-- Records where the compensation request for an extra task stands: its
-- round, the attempts made, the compensation task the remote answered with
-- and the last error.
UPDATE delegation_remote_tasks
SET compensation_round = @round, compensation_attempts = @attempts,
    compensation_task_id = sqlc.narg(compensation_task_id), compensation_last_error = sqlc.narg(last_error),
    updated_at = @now
WHERE delegation_id = @delegation_id AND task_id = @task_id;

-- name: RemoteTaskRedriveCompensation :execrows
-- Starts a new series of compensation requests for an extra task whose
-- compensation is open (compensation.Service.RedriveExtraTask): the
-- attempt count goes back to zero, the round and the last error stay (0
-- rows when the compensation is not open).
UPDATE delegation_remote_tasks
SET compensation_attempts = 0, updated_at = @now
WHERE delegation_id = @delegation_id AND task_id = @task_id
  AND compensation_required_at IS NOT NULL AND compensation_resolved_at IS NULL;

-- name: RemoteTaskResolveCompensation :execrows
-- Resolves the compensation of an extra task that needs it and is not
-- resolved yet: compensated, no_effects or written_off (0 rows otherwise).
UPDATE delegation_remote_tasks
SET compensation_resolved_at = @now, compensation_resolution = @resolution, updated_at = @now
WHERE delegation_id = @delegation_id AND task_id = @task_id
  AND compensation_required_at IS NOT NULL AND compensation_resolved_at IS NULL;

-- name: A2ATrackingListDispatchUnknown :many
-- Held delegations in the dispatch_unknown condition, not looked up since
-- cutoff, whose org is not backing off: their context is looked up again.
SELECT d.id FROM delegations d
LEFT JOIN a2a_delegations a ON a.delegation_id = d.id
LEFT JOIN a2a_org_backoff b ON b.org_id = d.org_id
WHERE d.dispatch_unknown_at IS NOT NULL
  AND d.remote_task_id IS NULL
  AND d.obligation_state = 'held'
  AND (a.observed_at IS NULL OR a.observed_at <= @cutoff)
  AND (b.retry_at IS NULL OR b.retry_at <= @now)
ORDER BY a.observed_at NULLS FIRST, d.id
LIMIT @max_rows;

-- name: DelegationGetByIDForUpdateWithDispatch :one
-- The delegation, locked, with whether Quittance dispatches it, whether the
-- dispatch may have reached the agent (a task recorded, the dispatch
-- unknown, or a dispatch job claimed at least once: attempts count claims,
-- and a claim may have sent before it crashed), in the lock's round trip.
-- A flush's pre-read serves it too (DelegationsServedForFlush's
-- served_delegation_get_by_id_for_update_with_dispatch columns): change both together.
SELECT sqlc.embed(d),
       coalesce(a.dispatched, false)::boolean AS dispatched,
       (d.remote_task_id IS NOT NULL OR d.dispatch_unknown_at IS NOT NULL OR EXISTS (
           SELECT FROM a2a_outbox o WHERE o.delegation_id = d.id AND o.kind = 'dispatch' AND o.attempts > 0))::boolean AS sent,
       d.dispatch_unknown_at AS unknown_since
FROM delegations d
LEFT JOIN a2a_delegations a ON a.delegation_id = d.id
WHERE d.id = @id
FOR UPDATE OF d;
