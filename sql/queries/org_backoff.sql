-- name: OrgBackoffFail :exec
INSERT INTO a2a_org_backoff (org_id, failures, retry_at, last_error, updated_at)
VALUES (@org_id, 1, @retry_at, @last_error, @now)
ON CONFLICT (org_id) DO UPDATE SET
    failures   = a2a_org_backoff.failures + 1,
    retry_at   = EXCLUDED.retry_at,
    last_error = EXCLUDED.last_error,
    updated_at = EXCLUDED.updated_at;

-- name: OrgBackoffGet :one
SELECT * FROM a2a_org_backoff WHERE org_id = $1;

-- name: OrgBackoffClear :exec
DELETE FROM a2a_org_backoff WHERE org_id = $1;
