-- +goose Up

-- The requester of a pending change may withdraw it (refuse it themselves),
-- but never approve it: the four-eyes rule is about what takes effect. The
-- CHECK of 00011 refused every decision by the requester, so a withdrawal
-- always failed; this one refuses only an applied change decided by its
-- requester.
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_applied_by_another CHECK (
    decided_by IS NULL OR status <> 'applied' OR decided_by <> requested_by);

-- +goose Down
-- Changes withdrawn meanwhile stay as they were recorded; the old rule
-- holds for rows written from then on.
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_applied_by_another;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_check CHECK (
    decided_by IS NULL OR decided_by <> requested_by) NOT VALID;
