//! Integration tests of the SQLite ledger, one module per topic.

mod bad_input;
mod durability;
mod fixtures;
mod race;
mod support;
