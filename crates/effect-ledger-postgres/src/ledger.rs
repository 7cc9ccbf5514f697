//! [`PostgresLedger`]: the ledger in a PostgreSQL schema.

use std::fmt;
use std::time::{Duration, SystemTime};

use effect_core::transition::{PendingEvent, Plan, WriteKind, plan};
use effect_core::{
    EffectLedger, EffectRecord, EffectStatus, LedgerError, LedgerEvent, LedgerStats, ListQuery,
    Transition, TransitionOutcome, WriteDurability,
};
use postgres::types::ToSql;

use crate::error::{Step, boxed, corrupt, from_pg, from_pool};
use crate::options::PostgresOptions;
use crate::pool::{Connection, Manager};
use crate::row::{self, RecordParams};
use crate::schema::{self, Schema, Statements};
use crate::tls::Target;

type Pool = r2d2::Pool<Manager>;

type Pooled = r2d2::PooledConnection<Manager>;

/// An [`EffectLedger`] stored in a PostgreSQL schema, for several processes or
/// hosts sharing one ledger.
///
/// Every transition is one transaction: it locks the operation's row
/// (`SELECT ... FOR UPDATE`), reads the database clock, evaluates
/// [`effect_core::transition::plan`] and writes the record and its events
/// before committing. Claims are therefore exclusive across hosts, and leases
/// are measured on the database server's clock, never on a caller's.
///
/// Cloning is cheap and shares the connection pool.
#[derive(Clone)]
pub struct PostgresLedger {
    pub(crate) pool: Pool,
    pub(crate) schema: Schema,
    retries: u32,
    sleeper: std::sync::Arc<dyn effect_core::Sleeper>,
}

impl fmt::Debug for PostgresLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.pool.state();
        f.debug_struct("PostgresLedger")
            .field("schema", &self.schema.name)
            .field("connections", &state.connections)
            .field("idle_connections", &state.idle_connections)
            .finish_non_exhaustive()
    }
}

impl PostgresLedger {
    /// Connects to the server at `url` (`postgres://user:password@host:port/database`,
    /// or the `key=value` form; `sslmode` and `sslrootcert` as in libpq, see
    /// [`SslMode`](crate::SslMode)), creates the schema if needed and runs the
    /// forward-only migrations. Several processes may open the same schema at
    /// once: migrations are serialized by an advisory lock. With
    /// [`PostgresOptions::migrate`] `false` it only checks that the ledger
    /// exists at the current version, and writes nothing.
    ///
    /// # Errors
    ///
    /// [`LedgerError::InvalidInput`] for an unparsable URL, an invalid schema
    /// name, an unknown `sslmode`, or a CA file that cannot be read or holds
    /// no certificate (checked before anything is contacted);
    /// [`LedgerError::Backend`] with a [`TlsError`](crate::TlsError) source
    /// when TLS is required and the server does not offer it, or its
    /// certificate is refused; [`LedgerError::Unavailable`] when the server cannot be reached
    /// within the connect timeout or refuses connections for now;
    /// [`LedgerError::Backend`] when it rejects them (authentication, unknown
    /// database), when the schema was written by a newer version of this crate,
    /// or when a migration fails. The driver's error is the source. Without
    /// migrations, [`LedgerError::InvalidInput`] when the schema holds no
    /// ledger or one that needs migrating.
    pub fn connect(url: &str, options: PostgresOptions) -> Result<PostgresLedger, LedgerError> {
        let schema = Schema::new(&options.schema)?;
        let target = target(url, &options)?;
        // One direct connection first: it fails fast with the driver's own
        // error (refused, authentication, unknown database) as the source,
        // where the pool would retry until its timeout and keep only a string.
        let mut client = connect_direct(&target)?;
        if options.migrate {
            schema::migrate(&mut client, &schema)?;
        } else {
            schema::check(&mut client, &schema)?;
        }
        drop(client);
        let manager = Manager::new(target, std::sync::Arc::new(Statements::new(&schema)));
        let pool = r2d2::Pool::builder()
            .max_size(options.pool_size.max(1))
            .min_idle(Some(1))
            .connection_timeout(options.connect_timeout.max(Duration::from_millis(1)))
            .build(manager)
            .map_err(from_pool)?;
        Ok(PostgresLedger {
            pool,
            schema,
            retries: options.transaction_retries,
            sleeper: std::sync::Arc::new(effect_core::ThreadSleeper),
        })
    }

