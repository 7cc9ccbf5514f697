//! A durable [`EffectLedger`](effect_core::EffectLedger) in a SQLite file.
//!
//! [`SqliteLedger`] records every effect operation of production-agent-systems
//! before it is dispatched and keeps its append-only history, so an uncertain
//! outcome survives a crash and is reconciled instead of repeated. It keeps the
//! table layout and value formats of the Python package `production-agent-systems`
//! 1.x (docs/spec.md §8): a ledger file written by either opens in the other. Opening a
//! file migrates it forward ([`SCHEMA_VERSION`]); older files are adopted as
//! they are. Version 3 adds one column, `last_event_sequence` (`list`'s
//! tie-break between equal update times, so a transition rewrites its row in
//! place), keeps one list index, and drops `AUTOINCREMENT` from
//! `effect_events` (the ledger assigns each event the next sequence inside the
//! write transaction; events are never deleted). Version 5 adds
//! `effect_status_counts`, the number of `confirmed` and `rejected`
//! operations, which triggers keep in the transaction that changes a status
//! (the Python package's writes fire them too), so `stats` costs what the
//! unresolved and active operations cost, not the ledger's size. A file
//! opened read-only is read in the layout it has.
//!
//! Each transition is applied inside one transaction around
//! [`effect_core::transition::plan`], holding the write lock for its writes, in WAL mode, fsynced before it returns
//! ([`Synchronous::Full`], the default). Several threads and processes may share
//! a file. The ledger is file-backed only: `:memory:` is refused, since a ledger
//! that dies with the process protects nothing.
//!
//! Concurrent transitions of one process share commits (group commit,
//! [`SqliteOptions::group_commit`], on by default): one caller writes a batch
//! of queued transitions in one transaction, each in its own savepoint, and
//! every caller is answered only once that commit is durable; a failing
//! transition fails alone. Replays of confirmed operations are answered from a
//! bounded in-memory copy ([`SqliteOptions::confirmed_cache`]): `confirmed` is
//! terminal, so the copy cannot go stale.
//!
//! It depends on effect-core, rusqlite (with SQLite bundled), r2d2 and tempfile
//! (for [`TempLedger`]); it deliberately knows nothing of execution or of other
//! stores.
//!
//! ```
//! use std::time::Duration;
//! use effect_core::{Claim, Confirmation, EffectLedger, EffectLedgerExt, NewOperation, RequestFingerprint, Transition};
//! use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
//! use serde_json::json;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("effects.sqlite3");
//! let ledger = SqliteLedger::open(&path, SqliteOptions::default())?;
//!
//! // Record the operation and take the dispatch lease in one durable commit ...
//! let op = NewOperation::new("capture_payment", "1", RequestFingerprint::of_value(&json!({"invoice_id": "INV-1"})))
//!     .with_provider_idempotency_key(Some("capture:INV-1".into()));
//! let claim = Claim::new("worker-1", Duration::from_secs(30));
//! let id = "invoice:INV-1:capture";
//! assert!(ledger.apply(id, &Transition::PrepareAndClaim(op, claim))?.applied);
//!
//! // ... call the provider, then record its answer in a second one.
//! let confirmation = Confirmation {
//!     output: json!({"payment_id": "pay-1"}),
//!     provider_operation_id: Some("pay-1".into()),
//!     evidence: Default::default(),
//! };
//! assert!(ledger.mark_confirmed(id, Some("worker-1"), &confirmation)?);
//! drop(ledger);
//!
//! // The outcome and its history survive a restart.
//! let reopened = SqliteLedger::open(&path, SqliteOptions::default())?;
//! let record = reopened.get(id)?.expect("the operation was stored");
//! assert_eq!(record.status.as_str(), "confirmed");
//! assert_eq!(record.output, Some(json!({"payment_id": "pay-1"})));
//! let events: Vec<String> = reopened.events(id)?.into_iter().map(|e| e.event_type).collect();
//! assert_eq!(events, ["prepared", "dispatched", "confirmed"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Errors
//!
//! Opening fails with a [`SqliteError`] that says what to do (a read-write
//! open of a file this process can only read is refused at once with
//! [`SqliteError::ReadOnly`], rather than failing at the first write); it converts into
//! a [`LedgerError`](effect_core::LedgerError) of kind [`SqliteError::kind`].
//! Ledger methods return `LedgerError`s, with SQLite's error as the `source`:
//!
//! | SQLite condition | kind |
//! | --- | --- |
//! | locked past the busy timeout, no pooled connection free, file vanished, disk full, an I/O error (`SQLITE_IOERR`) | `Unavailable` |
//! | a commit whose sync failed (`SQLITE_IOERR_FSYNC`): outcome unknown, the ledger is poisoned | `Unavailable` |
//! | not a database, damaged file (which a failed read of an intact file can look like: the message says to check it with `PRAGMA integrity_check` before restoring), undecodable row (unknown status, invalid JSON, negative attempts) | `Corrupt` |
//! | file made read-only after opening, or [`SqliteOptions::read_only`] ledger asked to write | `Backend` |
//! | anything else | `Backend` |
//!
//! A failed transition rolls back as a whole: nothing of it is written,
//! except after a failed sync, below.
//!
//! # After a failed sync
//!
//! When `fsync`/`fdatasync` fails during a commit, SQLite reports the commit
//! as failed and does not publish it to other connections, but its frames
//! are already in the write-ahead log, and the operating system may have
//! written them, or dropped them and marked the pages clean, so that a later
//! sync that succeeds proves nothing about them. The write's outcome is
//! therefore unknown: every caller of that commit gets
//! [`LedgerError::Unavailable`](effect_core::LedgerError::Unavailable) saying
//! so, and the ledger (with all its clones) is *poisoned*
//! ([`SqliteLedger::is_poisoned`]): every later transition is refused with
//! `Unavailable`, while reads still answer from the file. Opening the file
//! again (a new [`SqliteLedger`], in this process or another) writes again.
//! For the executor a refused or unknown claim is an error before any
//! dispatch, and an unknown confirmation leaves the record `dispatched`
//! until its lease expires and it is reconciled (probe or key), like any
//! interrupted dispatch. A failed sync of deferred commits (see
//! [`SqliteOptions::deferred_sync_delay`]) poisons the ledger the same way:
//! those commits were answered, and may or may not be durable. Other I/O
//! errors (a failed `write`, a full disk, a log that cannot be opened to
//! sync) roll the transaction back, or leave the deferred commits pending,
//! and leave the ledger usable; while opening, they are [`SqliteError::Io`],
//! of kind `Unavailable`.
//! `crates/effect-ledger-sqlite/tests/it/io_faults.rs` runs the ledger under
//! injected I/O faults (libfiu) and checks this.
//!
//! # Feature flags
//!
//! None: the crate has no optional features.

#![warn(missing_docs)]

mod backup;
mod batch;
mod budget;
mod busy;
mod confirmed;
mod counts;
mod deferred;
mod error;
mod file;
mod group;
mod known;
mod ledger;
mod options;
mod prune;
mod row;
mod schema;
mod temp;

pub use error::SqliteError;
pub use ledger::SqliteLedger;
pub use options::{SqliteOptions, Synchronous};
pub use schema::SCHEMA_VERSION;
pub use temp::TempLedger;
