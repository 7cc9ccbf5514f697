//! The slow soak tests (processes killed at random, many seeds), which a
//! developer's quick `cargo test` skips and CI runs, as rust-analyzer gates
//! its slow tests.
//!
//! `cargo xtask test` (and so `cargo xtask ci`) sets `EFFECT_SLOW_TESTS=1`;
//! without it a soak test says it skipped and passes.

use std::io::Write as _;

/// The variable that runs the slow soak tests when set to `1`.
pub const SLOW_TESTS_VAR: &str = "EFFECT_SLOW_TESTS";

/// Whether the soak test `test` runs: `EFFECT_SLOW_TESTS=1`. Otherwise says
/// on stderr that `test` skipped and how to run it, and answers false.
///
/// ```
/// if effect_test_support::slow::enabled("my_soak_test") {
///     // kill processes at random, many seeds...
/// }
/// ```
pub fn enabled(test: &str) -> bool {
    if std::env::var(SLOW_TESTS_VAR).as_deref() == Ok("1") {
        return true;
    }
    // In one piece on the real stderr, so a plain `cargo test` shows why the
    // test did nothing.
    let message = format!(
        "\nskipped: {test}: a slow soak test; set {SLOW_TESTS_VAR}=1 to run it \
         (`cargo xtask test` and CI do)\n"
    );
    let _ = std::io::stderr().write_all(message.as_bytes());
    false
}