    /// Waits between the retries of a conflicting transaction through
    /// `sleeper` (default [`ThreadSleeper`](effect_core::ThreadSleeper)).
    #[must_use]
    pub fn with_sleeper(mut self, sleeper: std::sync::Arc<dyn effect_core::Sleeper>) -> Self {
        self.sleeper = sleeper;
        self
    }

    /// The `synchronous_commit` setting the ledger's transactions run with:
    /// `on` whatever the server's default, so that every commit is durable on
    /// the server before a caller is answered. Only a transition applied as
    /// [`WriteDurability::Deferrable`] runs with `SET LOCAL synchronous_commit
    /// = off`, for its own transaction.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Unavailable`] when no connection can be had.
    pub fn synchronous_commit(&self) -> Result<String, LedgerError> {
        let mut conn = self.connection()?;
        let row = conn
            .client
            .query_one("SELECT current_setting('synchronous_commit')", &[])
            .map_err(|err| from_pg("reading synchronous_commit", err))?;
        row.try_get(0)
            .map_err(|err| corrupt("synchronous_commit cannot be decoded".to_owned(), err))
    }

    /// Whether the ledger's connection to the server is encrypted, as the
    /// server sees it (`pg_stat_ssl`): `true` when TLS was negotiated.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Unavailable`] when no connection can be had.
    pub fn encrypted(&self) -> Result<bool, LedgerError> {
        let mut conn = self.connection()?;
        let row = conn
            .client
            .query_one(
                "SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)",
                &[],
            )
            .map_err(|err| from_pg("reading pg_stat_ssl", err))?;
        row.try_get(0)
            .map_err(|err| corrupt("pg_stat_ssl cannot be decoded".to_owned(), err))
    }

    /// The schema holding this ledger's tables.
    pub fn schema(&self) -> &str {
        &self.schema.name
    }

    fn connection(&self) -> Result<Pooled, LedgerError> {
        self.pool.get().map_err(from_pool)
    }

    /// One attempt at a transition, in one transaction.
    fn try_apply(
        conn: &mut Connection,
        operation_id: &str,
        transition: &Transition,
        durability: WriteDurability,
    ) -> Result<TransitionOutcome, Step> {
        let pg = |doing: &'static str| move |err| Step::from_pg(doing, err);
        let Connection { client, sql } = conn;
        let mut tx = client
            .transaction()
            .map_err(pg("beginning a transaction"))?;
        // A deferrable transaction's commit returns before its WAL is
        // flushed (the lock statement's variant sets synchronous_commit off
        // for this transaction only); the WAL writer flushes it within three
        // `wal_writer_delay`s, and any later synchronous commit flushes it first.
        let lock = match durability {
            WriteDurability::Deferrable => &sql.lock_record_deferred,
            _ => &sql.lock_record,
        };
        let locked = tx
            .query_one(lock, &[&operation_id])
            .map_err(pg("locking an operation"))?;
        let exists: Option<String> = locked
            .try_get("operation_id")
            .map_err(|err| corrupt("a locked operation cannot be decoded".to_owned(), err))?;
        let current = exists.map(|_| row::record(&locked)).transpose()?;
        let now: SystemTime = locked
            .try_get("ledger_now")
            .map_err(|err| corrupt("the database clock cannot be decoded".to_owned(), err))?;
        let Plan { outcome, write } = plan(operation_id, current, transition, now)?;
        if let Some(write) = write {
            let params = RecordParams::new(&outcome.record)?;
            let bound = params.bind(&outcome.record);
            let events = EventParams::new(&write.events);
            match write.kind {
                WriteKind::Insert => {
                    let inserted = tx
                        .execute(&sql.insert_record, &bound)
                        .map_err(pg("inserting an operation"))?;
                    if inserted == 0 {
                        // Another transaction created it since our read: start
                        // over, and lock the row it wrote.
                        return Err(Step::Retry(None));
                    }
                    let mut args: Vec<&(dyn ToSql + Sync)> = vec![&operation_id];
                    args.extend(events.bind());
                    tx.execute(&sql.append_events, &args)
                        .map_err(pg("appending events"))?;
                }
                WriteKind::InPlace => {
                    let updated = tx
                        .execute(&sql.update_record, &bound)
                        .map_err(pg("updating an operation"))?;
                    if updated != 1 {
                        return Err(vanished(operation_id));
                    }
                }
                WriteKind::Transition => {
                    let mut args: Vec<&(dyn ToSql + Sync)> = bound.to_vec();
                    args.extend(events.bind());
                    let appended = tx
                        .execute(&sql.update_and_append, &args)
                        .map_err(pg("updating an operation and appending its events"))?;
                    // One row per event, none if the row was gone.
                    if usize::try_from(appended) != Ok(write.events.len()) {
                        return Err(vanished(operation_id));
                    }
                }
            }
        }
        tx.commit().map_err(pg("committing a transition"))?;
        Ok(outcome)
    }

