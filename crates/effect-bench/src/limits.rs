//! W0, W0n and W0r: the limits of bare SQLite, through the same rusqlite and
//! the same bundled SQLite the ledger uses, with nothing of the ledger around it.
//! With a PostgreSQL store, W0 is the limit of that server instead: bare
//! single-row `INSERT` transactions on one connection, through the same driver.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use rusqlite::{Connection, params};

use crate::report::Line;
use crate::rng::Rng;
use crate::store::Store;
use crate::workload::Workload;

/// `PRAGMA synchronous` of a commit-limit workload.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sync {
    Full,
    Normal,
}

/// W0 for `store`: bare SQLite at `synchronous=FULL`, or the PostgreSQL
/// server of a postgres store.
pub(crate) fn commit_limit(store: &Store, n: u64) -> Line {
    match store {
        Store::Sqlite(..) => commits(Workload::W0, n, Sync::Full),
        #[cfg(feature = "postgres")]
        Store::Postgres { url } => match measure_postgres_commits(url, n) {
            Ok(line) => line.with("store", store.name()),
            Err(err) => {
                Line::failed(Workload::W0, n, 1, format!("{err:#}")).with("store", store.name())
            }
        },
    }
}

/// W0 on PostgreSQL: `n` single-row `INSERT` transactions (`BEGIN`, a
/// prepared `INSERT`, `COMMIT`) on one connection with `synchronous_commit =
/// on` (as the ledger's sessions run), in a fresh schema dropped afterwards.
#[cfg(feature = "postgres")]
fn measure_postgres_commits(url: &str, n: u64) -> anyhow::Result<Line> {
    let mut client =
        postgres::Client::connect(url, postgres::NoTls).context("connecting to postgres")?;
    let schema = format!("effect_bench_w0_{}", std::process::id());
    client.batch_execute(&format!(
        "SET synchronous_commit = on; DROP SCHEMA IF EXISTS {schema} CASCADE; \
         CREATE SCHEMA {schema}; \
         CREATE TABLE {schema}.bench (k TEXT PRIMARY KEY, v TEXT NOT NULL)"
    ))?;
    let measured = (|| -> anyhow::Result<Line> {
        let insert = client.prepare(&format!(
            "INSERT INTO {schema}.bench (k, v) VALUES ($1, $2)"
        ))?;
        let value = payload();
        let keys: Vec<String> = (0..n).map(|i| format!("op:{i}")).collect();
        let start = Instant::now();
        for key in &keys {
            let mut tx = client.transaction()?;
            tx.execute(&insert, &[key, &value])?;
            tx.commit()?;
        }
        let elapsed = start.elapsed();
        let stored: i64 = client
            .query_one(&format!("SELECT COUNT(*) FROM {schema}.bench"), &[])?
            .get(0);
        let stored = u64::try_from(stored)?;
        Ok(
            Line::measured(Workload::W0, n, 1, elapsed).require(stored == n, || {
                format!("{stored} rows stored instead of {n}")
            }),
        )
    })();
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .context("dropping the W0 schema")?;
    measured
}

/// W0 / W0n: `n` single-row `INSERT` transactions (`BEGIN IMMEDIATE … COMMIT`)
/// on one connection, WAL, prepared statements.
pub(crate) fn commits(workload: Workload, n: u64, sync: Sync) -> Line {
    match measure_commits(workload, n, sync) {
        Ok(line) => line,
        Err(err) => Line::failed(workload, n, 1, format!("{err:#}")),
    }
}

/// W0r: `n` point selects of a 100-byte text value by a text primary key, in
/// a seeded random order, on one connection and a prepared statement.
pub(crate) fn reads(n: u64) -> Line {
    match measure_reads(n) {
        Ok(line) => line,
        Err(err) => Line::failed(Workload::W0r, n, 1, format!("{err:#}")),
    }
}

fn measure_commits(workload: Workload, n: u64, sync: Sync) -> anyhow::Result<Line> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let conn = open(&dir.path().join("limit.sqlite3"), sync)?;
    let value = payload();
    let mut begin = conn.prepare("BEGIN IMMEDIATE")?;
    let mut insert = conn.prepare("INSERT INTO bench (k, v) VALUES (?1, ?2)")?;
    let mut commit = conn.prepare("COMMIT")?;
    let keys: Vec<String> = (0..n).map(|i| format!("op:{i}")).collect();
    let start = Instant::now();
    for key in &keys {
        begin.execute([])?;
        insert.execute(params![key, value])?;
        commit.execute([])?;
    }
    let elapsed = start.elapsed();
    let stored: i64 = conn.query_row("SELECT COUNT(*) FROM bench", [], |r| r.get(0))?;
    let stored = u64::try_from(stored)?;
    Ok(
        Line::measured(workload, n, 1, elapsed).require(stored == n, || {
            format!("{stored} rows stored instead of {n}")
        }),
    )
}

fn measure_reads(n: u64) -> anyhow::Result<Line> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let mut conn = open(&dir.path().join("limit.sqlite3"), Sync::Full)?;
    let value = payload();
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare("INSERT INTO bench (k, v) VALUES (?1, ?2)")?;
        for i in 0..n {
            insert.execute(params![format!("op:{i}"), value])?;
        }
    }
    tx.commit()?;
    let keys: Vec<String> = Rng::new(n)
        .permutation(n)
        .into_iter()
        .map(|i| format!("op:{i}"))
        .collect();
    let mut select = conn.prepare("SELECT v FROM bench WHERE k = ?1")?;
    let mut bytes = 0usize;
    let start = Instant::now();
    for key in &keys {
        let v: String = select.query_row([key], |r| r.get(0))?;
        bytes += v.len();
    }
    let elapsed = start.elapsed();
    let expected = value.len() * keys.len();
    Ok(
        Line::measured(Workload::W0r, n, 1, elapsed).require(bytes == expected, || {
            format!("read {bytes} bytes instead of {expected}")
        }),
    )
}

fn open(path: &Path, sync: Sync) -> anyhow::Result<Connection> {
    let conn = Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    anyhow::ensure!(
        mode.eq_ignore_ascii_case("wal"),
        "WAL mode unavailable: {mode}"
    );
    let sync = match sync {
        Sync::Full => "FULL",
        Sync::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", sync)?;
    conn.execute_batch("CREATE TABLE bench (k TEXT PRIMARY KEY, v TEXT NOT NULL)")?;
    Ok(conn)
}

/// The 100-byte value of every row.
fn payload() -> String {
    "x".repeat(100)
}
