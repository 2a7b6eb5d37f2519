-- name: FollowUpInsert :execrows
INSERT INTO delegation_messages (
    delegation_id, message_id, a2a_message_id, request_hash, payload, status, created_at, updated_at
) VALUES (
    @delegation_id, @message_id, @a2a_message_id, @request_hash, @payload, 'queued', @now, @now
)
ON CONFLICT (delegation_id, message_id) DO NOTHING;

-- name: FollowUpGet :one
SELECT * FROM delegation_messages WHERE delegation_id = $1 AND message_id = $2;

-- name: FollowUpListQueued :many
SELECT * FROM delegation_messages WHERE delegation_id = $1 AND status = 'queued' ORDER BY created_at, message_id;

-- name: FollowUpFinish :exec
UPDATE delegation_messages SET
    status       = @status,
    attempts     = attempts + 1,
    error        = @error,
    result_state = @result_state,
    sent_at      = CASE WHEN @status::text = 'sent' THEN @now::timestamptz ELSE sent_at END,
    updated_at   = @now
WHERE delegation_id = @delegation_id AND message_id = @message_id;

-- name: FollowUpAttempt :exec
UPDATE delegation_messages SET attempts = attempts + 1, error = @error, updated_at = @now
WHERE delegation_id = @delegation_id AND message_id = @message_id;

-- name: FollowUpListByDelegation :many
-- Every follow-up message of a delegation, in the order queued.
SELECT * FROM delegation_messages WHERE delegation_id = $1 ORDER BY created_at, message_id;
