//! Integration tests of the SQLite ledger, one module per topic.
#![allow(clippy::disallowed_methods)] // Tests time real stores and processes.

mod approval;
mod backup;
mod bad_input;
mod budget;
mod conformance;
mod counts;
mod deferred;
mod durability;
mod fixtures;
mod io_faults;
mod known_rows;
mod prune;
mod race;
mod read_only;
mod retention;

mod support;
mod sweep;
