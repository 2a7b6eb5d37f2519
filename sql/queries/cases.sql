-- Case handling on obligations (ledger/cases.go): the case row of a
-- delegation, and the needs-action queue with its filters. Times come from
-- the caller's clock.

-- name: CaseGetByDelegation :one
SELECT * FROM delegation_cases WHERE delegation_id = sqlc.arg(delegation_id);

-- name: CaseUpsert :exec
INSERT INTO delegation_cases (delegation_id, owner, snoozed_until, notes, updated_at)
VALUES (sqlc.arg(delegation_id), sqlc.arg(owner), sqlc.narg(snoozed_until), sqlc.arg(notes), sqlc.arg(updated_at))
ON CONFLICT (delegation_id) DO UPDATE SET
    owner = EXCLUDED.owner,
    snoozed_until = EXCLUDED.snoozed_until,
    notes = EXCLUDED.notes,
    updated_at = EXCLUDED.updated_at;

-- name: CaseQueuePage :many
-- One page of obligations with their cases, in ascending (sort_key, id)
-- order after the cursor. sort_key is the created time in microseconds
-- (oldest/newest), the amount (amount_*), or the compensation deadline in
-- microseconds (deadline; none sorts last), multiplied by direction (1 or
-- -1) for descending orders. Times are read with date_part (double
-- precision, exact to the microsecond for centuries), which is several
-- times cheaper than extract's numeric. The page is chosen first from
-- columns delegations_active_cover holds, so choosing it reads no
-- delegation's heap row; only the page's rows are then read whole and look
-- up their last event.
SELECT
    d.id, d.tenant, d.business_operation_id, d.org_id, d.task_class, d.budget_id, d.amount_minor, d.currency,
    d.remote_task_id, d.task_status, d.obligation_state, d.obligation_reason,
    d.cancel_requested_at, d.compensation_deadline, d.compensation_attempts,
    d.compensation_last_error, d.pending_write_off_id, d.created_at, d.updated_at,
    q.owner, q.snoozed_until, q.notes, q.case_updated_at, q.sort_key,
    coalesce(last_event.type, '')::text                AS last_evidence_type,
    coalesce(last_event.at, d.created_at)::timestamptz AS last_evidence_at
FROM (
    SELECT * FROM (
        SELECT
            a.id,
            coalesce(c.owner, '')::text      AS owner,
            c.snoozed_until                  AS snoozed_until,
            coalesce(c.notes, 0)::integer    AS notes,
            c.updated_at                     AS case_updated_at,
            (sqlc.arg(direction)::bigint * CASE sqlc.arg(sort_by)::text
                WHEN 'amount' THEN a.amount_minor
                WHEN 'deadline' THEN coalesce((date_part('epoch', a.compensation_deadline) * 1000000)::bigint, 4000000000000000)
                ELSE (date_part('epoch', a.created_at) * 1000000)::bigint
            END)::bigint                     AS sort_key
        FROM delegations a
        LEFT JOIN delegation_cases c ON c.delegation_id = a.id
        WHERE a.obligation_state = ANY (sqlc.arg(states)::text[])
          AND (sqlc.narg(org_id)::text IS NULL OR a.org_id = sqlc.narg(org_id))
          AND (sqlc.narg(tenant)::text IS NULL OR a.tenant = sqlc.narg(tenant))
          AND (sqlc.narg(currency)::text IS NULL OR a.currency = sqlc.narg(currency))
          AND (sqlc.narg(min_amount)::bigint IS NULL OR a.amount_minor >= sqlc.narg(min_amount))
          AND (sqlc.narg(max_amount)::bigint IS NULL OR a.amount_minor <= sqlc.narg(max_amount))
          AND (sqlc.narg(created_before)::timestamptz IS NULL OR a.created_at < sqlc.narg(created_before))
          AND (sqlc.narg(created_after)::timestamptz IS NULL OR a.created_at > sqlc.narg(created_after))
          AND (sqlc.narg(deadline_before)::timestamptz IS NULL OR a.compensation_deadline < sqlc.narg(deadline_before))
          AND (sqlc.narg(owner)::text IS NULL OR coalesce(c.owner, '') = sqlc.narg(owner))
          AND (sqlc.arg(snoozed)::text = 'show'
               OR (sqlc.arg(snoozed)::text = 'hide' AND (c.snoozed_until IS NULL OR c.snoozed_until <= sqlc.arg(now)))
               OR (sqlc.arg(snoozed)::text = 'only' AND c.snoozed_until > sqlc.arg(now)))
    ) f
    WHERE (NOT sqlc.arg(has_after)::boolean OR (f.sort_key, f.id) > (sqlc.arg(after_key)::bigint, sqlc.arg(after_id)::uuid))
    ORDER BY f.sort_key, f.id
    LIMIT sqlc.arg(max_rows)
) q
JOIN delegations d ON d.id = q.id
LEFT JOIN LATERAL (
    SELECT e.type, e.at FROM events e
    WHERE e.delegation_id = q.id
    ORDER BY e.seq DESC
    LIMIT 1
) last_event ON true
ORDER BY q.sort_key, q.id;

