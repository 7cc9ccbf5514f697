//! End-to-end tests of the default stack: the executor over the SQLite ledger,
//! across reopenings and process deaths.
#![allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failing test with its message.

mod chaos;
mod compensation_kill;
mod crash;
mod deferred;
mod mixed_fleet;
mod open;
mod payment_recovery;
mod provider;
mod python_approval;
mod python_floats;
mod recovery_kill;
mod reopen;
mod unstorable;
