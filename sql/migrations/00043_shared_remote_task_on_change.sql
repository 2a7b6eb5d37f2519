-- +goose Up

-- The trigger of migration 00033 that keeps the shared remote task ids ran
-- on every update of a delegation recording a remote task id: an UPDATE OF
-- trigger fires when the column is in the statement's SET list, and
-- DelegationUpdate sets every column, so each task status and each
-- evidence decision took the remote task's lock and searched the index
-- for another holder again, two nested statements an update, four a
-- lifecycle (cmd/quittance-bench/BENCHMARK.md). A delegation is a new
-- holder of a remote task id only when it inserts one, or an update
-- changes it; an update that leaves it as it was adds no pair, since the
-- trigger ran when the id was recorded and every later holder's own run
-- finds this one. So the update's trigger now runs only on a change; the
-- insert's is unchanged.
DROP TRIGGER delegations_shared_remote_task ON delegations;

CREATE TRIGGER delegations_shared_remote_task
    AFTER INSERT ON delegations
    FOR EACH ROW WHEN (NEW.remote_task_id IS NOT NULL)
    EXECUTE FUNCTION quittance_note_shared_remote_task();

CREATE TRIGGER delegations_shared_remote_task_changed
    AFTER UPDATE OF remote_task_id ON delegations
    FOR EACH ROW WHEN (NEW.remote_task_id IS NOT NULL AND NEW.remote_task_id IS DISTINCT FROM OLD.remote_task_id)
    EXECUTE FUNCTION quittance_note_shared_remote_task();

-- +goose Down
DROP TRIGGER delegations_shared_remote_task_changed ON delegations;
DROP TRIGGER delegations_shared_remote_task ON delegations;

CREATE TRIGGER delegations_shared_remote_task
    AFTER INSERT OR UPDATE OF remote_task_id ON delegations
    FOR EACH ROW WHEN (NEW.remote_task_id IS NOT NULL)
    EXECUTE FUNCTION quittance_note_shared_remote_task();
