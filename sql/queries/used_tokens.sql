-- name: UsedTokenGet :one
-- A flush's pre-read serves it too (UsedTokensForFlush): change both
-- together.
SELECT * FROM used_token_ids WHERE org_id = $1 AND jti = $2;

-- name: UsedTokensForFlush :many
-- UsedTokenGet of each token id a flush's evidence names (@org_ids[i],
-- @jtis[i]), for its pre-read to answer them (sql/pgstore/served.go):
-- the pair, then UsedTokenGet's columns in its order. No row for an
-- unused one.
SELECT k.org_id AS key_org_id, k.jti AS key_jti, u.*
FROM (SELECT unnest(a.org_ids) AS org_id, unnest(a.jtis) AS jti
      FROM (SELECT @org_ids::text[] AS org_ids, @jtis::text[] AS jtis OFFSET 0) a) k
CROSS JOIN LATERAL (SELECT u.* FROM used_token_ids u WHERE u.org_id = k.org_id AND u.jti = k.jti OFFSET 0) u;

-- name: UsedTokenInsert :execrows
INSERT INTO used_token_ids (org_id, jti, delegation_id, token_sha256, used_at)
VALUES (@org_id, @jti, @delegation_id, @token_sha256, @used_at)
ON CONFLICT (org_id, jti) DO NOTHING;

-- name: UsedTokenInsertBatch :many
-- Records a flush's used token ids, in one statement, each as
-- UsedTokenInsert would, and returns those recorded: a flush buffers only
-- ids its transaction read as unused (sql/pgstore/insertbatch.go), so one
-- missing is a use that raced it, whose operation runs again alone.
INSERT INTO used_token_ids (org_id, jti, delegation_id, token_sha256, used_at)
SELECT u.org_id, u.jti, u.delegation_id, u.token_sha256, u.used_at
FROM (
    SELECT generate_subscripts(@org_ids::text[], 1) AS ord,
           unnest(@org_ids::text[]) AS org_id, unnest(@jtis::text[]) AS jti,
           unnest(@delegation_ids::uuid[]) AS delegation_id, unnest(@token_sha256s::bytea[]) AS token_sha256,
           unnest(@used_ats::timestamptz[]) AS used_at
) u
ORDER BY u.ord
ON CONFLICT (org_id, jti) DO NOTHING
RETURNING org_id, jti;
