//! The test servers a suite may need, found through the environment.
//!
//! A PostgreSQL test reads the server's URL from `EFFECT_TEST_POSTGRES_URL`.
//! Without it the test says it skipped and passes, so a plain `cargo test`
//! works on any machine; CI sets `EFFECT_REQUIRE_POSTGRES=1`, which turns a
//! skip into a failure. The suites of every crate call [`postgres_url`], so
//! the variables and the message are the same everywhere.

use std::io::Write as _;

/// The variable holding the PostgreSQL server's URL.
pub const POSTGRES_URL_VAR: &str = "EFFECT_TEST_POSTGRES_URL";
/// Set to `1` to make a missing server a failure instead of a skip.
pub const REQUIRE_POSTGRES_VAR: &str = "EFFECT_REQUIRE_POSTGRES";

/// The PostgreSQL server's URL, or `None` after saying (on stderr, past the
/// test harness's capture) that `test` was skipped.
///
/// ```
/// // Without the variable (and without the requirement), a test skips.
/// if let Some(url) = effect_test_support::servers::postgres_url("my_test") {
///     assert!(url.starts_with("postgres"));
/// }
/// ```
///
/// # Panics
///
/// When the URL is missing and `EFFECT_REQUIRE_POSTGRES=1`: CI must not skip.
pub fn postgres_url(test: &str) -> Option<String> {
    if let Ok(url) = std::env::var(POSTGRES_URL_VAR)
        && !url.trim().is_empty()
    {
        return Some(url);
    }
    assert!(
        std::env::var(REQUIRE_POSTGRES_VAR).as_deref() != Ok("1"),
        "{test}: {POSTGRES_URL_VAR} is not set, but {REQUIRE_POSTGRES_VAR}=1 requires the PostgreSQL tests to run"
    );
    // In one piece on the real stderr, so a plain `cargo test` shows why the
    // test did nothing.
    let message = format!(
        "\nskipped: {test}: {POSTGRES_URL_VAR} is not set (set it to a PostgreSQL server URL such as \
         postgres://postgres@127.0.0.1:55439/postgres to run the PostgreSQL tests)\n"
    );
    let _ = std::io::stderr().write_all(message.as_bytes());
    None
}

/// The variable holding the path of the CA certificate (PEM) that signed the
/// PostgreSQL server's TLS certificate.
pub const POSTGRES_TLS_CA_VAR: &str = "EFFECT_TEST_POSTGRES_TLS_CA";

/// The PostgreSQL server's URL and the CA file that signed its TLS
/// certificate, or `None` after saying that `test` was skipped: a server
/// without TLS (no [`POSTGRES_TLS_CA_VAR`]) skips the TLS tests.
///
/// ```
/// if let Some((url, ca)) = effect_test_support::servers::postgres_tls("my_tls_test") {
///     assert!(url.starts_with("postgres") && !ca.as_os_str().is_empty());
/// }
/// ```
///
/// # Panics
///
/// When the URL or the CA file is missing and `EFFECT_REQUIRE_POSTGRES=1`:
/// CI must run the TLS tests too.
pub fn postgres_tls(test: &str) -> Option<(String, std::path::PathBuf)> {
    let url = postgres_url(test)?;
    if let Ok(ca) = std::env::var(POSTGRES_TLS_CA_VAR)
        && !ca.trim().is_empty()
    {
        return Some((url, std::path::PathBuf::from(ca)));
    }
    assert!(
        std::env::var(REQUIRE_POSTGRES_VAR).as_deref() != Ok("1"),
        "{test}: {POSTGRES_TLS_CA_VAR} is not set, but {REQUIRE_POSTGRES_VAR}=1 requires the PostgreSQL TLS tests to run"
    );
    let message = format!(
        "\nskipped: {test}: {POSTGRES_TLS_CA_VAR} is not set (set it to the CA file that signed the \
         PostgreSQL server's certificate to run the TLS tests)\n"
    );
    let _ = std::io::stderr().write_all(message.as_bytes());
    None
}
