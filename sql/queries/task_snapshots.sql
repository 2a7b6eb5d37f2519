-- name: TaskSnapshotGet :one
SELECT snapshot, updated_at FROM task_snapshots WHERE delegation_id = $1;

-- name: TaskSnapshotGetForUpdate :one
SELECT snapshot, updated_at FROM task_snapshots WHERE delegation_id = $1 FOR UPDATE;

-- name: TaskSnapshotPut :exec
INSERT INTO task_snapshots (delegation_id, snapshot, updated_at) VALUES (@delegation_id, @snapshot, @now)
ON CONFLICT (delegation_id) DO UPDATE SET snapshot = EXCLUDED.snapshot, updated_at = EXCLUDED.updated_at;
