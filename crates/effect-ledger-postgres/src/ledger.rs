//! [`PostgresLedger`]: the ledger in a PostgreSQL schema.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use effect_core::transition::{
    PendingEvent, Plan, Write, WriteKind, budget_charges, may_refund, owner_outcome_token, plan,
    plan_with_budgets,
};
use effect_core::{
    EffectLedger, EffectRecord, EffectStatus, LedgerError, LedgerEvent, LedgerStats, ListQuery,
    Transition, TransitionOutcome, WriteDurability,
};
use postgres::GenericClient;
use postgres::types::{ToSql, Type};

use crate::error::{Step, boxed, corrupt, from_pg, from_pool, is_unprepared};
use crate::options::PostgresOptions;
use crate::pool::{Connection, Manager};
use crate::prepared::{Prepared, Session, Stmt};
use crate::row::{self, RecordParams};
use crate::schema::{self, Schema, SchemaState};
use crate::statements::Statements;
use crate::timeline::Timelines;
use crate::tls::Target;

type Pool = r2d2::Pool<Manager>;

type Pooled = r2d2::PooledConnection<Manager>;

/// An [`EffectLedger`] stored in a PostgreSQL schema, for several processes or
/// hosts sharing one ledger.
///
/// Every transition is one transaction: it reads the record and the
/// database clock, evaluates [`effect_core::transition::plan`] and writes
/// the record and its events in one statement that applies only if the row
/// is unchanged since the read (else under the row lock, `SELECT ... FOR
/// UPDATE`). Claims are therefore exclusive across hosts, and leases are
/// measured on the database server's clock, never on a caller's. The owner's
/// outcome of a claim this ledger wrote skips the read (see the crate's
/// documentation).
///
/// Cloning is cheap and shares the connection pool.
#[derive(Clone)]
pub struct PostgresLedger {
    pub(crate) pool: Pool,
    pub(crate) schema: Schema,
    retries: u32,
    durable_commits: bool,
    sleeper: std::sync::Arc<dyn effect_core::Sleeper>,
    claimed: Arc<Claimed>,
    absent: Arc<Absent>,
    prepared: Arc<Prepared>,
    timelines: Arc<Timelines>,
}

