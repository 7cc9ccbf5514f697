-- Version 8: the counters' delete trigger runs once per statement, over
-- the statement's deleted rows, instead of once per row. Only a prune
-- deletes operations, a batch of them per statement: the row trigger
-- updated the session's counter row once per deleted operation, and each
-- update inside one transaction leaves a version the next must pass, so a
-- batch cost grew with the square of its size. Inserts and status updates
-- keep their row triggers: the ledger writes one row per statement, most
-- of them in no counted status, which the row triggers' WHEN skips without
-- a call.
--
-- Replacing the trigger takes a lock that no deletion passes, so none
-- falls between the two.

CREATE OR REPLACE FUNCTION {schema}.effect_uncount_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    my_shard SMALLINT := (pg_backend_pid() % 64)::smallint;
BEGIN
    INSERT INTO {schema}.effect_status_counts AS c (status, shard, operations)
        SELECT status, my_shard, -count(*) FROM effect_deleted_operations
        WHERE status IN ('confirmed', 'rejected') GROUP BY status
        ON CONFLICT (status, shard) DO UPDATE SET operations = c.operations + EXCLUDED.operations;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS effect_status_counts_delete ON {schema}.effect_operations;
CREATE TRIGGER effect_status_counts_delete
    AFTER DELETE ON {schema}.effect_operations
    REFERENCING OLD TABLE AS effect_deleted_operations
    FOR EACH STATEMENT
    EXECUTE FUNCTION {schema}.effect_uncount_deleted();
