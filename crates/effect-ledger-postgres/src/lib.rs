//! A PostgreSQL [`EffectLedger`](effect_core::EffectLedger) for
//! production-agent-systems: [`PostgresLedger`].
//!
//! # When to choose it
//!
//! Choose this store when agents on **several hosts** must share one ledger:
//! a claim made on one host is exclusive on every other, because each transition
//! writes only a record that is still as it was read, or holds its row lock.
//! On a single host, the SQLite
//! store (`effect-ledger-sqlite`) is simpler and needs no server; do not put a
//! SQLite file on a network drive to share it between hosts.
//!
//! It depends on effect-core and the synchronous `postgres` driver with an
//! `r2d2` pool and rustls for TLS, and deliberately on nothing else: no async
//! runtime of its own, no executor, no other store.
//!
//! # What it stores
//!
//! The tables of the SQLite store, with the same column names and status
//! strings, in a schema of their own (default `effect_ledger`, see
//! [`PostgresOptions::schema`]), so several applications can share one
//! database. The schema is created and migrated forward on
//! [`PostgresLedger::connect`]; concurrent openers are serialized by an
//! advisory lock. JSON columns are compact `TEXT` rather than `jsonb`: the
//! ledger never queries inside them, and text keeps exactly what was written,
//! as the SQLite store does. `lease_until` is seconds since the epoch
//! (`DOUBLE PRECISION`), timestamps are ISO-8601 UTC text.
//!
//! # A transition: one read, one write statement
//!
//! A transition reads the record with its version (`xmin`) and the database
//! clock, plans it in Rust ([`effect_core::transition::plan`]), and writes the
//! plan with one call of the schema's `effect_write` function (installed by
//! migration 2, replaced by migrations 3, 4 and 6), which commits on its own:
//! two round trips and one commit.
//! The function writes only if the record is unchanged since the read and
//! nobody holds its row lock; otherwise the transition is planned again
//! inside a transaction that locks the row first (`SELECT ... FOR UPDATE`,
//! four round trips). A transition that writes nothing (a replay of a
//! finished operation, a claim refused because another holds the lease) is
//! the one read and nothing else: no write, no lock, no transaction.
//!
//! **The owner's outcome is one round trip.** The write answers the row's
//! new version, and the ledger remembers the record of each claim it wrote
//! with that version. The owner's confirmation, rejection or unknown outcome
//! is then planned on that record and written at once, with no read: its
//! plan depends on the record, not on the clock, and the write applies only
//! if the row is still that version (otherwise the transition is planned
//! again on a fresh read, so a claim another host took over is never
//! overwritten). Its timestamps are still the database's: the function
//! writes `clock_timestamp()` in place of the placeholder the plan was made
//! with.
//!
//! **A new operation just read as absent is one round trip.** The executor
//! reads an operation before it prepares and claims it; when that read
//! found nothing, the ledger plans the new operation on no record with a
//! placeholder clock and inserts it at once (`ON CONFLICT DO NOTHING`): the
//! write function stamps it and measures the claim's lease on the database
//! clock. If the row exists after all, nothing is written and the
//! transition is planned again on a fresh read. A fresh effect is three
//! round trips (the executor's read, the insert, the outcome) and two
//! commits.
//!
//! The driver is synchronous and does not pipeline; where a plan
//! needs the clock or a record the ledger did not write itself, the read and
//! the write are two round trips, as a single statement cannot do both
//! while the plan is decided in Rust. A pooled connection used within the
//! last second is handed out without the check-out ping (an empty query).
//!
//! # Prepared statements, and poolers
//!
//! Each pooled connection prepares a statement the first time it runs it
//! (SQL `PREPARE effect_<nonce>_<name>(types) AS ...`, the nonce random per
//! ledger) and runs it by name from then on (`EXECUTE`, its arguments as
//! literals), so the server parses, analyses and plans each statement once
//! per session rather than on every call
//! ([`PostgresOptions::prepared_statements`], on by default). Behind a
//! pooler in transaction mode (PgBouncer's `pool_mode = transaction`, with
//! no prepared-statement setting) a transaction may run on a server session
//! that lacks the statement, or where another connection of this ledger
//! prepared it already: that error comes before the statement ran, so the
//! ledger runs the call again, the whole transaction if it was in one, with
//! unnamed statements (`query_typed`, one round trip each), and keeps to
//! them from then on ([`PostgresLedger::prepares_statements`]). A random
//! name never stands for another process's statement, which the driver's
//! own protocol-level names (`s0`, `s1`, ... per process) could.
//! The write sets `synchronous_commit` for its own transaction, so no
//! session setting is relied on either.
//!
//! # Event order
//!
//! Event sequences come from an identity column, and appends in one schema
//! commit in parallel: no writer waits for, or looks at, another (schema
//! version 6). A writer marks itself with a *shared* advisory lock, draws its
//! sequences, and announces the first with a second shared advisory lock
//! keyed by it; both are held until it ends. An
//! [`events_after`](effect_core::EffectLedger::events_after) reader reads the
//! largest committed sequence, then the marks and announcements (one
//! `pg_locks` copy), then the page in a fresh snapshot, up to that sequence
//! and below the first announced one; if a marked writer has announced nothing
//! yet, the page ends before its first missing sequence. So a cursor never
//! skips an event that commits late, nor returns one twice, and the cursor
//! is still the sequence. The argument is in
//! `migrations/0006_announced_writers.sql` (`migrations/0003_parallel_appends.sql`
//! has the cause of an earlier attempt's skip);
//! `tests/it/cursor.rs` drives the interleavings, with a naive reader that
//! skips. Readers pay for the look; writers, which used to read `pg_locks`
//! on every append beside another writer (versions 3 to 5), no longer do.

