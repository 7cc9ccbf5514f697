//! Every statement the ledger runs on the tables of `src/schema.rs`, with
//! the schema name filled in.

use crate::schema::Schema;

pub(crate) const COLUMNS: &str = "operation_id, contract_name, contract_version, request_fingerprint, \
     provider_idempotency_key, status, result_json, provider_operation_id, error, attempts, \
     evidence_json, owner_token, lease_until, created_at, updated_at";

pub(crate) const EVENT_COLUMNS: &str = "sequence, operation_id, event_type, data_json, timestamp";

/// Every statement the ledger runs, as SQL text with the schema name filled
/// in: prepared once per server session, or run unnamed (`query_typed`), as
/// `src/prepared.rs` decides, one round trip each.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) read_record: String,
    pub(crate) lock_record: String,
    pub(crate) write: String,
    pub(crate) get: String,
    pub(crate) list: String,
    pub(crate) list_status: String,
    pub(crate) list_page: String,
    pub(crate) events: String,
    pub(crate) events_largest: String,
    pub(crate) events_marks: String,
    pub(crate) events_page: String,
    pub(crate) stats: String,
    pub(crate) stale: String,
    pub(crate) budgets: BudgetStatements,
}

/// The statements of budgets (see `migrations/0005_budgets.sql`).
#[derive(Debug, Clone)]
pub(crate) struct BudgetStatements {
    /// Creates a budget's row if it has none: `$1` budget, `$2` window,
    /// `$3` max count, `$4` max amount.
    pub(crate) create: String,
    /// Locks a budget's row: `$1` budget.
    pub(crate) lock: String,
    /// A budget's charges since `$2` (count, sum) and `$3`'s own charge.
    pub(crate) usage: String,
    /// Records a charge and the budget's window and limits: `$1` budget,
    /// `$2` window, `$3` max count, `$4` max amount, `$5` operation, `$6`
    /// amount, `$7` time.
    pub(crate) charge: String,
    /// Deletes an operation's charges: `$1` operation.
    pub(crate) refund: String,
    /// Every budget with its charges, and the database clock.
    pub(crate) list: String,
}

