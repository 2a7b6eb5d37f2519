-- name: AdvisoryLockTry :one
-- Takes the session-level advisory lock named lock_key without waiting:
-- true when taken. The lock lasts until released or the session ends.
SELECT pg_try_advisory_lock(hashtextextended(@lock_key::text, 0));

-- name: AdvisoryLockRelease :one
SELECT pg_advisory_unlock(hashtextextended(@lock_key::text, 0));
