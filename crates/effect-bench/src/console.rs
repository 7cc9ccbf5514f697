//! W9: the operator console on a large ledger. A SQLite ledger of `n`
//! operations is filled as W6 fills it (1 % quarantined, the rest confirmed,
//! 3 to 17 events each), then the console's router (agent-effect-ops
//! `serve`, read-only, in this process) renders the queue, an operation page
//! (a random operation each time) and `/metrics`, each timed from the
//! request to the last byte of the body. The correctness check: every page
//! answers 200, the queue and `/metrics` count exactly the quarantined
//! operations the fill wrote, and each operation page shows its operation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_effect_ops::{Console, ConsoleConfig};
use anyhow::{Context, ensure};
use axum::body::Body;
use axum::http::Request;
use effect_core::SystemClock;
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use http_body_util::BodyExt as _;
use production_agent_systems::open::LedgerUrl;
use tower::ServiceExt as _;

use crate::report::Line;
use crate::rng::Rng;
use crate::workload::Workload;

/// How many times each page is rendered (after one unmeasured render).
const CALLS: usize = 20;

/// W9 on a ledger of `n` operations.
pub(crate) fn console(n: u64) -> Line {
    measure(n).unwrap_or_else(|err| Line::failed(Workload::W9, n, 1, format!("{err:#}")))
}

fn measure(n: u64) -> anyhow::Result<Line> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let path = dir.path().join("w9.sqlite3");
    drop(SqliteLedger::open(&path, SqliteOptions::default()).context("creating the ledger")?);
    let start = Instant::now();
    crate::scan::fill(&path, n, 100)?;
    let fill_seconds = start.elapsed().as_secs_f64();
    let file_mb = std::fs::metadata(&path)?.len() as f64 / 1e6;
    // Operations 0, 100, 200, … are quarantined.
    let quarantined = n.div_ceil(100);

    let console = Console::new(
        &LedgerUrl::Sqlite(path.clone()),
        false,
        ConsoleConfig::default(),
        Arc::new(SystemClock),
    )?;
    let router = console.router();
    // As `serve` runs it: two workers, ledger reads on blocking threads.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let get = |uri: &str| -> anyhow::Result<(Duration, String)> {
        let request = Request::get(uri).body(Body::empty())?;
        let router = router.clone();
        runtime.block_on(async move {
            let start = Instant::now();
            let response = router.oneshot(request).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            let elapsed = start.elapsed();
            ensure!(status.is_success(), "{uri} answered {status}");
            Ok((elapsed, String::from_utf8(body.to_vec())?))
        })
    };

    let count = format!("data-kind=\"quarantined\"><b>{quarantined}</b>");
    let queue_ms = median_ms(|_| {
        let (took, body) = get("/")?;
        ensure!(
            body.contains(&count),
            "the queue does not count {quarantined} quarantined operations"
        );
        Ok(took)
    })?;
    let mut rng = Rng::new(n ^ 9);
    let picks: Vec<u64> = (0..=CALLS).map(|_| rng.below(n)).collect();
    let operation_ms = median_ms(|call| {
        let id = format!("op:{}", picks[call]);
        let (took, body) = get(&format!("/operations/op%3A{}", picks[call]))?;
        ensure!(
            body.contains(&format!("id=\"operation-id\">{id}<")),
            "the page of {id} does not show it"
        );
        Ok(took)
    })?;
    let line_of_quarantined =
        format!("effect_operations{{status=\"quarantined\"}} {quarantined}\n");
    let metrics_ms = median_ms(|_| {
        let (took, body) = get("/metrics")?;
        ensure!(
            body.contains(&line_of_quarantined),
            "/metrics does not count {quarantined} quarantined operations"
        );
        Ok(took)
    })?;

    let total = Duration::from_secs_f64((queue_ms + operation_ms + metrics_ms) / 1000.0);
    let mut line = Line::measured(Workload::W9, n, 1, total);
    // The figure is pages per second, not operations of the ledger.
    line.per_second = Some(crate::report::per_second(3, total.as_secs_f64()));
    Ok(line
        .with("store", "sqlite")
        .with("queue_ms", queue_ms)
        .with("operation_ms", operation_ms)
        .with("metrics_ms", metrics_ms)
        .with("quarantined", quarantined)
        .with("calls", CALLS as u64)
        .with("file_mb", file_mb)
        .with("fill_seconds", fill_seconds))
}

/// The median of `CALLS` timed calls of `page` (given the call's index),
/// after one unmeasured call (index `CALLS`) that warms the caches.
fn median_ms(mut page: impl FnMut(usize) -> anyhow::Result<Duration>) -> anyhow::Result<f64> {
    page(CALLS)?;
    let mut times = (0..CALLS)
        .map(&mut page)
        .collect::<anyhow::Result<Vec<_>>>()?;
    times.sort();
    Ok(times[CALLS / 2].as_secs_f64() * 1000.0)
}