impl Statements {
    pub(crate) fn new(schema: &Schema) -> Statements {
        let q = &schema.quoted;
        let ops = format!("{q}.effect_operations");
        let events = format!("{q}.effect_events");
        let mark = format!("hashtext('effect-ledger-postgres events {q}')");
        let pending = format!("hashtext('effect-ledger-postgres pending {q}')");
        // The row (or none), its version (`xmin`, which every update
        // changes) and the database clock in one round trip. Locking, the
        // clock is read after the lock is held (the CTE is materialized
        // before the projection runs), so a transition that waited for the
        // lock sees the time at which it actually runs.
        let record_and_clock = |lock: &str| {
            format!(
                "WITH found AS MATERIALIZED \
                 (SELECT {COLUMNS}, xmin::text AS version FROM {ops} \
                  WHERE operation_id = $1{lock}) \
                 SELECT found.*, clock_timestamp() AS ledger_now \
                 FROM (VALUES (0)) AS one (x) LEFT JOIN found ON true"
            )
        };
        Statements {
            read_record: record_and_clock(""),
            lock_record: record_and_clock(" FOR UPDATE"),
            write: format!(
                "SELECT written, version, stamp, lease_until FROM {q}.effect_write($1, $2, $3, \
                 $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, \
                 $21, $22)"
            ),
            get: format!("SELECT {COLUMNS} FROM {ops} WHERE operation_id = $1"),
            list: format!(
                "SELECT {COLUMNS} FROM {ops} ORDER BY updated_at DESC, operation_id DESC LIMIT $1"
            ),
            list_status: format!(
                "SELECT {COLUMNS} FROM {ops} WHERE status = $1 \
                 ORDER BY updated_at DESC, operation_id DESC LIMIT $2"
            ),
            // A page after a cursor and/or of stale dispatches: `$1` a status
            // or NULL, `$2` only leases ended by the database clock, `$3` the
            // cursor's operation or NULL, `$4` the limit.
            list_page: format!(
                "SELECT {COLUMNS} FROM {ops} WHERE ($1::text IS NULL OR status = $1) \
                 AND (NOT $2::boolean OR lease_until IS NULL \
                      OR lease_until <= extract(epoch FROM clock_timestamp())) \
                 AND ($3::text IS NULL OR (updated_at, operation_id) < \
                      (SELECT updated_at, operation_id FROM {ops} WHERE operation_id = $3)) \
                 ORDER BY updated_at DESC, operation_id DESC LIMIT $4"
            ),
            events: format!(
                "SELECT {EVENT_COLUMNS} FROM {events} WHERE operation_id = $1 ORDER BY sequence"
            ),
            // The cursor's three reads (see migrations/0006_announced_writers.sql), in this order in
            // one READ COMMITTED transaction: the largest visible sequence; the
            // marked writers (`$1` that sequence, against which the 32
            // announced bits are widened): whether one has announced nothing,
            // and the smallest announced sequence; then, in a fresh
            // snapshot, the events after `$1` up to `$2`, at most `$3`.
            events_largest: format!("SELECT coalesce(max(sequence), 0) FROM {events}"),
            events_marks: format!(
                "WITH locks AS MATERIALIZED (SELECT virtualtransaction, classid, objid \
                 FROM pg_catalog.pg_locks \
                 WHERE locktype = 'advisory' AND objsubid = 2 AND granted) \
                 SELECT coalesce(bool_or(NOT EXISTS (SELECT 1 FROM locks AS a \
                          WHERE a.virtualtransaction = m.virtualtransaction \
                          AND a.classid = {pending}::oid)), false) AS unannounced, \
                        (SELECT min($1 + ((a.objid::bigint + 2147483648) % 4294967296 \
                                 - $1 % 4294967296 + 6442450944) % 4294967296 - 2147483648) \
                         FROM locks AS a WHERE a.classid = {pending}::oid) AS first_pending \
                 FROM locks AS m WHERE m.classid = 1701209697 AND m.objid = {mark}::oid"
            ),
            events_page: format!(
                "SELECT {EVENT_COLUMNS} FROM {events} WHERE sequence > $1 AND sequence <= $2 \
                 ORDER BY sequence LIMIT $3"
            ),
            // The statuses that are not terminal, through the status index:
            // time proportional to their number. Terminal ones are counted
            // by triggers (`migrations/0007_status_counters.sql`).
            stats: format!(
                "SELECT status, count(*), min(updated_at) FROM {ops} \
                 WHERE status IN ('prepared', 'awaiting_approval', 'dispatched', \
                 'outcome_unknown', 'quarantined') GROUP BY status"
            ),
            stale: format!(
                "SELECT count(*) FROM {ops} WHERE status = 'dispatched' \
                 AND (lease_until IS NULL OR lease_until <= extract(epoch FROM clock_timestamp()))"
            ),
            budgets: BudgetStatements::new(q),
        }
    }
}

impl BudgetStatements {
    fn new(q: &str) -> BudgetStatements {
        let budgets = format!("{q}.effect_budgets");
        let charges = format!("{q}.effect_budget_charges");
        BudgetStatements {
            create: format!(
                "INSERT INTO {budgets} (budget, budget_window, max_count, max_amount) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (budget) DO NOTHING"
            ),
            lock: format!("SELECT budget FROM {budgets} WHERE budget = $1 FOR UPDATE"),
            usage: format!(
                "SELECT count(*), coalesce(sum(amount), 0)::bigint, \
                 (SELECT amount FROM {charges} WHERE budget = $1 AND operation_id = $3) \
                 FROM {charges} WHERE budget = $1 AND charged_at >= $2"
            ),
            charge: format!(
                "WITH limits AS (UPDATE {budgets} SET budget_window = $2, max_count = $3, \
                 max_amount = $4 WHERE budget = $1) \
                 INSERT INTO {charges} (budget, operation_id, amount, charged_at) \
                 VALUES ($1, $5, $6, $7)"
            ),
            refund: format!("DELETE FROM {charges} WHERE operation_id = $1"),
            list: format!(
                "SELECT b.budget, b.budget_window, b.max_count, b.max_amount, c.amount, \
                 c.charged_at, clock_timestamp() AS ledger_now \
                 FROM {budgets} AS b LEFT JOIN {charges} AS c ON c.budget = b.budget \
                 ORDER BY b.budget"
            ),
        }
    }
}
