-- +goose Up

-- An org's keys come from one source: the inline JWK Set registered with
-- it (jwks) or a JWKS URL of the org's own (jwks_url), never both. Setting
-- or changing the source is an approved change; the keys the org serves at
-- its URL are fetched, and take effect, without one. jwks_fetched is the
-- last valid set fetched from jwks_url (the keys in force, also in
-- org_keys); jwks_fetched_at is when it was fetched, jwks_fetch_attempted_at
-- and jwks_fetch_error the last attempt and its error (NULL when it
-- succeeded). A failed fetch or an invalid document changes no key.
ALTER TABLE remote_orgs
    ADD COLUMN jwks_url                text,
    ADD COLUMN jwks_fetched            jsonb,
    ADD COLUMN jwks_fetched_at         timestamptz,
    ADD COLUMN jwks_fetch_attempted_at timestamptz,
    ADD COLUMN jwks_fetch_error        text,
    ADD CONSTRAINT remote_orgs_one_key_source CHECK (jwks IS NULL OR jwks_url IS NULL),
    ADD CONSTRAINT remote_orgs_fetched_from_url CHECK (jwks_url IS NOT NULL OR jwks_fetched IS NULL);

-- Identities revoked before migration 00018 surfaced nothing: the
-- revocation that writes revoked_identity_releases did not exist yet. Each
-- obligation of such an org released on one of its declarations is
-- surfaced now, as a revocation made today would have surfaced it, so
-- finance sees it in the summary and the reporting view until it is
-- acknowledged. Rows already written (revocations since 00018) are kept.
INSERT INTO revoked_identity_releases (delegation_id, org_id, amount_minor, currency, released_at, identity_revoked_at)
SELECT d.id, d.org_id, d.amount_minor, d.currency, d.updated_at, o.identity_revoked_at
FROM delegations d
JOIN remote_orgs o ON o.id = d.org_id
WHERE o.identity_revoked_at IS NOT NULL
  AND d.obligation_state = 'released'
  AND d.obligation_reason = 'no_compensation_declared'
ON CONFLICT (delegation_id) DO NOTHING;

-- +goose Down
ALTER TABLE remote_orgs
    DROP CONSTRAINT remote_orgs_fetched_from_url,
    DROP CONSTRAINT remote_orgs_one_key_source,
    DROP COLUMN jwks_fetch_error,
    DROP COLUMN jwks_fetch_attempted_at,
    DROP COLUMN jwks_fetched_at,
    DROP COLUMN jwks_fetched,
    DROP COLUMN jwks_url;
