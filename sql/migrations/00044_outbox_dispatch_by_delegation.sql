-- +goose Up

-- Whether a delegation's dispatch may have reached its agent asks for its
-- dispatch job claimed at least once (DelegationGetByIDForUpdateWithDispatch,
-- on every cancel and every evidence decision). Finished jobs stay in
-- a2a_outbox, and its only index by delegation covers open jobs, so the
-- question read the whole outbox, which grows with every dispatch
-- (TestWritePathPlansUseIndexes). A dispatch job's kind never changes, so
-- the index is never touched by a claim.
CREATE INDEX a2a_outbox_dispatch ON a2a_outbox (delegation_id) WHERE kind = 'dispatch';

-- +goose Down
DROP INDEX a2a_outbox_dispatch;