-- name: CaseQueueOldest :many
-- The queue oldest first: the same filters as CaseQueuePage, ordered by
-- (created_at, id) so that an index on them (partial, over the open
-- states, for the needs-action queue; full for every obligation) yields
-- the page without reading the rest.
SELECT
    q.id, q.tenant, q.business_operation_id, q.org_id, q.task_class, q.budget_id, q.amount_minor, q.currency,
    q.remote_task_id, q.task_status, q.obligation_state, q.obligation_reason,
    q.cancel_requested_at, q.compensation_deadline, q.compensation_attempts,
    q.compensation_last_error, q.pending_write_off_id, q.created_at, q.updated_at,
    q.owner, q.snoozed_until, q.notes, q.case_updated_at,
    coalesce(last_event.type, '')::text                AS last_evidence_type,
    coalesce(last_event.at, q.created_at)::timestamptz AS last_evidence_at
FROM (
        SELECT
            d.id, d.tenant, d.business_operation_id, d.org_id, d.task_class, d.budget_id, d.amount_minor, d.currency,
            d.remote_task_id, d.task_status, d.obligation_state, d.obligation_reason,
            d.cancel_requested_at, d.compensation_deadline, d.compensation_attempts,
            d.compensation_last_error, d.pending_write_off_id, d.created_at, d.updated_at,
            coalesce(c.owner, '')::text      AS owner,
            c.snoozed_until                  AS snoozed_until,
            coalesce(c.notes, 0)::integer    AS notes,
            c.updated_at                     AS case_updated_at
        FROM delegations d
        LEFT JOIN delegation_cases c ON c.delegation_id = d.id
        WHERE d.obligation_state = ANY (sqlc.arg(states)::text[])
          AND (sqlc.narg(org_id)::text IS NULL OR d.org_id = sqlc.narg(org_id))
          AND (sqlc.narg(tenant)::text IS NULL OR d.tenant = sqlc.narg(tenant))
          AND (sqlc.narg(currency)::text IS NULL OR d.currency = sqlc.narg(currency))
          AND (sqlc.narg(min_amount)::bigint IS NULL OR d.amount_minor >= sqlc.narg(min_amount))
          AND (sqlc.narg(max_amount)::bigint IS NULL OR d.amount_minor <= sqlc.narg(max_amount))
          AND (sqlc.narg(created_before)::timestamptz IS NULL OR d.created_at < sqlc.narg(created_before))
          AND (sqlc.narg(created_after)::timestamptz IS NULL OR d.created_at > sqlc.narg(created_after))
          AND (sqlc.narg(deadline_before)::timestamptz IS NULL OR d.compensation_deadline < sqlc.narg(deadline_before))
          AND (sqlc.narg(owner)::text IS NULL OR coalesce(c.owner, '') = sqlc.narg(owner))
          AND (sqlc.arg(snoozed)::text = 'show'
               OR (sqlc.arg(snoozed)::text = 'hide' AND (c.snoozed_until IS NULL OR c.snoozed_until <= sqlc.arg(now)))
               OR (sqlc.arg(snoozed)::text = 'only' AND c.snoozed_until > sqlc.arg(now)))
          AND (sqlc.narg(after_created_at)::timestamptz IS NULL OR (d.created_at, d.id) > (sqlc.narg(after_created_at), sqlc.arg(after_id)::uuid))
        ORDER BY d.created_at, d.id
        LIMIT sqlc.arg(max_rows)
) q
LEFT JOIN LATERAL (
    SELECT e.type, e.at FROM events e
    WHERE e.delegation_id = q.id
    ORDER BY e.seq DESC
    LIMIT 1
) last_event ON true
ORDER BY q.created_at, q.id;

