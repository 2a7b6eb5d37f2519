-- name: LinkInsert :exec
INSERT INTO delegation_links (delegation_id, linked_id, kind, created_at)
VALUES (@delegation_id, @linked_id, @kind, @now)
ON CONFLICT DO NOTHING;

-- name: LinkListFrom :many
SELECT delegation_id, linked_id, kind FROM delegation_links WHERE delegation_id = $1 ORDER BY kind, created_at, linked_id;

-- name: LinkListTo :many
SELECT delegation_id, linked_id, kind FROM delegation_links WHERE linked_id = $1 ORDER BY kind, created_at, delegation_id;