    fn read<T>(
        &self,
        doing: &'static str,
        f: impl FnOnce(
            &mut postgres::Client,
            &Statements<postgres::Statement>,
        ) -> Result<T, postgres::Error>,
    ) -> Result<T, LedgerError> {
        let mut conn = self.connection()?;
        let Connection { client, sql } = &mut *conn;
        f(client, sql).map_err(|err| from_pg(doing, err))
    }
}

/// The row of a transition's own locked operation is gone.
fn vanished(operation_id: &str) -> Step {
    Step::Fail(LedgerError::backend(
        format!("operation {operation_id:?} vanished while locked"),
        None,
    ))
}

/// A transition's events as the three arrays the append statements unnest.
struct EventParams {
    types: Vec<String>,
    data: Vec<String>,
    timestamps: Vec<String>,
}

impl EventParams {
    fn new(events: &[PendingEvent]) -> EventParams {
        EventParams {
            types: events.iter().map(|e| e.event_type.to_owned()).collect(),
            data: events
                .iter()
                .map(|e| effect_core::canonical::canonical_json(&e.data))
                .collect(),
            timestamps: events.iter().map(|e| e.timestamp.clone()).collect(),
        }
    }

    fn bind(&self) -> [&(dyn ToSql + Sync); 3] {
        [&self.types, &self.data, &self.timestamps]
    }
}

/// A plain `postgres` client for the server at `url`, with the same URL
/// forms, TLS modes and CA file as [`PostgresLedger::connect`], for the SQL a
/// ledger does not run itself (dropping a schema, granting a role).
///
/// ```
/// use effect_ledger_postgres::{PostgresOptions, connect_client};
///
/// // The TLS setup is checked before anything is contacted.
/// let url = "postgres://ops@db.internal/agents?sslmode=verify-ca&sslrootcert=/no/such/ca.pem";
/// let Err(err) = connect_client(url, &PostgresOptions::default()) else {
///     panic!("the CA file is missing");
/// };
/// assert!(err.to_string().contains("/no/such/ca.pem"));
/// ```
///
/// # Errors
///
/// As [`PostgresLedger::connect`] for the URL, the TLS setup and the
/// connection.
pub fn connect_client(
    url: &str,
    options: &PostgresOptions,
) -> Result<postgres::Client, LedgerError> {
    connect_direct(&target(url, options)?)
}

/// The driver's config and TLS connector for `url`, with the options'
/// timeout and our application name unless the URL gives one.
fn target(url: &str, options: &PostgresOptions) -> Result<Target, LedgerError> {
    let mut target = Target::new(url, options.ssl_mode, options.tls_ca_file.as_deref())?;
    let config = &mut target.config;
    config.connect_timeout(options.connect_timeout);
    if config.get_application_name().is_none() {
        config.application_name("effect-ledger-postgres");
    }
    Ok(target)
}

/// One connection, with TLS failures told apart from the others.
fn connect_direct(target: &Target) -> Result<postgres::Client, LedgerError> {
    target
        .connect()
        .map_err(|err| match target.tls_failure(&err) {
            Some(tls) => LedgerError::backend("cannot connect to postgres over TLS", boxed(tls)),
            None => from_pg("connecting", err),
        })
}

