//! A PostgreSQL [`EffectLedger`](effect_core::EffectLedger) for
//! production-agent-systems: [`PostgresLedger`].
//!
//! # When to choose it
//!
//! Choose this store when agents on **several hosts** must share one ledger:
//! a claim made on one host is exclusive on every other, because each transition
//! locks the operation's row in one transaction. On a single host, the SQLite
//! store (`effect-ledger-sqlite`) is simpler and needs no server; do not put a
//! SQLite file on a network drive to share it between hosts.
//!
//! It depends on effect-core and the synchronous `postgres` driver with an
//! `r2d2` pool, and deliberately on nothing else: no async runtime, no executor,
//! no other store.
//!
//! # What it stores
//!
//! The tables of the SQLite store, with the same column names and status
//! strings, in a schema of their own (default `effect_ledger`, see
//! [`PostgresOptions::schema`]), so several applications can share one
//! database. The schema is created and migrated forward on
//! [`PostgresLedger::connect`]; concurrent openers are serialized by an
//! advisory lock. JSON columns are compact text (see the `schema` module's
//! notes), `lease_until` is seconds since the epoch, timestamps are ISO-8601
//! UTC text.
//!
//! # What a lease proves, and what it does not
//!
//! Claiming a dispatch records an owner token and a lease expiry computed from
//! the **database server's clock** (`clock_timestamp()` inside the transaction),
//! so hosts whose clocks are skewed cannot end a live lease early or keep one
//! alive late; every host is measured against one clock.
//!
//! A live lease proves that no other caller can claim the operation or
//! finalize it: only the token holder can mark it confirmed, rejected or
//! unknown. An expired lease proves nothing about the handler: the process may
//! still be running, or its request may have committed at the provider. So
//! expiry ([`Transition::ExpireLease`](effect_core::Transition::ExpireLease))
//! never retries anything: it moves the operation to `outcome_unknown` with
//! evidence `handler_may_still_be_running=true`, and reconciliation (a probe,
//! or an operator) decides what happened. A stale owner whose lease was taken
//! over can never finalize, since its token no longer matches.
//!
//! # Example
//!
//! Using it needs a server, so the runnable example lives in the integration
//! tests (`tests/it/`, driven by `EFFECT_TEST_POSTGRES_URL`). In outline:
//!
//! ```text
//! let ledger = PostgresLedger::connect(
//!     "postgres://app@db.internal:5432/agents",
//!     PostgresOptions::default().schema("billing_effects"),
//! )?;
//! let executor_ledger: Arc<dyn EffectLedger> = Arc::new(ledger);
//! ```
//!
//! The options themselves need no server:
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
//! TLS is not offered yet: connect over a trusted network or a local proxy.

mod error;
mod ledger;
mod options;
mod row;
mod schema;

pub use ledger::PostgresLedger;
pub use options::{DEFAULT_SCHEMA, PostgresOptions};
pub use schema::SCHEMA_VERSION;
