-- +goose Up

-- Claiming the head of an event stream in one round trip. An append must
-- hold the stream's transaction-scoped advisory lock before it reads the
-- stream's last event, or two appends could chain onto the same head.
-- event_stream_head takes the lock and then reads the head as a separate
-- statement: in a VOLATILE function every statement runs on a fresh
-- snapshot, so the read sees an append committed by the lock's previous
-- holder, exactly as a second statement from the client would.
-- +goose StatementBegin
CREATE FUNCTION event_stream_head(p_stream text)
RETURNS TABLE (stream_seq integer, hash bytea)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_stream, 0));
    RETURN QUERY
        SELECT e.stream_seq, e.hash FROM events e
        WHERE e.stream = p_stream
        ORDER BY e.stream_seq DESC
        LIMIT 1;
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION event_stream_head(text);
