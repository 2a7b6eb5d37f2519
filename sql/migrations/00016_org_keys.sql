-- +goose Up

-- The key history of every org: each public key it was ever registered
-- with, its RFC 7638 thumbprint and the interval it was in force. A stored
-- token is verified again against the keys in force when it was accepted,
-- not the org's current ones. Rows are appended when a key is registered
-- and closed (valid_until) when it is removed; they are never deleted.
CREATE TABLE org_keys (
    org_id      text        NOT NULL REFERENCES remote_orgs (id),
    kid         text        NOT NULL,
    thumbprint  text        NOT NULL,
    jwk         jsonb       NOT NULL,
    valid_from  timestamptz NOT NULL,
    valid_until timestamptz,
    CHECK (valid_until IS NULL OR valid_until >= valid_from)
);
CREATE INDEX org_keys_by_org ON org_keys (org_id, valid_from);
-- A kid names one key in force at a time.
CREATE UNIQUE INDEX org_keys_open_kid ON org_keys (org_id, kid) WHERE valid_until IS NULL;

-- The keys orgs are registered with now, in force since the org was
-- registered: the earliest time known. Keys removed before the history
-- existed are not known. The thumbprint is RFC 7638's: the SHA-256 of the
-- key type's required members, in lexicographic order, no whitespace,
-- base64url without padding (ledger.JWKThumbprint computes the same).
INSERT INTO org_keys (org_id, kid, thumbprint, jwk, valid_from)
SELECT o.id, k ->> 'kid',
       rtrim(translate(encode(sha256(convert_to(
           CASE k ->> 'kty'
               WHEN 'OKP' THEN format('{"crv":%s,"kty":"OKP","x":%s}', to_json(k ->> 'crv'), to_json(k ->> 'x'))
               WHEN 'EC' THEN format('{"crv":%s,"kty":"EC","x":%s,"y":%s}', to_json(k ->> 'crv'), to_json(k ->> 'x'), to_json(k ->> 'y'))
               WHEN 'RSA' THEN format('{"e":%s,"kty":"RSA","n":%s}', to_json(k ->> 'e'), to_json(k ->> 'n'))
           END, 'UTF8')), 'base64'), '+/', '-_'), '='),
       k, o.created_at
FROM remote_orgs o, jsonb_array_elements(o.jwks -> 'keys') AS k
WHERE o.jwks IS NOT NULL AND k ->> 'kty' IN ('OKP', 'EC', 'RSA');

-- +goose Down
DROP TABLE org_keys;
