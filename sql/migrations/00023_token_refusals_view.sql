-- +goose Up

-- Refused signed evidence, counted per (org, reason) since migration 00019
-- (token_refusals), for finance's SQL clients: how often each registered
-- org's tokens were refused and why. org_id is '' for tokens that named no
-- registered org. The samples (token_refusal_samples) stay out of the
-- reporting schema: they hold client addresses, which are for on-call
-- (GET /v1/anomalies), not for reports.
CREATE VIEW reporting.token_refusals_v1 AS
SELECT org_id, reason, refused, first_at, last_at
FROM token_refusals;

COMMENT ON VIEW reporting.token_refusals_v1 IS
    'Refused compensation acks and declarations per (org, reason): how many, first and last. org_id is empty for tokens naming no registered org. Version 1.';

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'quittance_reporting') THEN
        EXECUTE 'GRANT SELECT ON reporting.token_refusals_v1 TO quittance_reporting';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP VIEW reporting.token_refusals_v1;
