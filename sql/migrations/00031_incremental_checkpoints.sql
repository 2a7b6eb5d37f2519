-- +goose Up

-- Incremental checkpoints (ledger/AUDIT.md). A checkpoint used to sign the
-- head of every stream, which past a few million streams no longer fits in
-- one message. Now each one signs the heads of the streams that moved in a
-- span of the event feed: the final events (migration 00009) after the
-- previous checkpoint's span, in the feed's order (order_xid, tx_pos, pos),
-- up to a bounded number of them. Its span ends at the event named by
-- through_pos, whose feed order is kept beside it, so that the checkpoint
-- that signed a stream's head can be found by the position of the stream's
-- last event (CheckpointsSigningStream) without reading any payload.
--
-- A checkpoint signed before this migration has no span (the three columns
-- are NULL): it signed every stream's head, and the first incremental
-- checkpoint after it starts at the beginning of the feed.
ALTER TABLE checkpoints
    ADD COLUMN through_pos       bigint,
    ADD COLUMN through_order_xid xid8,
    ADD COLUMN through_tx_pos    bigint,
    ADD CONSTRAINT checkpoints_through_whole CHECK (
        (through_pos IS NULL) = (through_order_xid IS NULL) AND (through_pos IS NULL) = (through_tx_pos IS NULL));
CREATE INDEX checkpoints_through ON checkpoints (through_order_xid, through_tx_pos, through_pos, id)
    WHERE through_pos IS NOT NULL;

-- +goose Down
DROP INDEX checkpoints_through;
ALTER TABLE checkpoints
    DROP CONSTRAINT checkpoints_through_whole,
    DROP COLUMN through_tx_pos,
    DROP COLUMN through_order_xid,
    DROP COLUMN through_pos;