//! # What a lease proves, and what it does not
//!
//! Claiming a dispatch records an owner token and a lease expiry computed from
//! the **database server's clock** (`clock_timestamp()` inside the transaction),
//! so hosts whose clocks are skewed cannot end a live lease early or keep one
//! alive late; every host is measured against one clock.
//!
//! A live lease proves that no other caller can claim the operation or
//! finalize it: only the token holder can mark it confirmed, rejected or
//! unknown. It does not prove that the holder is alive (it may have crashed a
//! moment ago), and it fences only the ledger, not the provider: a holder that
//! stalls past its lease can still send its request; only the provider
//! idempotency key protects against that.
//!
//! An expired lease proves nothing about the handler: the process may still be
//! running, or its request may have committed at the provider. So expiry
//! ([`Transition::ExpireLease`](effect_core::Transition::ExpireLease)) never
//! retries anything: it moves the operation to `outcome_unknown` with evidence
//! `handler_may_still_be_running=true`, and reconciliation (a probe, or an
//! operator) decides what happened. A stale owner whose lease was taken over
//! can never finalize, since its token no longer matches.
//!
//! # Failover
//!
//! The ledger's guarantees across a failover are the replication's: with
//! asynchronous replication a promoted standby lacks the last commits the
//! old primary acknowledged, and an operation whose record was lost is a new
//! operation to the executor (docs/production.md, "Several hosts", has the
//! measurements and the settings). What the ledger does detect: PostgreSQL
//! starts a new timeline at each promotion, and every new connection reads
//! the server's ([`PostgresLedger::server_timeline`]). One that finds a
//! server on an *earlier* timeline than the ledger already used (the old
//! primary, still reachable because it was not fenced or the address moved
//! back) is refused, so nothing is written where the promoted server will
//! never see it; calls fail as `Unavailable` meanwhile.
//! [`PostgresLedger::timeline_changes`] counts the failovers the ledger
//! lived through, [`PostgresLedger::stale_servers_refused`] the refusals.
//!
//! # Example
//!
//! An executor over a shared ledger. The example needs a server, so it runs
//! only when `EFFECT_TEST_POSTGRES_URL` names one (CI sets it; see
//! `tests/it/` for the multi-process and lease tests):
//!
//! ```
//! use std::sync::Arc;
//! use effect_core::{EffectContract, EffectLedger};
//! use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
//! use effect_ledger_postgres::{PostgresLedger, PostgresOptions};
//! use serde_json::{Value, json};
//!
//! let Ok(url) = std::env::var("EFFECT_TEST_POSTGRES_URL") else {
//!     return Ok(()); // No server to talk to.
//! };
//! // Each application (here: each run of this example) has a schema of its own.
//! let schema = format!("doc_example_{}", std::process::id());
//! let options = PostgresOptions::default().schema(schema.clone());
//! let ledger = Arc::new(PostgresLedger::connect(&url, options)?);
//! let executor = EffectExecutor::new(ledger.clone());
//!
//! let contract = EffectContract::builder("capture_payment", |args| {
//!     Ok(format!("invoice:{}:capture", args["invoice_id"].as_str().ok_or("missing invoice_id")?))
//! })
//! .build()?;
//! let capture = |args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
//!     Ok(json!({"charge": format!("ch_{}", args["invoice_id"].as_str().unwrap_or_default())}))
//! };
//! let first = executor.execute(&contract, &json!({"invoice_id": "INV-1"}), capture)?;
//! let again = executor.execute(&contract, &json!({"invoice_id": "INV-1"}), capture)?;
//! assert!(first.is_confirmed() && again.duplicate_suppressed);
//! assert_eq!(ledger.events("invoice:INV-1:capture")?.len(), 3); // prepared, dispatched, confirmed
//! # drop((executor, ledger));
//! # effect_ledger_postgres::connect_client(&url, &PostgresOptions::default())?
//! #     .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Options alone need no server:
//!
//! ```
//! use effect_ledger_postgres::PostgresOptions;
//!
//! let options = PostgresOptions::default().schema("billing_effects").pool_size(4);
//! assert_eq!(options.schema, "billing_effects");
//! ```
//!
//! # Errors
//!
//! Failures are [`LedgerError`](effect_core::LedgerError)s with the native
//! error as source: an unreachable server, a busy pool, or a transaction that
//! kept conflicting after its retries is `unavailable`; a row that cannot be
//! decoded (an unknown status, invalid JSON) is `corrupt`.
//!
//! # TLS
//!
//! Connections use TLS (rustls, with the platform's or a given CA's
//! certificates; no OpenSSL) as libpq's `sslmode` says, in the URL
//! (`postgres://ledger@db.internal/app?sslmode=verify-full&sslrootcert=/etc/ledger/ca.pem`)
//! or the `key=value` form (`host=db.internal sslmode=verify-full sslrootcert=/etc/ledger/ca.pem`),
//! else in [`PostgresOptions::ssl_mode`] and [`PostgresOptions::tls_ca_file`].
//! The default, `prefer`, encrypts when the server offers TLS but checks no
//! certificate; across an untrusted network use `verify-full`. [`SslMode`]
//! says what each mode checks. A wrong setup is an error before anything
//! is contacted, and a refused certificate names the host and the CA:
//!
//! ```
//! use effect_core::LedgerErrorKind;
//! use effect_ledger_postgres::{PostgresLedger, PostgresOptions};
//!
//! let url = "postgres://ledger@db.internal/app?sslmode=verify-full&sslrootcert=/no/such/ca.pem";
//! let err = PostgresLedger::connect(url, PostgresOptions::default()).unwrap_err();
//! assert_eq!(err.kind(), LedgerErrorKind::InvalidInput);
//! assert!(err.to_string().contains("cannot read the TLS CA file /no/such/ca.pem"));
//! ```
//!
//! Failures on the server's side ([`TlsError::ServerRefusedTls`],
//! [`TlsError::CertificateNotTrusted`], [`TlsError::CertificateNameMismatch`],
//! ...) are [`LedgerError::Backend`](effect_core::LedgerError::Backend)
//! errors whose source is the [`TlsError`]: retrying does not fix them.

mod budget;
mod error;
mod ledger;
mod options;
mod pool;
mod prepared;
mod prune;
mod row;
mod schema;
mod statements;
mod timeline;
mod tls;

pub use ledger::{PostgresLedger, connect_client};
pub use options::{DEFAULT_SCHEMA, PostgresOptions};
/// The `postgres` driver, whose [`Client`](postgres::Client) [`connect_client`] returns.
pub use postgres;
pub use schema::{SCHEMA_VERSION, SchemaState};
pub use tls::{SslMode, TlsError};
