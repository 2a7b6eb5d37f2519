-- +goose Up

-- A delegation names its write-off awaiting a second approver, if any, so
-- evidence that discharges the obligation learns from the row it already
-- locked whether there is a write-off to void. The compensation service
-- keeps it in step with write_offs, through ledger.Apply;
-- pgstore.CheckInvariants checks that it is.
ALTER TABLE delegations ADD COLUMN pending_write_off_id uuid;
UPDATE delegations d SET pending_write_off_id = w.id
FROM write_offs w
WHERE w.delegation_id = d.id AND w.status = 'pending_approval';

-- +goose Down
ALTER TABLE delegations DROP COLUMN pending_write_off_id;
