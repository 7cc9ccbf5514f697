-- The write function as versions 4 and 5 of the schema shipped it, never applied by
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
    p_deferred boolean, p_stamp text,
    OUT written boolean, OUT version text, OUT stamp text
) LANGUAGE plpgsql VOLATILE AS $effect_write4$
DECLARE
    n integer := coalesce(cardinality(p_event_types), 0);
    sequences bigint[];
    me bigint;
    pending xid8[];
    alone boolean := false;
BEGIN
    written := false;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN;
    END IF;
    -- For this transaction only: a deferrable write commits without waiting
    -- for its WAL flush, every other one waits whatever the session says.
    PERFORM set_config('synchronous_commit',
                       CASE WHEN p_deferred THEN 'off' ELSE 'on' END, true);
    IF p_stamp IS NOT NULL THEN
        stamp := to_char(clock_timestamp() AT TIME ZONE 'UTC',
                         'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"');
        IF p_updated_at = p_stamp THEN
            p_updated_at := stamp;
        END IF;
        IF p_created_at = p_stamp THEN
            p_created_at := stamp;
        END IF;
        p_event_timestamps := array_fill(stamp, ARRAY[n]);
    END IF;
    IF p_kind = 'insert' THEN
        INSERT INTO {schema}.effect_operations (operation_id, contract_name,
            contract_version, request_fingerprint, provider_idempotency_key, status,
            result_json, provider_operation_id, error, attempts, evidence_json,
            owner_token, lease_until, created_at, updated_at)
        VALUES (p_operation_id, p_contract_name, p_contract_version,
            p_request_fingerprint, p_provider_idempotency_key, p_status, p_result_json,
            p_provider_operation_id, p_error, p_attempts, p_evidence_json, p_owner_token,
            p_lease_until, p_created_at, p_updated_at)
        ON CONFLICT (operation_id) DO NOTHING
        RETURNING xmin::text INTO version;
        IF version IS NULL THEN
            RETURN;
        END IF;
    ELSE
        PERFORM 1 FROM {schema}.effect_operations
            WHERE operation_id = p_operation_id AND xmin = p_version::xid
            FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        UPDATE {schema}.effect_operations SET contract_name = p_contract_name,
            contract_version = p_contract_version,
            request_fingerprint = p_request_fingerprint,
            provider_idempotency_key = p_provider_idempotency_key, status = p_status,
            result_json = p_result_json, provider_operation_id = p_provider_operation_id,
            error = p_error, attempts = p_attempts, evidence_json = p_evidence_json,
            owner_token = p_owner_token, lease_until = p_lease_until,
            created_at = p_created_at, updated_at = p_updated_at
        WHERE operation_id = p_operation_id
        RETURNING xmin::text INTO version;
    END IF;
    IF n > 0 THEN
        -- The argument is in the doc comments of MIGRATION_3 and MIGRATION_4
        -- (schema.rs of effect-ledger-postgres). Order matters: an id, the
        -- mark, the draw, then the try or the look at the other marks.
        me := pg_current_xact_id()::text::bigint;
        PERFORM pg_advisory_xact_lock_shared(1701209697,
            hashtext('effect-ledger-postgres events {schema}'));
        SELECT array_agg(s ORDER BY s) INTO sequences FROM (
            SELECT nextval(pg_get_serial_sequence('{schema}.effect_events', 'sequence')) AS s
            FROM generate_series(1, n)
        ) AS drawn;
        -- Alone? The mark's exclusive lock, tried without waiting in a
        -- subtransaction that is always rolled back, which releases it.
        BEGIN
            alone := pg_try_advisory_xact_lock(1701209697,
                hashtext('effect-ledger-postgres events {schema}'));
            RAISE EXCEPTION USING ERRCODE = 'EL001';
        EXCEPTION WHEN SQLSTATE 'EL001' THEN
            NULL;
        END;
        IF alone THEN
            pending := '{}';
        ELSE
            -- One call of pg_locks (one consistent copy of the lock table). Its
            -- 32-bit ids belong to transactions running now, so each is within
            -- 2^31 of ours: widen it to xid8 by the signed distance.
            WITH locks AS MATERIALIZED (
                SELECT locktype, virtualtransaction, transactionid, mode, granted,
                    classid, objid, objsubid, pid FROM pg_catalog.pg_locks)
            SELECT coalesce(array_agg(DISTINCT (me
                    + ((own.transactionid::text::bigint - me % 4294967296 + 6442450944)
                       % 4294967296) - 2147483648)::text::xid8), '{}')
                INTO pending
            FROM locks AS mark JOIN locks AS own
                ON own.virtualtransaction = mark.virtualtransaction
            WHERE mark.locktype = 'advisory' AND mark.objsubid = 2 AND mark.granted
                AND mark.classid = 1701209697
                AND mark.objid = hashtext('effect-ledger-postgres events {schema}')::oid
                AND mark.pid IS DISTINCT FROM pg_backend_pid()
                AND own.locktype = 'transactionid' AND own.mode = 'ExclusiveLock'
                AND own.granted;
        END IF;
        INSERT INTO {schema}.effect_events (sequence, operation_id, event_type,
            data_json, timestamp, pending_writers)
        SELECT sequences[i], p_operation_id, p_event_types[i], p_event_data[i],
            p_event_timestamps[i], pending
        FROM generate_series(1, n) AS i ORDER BY i;
    END IF;
    written := true;
END
$effect_write4$;
CREATE OR REPLACE FUNCTION {schema}.effect_write(
    p_kind text, p_version text,
    p_operation_id text, p_contract_name text, p_contract_version text,
    p_request_fingerprint text, p_provider_idempotency_key text, p_status text,
    p_result_json text, p_provider_operation_id text, p_error text, p_attempts integer,
    p_evidence_json text, p_owner_token text, p_lease_until double precision,
    p_created_at text, p_updated_at text,
    p_event_types text[], p_event_data text[], p_event_timestamps text[],
    p_deferred boolean
) RETURNS boolean LANGUAGE sql VOLATILE AS $effect_write$
    SELECT written FROM {schema}.effect_write(p_kind, p_version, p_operation_id,
        p_contract_name, p_contract_version, p_request_fingerprint,
        p_provider_idempotency_key, p_status, p_result_json, p_provider_operation_id,
        p_error, p_attempts, p_evidence_json, p_owner_token, p_lease_until,
        p_created_at, p_updated_at, p_event_types, p_event_data, p_event_timestamps,
        p_deferred, NULL::text)
$effect_write$;
