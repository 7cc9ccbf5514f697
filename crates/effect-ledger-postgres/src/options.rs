//! [`PostgresOptions`]: how [`PostgresLedger::connect`](crate::PostgresLedger::connect)
//! opens a ledger.

use std::path::PathBuf;
use std::time::Duration;

use crate::tls::SslMode;

/// The schema a ledger uses unless told otherwise.
pub const DEFAULT_SCHEMA: &str = "effect_ledger";

/// Options for [`PostgresLedger::connect`](crate::PostgresLedger::connect).
///
/// Several applications can share one database: give each its own schema.
///
/// ```
/// use std::time::Duration;
/// use effect_ledger_postgres::{PostgresOptions, SslMode};
///
/// let options = PostgresOptions::default()
///     .schema("billing_effects")
///     .pool_size(4)
///     .connect_timeout(Duration::from_secs(5))
///     .ssl_mode(SslMode::VerifyFull)
///     .tls_ca_file("/etc/ssl/ledger-ca.pem");
/// assert_eq!(options.schema, "billing_effects");
/// assert_eq!(PostgresOptions::default().ssl_mode, SslMode::Prefer);
/// assert_eq!(PostgresOptions::default().schema, "effect_ledger");
/// assert!(PostgresOptions::default().prepared_statements);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// See [`PostgresOptions::schema`].
    pub schema: String,
    /// See [`PostgresOptions::pool_size`].
    pub pool_size: u32,
    /// See [`PostgresOptions::connect_timeout`].
    pub connect_timeout: Duration,
    /// See [`PostgresOptions::transaction_retries`].
    pub transaction_retries: u32,
    /// See [`PostgresOptions::migrate`].
    pub migrate: bool,
    /// See [`PostgresOptions::create`].
    pub create: bool,
    /// See [`PostgresOptions::ssl_mode`].
    pub ssl_mode: SslMode,
    /// See [`PostgresOptions::tls_ca_file`].
    pub tls_ca_file: Option<PathBuf>,
    /// See [`PostgresOptions::durable_commits`].
    pub durable_commits: bool,
    /// See [`PostgresOptions::prepared_statements`].
    pub prepared_statements: bool,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            schema: DEFAULT_SCHEMA.to_owned(),
            pool_size: 8,
            connect_timeout: Duration::from_secs(10),
            transaction_retries: 16,
            migrate: true,
            create: true,
            ssl_mode: SslMode::Prefer,
            tls_ca_file: None,
            durable_commits: true,
            prepared_statements: true,
        }
    }
}

impl PostgresOptions {
    /// The schema holding the ledger's tables (default `effect_ledger`). It is
    /// created on open (see [`create`](PostgresOptions::create)). A name is 1 to 63 characters of lowercase ASCII letters,
    /// digits and `_`, starting with a letter or `_`, and not `pg_`-prefixed.
    #[must_use]
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The most connections the ledger keeps open (default 8, at least 1).
    #[must_use]
    pub fn pool_size(mut self, pool_size: u32) -> Self {
        self.pool_size = pool_size.max(1);
        self
    }

    /// How long to wait for a connection, from the server or from a busy pool
    /// (default 10 s).
    #[must_use]
    pub fn connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.connect_timeout = connect_timeout;
        self
    }

    /// Whether opening creates the schema and runs pending migrations (the
    /// default), under the migration lock. With `false` the ledger must
    /// already exist at the current schema version: nothing is created or
    /// altered, so a role with only `SELECT` (and `USAGE` on the schema) can
    /// open it to read, and a misspelled schema is an error rather than a new,
    /// empty ledger.
    #[must_use]
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// Whether a migrating open may create the ledger (the default) where the
    /// schema holds none yet. With `false` such a schema is refused, under the
    /// migration lock, and nothing is created; an existing ledger is still
    /// migrated. Without [`migrate`](PostgresOptions::migrate) nothing is
    /// created anyway.
    #[must_use]
    pub fn create(mut self, create: bool) -> Self {
        self.create = create;
        self
    }

    /// How many times a transition is retried after a serialization failure,
    /// deadlock or lost insert race before it fails as unavailable (default 16).
    #[must_use]
    pub fn transaction_retries(mut self, retries: u32) -> Self {
        self.transaction_retries = retries;
        self
    }

    /// The TLS mode when the URL has no `sslmode` (default
    /// [`SslMode::Prefer`]): the URL's `sslmode` wins, so an operator's
    /// connection string says the last word.
    #[must_use]
    pub fn ssl_mode(mut self, mode: SslMode) -> Self {
        self.ssl_mode = mode;
        self
    }

    /// The PEM file of the CA certificates to trust, when the URL has no
    /// `sslrootcert` (which wins). With a CA file every TLS mode but
    /// `disable` checks that the server's certificate is signed by one of
    /// them; `verify-full` also checks the host name. It is read on
    /// [`connect`](crate::PostgresLedger::connect), before the server is
    /// contacted.
    #[must_use]
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls_ca_file = Some(path.into());
        self
    }

    /// Whether every commit waits for the server's WAL flush (the default,
    /// `true`), whatever the server's `synchronous_commit`. With `false`
    /// every transition, claims included, commits as a
    /// [`Deferrable`](effect_core::WriteDurability::Deferrable) one does
    /// (`synchronous_commit = off` for its transaction): it is answered
    /// once committed and visible, and survives a crash of the calling
    /// process, but a crash of the server's machine may lose the last
    /// acknowledged transitions (up to three times the server's
    /// `wal_writer_delay`). A lost claim lets the operation be dispatched
    /// again, so choose `false` only where the provider's idempotency key
    /// absorbs a second dispatch. This is the PostgreSQL counterpart of the
    /// SQLite store's `synchronous = NORMAL` (the benchmarks' W2).
    #[must_use]
    pub fn durable_commits(mut self, durable: bool) -> Self {
        self.durable_commits = durable;
        self
    }

    /// Whether each pooled connection prepares the ledger's statements once
    /// on its server session and runs them by name from then on (the
    /// default, `true`), so the server does not parse, analyse and plan
    /// them again on every call. The names are SQL `PREPARE`d names with a
    /// random part of this ledger's own (`effect_<nonce>_read_record`), so
    /// another process's statement is never run in place of one. Behind a
    /// pooler in transaction mode (PgBouncer's `pool_mode = transaction`),
    /// the first transaction that runs on a server session without the
    /// statement, or on one where another connection of this ledger
    /// prepared it already, is run again with unnamed statements, and the
    /// ledger keeps to unnamed statements from then on
    /// ([`PostgresLedger::prepares_statements`](crate::PostgresLedger::prepares_statements)
    /// turns `false`): the caller sees no error and no write runs twice,
    /// since such an error comes before the statement ran. With `false`
    /// every statement runs unnamed, parsed and planned on every call.
    #[must_use]
    pub fn prepared_statements(mut self, prepared: bool) -> Self {
        self.prepared_statements = prepared;
        self
    }
}
