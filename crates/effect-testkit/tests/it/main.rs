//! Integration tests of effect-testkit: the suite passes on the reference
//! ledger, fails on broken ones, and the fault injector behaves as scripted.

mod broken;
mod faults;
mod memory;
mod snapshot_settings;
