-- +goose Up

-- The event feed's order without a global lock.
--
-- Until now (00004) every transaction that appended events took one
-- advisory lock at commit and held it until it was visible, so positions
-- became visible in increasing order. Every writing transaction in the
-- cluster queued on that lock, and on a second one: the trigger's
-- pg_notify, whose commit takes PostgreSQL's cluster-wide notification
-- lock. This migration removes both. Readers instead serve a position only
-- once no transaction that could still write a position before it is open.
--
-- What each position row records, at commit (the deferred trigger), once
-- per transaction:
--
--   order_xid = greatest(own xid, latest completed xid at commit), the
--               latter being pg_snapshot_xmax(a snapshot taken there) - 1
--   tx_pos    = the transaction's first position (nextval, at commit)
--   pos       = nextval, one per event, in insertion order
--
-- The feed's order is (order_xid, tx_pos, pos), and a reader whose
-- statement snapshot has xmin X serves only rows with order_xid < X:
--
-- 1. Nothing is ever added below the cut. A row not visible to the reader
--    comes from a transaction still open in its snapshot, or one that had
--    no xid yet; either way that transaction's xid is >= X (X is the
--    lowest xid still open; newer xids are higher still), and its
--    order_xid >= its xid. Rows below the cut whose transaction committed
--    are visible in that same snapshot (every xid below xmin has ended).
--    So the rows below the cut are final: a reader that served them in
--    order, up to some row, has served every row that will ever sort
--    before it. That is why a cursor needs no more than the last row
--    served: resuming after it yields no gap and no duplicate, on any
--    replica, after any restart, and the order never changes.
--
-- 2. The order follows commit. If A committed before B reached its commit,
--    the latest completed xid B reads there is >= A's xid and >= the one A
--    read: B's order_xid >= A's; a tie is broken by tx_pos, taken by A
--    before it committed and by B after. In particular a stream's events
--    (whose appends are serialized by the stream's lock) are in stream_seq
--    order, and a transaction's events are adjacent, in insertion order.
--    Transactions that commit at the same moment are in an arbitrary but
--    fixed order. (Ordering by the writer's own xid alone would break
--    this: a transaction that took its xid before it waited for a stream's
--    lock would sort before the append it waited for.)
--
-- 3. Every event becomes ready, without waiting for anything to happen
--    after it: every xid up to its order_xid had been assigned when it
--    committed, so once those transactions (and its own) have ended, the
--    xmin of a new snapshot is above it. (xmax itself, the latest completed
--    xid + 1, could name an xid not yet assigned: an event ordered by it
--    would wait for some later transaction.)
--
-- The price is latency, not throughput: a committed event waits until every
-- transaction with an xid up to its order_xid, that is, one that was
-- already writing when it committed, has ended. pg_current_snapshot() spans
-- the whole cluster, so a long writing transaction in another database
-- (CREATE INDEX CONCURRENTLY, a forgotten prepared transaction) holds the
-- feed back too; nothing makes a reader skip an event.
--
-- Positions keep their meaning as identifiers of events (Last-Event-ID is
-- still an event's seq, mapped to its position): existing positions keep
-- their numbers and their order (order_xid 0, tx_pos 0: before every new
-- row, by pos), and new positions come from the same sequence, so they are
-- greater. A position is no longer comparable to another by number: the
-- feed's order is the triple.
--
-- Wake-ups: the store notifies quittance_events after each commit that
-- appended events, on a connection of its own, so the notification lock is
-- never held by a writing transaction. Writers that insert events by other
-- means wake nobody; readers find their events at the next poll.
--
-- Rolling upgrade: a replica still running the previous binary reads by pos
-- alone, which new positions no longer order by commit; finish the rollout
-- before relying on its streams.

-- Lock events first: every transaction that already appended events
-- finishes (its old trigger writes its positions) before the table below
-- changes, and none appends until this commits. Taking event_positions
-- first could deadlock with such a transaction's commit.
LOCK TABLE events IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE event_positions
    ADD COLUMN order_xid xid8   NOT NULL DEFAULT '0',
    ADD COLUMN tx_pos    bigint NOT NULL DEFAULT 0;
ALTER TABLE event_positions
    ALTER COLUMN order_xid DROP DEFAULT,
    ALTER COLUMN tx_pos DROP DEFAULT;

DROP INDEX event_positions_delegation;
DROP INDEX event_positions_tenant;
CREATE INDEX event_positions_feed ON event_positions (order_xid, tx_pos, pos);
CREATE INDEX event_positions_delegation ON event_positions (delegation_id, order_xid, tx_pos, pos) WHERE delegation_id IS NOT NULL;
CREATE INDEX event_positions_tenant ON event_positions (tenant, order_xid, tx_pos, pos) WHERE tenant IS NOT NULL;

-- The transaction's order_xid and tx_pos are kept in a transaction-local
-- setting, with the xid they belong to, so its later events share them.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION events_assign_position() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_pos    bigint := nextval('event_positions_pos_seq');
    v_xid    xid8   := pg_current_xact_id();
    v_tx     text   := coalesce(current_setting('quittance.event_feed_tx', true), '');
    v_order  xid8;
    v_tx_pos bigint;
BEGIN
    IF v_tx <> '' AND split_part(v_tx, ' ', 1)::xid8 = v_xid THEN
        v_order  := split_part(v_tx, ' ', 2)::xid8;
        v_tx_pos := split_part(v_tx, ' ', 3)::bigint;
    ELSE
        v_order  := greatest(v_xid,
            (pg_snapshot_xmax(pg_current_snapshot())::text::numeric - 1)::text::xid8);
        v_tx_pos := v_pos;
        PERFORM set_config('quittance.event_feed_tx', v_xid || ' ' || v_order || ' ' || v_tx_pos, true);
    END IF;
    INSERT INTO event_positions (pos, seq, delegation_id, tenant, order_xid, tx_pos)
    VALUES (v_pos, NEW.seq, NEW.delegation_id,
            (SELECT d.tenant FROM delegations d WHERE d.id = NEW.delegation_id),
            v_order, v_tx_pos);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- Positions written since the Up were not assigned in commit order; the
-- restored trigger orders those written from now on.
LOCK TABLE events IN SHARE ROW EXCLUSIVE MODE;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION events_assign_position() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('quittance/event-positions', 0));
    INSERT INTO event_positions (seq, delegation_id, tenant)
    VALUES (NEW.seq, NEW.delegation_id,
            (SELECT d.tenant FROM delegations d WHERE d.id = NEW.delegation_id));
    PERFORM pg_notify('quittance_events', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

DROP INDEX event_positions_feed;
DROP INDEX event_positions_delegation;
DROP INDEX event_positions_tenant;
ALTER TABLE event_positions DROP COLUMN order_xid, DROP COLUMN tx_pos;
CREATE INDEX event_positions_delegation ON event_positions (delegation_id, pos) WHERE delegation_id IS NOT NULL;
CREATE INDEX event_positions_tenant ON event_positions (tenant, pos) WHERE tenant IS NOT NULL;
