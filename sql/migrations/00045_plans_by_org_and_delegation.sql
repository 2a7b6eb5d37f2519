-- +goose Up

-- Revoking an org's identity lists the obligations its declarations
-- released (DelegationListDeclaredReleasesByOrgForUpdate), to record each
-- as a release on a discredited identity. Released is an ended state, out
-- of delegations_active_cover, and the only other index leading with
-- org_id is the remote tasks' unique one, which holds every delegation of
-- the org: the list read the whole table, or all the org's delegations,
-- which grow with the ledger (TestWritePathPlansUseIndexes). Declarations
-- are a small share of the ended obligations, so the index stays small,
-- and in id order it gives the rows in the order they are locked.
CREATE INDEX delegations_declared_releases ON delegations (org_id, id)
    WHERE obligation_state = 'released' AND obligation_reason = 'no_compensation_declared';

-- A delegation's page (the console's) lists the delegation's write-offs
-- (WriteOffListByDelegation), newest first. write_offs has no other index
-- by delegation than the one of its pending write-off, so the list read
-- every write-off ever requested (TestWritePathPlansUseIndexes).
CREATE INDEX write_offs_delegation ON write_offs (delegation_id, created_at DESC, id DESC);

-- +goose Down
DROP INDEX write_offs_delegation;
DROP INDEX delegations_declared_releases;
