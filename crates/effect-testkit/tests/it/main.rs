//! Integration tests of effect-testkit: the suite passes on the reference
//! ledger, fails on broken ones, and the fault injector behaves as scripted.
#![allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failing test with its message.

mod broken;
mod certify;
mod deferred;
mod faults;
mod guide;
mod matrix;
mod memory;
mod provider;
mod scenario;
mod schema;
