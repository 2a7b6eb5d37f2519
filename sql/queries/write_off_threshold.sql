-- name: WriteOffThresholdGet :one
SELECT * FROM write_off_threshold;

-- name: WriteOffThresholdPut :exec
INSERT INTO write_off_threshold (singleton, threshold_minor, updated_at, updated_by, pending_change)
VALUES (true, @threshold_minor, @updated_at, @updated_by, @pending_change)
ON CONFLICT (singleton) DO UPDATE SET
    threshold_minor = EXCLUDED.threshold_minor,
    updated_at      = EXCLUDED.updated_at,
    updated_by      = EXCLUDED.updated_by,
    pending_change  = EXCLUDED.pending_change;

-- name: WriteOffCurrencyThresholdList :many
-- The thresholds approved changes set for single currencies.
SELECT * FROM write_off_currency_thresholds ORDER BY currency;

-- name: WriteOffCurrencyThresholdPut :exec
INSERT INTO write_off_currency_thresholds (currency, threshold_minor, updated_at, updated_by, pending_change)
VALUES (@currency, @threshold_minor, @updated_at, @updated_by, @pending_change)
ON CONFLICT (currency) DO UPDATE SET
    threshold_minor = EXCLUDED.threshold_minor,
    updated_at      = EXCLUDED.updated_at,
    updated_by      = EXCLUDED.updated_by,
    pending_change  = EXCLUDED.pending_change;
