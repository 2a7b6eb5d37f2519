-- name: CompensationEvidenceGet :one
SELECT * FROM compensation_evidence WHERE delegation_id = $1;

-- name: CompensationEvidencePut :exec
INSERT INTO compensation_evidence (
    delegation_id, idempotency_key, kind, channel, payload_sha256, status, receipt, data, token, received_at, decided_at
) VALUES (
    @delegation_id, @idempotency_key, @kind, @channel, @payload_sha256, @status, @receipt, @data, @token, @received_at, @decided_at
)
ON CONFLICT (delegation_id) DO UPDATE SET status = EXCLUDED.status, decided_at = EXCLUDED.decided_at;
