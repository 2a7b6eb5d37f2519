-- name: TaskClassList :many
-- Every registered task class, by name. There are few: a full read.
SELECT * FROM task_classes ORDER BY name;
