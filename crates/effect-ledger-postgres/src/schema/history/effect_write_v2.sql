-- The write function as version 2 of the schema shipped it, never applied by
-- the library: the upgrade tests (src/schema/tests.rs) build the schemas
-- older releases left with it, then migrate them. Its comments name the
-- places the argument had then (now migrations/0003_parallel_appends.sql
-- and migrations/0004_write_answers_version.sql).

CREATE OR REPLACE FUNCTION {schema}.effect_write(
    p_kind text, p_version text,
    p_operation_id text, p_contract_name text, p_contract_version text,
    p_request_fingerprint text, p_provider_idempotency_key text, p_status text,
    p_result_json text, p_provider_operation_id text, p_error text, p_attempts integer,
    p_evidence_json text, p_owner_token text, p_lease_until double precision,
    p_created_at text, p_updated_at text,
    p_event_types text[], p_event_data text[], p_event_timestamps text[],
    p_deferred boolean
) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $effect_write$
DECLARE
    n integer := coalesce(cardinality(p_event_types), 0);
    sequences bigint[];
    marked xid[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN false;
    END IF;
    -- For this transaction only: a deferrable write commits without waiting
    -- for its WAL flush, every other one waits whatever the session says.
    PERFORM set_config('synchronous_commit',
                       CASE WHEN p_deferred THEN 'off' ELSE 'on' END, true);
    IF p_kind = 'insert' THEN
        INSERT INTO {schema}.effect_operations (operation_id, contract_name,
            contract_version, request_fingerprint, provider_idempotency_key, status,
            result_json, provider_operation_id, error, attempts, evidence_json,
            owner_token, lease_until, created_at, updated_at)
        VALUES (p_operation_id, p_contract_name, p_contract_version,
            p_request_fingerprint, p_provider_idempotency_key, p_status, p_result_json,
            p_provider_operation_id, p_error, p_attempts, p_evidence_json, p_owner_token,
            p_lease_until, p_created_at, p_updated_at)
        ON CONFLICT (operation_id) DO NOTHING;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
    ELSE
        PERFORM 1 FROM {schema}.effect_operations
            WHERE operation_id = p_operation_id AND xmin = p_version::xid
            FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
        UPDATE {schema}.effect_operations SET contract_name = p_contract_name,
            contract_version = p_contract_version,
            request_fingerprint = p_request_fingerprint,
            provider_idempotency_key = p_provider_idempotency_key, status = p_status,
            result_json = p_result_json, provider_operation_id = p_provider_operation_id,
            error = p_error, attempts = p_attempts, evidence_json = p_evidence_json,
            owner_token = p_owner_token, lease_until = p_lease_until,
            created_at = p_created_at, updated_at = p_updated_at
        WHERE operation_id = p_operation_id;
    END IF;
    IF n > 0 THEN
        -- Appends in one schema are serialized until commit (an exclusive
        -- transaction lock), so sequences commit in the order they are
        -- drawn. The shared form, with each writer recording the others
        -- still drawing (`drawers`), let appends commit in parallel, but
        -- skipped two events of a concurrent-writer run under load; it stays
        -- off until that is explained. `drawers` is then always empty (the
        -- scan of pg_locks that filled it is gone), and the reader's check
        -- costs nothing.
        PERFORM pg_current_xact_id();
        PERFORM pg_advisory_xact_lock(1701209697,
            hashtext('effect-ledger-postgres events {schema}'));
        SELECT array_agg(s ORDER BY s) INTO sequences FROM (
            SELECT nextval(pg_get_serial_sequence('{schema}.effect_events', 'sequence')) AS s
            FROM generate_series(1, n)
        ) AS drawn;
        -- No other writer can be appending meanwhile: nobody to record.
        marked := '{}';
        INSERT INTO {schema}.effect_events (sequence, operation_id, event_type,
            data_json, timestamp, drawers)
        SELECT sequences[i], p_operation_id, p_event_types[i], p_event_data[i],
            p_event_timestamps[i], marked
        FROM generate_series(1, n) AS i ORDER BY i;
    END IF;
    RETURN true;
END
$effect_write$;
