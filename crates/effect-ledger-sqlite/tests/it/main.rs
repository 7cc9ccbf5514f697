//! Integration tests of the SQLite ledger, one module per topic.
#![allow(clippy::disallowed_methods)] // Tests time real stores and processes.

mod bad_input;
mod conformance;
mod durability;
mod fixtures;
mod race;
mod support;