impl fmt::Debug for PostgresLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.pool.state();
        f.debug_struct("PostgresLedger")
            .field("schema", &self.schema.name)
            .field("connections", &state.connections)
            .field("idle_connections", &state.idle_connections)
            .field("prepared_statements", &self.prepared.enabled())
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
            schema::migrate(&mut client, &schema, options.create)?;
        } else {
            schema::check(&mut client, &schema)?;
        }
        drop(client);
        let prepared = Arc::new(Prepared::new(
            Statements::new(&schema),
            options.prepared_statements,
        ));
        let timelines = Arc::new(Timelines::default());
        let manager = Manager::new(target, Arc::clone(&prepared), Arc::clone(&timelines));
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
            durable_commits: options.durable_commits,
            sleeper: std::sync::Arc::new(effect_core::ThreadSleeper),
            claimed: Arc::new(Claimed::default()),
            absent: Arc::new(Absent::default()),
            prepared,
            timelines,
        })
    }

    /// What the schema of `options` holds at `url`, read without writing
    /// anything: nothing, an empty schema, someone else's tables, or a ledger
    /// and its schema version. A caller that must not make a new ledger of a
    /// misspelled schema, or of someone else's, looks first.
    ///
    /// # Errors
    ///
    /// As [`connect`](PostgresLedger::connect) for the URL, the schema name,
    /// the TLS setup and the connection.
    pub fn schema_state(url: &str, options: &PostgresOptions) -> Result<SchemaState, LedgerError> {
        let schema = Schema::new(&options.schema)?;
        let mut client = connect_direct(&target(url, options)?)?;
        schema::state(&mut client, &schema)
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
    /// [`WriteDurability::Deferrable`] (every transition, with
    /// [`PostgresOptions::durable_commits`] `false`) runs with `SET LOCAL
    /// synchronous_commit = off`, for its own transaction.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Unavailable`] when no connection can be had.
    pub fn synchronous_commit(&self) -> Result<String, LedgerError> {
        let mut conn = self.connection()?;
        let row = conn
            .client
            .query_typed_one("SELECT current_setting('synchronous_commit')", &[])
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
            .query_typed_one(
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

    /// Whether the ledger runs its statements prepared, by name
    /// ([`PostgresOptions::prepared_statements`]): `false` when the option
    /// is off, and from the moment a server session lacked a statement a
    /// connection had prepared, or had its name taken (a pooler in
    /// transaction mode moved the connection to another session), after
    /// which every statement runs unnamed.
    pub fn prepares_statements(&self) -> bool {
        self.prepared.enabled()
    }

    /// How many statements this ledger's connections have prepared so far
    /// (one `PREPARE` per statement and server session).
    pub fn statements_prepared(&self) -> u64 {
        self.prepared.prepares()
    }

    /// The latest timeline of the server's history that this ledger's
    /// connections found (PostgreSQL starts a new one at each promotion of
    /// a standby), or `None` before the first connection to a primary, or
    /// when the role may not read the WAL position.
    ///
    /// A new connection to a server on an *earlier* timeline is refused: it
    /// is a primary that was failed over from and is still reachable, and
    /// what it would commit the promoted server never has. Calls then fail
    /// with [`LedgerError::Unavailable`] (the message names both timelines)
    /// until the ledger's address points at the promoted server again. A
    /// process that never connected to the promoted server cannot tell;
    /// fence the old primary (docs/production.md, "Several hosts").
    pub fn server_timeline(&self) -> Option<u32> {
        self.timelines.latest()
    }

    /// How many times a new connection found the server on a later timeline
    /// than the ones before: the failovers this ledger lived through.
    pub fn timeline_changes(&self) -> u64 {
        self.timelines.changes()
    }

    /// How many new connections were refused because their server was on
    /// an earlier timeline than [`server_timeline`](Self::server_timeline).
    pub fn stale_servers_refused(&self) -> u64 {
        self.timelines.refused()
    }

    fn connection(&self) -> Result<Pooled, LedgerError> {
        self.pool.get().map_err(from_pool)
    }

    /// One attempt at a transition without an explicit transaction: read
    /// the record and the database clock, plan, and write the plan (if it
    /// writes) in one statement that commits on its own, provided the record
    /// is still as read and nobody holds its lock. Two round trips and one
    /// commit for a write; one read and nothing else for a transition that
    /// writes nothing (a replay of a finished operation, a claim refused).
    /// `None` when the write did not apply: plan again under the row lock.
    fn try_apply_unlocked(
        conn: &mut Connection,
        operation_id: &str,
        transition: &Transition,
        durability: WriteDurability,
    ) -> Result<Option<Applied>, Step> {
        if touches_budgets(transition) {
            return Ok(None);
        }
        let Connection {
            client, statements, ..
        } = conn;
        let found = statements
            .query_one(client, Stmt::ReadRecord, &[(&operation_id, Type::TEXT)])
            .map_err(|err| Step::from_pg("reading an operation", err))?;
        let (current, version, now) = found_record(&found)?;
        let Plan { outcome, write } = plan(operation_id, current, transition, now)?;
        let Some(write) = write else {
            return Ok(Some((outcome, None)));
        };
        let written = write_plan(
            client, statements, &outcome, &write, &version, durability, None,
        )?;
        Ok(written.version.map(|version| (outcome, Some(version))))
    }

    /// A transition planned without a read, on what this ledger knows, and
    /// written in one round trip with a placeholder clock (the epoch) whose
    /// timestamps, and an inserted claim's lease (relative to the epoch), the
    /// write function takes from the database clock. `known` is either
    /// nothing, for a new operation (a prepare, or a prepare and claim) of
    /// an id this ledger just read as absent, inserted only if no row exists;
    /// or the record a claim of this ledger wrote and its version, for the
    /// owner's outcome, written only if the row is still that version. Both
    /// plans depend on the record and not on the clock, which only stamps
    /// them. `None` when the row exists or changed (another transition, a
    /// takeover), or when the plan is not such a write or names the
    /// placeholder in an event's data: plan again on a fresh read.
    fn try_apply_known(
        conn: &mut Connection,
        operation_id: &str,
        transition: &Transition,
        known: Option<(EffectRecord, String)>,
        durability: WriteDurability,
    ) -> Result<Option<Applied>, Step> {
        if touches_budgets(transition) {
            return Ok(None);
        }
        let Connection {
            client, statements, ..
        } = conn;
        let epoch = SystemTime::UNIX_EPOCH;
        let (current, version) = known.unzip();
        let fresh = current.is_none();
        let Plan { mut outcome, write } = plan(operation_id, current, transition, epoch)?;
        let placeholder = effect_core::format_timestamp(epoch);
        let Some(write) = write.filter(|write| {
            if fresh {
                matches!(write.kind, WriteKind::Insert)
            } else {
                outcome.applied
            }
        }) else {
            return Ok(None);
        };
        let written = write_plan(
            client,
            statements,
            &outcome,
            &write,
            &version,
            durability,
            Some(&placeholder),
        )?;
        let (Some(version), Some(stamp)) = (written.version, written.stamp) else {
            return Ok(None);
        };
        let record = &mut outcome.record;
        if fresh
            && let Some(lease) = record.lease_until.as_mut()
            && let Some(lease_until) = written.lease_until
        {
            *lease = lease_until;
        }
        if record.created_at == placeholder {
            record.created_at.clone_from(&stamp);
        }
        if record.updated_at == placeholder {
            record.updated_at = stamp;
        }
        Ok(Some((outcome, Some(version))))
    }

    /// One attempt at a transition in one transaction, under the row lock
    /// (`SELECT ... FOR UPDATE`): for a record another transaction changed or
    /// holds between our read and our write.
    fn try_apply_locked(
        conn: &mut Connection,
        operation_id: &str,
        transition: &Transition,
        durability: WriteDurability,
    ) -> Result<Applied, Step> {
        let pg = |doing: &'static str| move |err| Step::from_pg(doing, err);
        let Connection {
            client, statements, ..
        } = conn;
        // READ COMMITTED whatever the server's default: the row lock orders
        // transitions, and the write function's horizon needs fresh snapshots.
        let mut tx = client
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::ReadCommitted)
            .start()
            .map_err(pg("beginning a transaction"))?;
        let locked = statements
            .query_one(&mut tx, Stmt::LockRecord, &[(&operation_id, Type::TEXT)])
            .map_err(pg("locking an operation"))?;
        let (current, version, now) = found_record(&locked)?;
        let usage =
            crate::budget::lock_and_read(&mut tx, statements, operation_id, transition, now)?;
        let Plan { outcome, write } =
            plan_with_budgets(operation_id, current, transition, now, &usage)?;
        let mut written_version = None;
        if let Some(write) = write {
            let written = write_plan(
                &mut tx, statements, &outcome, &write, &version, durability, None,
            )?;
            if written.version.is_none() {
                return Err(match write.kind {
                    // Another transaction created it since our read: start
                    // over, and lock the row it wrote.
                    WriteKind::Insert => Step::Retry(None),
                    _ => vanished(operation_id),
                });
            }
            crate::budget::write(&mut tx, statements, operation_id, &write.budgets)?;
            written_version = written.version;
        }
        tx.commit().map_err(pg("committing a transition"))?;
        Ok((outcome, written_version))
    }

    /// Runs `f` on a pooled connection; once more, with unnamed statements,
    /// if a prepared statement was missing or its name taken on the server
    /// session (the statement did not run, and any transaction of `f`'s
    /// was rolled back).
    fn read<T>(
        &self,
        doing: &'static str,
        mut f: impl FnMut(&mut postgres::Client, &mut Session) -> Result<T, postgres::Error>,
    ) -> Result<T, LedgerError> {
        let mut conn = self.connection()?;
        let Connection {
            client, statements, ..
        } = &mut *conn;
        match f(client, statements) {
            Err(err) if is_unprepared(&err) && !self.prepared.enabled() => {
                f(client, statements).map_err(|err| from_pg(doing, err))
            }
            done => done.map_err(|err| from_pg(doing, err)),
        }
    }
}

/// How many times `events_after` reads the marked writers while one of them
/// has announced nothing (it is between its mark and its announcement, a
/// few statements inside the write function, or it is an older writer that
/// never announces) before it settles for the contiguous part of its page.
const MARK_READS: usize = 4;

/// A transition's outcome and, when it wrote, the row's new version.
type Applied = (TransitionOutcome, Option<String>);

/// Whether a transition charges or may refund a budget: budgets are read and
/// written under locks, so such a transition takes the locked path.
fn touches_budgets(transition: &Transition) -> bool {
    !budget_charges(transition).is_empty() || may_refund(transition)
}

/// The most claims [`Claimed`] remembers; when full it starts over (a miss
/// costs one read).
const CLAIMED_CAPACITY: usize = 4096;

/// The claims this ledger wrote and that nothing it applied since has
/// changed, by operation id: the `dispatched` record with its owner and the
/// row's version (`xmin`), so the owner's outcome needs no read first
/// ([`PostgresLedger::try_apply_known`]). A stale entry (another process
/// changed the row) costs one refused write; it is never trusted without
/// the version check in the write function.
#[derive(Debug, Default)]
struct Claimed {
    records: Mutex<HashMap<String, (EffectRecord, String)>>,
}

impl Claimed {
    /// Forgets `operation_id`'s entry; returns it if the transition is its
    /// owner's outcome (confirmed, rejected, unknown) with its token.
    fn take(&self, operation_id: &str, transition: &Transition) -> Option<(EffectRecord, String)> {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        if records.is_empty() {
            return None;
        }
        let entry = records.remove(operation_id)?;
        drop(records);
        let token = owner_outcome_token(transition)?;
        (entry.0.owner_token.as_deref() == Some(token)).then_some(entry)
    }

    /// Remembers a committed write that left `record` dispatched to an owner.
    fn remember(&self, record: &EffectRecord, version: Option<String>) {
        let Some(version) = version else {
            return;
        };
        if record.status != EffectStatus::Dispatched || record.owner_token.is_none() {
            return;
        }
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        if records.len() >= CLAIMED_CAPACITY {
            records.clear();
        }
        records.insert(record.operation_id.clone(), (record.clone(), version));
    }
}

/// The ids this ledger last read as absent (at most [`CLAIMED_CAPACITY`]),
/// so that the prepare that usually follows is tried as an insert without a
/// read first ([`PostgresLedger::try_apply_known`]). A hint only: the insert
/// applies only if no row exists, whatever the hint says.
#[derive(Debug, Default)]
struct Absent {
    ids: Mutex<std::collections::HashSet<String>>,
}

impl Absent {
    fn remember(&self, operation_id: &str) {
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        if ids.len() >= CLAIMED_CAPACITY {
            ids.clear();
        }
        ids.insert(operation_id.to_owned());
    }

    /// Forgets `operation_id`; whether it was remembered and `transition`
    /// creates an operation.
    fn take(&self, operation_id: &str, transition: &Transition) -> bool {
        if !matches!(
            transition,
            Transition::Prepare(_) | Transition::PrepareAndClaim(..)
        ) {
            return false;
        }
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        !ids.is_empty() && ids.remove(operation_id)
    }
}

/// The row of a transition's own locked operation is gone.
fn vanished(operation_id: &str) -> Step {
    Step::Fail(LedgerError::backend(
        format!("operation {operation_id:?} vanished while locked"),
        None,
    ))
}

/// The record (if any), its version and the database clock from a
/// `read_record` or `lock_record` row.
fn found_record(
    found: &postgres::Row,
) -> Result<(Option<EffectRecord>, Option<String>, SystemTime), Step> {
    let exists: Option<String> = found
        .try_get("operation_id")
        .map_err(|err| corrupt("an operation cannot be decoded".to_owned(), err))?;
    let current = exists.map(|_| row::record(found)).transpose()?;
    let version: Option<String> = found
        .try_get("version")
        .map_err(|err| corrupt("an operation's version cannot be decoded".to_owned(), err))?;
    let now: SystemTime = found
        .try_get("ledger_now")
        .map_err(|err| corrupt("the database clock cannot be decoded".to_owned(), err))?;
    Ok((current, version, now))
}

/// What the write function answered.
struct Written {
    /// The row's new version; `None` when it wrote nothing (the record
    /// exists already, or changed since the version given).
    version: Option<String>,
    /// The database clock written in place of the placeholder, if one was given.
    stamp: Option<String>,
    /// The lease written, when an insert planned on the placeholder had one.
    lease_until: Option<f64>,
}

/// Runs the write function for a plan, with `placeholder` the timestamp
/// text to replace with the database clock (when the plan was made without
/// reading it); writes nothing, and answers no version, when the placeholder
/// stands in an event's data.
fn write_plan(
    client: &mut impl GenericClient,
    statements: &mut Session,
    outcome: &TransitionOutcome,
    write: &Write,
    version: &Option<String>,
    durability: WriteDurability,
    placeholder: Option<&str>,
) -> Result<Written, Step> {
    let record = &outcome.record;
    let params = RecordParams::new(record)?;
    let events = EventParams::new(&write.events);
    if placeholder.is_some_and(|placeholder| events.data.iter().any(|d| d.contains(placeholder))) {
        // The plan put the clock into an event's data, where the write
        // function would not replace it: write nothing, plan on a read.
        return Ok(Written {
            version: None,
            stamp: None,
            lease_until: None,
        });
    }
    let kind = match write.kind {
        WriteKind::Insert => "insert",
        WriteKind::Transition => "transition",
        WriteKind::InPlace => "in place",
    };
    let deferred = matches!(durability, WriteDurability::Deferrable);
    let mut args: Vec<(&(dyn ToSql + Sync), Type)> =
        vec![(&kind, Type::TEXT), (version, Type::TEXT)];
    args.extend(params.bind(record).into_iter().zip(RecordParams::TYPES));
    args.extend(events.bind().into_iter().zip([
        Type::TEXT_ARRAY,
        Type::TEXT_ARRAY,
        Type::TEXT_ARRAY,
    ]));
    args.push((&deferred, Type::BOOL));
    args.push((&placeholder, Type::TEXT));
    let row = statements
        .query_one(client, Stmt::Write, &args)
        .map_err(|err| Step::from_pg("writing a transition", err))?;
    let decode = |err| {
        Step::Fail(corrupt(
            "the write's answer cannot be decoded".to_owned(),
            err,
        ))
    };
    let written: bool = row.try_get(0).map_err(decode)?;
    let version: Option<String> = row.try_get(1).map_err(decode)?;
    Ok(Written {
        version: version.filter(|_| written),
        stamp: row.try_get(2).map_err(decode)?,
        lease_until: row.try_get(3).map_err(decode)?,
    })
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
        let durability = if self.durable_commits {
            durability
        } else {
            WriteDurability::Deferrable
        };
        let mut conn = self.connection()?;
        let known = if self.absent.take(operation_id, transition) {
            Some(None)
        } else {
            self.claimed.take(operation_id, transition).map(Some)
        };
        if let Some(known) = known {
            match Self::try_apply_known(&mut conn, operation_id, transition, known, durability) {
                Ok(Some((outcome, version))) => {
                    self.claimed.remember(&outcome.record, version);
                    return Ok(outcome);
                }
                // The row exists or changed, the write conflicted, or the
                // session lacked a prepared statement (nothing ran): plan on
                // a fresh read.
                Ok(None) | Err(Step::Retry(_) | Step::Unprepared(_)) => {}
                Err(Step::Fail(err)) => return Err(err),
            }
        }
        let mut attempt: u32 = 0;
        let mut unprepared = false;
        loop {
            let tried = Self::try_apply_unlocked(&mut conn, operation_id, transition, durability)
                .and_then(|done| match done {
                    Some(applied) => Ok(applied),
                    None => Self::try_apply_locked(&mut conn, operation_id, transition, durability),
                });
            match tried {
                Ok((outcome, version)) => {
                    self.claimed.remember(&outcome.record, version);
                    return Ok(outcome);
                }
                Err(Step::Fail(err)) => return Err(err),
                // The session lacked a prepared statement, or had its name:
                // it did not run, and a transaction it was in rolled back.
                // The ledger runs unnamed statements from now on; run the
                // attempt again at once, once.
                Err(Step::Unprepared(err)) if !unprepared && !self.prepared.enabled() => {
                    unprepared = true;
                    drop(err);
                }
                Err(Step::Unprepared(err)) => return Err(from_pg("running a transition", err)),
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
            tx.query_typed_one("SELECT txid_current()", &[])?;
            tx.commit()
        })
    }

    fn get(&self, operation_id: &str) -> Result<Option<EffectRecord>, LedgerError> {
        let found = self
            .read("reading an operation", |c, s| {
                s.query_opt(c, Stmt::Get, &[(&operation_id, Type::TEXT)])
            })?
            .map(|r| row::record(&r))
            .transpose()?;
        if found.is_none() {
            self.absent.remember(operation_id);
        }
        Ok(found)
    }

    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError> {
        query.validate()?;
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        if let Some(after) = &query.after {
            let found = self.read("reading the list cursor", |c, s| {
                s.query(c, Stmt::Get, &[(after, Type::TEXT)])
            })?;
            if found.is_empty() {
                return Err(ListQuery::unknown_cursor(after));
            }
        }
        let rows = self.read("listing operations", |c, s| {
            if query.after.is_some() || query.stale {
                let status = query.status_filter().map(EffectStatus::as_str);
                s.query(
                    c,
                    Stmt::ListPage,
                    &[
                        (&status, Type::TEXT),
                        (&query.stale, Type::BOOL),
                        (&query.after, Type::TEXT),
                        (&limit, Type::INT8),
                    ],
                )
            } else {
                match query.status {
                    Some(status) => s.query(
                        c,
                        Stmt::ListStatus,
                        &[(&status.as_str(), Type::TEXT), (&limit, Type::INT8)],
                    ),
                    None => s.query(c, Stmt::List, &[(&limit, Type::INT8)]),
                }
            }
        })?;
        rows.iter().map(row::listed).collect()
    }

    fn events(&self, operation_id: &str) -> Result<Vec<LedgerEvent>, LedgerError> {
        let rows = self.read("reading events", |c, s| {
            s.query(c, Stmt::Events, &[(&operation_id, Type::TEXT)])
        })?;
        rows.iter().map(row::event).collect()
    }

    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        // Past the largest sequence PostgreSQL can hold there is nothing to read.
        let Ok(after) = i64::try_from(after) else {
            return Ok(Vec::new());
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (rows, unannounced) = self.read("reading events", |c, s| {
            // The reads of schema version 6 (migrations/0006_announced_writers.sql), in this order, each
            // statement in a snapshot of its own.
            let mut tx = c
                .build_transaction()
                .isolation_level(postgres::IsolationLevel::ReadCommitted)
                .read_only(true)
                .start()?;
            let largest: i64 = s.query_one(&mut tx, Stmt::EventsLargest, &[])?.try_get(0)?;
            let mut bound = largest;
            let mut unannounced = true;
            for _ in 0..MARK_READS {
                let marks = s.query_one(&mut tx, Stmt::EventsMarks, &[(&largest, Type::INT8)])?;
                unannounced = marks.try_get(0)?;
                let first_pending: Option<i64> = marks.try_get(1)?;
                bound = first_pending.map_or(largest, |first| largest.min(first.saturating_sub(1)));
                if !unannounced {
                    break;
                }
            }
            let rows = s.query(
                &mut tx,
                Stmt::EventsPage,
                &[
                    (&after, Type::INT8),
                    (&bound, Type::INT8),
                    (&limit, Type::INT8),
                ],
            )?;
            tx.commit()?;
            Ok((rows, unannounced))
        })?;
        let mut events = rows.iter().map(row::event).collect::<Result<Vec<_>, _>>()?;
        if unannounced {
            // A marked writer had announced nothing: a missing sequence may
            // be its, so the page ends before the first one.
            let contiguous = events
                .iter()
                .zip(after.unsigned_abs() + 1..)
                .take_while(|(event, expected)| event.sequence == *expected)
                .count();
            events.truncate(contiguous);
        }
        Ok(events)
    }

    fn count_events(
        &self,
        operation_ids: &[&str],
        event_type: &str,
    ) -> Result<Vec<u64>, LedgerError> {
        if operation_ids.is_empty() {
            return Ok(Vec::new());
        }
        let q = &self.schema.quoted;
        // One statement for the page, unnamed (as `query_typed` runs), so a
        // transaction pooler sees nothing it must keep.
        let sql = format!(
            "SELECT operation_id, count(*) FROM {q}.effect_events \
             WHERE event_type = $1 AND operation_id = ANY($2) GROUP BY operation_id"
        );
        let rows = self.read("counting events", |c, _| {
            c.query_typed(
                &sql,
                &[
                    (&event_type, postgres::types::Type::TEXT),
                    (&operation_ids, postgres::types::Type::TEXT_ARRAY),
                ],
            )
        })?;
        let mut counts = std::collections::HashMap::with_capacity(rows.len());
        for row in &rows {
            let id: String = row
                .try_get(0)
                .map_err(|e| crate::error::from_pg("counting events", e))?;
            let count: i64 = row
                .try_get(1)
                .map_err(|e| crate::error::from_pg("counting events", e))?;
            counts.insert(id, u64::try_from(count).unwrap_or(0));
        }
        Ok(operation_ids
            .iter()
            .map(|id| counts.get(*id).copied().unwrap_or(0))
            .collect())
    }

    fn stats(&self) -> Result<LedgerStats, LedgerError> {
        let q = &self.schema.quoted;
        let (rows, stale, budgets) = self.read("counting operations", |c, s| {
            // One snapshot, so the counts and the stale count agree.
            let mut tx = c
                .build_transaction()
                .isolation_level(postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let mut rows = s.query(&mut tx, Stmt::Stats, &[])?;
            // Terminal statuses: the counters where the schema has them (a
            // schema read before it was migrated is counted row by row).
            let ops = format!("{q}.effect_operations");
            let counters = format!("{q}.effect_status_counts");
            let counted: bool = tx
                .query_typed(
                    "SELECT to_regclass($1) IS NOT NULL",
                    &[(&counters, postgres::types::Type::TEXT)],
                )?
                .first()
                .map(|row| row.try_get(0))
                .transpose()?
                .unwrap_or(false);
            let terminal = if counted {
                format!(
                    "SELECT status, sum(operations)::bigint, NULL::text FROM {counters} \
                     GROUP BY status"
                )
            } else {
                format!(
                    "SELECT status, count(*), NULL::text FROM {ops} \
                     WHERE status NOT IN ('prepared', 'awaiting_approval', 'dispatched', \
                     'outcome_unknown', 'quarantined') GROUP BY status"
                )
            };
            rows.extend(tx.query_typed(&terminal, &[])?);
            if counted {
                // The counters and the per-status counts see only statuses
                // they know. The statuses present are found by seeking the
                // status index once per distinct value (a skip scan, not a
                // scan), so a status no `EffectStatus` parses is still
                // reported as corrupt below.
                let present = format!(
                    "WITH RECURSIVE present(status) AS ( \
                         (SELECT status FROM {ops} ORDER BY status LIMIT 1) \
                         UNION ALL \
                         SELECT (SELECT o.status FROM {ops} o WHERE o.status > present.status \
                                 ORDER BY o.status LIMIT 1) \
                         FROM present WHERE present.status IS NOT NULL) \
                     SELECT status, 0::bigint, NULL::text FROM present \
                     WHERE status IS NOT NULL AND status NOT IN ('prepared', \
                     'awaiting_approval', 'dispatched', 'outcome_unknown', 'quarantined', \
                     'confirmed', 'rejected')"
                );
                rows.extend(tx.query_typed(&present, &[])?);
            }
            let stale: i64 = s.query_one(&mut tx, Stmt::Stale, &[])?.try_get(0)?;
            let budgets = s.query(&mut tx, Stmt::BudgetList, &[])?;
            tx.commit()?;
            Ok((rows, stale, budgets))
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
            budgets: crate::budget::uses(&budgets)?,
        })
    }
}
