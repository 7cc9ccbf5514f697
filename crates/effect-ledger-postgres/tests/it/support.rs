//! The server, fresh schemas, and child processes.

use std::io::Write;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use effect_core::{NewOperation, RequestFingerprint};
use effect_ledger_postgres::{PostgresLedger, PostgresOptions};
use postgres::{Client, NoTls};

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

pub use effect_test_support::servers::POSTGRES_URL_VAR as URL_VAR;

/// Environment of a child process: its role, schema and index.
pub const CHILD_ROLE_VAR: &str = "EFFECT_PG_TEST_CHILD_ROLE";
pub const CHILD_SCHEMA_VAR: &str = "EFFECT_PG_TEST_CHILD_SCHEMA";
pub const CHILD_INDEX_VAR: &str = "EFFECT_PG_TEST_CHILD_INDEX";

/// The server URL, or `None` after saying that `test` was skipped.
pub fn server_url(test: &str) -> Option<String> {
    effect_test_support::servers::postgres_url(test)
}

/// A schema of one test's own, dropped (with everything in it) on drop.
#[derive(Debug)]
pub struct TestSchema {
    pub url: String,
    pub name: String,
}

impl TestSchema {
    /// A fresh, empty schema name for `test`; nothing is created yet.
    pub fn new(url: &str, test: &str) -> Result<TestSchema, postgres::Error> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut stem: String = test
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        stem.truncate(40);
        let name = format!("t_{stem}_{}_{n}", std::process::id());
        let schema = TestSchema {
            url: url.to_owned(),
            name,
        };
        schema.drop_schema()?;
        Ok(schema)
    }

    /// The quoted schema name, for raw SQL.
    pub fn q(&self) -> String {
        format!("\"{}\"", self.name)
    }

    pub fn options(&self) -> PostgresOptions {
        PostgresOptions::default()
            .schema(self.name.clone())
            .pool_size(4)
            .connect_timeout(Duration::from_secs(10))
    }

    /// Opens the ledger in this schema (creating and migrating it).
    pub fn ledger(&self) -> Result<PostgresLedger, effect_core::LedgerError> {
        PostgresLedger::connect(&self.url, self.options())
    }

    /// A plain client, for raw SQL.
    pub fn admin(&self) -> Result<Client, postgres::Error> {
        Client::connect(&self.url, NoTls)
    }

    fn drop_schema(&self) -> Result<(), postgres::Error> {
        self.admin()?
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.q()))
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        if let Err(err) = self.drop_schema() {
            let _ = writeln!(
                std::io::stderr(),
                "could not drop test schema {}: {err}",
                self.name
            );
        }
    }
}

/// The identity of test operation `n`.
pub fn new_operation(n: usize) -> NewOperation {
    NewOperation::new(
        "capture_payment",
        "1",
        RequestFingerprint::of_canonical(&format!(r#"{{"invoice_id":"INV-{n}"}}"#)),
    )
    .with_provider_idempotency_key(Some(format!("capture:INV-{n}")))
}

/// The database server's clock, in seconds since the epoch.
pub fn db_epoch(client: &mut Client) -> Result<f64, postgres::Error> {
    client
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])?
        .try_get(0)
}

/// Starts this test binary again, running only `test`, as a child with `role`.
pub fn spawn_child(
    test: &str,
    role: &str,
    schema: &TestSchema,
    index: usize,
) -> std::io::Result<Child> {
    Command::new(std::env::current_exe()?)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(URL_VAR, &schema.url)
        .env(CHILD_ROLE_VAR, role)
        .env(CHILD_SCHEMA_VAR, &schema.name)
        .env(CHILD_INDEX_VAR, index.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
}

/// Waits for a child, killing it after `timeout`.
pub fn wait_child(
    mut child: Child,
    timeout: Duration,
) -> Result<Output, Box<dyn std::error::Error>> {
    let start = Instant::now();
    while child.try_wait()?.is_none() {
        if start.elapsed() > timeout {
            child.kill()?;
            let output = child.wait_with_output()?;
            return Err(format!(
                "child process timed out after {timeout:?}: {}",
                describe(&output)
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child.wait_with_output()?)
}

/// A child's exit status and output, for failure messages.
pub fn describe(output: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// This process's child role and schema, when it was started by [`spawn_child`]
/// with `role`.
pub fn child_env(role: &str) -> Option<(String, String, usize)> {
    if std::env::var(CHILD_ROLE_VAR).ok()? != role {
        return None;
    }
    let url = std::env::var(URL_VAR).ok()?;
    let schema = std::env::var(CHILD_SCHEMA_VAR).ok()?;
    let index = std::env::var(CHILD_INDEX_VAR).ok()?.parse().ok()?;
    Some((url, schema, index))
}
