-- name: FeedList :many
-- Events after a commit-ordered position, in commit order, optionally of
-- one tenant or one delegation.
SELECT p.pos, sqlc.embed(e) FROM event_positions p
JOIN events e ON e.seq = p.seq
WHERE p.pos > @after_pos
  AND (sqlc.narg(tenant)::text IS NULL OR p.tenant = sqlc.narg(tenant))
  AND (sqlc.narg(delegation_id)::uuid IS NULL OR p.delegation_id = sqlc.narg(delegation_id))
ORDER BY p.pos
LIMIT @max_rows;

-- name: FeedPositionOf :one
SELECT pos FROM event_positions WHERE seq = $1;

-- name: FeedHead :one
SELECT coalesce(max(pos), 0)::bigint FROM event_positions;
