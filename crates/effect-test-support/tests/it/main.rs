//! Integration tests of effect-test-support: the shared snapshot settings
//! redact and filter exactly the unstable values.
#![allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failing test with its message.

mod snapshot_settings;
