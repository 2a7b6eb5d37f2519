-- name: OrgKeyList :many
-- An org's key history, every key it ever had.
SELECT * FROM org_keys WHERE org_id = $1 ORDER BY valid_from, kid;

-- name: OrgKeyInsert :exec
INSERT INTO org_keys (org_id, kid, thumbprint, jwk, valid_from)
VALUES (@org_id, @kid, @thumbprint, @jwk, @valid_from);

-- name: OrgKeyEnd :exec
UPDATE org_keys SET valid_until = @valid_until
WHERE org_id = @org_id AND kid = @kid AND thumbprint = @thumbprint AND valid_from = @valid_from
  AND valid_until IS NULL;