-- name: CaseQueueNewest :many
-- The queue newest first, as CaseQueueOldest backwards.
SELECT
    q.id, q.tenant, q.business_operation_id, q.org_id, q.task_class, q.budget_id, q.amount_minor, q.currency,
    q.remote_task_id, q.task_status, q.obligation_state, q.obligation_reason,
    q.cancel_requested_at, q.compensation_deadline, q.compensation_attempts,
    q.compensation_last_error, q.pending_write_off_id, q.created_at, q.updated_at,
    q.owner, q.snoozed_until, q.notes, q.case_updated_at,
    coalesce(last_event.type, '')::text                AS last_evidence_type,
    coalesce(last_event.at, q.created_at)::timestamptz AS last_evidence_at
FROM (
        SELECT
            d.id, d.tenant, d.business_operation_id, d.org_id, d.task_class, d.budget_id, d.amount_minor, d.currency,
            d.remote_task_id, d.task_status, d.obligation_state, d.obligation_reason,
            d.cancel_requested_at, d.compensation_deadline, d.compensation_attempts,
            d.compensation_last_error, d.pending_write_off_id, d.created_at, d.updated_at,
            coalesce(c.owner, '')::text      AS owner,
            c.snoozed_until                  AS snoozed_until,
            coalesce(c.notes, 0)::integer    AS notes,
            c.updated_at                     AS case_updated_at
        FROM delegations d
        LEFT JOIN delegation_cases c ON c.delegation_id = d.id
        WHERE d.obligation_state = ANY (sqlc.arg(states)::text[])
          AND (sqlc.narg(org_id)::text IS NULL OR d.org_id = sqlc.narg(org_id))
          AND (sqlc.narg(tenant)::text IS NULL OR d.tenant = sqlc.narg(tenant))
          AND (sqlc.narg(currency)::text IS NULL OR d.currency = sqlc.narg(currency))
          AND (sqlc.narg(min_amount)::bigint IS NULL OR d.amount_minor >= sqlc.narg(min_amount))
          AND (sqlc.narg(max_amount)::bigint IS NULL OR d.amount_minor <= sqlc.narg(max_amount))
          AND (sqlc.narg(created_before)::timestamptz IS NULL OR d.created_at < sqlc.narg(created_before))
          AND (sqlc.narg(created_after)::timestamptz IS NULL OR d.created_at > sqlc.narg(created_after))
          AND (sqlc.narg(deadline_before)::timestamptz IS NULL OR d.compensation_deadline < sqlc.narg(deadline_before))
          AND (sqlc.narg(owner)::text IS NULL OR coalesce(c.owner, '') = sqlc.narg(owner))
          AND (sqlc.arg(snoozed)::text = 'show'
               OR (sqlc.arg(snoozed)::text = 'hide' AND (c.snoozed_until IS NULL OR c.snoozed_until <= sqlc.arg(now)))
               OR (sqlc.arg(snoozed)::text = 'only' AND c.snoozed_until > sqlc.arg(now)))
          AND (sqlc.narg(after_created_at)::timestamptz IS NULL OR (d.created_at, d.id) < (sqlc.narg(after_created_at), sqlc.arg(after_id)::uuid))
        ORDER BY d.created_at DESC, d.id DESC
        LIMIT sqlc.arg(max_rows)
) q
LEFT JOIN LATERAL (
    SELECT e.type, e.at FROM events e
    WHERE e.delegation_id = q.id
    ORDER BY e.seq DESC
    LIMIT 1
) last_event ON true
ORDER BY q.created_at DESC, q.id DESC;
