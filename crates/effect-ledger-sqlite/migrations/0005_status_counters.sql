-- Version 4 -> 5: the number of operations in each terminal status
-- (confirmed, rejected), kept by triggers in the transaction that changes a
-- status, so `stats` reads them instead of counting every row. Triggers and
-- not the ledger's own writes: the Python package writing the same file
-- keeps them true too (it inserts and updates, and never deletes).
-- Unresolved and active statuses are counted through the status index at
-- each read, in time proportional to their number.
CREATE TABLE IF NOT EXISTS effect_status_counts (
    status TEXT PRIMARY KEY,
    operations INTEGER NOT NULL
) WITHOUT ROWID;

DELETE FROM effect_status_counts;
INSERT INTO effect_status_counts (status, operations)
    SELECT status, COUNT(*) FROM effect_operations
    WHERE status IN ('confirmed', 'rejected') GROUP BY status;

CREATE TRIGGER IF NOT EXISTS effect_status_counts_insert
AFTER INSERT ON effect_operations
WHEN NEW.status IN ('confirmed', 'rejected')
BEGIN
    INSERT INTO effect_status_counts (status, operations) VALUES (NEW.status, 1)
        ON CONFLICT (status) DO UPDATE SET operations = operations + 1;
END;

CREATE TRIGGER IF NOT EXISTS effect_status_counts_update
AFTER UPDATE OF status ON effect_operations
WHEN OLD.status IS NOT NEW.status
    AND (OLD.status IN ('confirmed', 'rejected') OR NEW.status IN ('confirmed', 'rejected'))
BEGIN
    UPDATE effect_status_counts SET operations = operations - 1 WHERE status = OLD.status;
    INSERT INTO effect_status_counts (status, operations)
        SELECT NEW.status, 1 WHERE NEW.status IN ('confirmed', 'rejected')
        ON CONFLICT (status) DO UPDATE SET operations = operations + 1;
END;

CREATE TRIGGER IF NOT EXISTS effect_status_counts_delete
AFTER DELETE ON effect_operations
WHEN OLD.status IN ('confirmed', 'rejected')
BEGIN
    UPDATE effect_status_counts SET operations = operations - 1 WHERE status = OLD.status;
END;
