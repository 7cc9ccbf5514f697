//! Integration tests of the PostgreSQL ledger.
//!
//! They need a server: set `EFFECT_TEST_POSTGRES_URL` (for example
//! `postgres://postgres@127.0.0.1:55439/postgres`; `cargo xtask ci` starts one).
//! Without it each test says that it was skipped and passes, unless
//! `EFFECT_REQUIRE_POSTGRES=1` (set by CI), which makes a missing server a
//! failure. Every test works in a fresh schema of its own and drops it after.
//! The TLS tests also need `EFFECT_TEST_POSTGRES_TLS_CA`, the CA file that
//! signed the server's certificate (`cargo xtask ci` makes both).
//! The restart tests (`restart.rs`) start a PostgreSQL cluster of their own
//! (`cluster.rs`): they need `initdb` and `pg_ctl`, not the shared server.
#![allow(clippy::disallowed_methods)] // Tests time real stores and processes.

mod approval;
mod budget;
mod cluster;
mod conformance;
mod counts;
mod cursor;
mod leases;
mod lost_commit;
mod pgbouncer;
mod prepared;
mod processes;
mod prune;
mod restart;
mod retention;
mod roles;
mod round_trips;
mod schema;
mod storage;
mod support;
mod tls;
