-- +goose Up

-- The requester of a pending change may withdraw it (refuse it themselves),
-- but never approve it: the four-eyes rule is about what takes effect. The
-- CHECK of 00011 refused every decision by the requester, so a withdrawal
-- always failed; this one refuses only an applied change decided by its
-- requester.
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_applied_by_another CHECK (
    decided_by IS NULL OR status <> 'applied' OR decided_by <> requested_by);

-- A further credential of a machine principal, issued (or rotated) by an
-- on-call principal, waits for a second one: whoever holds a machine
-- orchestrator's credential can release its tenant's held obligations.
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check CHECK (kind IN (
    'principal_create', 'role_grant', 'org_update', 'task_class_update', 'write_off_threshold_update',
    'credential_create'));

-- +goose Down
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check CHECK (kind IN (
    'principal_create', 'role_grant', 'org_update', 'task_class_update', 'write_off_threshold_update')) NOT VALID;
-- Changes withdrawn meanwhile stay as they were recorded; the old rule
-- holds for rows written from then on.
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_applied_by_another;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_check CHECK (
    decided_by IS NULL OR decided_by <> requested_by) NOT VALID;
