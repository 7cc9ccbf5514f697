-- The write function, defined once: applied after the numbered migrations
-- whenever one of them ran (src/schema.rs), so a schema at any version
-- migrated to the current one ends with exactly this text. A change that
-- `CREATE OR REPLACE` cannot make (a new result type, a removed overload)
-- goes into a new numbered migration that drops the old form first, as
-- 0006_announced_writers.sql does.
--
-- `effect_write` writes one transition (the record and its events) in one
-- statement, so a transition outside an explicit transaction is one round
-- trip and one commit. It writes nothing and answers `written` false when:
-- the record to insert exists already; the record to update has changed
-- since it was read (its `xmin` is not `p_version`) or is locked by another
-- transaction (the caller then plans again under the row lock, so it never
-- waits here with a stale clock reading); or the transaction is not READ
-- COMMITTED (the ledger's own explicit transactions always are).
--
-- - `version` is the written row's `xmin` as text: the version a later
--   transition of the same operation passes as `p_version`. The ledger
--   remembers it with the record of each claim it wrote, so the owner's
--   outcome (confirmed, rejected, unknown) is planned on that record and
--   written in one round trip, without reading the row first; the write
--   applies only if the row is still exactly that version (src/ledger.rs),
--   else the transition is planned again on a fresh read.
-- - `p_stamp`, when not NULL, is the placeholder timestamp the caller
--   planned with (it did not read the database clock): the function writes
--   the database clock (`clock_timestamp()`, as docs/spec.md §8 text)
--   instead, in every event's timestamp and in `updated_at` and
--   `created_at` where they equal the placeholder, shifts an insert's lease
--   by it, and answers it as `stamp` (and the lease as `lease_until`), so
--   every timestamp stays the database's.
-- - Appends: the argument of why the cursor never skips nor repeats an
--   event is in 0006_announced_writers.sql (the body's comment names it
--   "MIGRATION_6 (schema.rs ...)", its place when version 6 shipped: a
--   deployed function's text is kept byte for byte).
--
-- The 21-argument `effect_write` keeps its answer (a boolean) and calls the
-- 22-argument one, so a writer of version 2 or 3 still running keeps
-- working. Both contain `effect_write(`, which test-support's
-- `CommitCutProxy` looks for.

CREATE OR REPLACE FUNCTION {schema}.effect_write(
    p_kind text, p_version text,
    p_operation_id text, p_contract_name text, p_contract_version text,
    p_request_fingerprint text, p_provider_idempotency_key text, p_status text,
    p_result_json text, p_provider_operation_id text, p_error text, p_attempts integer,
    p_evidence_json text, p_owner_token text, p_lease_until double precision,
    p_created_at text, p_updated_at text,
    p_event_types text[], p_event_data text[], p_event_timestamps text[],
    p_deferred boolean, p_stamp text,
    OUT written boolean, OUT version text, OUT stamp text, OUT lease_until double precision
) LANGUAGE plpgsql VOLATILE AS $effect_write6$
DECLARE
    n integer := coalesce(cardinality(p_event_types), 0);
    drawn regclass;
    drawn_sequence bigint;
    now_ts timestamptz;
    -- Calls made as assignments, which plpgsql evaluates without a plan.
    done text;
BEGIN
    written := false;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN;
    END IF;
    -- For this transaction only: a deferrable write commits without waiting
    -- for its WAL flush, every other one waits whatever the session says.
    done := set_config('synchronous_commit',
                       CASE WHEN p_deferred THEN 'off' ELSE 'on' END, true);
    IF p_stamp IS NOT NULL THEN
        now_ts := clock_timestamp();
        stamp := to_char(now_ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"');
        -- An insert planned on the placeholder (the epoch) without reading
        -- the clock: its lease is relative to the placeholder.
        IF p_kind = 'insert' AND p_lease_until IS NOT NULL THEN
            p_lease_until := p_lease_until + extract(epoch FROM now_ts)::double precision;
        END IF;
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
        -- The argument is in the doc comment of MIGRATION_6 (schema.rs of
        -- effect-ledger-postgres). Order matters: the mark, then each draw,
        -- the first one announced at once. One row per INSERT: a plan that
        -- does not depend on the number of events stays cached.
        done := pg_advisory_xact_lock_shared(1701209697,
            hashtext('effect-ledger-postgres events {schema}'))::text;
        drawn := pg_get_serial_sequence('{schema}.effect_events', 'sequence')::regclass;
        FOR i IN 1..n LOOP
            drawn_sequence := nextval(drawn);
            IF i = 1 THEN
                done := pg_advisory_xact_lock_shared(
                    hashtext('effect-ledger-postgres pending {schema}'),
                    (drawn_sequence % 4294967296 - 2147483648)::integer)::text;
            END IF;
            INSERT INTO {schema}.effect_events (sequence, operation_id, event_type,
                data_json, timestamp)
            VALUES (drawn_sequence, p_operation_id, p_event_types[i], p_event_data[i],
                p_event_timestamps[i]);
        END LOOP;
    END IF;
    lease_until := p_lease_until;
    written := true;
END
$effect_write6$;
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
