//! Integration tests of the SQLite ledger, one module per topic.

mod bad_input;
mod conformance;
mod durability;
mod fixtures;
mod race;
mod support;
mod sweep;
