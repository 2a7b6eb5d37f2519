-- name: AdvisoryLockTry :one
-- Takes the session-level advisory lock named lock_key without waiting:
-- true when taken. The lock lasts until the session ends: its holder
-- closes the connection to release it.
SELECT pg_try_advisory_lock(hashtextextended(@lock_key::text, 0));


-- name: AdvisoryXactLock :exec
-- Takes the transaction-level advisory lock named lock_key, waiting for
-- it: released when the transaction ends.
SELECT pg_advisory_xact_lock(hashtextextended(@lock_key::text, 0));

-- name: AdvisoryXactLockTry :one
-- Takes the transaction-level advisory lock named lock_key without
-- waiting: true when taken, and then released when the transaction ends.
SELECT pg_try_advisory_xact_lock(hashtextextended(@lock_key::text, 0));

-- name: AdvisoryXactLocksSorted :exec
-- Takes the transaction-level advisory locks named lock_keys, waiting for
-- each, in the order of their names: the first statement of a flush's
-- locking pre-read (sql/pgstore/prereader.go), so that two flushes that
-- need the same locks take them in one order and never wait in a cycle.
SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0)))::integer
FROM (SELECT DISTINCT unnest(@lock_keys::text[]) AS k ORDER BY 1) s;
