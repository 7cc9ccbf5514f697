//! Statements prepared once per server session
//! ([`PostgresOptions::prepared_statements`](crate::PostgresOptions::prepared_statements)).
//!
//! Each statement of [`Statements`] is prepared with SQL `PREPARE
//! effect_<nonce>_<name>(types) AS ...` the first time a pooled connection
//! runs it, and run from then on as `EXECUTE effect_<nonce>_<name>(...)`
//! (unnamed, with `query_typed`, as before), its arguments written as
//! literals ([`literal`]: a utility statement takes no bound parameters):
//! the server parses, analyses and plans the ledger's statement once per
//! session, and each call parses only the short `EXECUTE` and its literals.
//!
//! The nonce is random per ledger, so a name can only ever stand for this
//! ledger's own statement with this SQL. Behind a pooler in transaction mode
//! (PgBouncer's `pool_mode = transaction`) a transaction may run on a server
//! session where the name is missing (SQLSTATE 26000) or, when another
//! connection of this ledger prepared it there, already taken (42P05); a
//! name of another process never matches. Either error comes before the
//! statement ran: `EXECUTE` looks the name up before it executes anything,
//! and `PREPARE` executes nothing. The ledger then switches to unnamed
//! statements for good and runs the call again (a whole transaction again,
//! since the error aborted it), so the caller never sees it.
//!
//! Protocol-level named statements (`Client::prepare_typed`) were measured
//! too, but the driver names them `s0, s1, ...` from a counter of its
//! process: behind a transaction pooler another process's `s3` may exist on
//! the session, and binding to it would run another statement.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use postgres::GenericClient;
use postgres::types::{ToSql, Type};

use crate::error::is_unprepared;
use crate::statements::Statements;

mod literal;

/// A statement of [`Statements`], by its place in the per-session set.
/// Every call site of one statement binds the same parameter types, which
/// its `PREPARE` declares: a session where another connection of this
/// ledger prepared it holds the same statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stmt {
    ReadRecord,
    LockRecord,
    Write,
    Get,
    List,
    ListStatus,
    ListPage,
    Events,
    EventsLargest,
    EventsMarks,
    EventsPage,
    Stats,
    Stale,
    BudgetCreate,
    BudgetLock,
    BudgetUsage,
    BudgetCharge,
    BudgetRefund,
    BudgetList,
}

impl Stmt {
    const ALL: [Stmt; 19] = [
        Stmt::ReadRecord,
        Stmt::LockRecord,
        Stmt::Write,
        Stmt::Get,
        Stmt::List,
        Stmt::ListStatus,
        Stmt::ListPage,
        Stmt::Events,
        Stmt::EventsLargest,
        Stmt::EventsMarks,
        Stmt::EventsPage,
        Stmt::Stats,
        Stmt::Stale,
        Stmt::BudgetCreate,
        Stmt::BudgetLock,
        Stmt::BudgetUsage,
        Stmt::BudgetCharge,
        Stmt::BudgetRefund,
        Stmt::BudgetList,
    ];

