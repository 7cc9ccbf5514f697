-- Version 7: the number of operations in each terminal status (confirmed,
-- rejected), kept by triggers in the transaction that changes a status, so
-- `stats` reads them instead of counting every row.
--
-- Each count is split over 64 shards (the writing session's backend pid
-- modulo 64), so transactions confirming operations at once rarely update
-- the same counter row and never wait for each other's commit on it;
-- `stats` sums the shards. A shard can go negative (a prune deletes what
-- other sessions counted); only the sum means anything. Unresolved and
-- active statuses are counted through the status index at each read.
--
-- The operations table is locked against writes while the counters are
-- filled and the triggers created, so no change falls between the two.

CREATE TABLE IF NOT EXISTS {schema}.effect_status_counts (
    status TEXT NOT NULL,
    shard SMALLINT NOT NULL,
    operations BIGINT NOT NULL,
    PRIMARY KEY (status, shard)
);

LOCK TABLE {schema}.effect_operations IN SHARE ROW EXCLUSIVE MODE;

DELETE FROM {schema}.effect_status_counts;
INSERT INTO {schema}.effect_status_counts (status, shard, operations)
    SELECT status, 0, count(*) FROM {schema}.effect_operations
    WHERE status IN ('confirmed', 'rejected') GROUP BY status;

CREATE OR REPLACE FUNCTION {schema}.effect_count_status() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    my_shard SMALLINT := (pg_backend_pid() % 64)::smallint;
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.status IN ('confirmed', 'rejected') THEN
        INSERT INTO {schema}.effect_status_counts AS c (status, shard, operations)
            VALUES (OLD.status, my_shard, -1)
            ON CONFLICT (status, shard) DO UPDATE SET operations = c.operations - 1;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.status IN ('confirmed', 'rejected') THEN
        INSERT INTO {schema}.effect_status_counts AS c (status, shard, operations)
            VALUES (NEW.status, my_shard, 1)
            ON CONFLICT (status, shard) DO UPDATE SET operations = c.operations + 1;
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS effect_status_counts_insert ON {schema}.effect_operations;
CREATE TRIGGER effect_status_counts_insert
    AFTER INSERT ON {schema}.effect_operations
    FOR EACH ROW WHEN (NEW.status IN ('confirmed', 'rejected'))
    EXECUTE FUNCTION {schema}.effect_count_status();

DROP TRIGGER IF EXISTS effect_status_counts_update ON {schema}.effect_operations;
CREATE TRIGGER effect_status_counts_update
    AFTER UPDATE OF status ON {schema}.effect_operations
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
        AND (OLD.status IN ('confirmed', 'rejected') OR NEW.status IN ('confirmed', 'rejected')))
    EXECUTE FUNCTION {schema}.effect_count_status();

DROP TRIGGER IF EXISTS effect_status_counts_delete ON {schema}.effect_operations;
CREATE TRIGGER effect_status_counts_delete
    AFTER DELETE ON {schema}.effect_operations
    FOR EACH ROW WHEN (OLD.status IN ('confirmed', 'rejected'))
    EXECUTE FUNCTION {schema}.effect_count_status();