impl EffectLedger for PostgresLedger {
    /// A deferrable transition's transaction commits with `SET LOCAL
    /// synchronous_commit = off`: it is answered once committed and visible,
    /// before the server has flushed its WAL.
    fn apply_with(
        &self,
        operation_id: &str,
        transition: &Transition,
        durability: WriteDurability,
    ) -> Result<TransitionOutcome, LedgerError> {
        let mut conn = self.connection()?;
        let mut attempt: u32 = 0;
        loop {
            match Self::try_apply(&mut conn, operation_id, transition, durability) {
                Ok(outcome) => return Ok(outcome),
                Err(Step::Fail(err)) => return Err(err),
                Err(Step::Retry(err)) => {
                    attempt += 1;
                    if attempt > self.retries {
                        return Err(LedgerError::unavailable(
                            format!(
                                "transaction on operation {operation_id:?} kept conflicting \
                                 after {attempt} attempts"
                            ),
                            err.and_then(boxed),
                        ));
                    }
                    // Back off a little more each time; contention on one row
                    // clears as soon as its holder commits.
                    self.sleeper
                        .sleep(Duration::from_millis(u64::from(attempt.min(10)) * 2));
                }
            }
        }
    }

    /// Commits a transaction that has a transaction id, synchronously: its
    /// commit waits for the WAL to be flushed up to its own record, and so
    /// past every asynchronous commit before it.
    fn sync(&self) -> Result<(), LedgerError> {
        self.read("syncing deferred commits", |c, _| {
            let mut tx = c.transaction()?;
            tx.query_one("SELECT txid_current()", &[])?;
            tx.commit()
        })
    }

    fn get(&self, operation_id: &str) -> Result<Option<EffectRecord>, LedgerError> {
        self.read("reading an operation", |c, sql| {
            c.query_opt(&sql.get, &[&operation_id])
        })?
        .map(|r| row::record(&r))
        .transpose()
    }

    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError> {
        query.validate()?;
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        if let Some(after) = &query.after {
            let found = self.read("reading the list cursor", |c, sql| {
                c.query(&sql.get, &[after])
            })?;
            if found.is_empty() {
                return Err(ListQuery::unknown_cursor(after));
            }
        }
        let rows = self.read("listing operations", |c, sql| {
            if query.after.is_some() || query.stale {
                let status = query.status_filter().map(EffectStatus::as_str);
                c.query(
                    &sql.list_page,
                    &[&status, &query.stale, &query.after, &limit],
                )
            } else {
                match query.status {
                    Some(status) => c.query(&sql.list_status, &[&status.as_str(), &limit]),
                    None => c.query(&sql.list, &[&limit]),
                }
            }
        })?;
        rows.iter().map(row::listed).collect()
    }

    fn events(&self, operation_id: &str) -> Result<Vec<LedgerEvent>, LedgerError> {
        let rows = self.read("reading events", |c, sql| {
            c.query(&sql.events, &[&operation_id])
        })?;
        rows.iter().map(row::event).collect()
    }

    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        // Past the largest sequence PostgreSQL can hold there is nothing to read.
        let Ok(after) = i64::try_from(after) else {
            return Ok(Vec::new());
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.read("reading events", |c, sql| {
            c.query(&sql.events_after, &[&after, &limit])
        })?;
        rows.iter().map(row::event).collect()
    }

    fn stats(&self) -> Result<LedgerStats, LedgerError> {
        let (rows, stale) = self.read("counting operations", |c, sql| {
            // One snapshot, so the counts and the stale count agree.
            let mut tx = c
                .build_transaction()
                .isolation_level(postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let rows = tx.query(&sql.stats, &[])?;
            let stale: i64 = tx.query_one(&sql.stale, &[])?.try_get(0)?;
            tx.commit()?;
            Ok((rows, stale))
        })?;
        let mut counts: Vec<(EffectStatus, u64)> =
            EffectStatus::ALL.into_iter().map(|s| (s, 0)).collect();
        let mut oldest: Option<String> = None;
        for r in &rows {
            let decode = |err| corrupt("operation counts cannot be decoded".to_owned(), err);
            let status: String = r.try_get(0).map_err(decode)?;
            let count: i64 = r.try_get(1).map_err(decode)?;
            let min_updated: Option<String> = r.try_get(2).map_err(decode)?;
            let status = status
                .parse::<EffectStatus>()
                .map_err(|err| corrupt("an operation has an unknown status".to_owned(), err))?;
            if let Some(entry) = counts.iter_mut().find(|(s, _)| *s == status) {
                entry.1 = u64::try_from(count).unwrap_or(0);
            }
            if status.is_uncertain()
                && let Some(min) = min_updated
                && oldest.as_ref().is_none_or(|o| min < *o)
            {
                oldest = Some(min);
            }
        }
        Ok(LedgerStats {
            counts,
            oldest_unresolved_updated_at: oldest,
            stale_dispatched: u64::try_from(stale).unwrap_or(0),
        })
    }
}