    fn name(self) -> &'static str {
        match self {
            Stmt::ReadRecord => "read_record",
            Stmt::LockRecord => "lock_record",
            Stmt::Write => "write",
            Stmt::Get => "get",
            Stmt::List => "list",
            Stmt::ListStatus => "list_status",
            Stmt::ListPage => "list_page",
            Stmt::Events => "events",
            Stmt::EventsLargest => "events_largest",
            Stmt::EventsMarks => "events_marks",
            Stmt::EventsPage => "events_page",
            Stmt::Stats => "stats",
            Stmt::Stale => "stale",
            Stmt::BudgetCreate => "budget_create",
            Stmt::BudgetLock => "budget_lock",
            Stmt::BudgetUsage => "budget_usage",
            Stmt::BudgetCharge => "budget_charge",
            Stmt::BudgetRefund => "budget_refund",
            Stmt::BudgetList => "budget_list",
        }
    }

    fn sql(self, sql: &Statements) -> &str {
        match self {
            Stmt::ReadRecord => &sql.read_record,
            Stmt::LockRecord => &sql.lock_record,
            Stmt::Write => &sql.write,
            Stmt::Get => &sql.get,
            Stmt::List => &sql.list,
            Stmt::ListStatus => &sql.list_status,
            Stmt::ListPage => &sql.list_page,
            Stmt::Events => &sql.events,
            Stmt::EventsLargest => &sql.events_largest,
            Stmt::EventsMarks => &sql.events_marks,
            Stmt::EventsPage => &sql.events_page,
            Stmt::Stats => &sql.stats,
            Stmt::Stale => &sql.stale,
            Stmt::BudgetCreate => &sql.budgets.create,
            Stmt::BudgetLock => &sql.budgets.lock,
            Stmt::BudgetUsage => &sql.budgets.usage,
            Stmt::BudgetCharge => &sql.budgets.charge,
            Stmt::BudgetRefund => &sql.budgets.refund,
            Stmt::BudgetList => &sql.budgets.list,
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// What every connection of one ledger shares: the statements, their
/// `EXECUTE` texts, and whether they are prepared at all.
#[derive(Debug)]
pub(crate) struct Prepared {
    sql: Arc<Statements>,
    /// `effect_<nonce>_<name>`, by [`Stmt`].
    names: Vec<String>,
    enabled: AtomicBool,
    /// `PREPARE`s that succeeded, on every connection.
    prepares: AtomicU64,
}

impl Prepared {
    pub(crate) fn new(sql: Statements, enabled: bool) -> Prepared {
        let prefix = format!("effect_{}_", nonce());
        let names = Stmt::ALL
            .iter()
            .map(|stmt| format!("{prefix}{}", stmt.name()))
            .collect();
        Prepared {
            sql: Arc::new(sql),
            names,
            enabled: AtomicBool::new(enabled),
            prepares: AtomicU64::new(0),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub(crate) fn prepares(&self) -> u64 {
        self.prepares.load(Ordering::Relaxed)
    }

    /// Switches the ledger to unnamed statements for good when `err` (of a
    /// prepared statement) says the server session lacks it or has its name.
    fn seen(&self, err: postgres::Error) -> postgres::Error {
        if is_unprepared(&err) {
            self.enabled.store(false, Ordering::Relaxed);
        }
        err
    }
}

/// One pooled connection's view of [`Prepared`]: which statements its
/// server session holds.
#[derive(Debug)]
pub(crate) struct Session {
    shared: Arc<Prepared>,
    /// One bit per [`Stmt`] prepared on this connection's server session.
    ready: u32,
}

type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

impl Session {
    pub(crate) fn new(shared: Arc<Prepared>) -> Session {
        Session { shared, ready: 0 }
    }

    pub(crate) fn query(
        &mut self,
        client: &mut impl GenericClient,
        stmt: Stmt,
        params: &Params<'_>,
    ) -> Result<Vec<postgres::Row>, postgres::Error> {
        match self.named(client, stmt, params)? {
            Some(text) => client
                .query_typed(&text, &[])
                .map_err(|err| self.shared.seen(err)),
            None => client.query_typed(stmt.sql(&self.shared.sql), params),
        }
    }

    pub(crate) fn query_one(
        &mut self,
        client: &mut impl GenericClient,
        stmt: Stmt,
        params: &Params<'_>,
    ) -> Result<postgres::Row, postgres::Error> {
        match self.named(client, stmt, params)? {
            Some(text) => client
                .query_typed_one(&text, &[])
                .map_err(|err| self.shared.seen(err)),
            None => client.query_typed_one(stmt.sql(&self.shared.sql), params),
        }
    }

    pub(crate) fn query_opt(
        &mut self,
        client: &mut impl GenericClient,
        stmt: Stmt,
        params: &Params<'_>,
    ) -> Result<Option<postgres::Row>, postgres::Error> {
        match self.named(client, stmt, params)? {
            Some(text) => client
                .query_typed_opt(&text, &[])
                .map_err(|err| self.shared.seen(err)),
            None => client.query_typed_opt(stmt.sql(&self.shared.sql), params),
        }
    }

    pub(crate) fn execute(
        &mut self,
        client: &mut impl GenericClient,
        stmt: Stmt,
        params: &Params<'_>,
    ) -> Result<u64, postgres::Error> {
        match self.named(client, stmt, params)? {
            Some(text) => client
                .execute_typed(&text, &[])
                .map_err(|err| self.shared.seen(err)),
            None => client.execute_typed(stmt.sql(&self.shared.sql), params),
        }
    }

    /// The `EXECUTE` of `stmt` with `params`, after preparing `stmt` on the
    /// session unless it is there already; `None` when it is to run
    /// unnamed (the ledger does not prepare, or a value has no literal).
    fn named(
        &mut self,
        client: &mut impl GenericClient,
        stmt: Stmt,
        params: &Params<'_>,
    ) -> Result<Option<String>, postgres::Error> {
        if !self.shared.enabled() {
            return Ok(None);
        }
        let mut text = String::new();
        if literal::execute(&mut text, &self.shared.names[stmt as usize], params).is_err() {
            return Ok(None);
        }
        if self.ready & stmt.bit() == 0 {
            let types: Vec<&str> = params.iter().map(|(_, ty)| ty.name()).collect();
            let types = if types.is_empty() {
                String::new()
            } else {
                format!("({})", types.join(", "))
            };
            let prepare = format!(
                "PREPARE {}{types} AS {}",
                self.shared.names[stmt as usize],
                stmt.sql(&self.shared.sql)
            );
            client
                .batch_execute(&prepare)
                .map_err(|err| self.shared.seen(err))?;
            // A prepared statement is not transactional: it stays on the
            // session even if the transaction it was prepared in rolls back.
            self.ready |= stmt.bit();
            self.shared.prepares.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some(text))
    }
}

/// A UUID v4 (122 random bits from the operating system) as 32 hex digits,
/// so two ledgers, in one process or many, never share statement names.
fn nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests;
