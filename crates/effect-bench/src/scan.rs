//! W6: reads on a large ledger. The ledger file is filled directly with
//! rusqlite, in one transaction through the ledger's own schema (created by
//! opening a [`SqliteLedger`] once), then measured through the ledger.

use std::path::Path;
use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::{Context, bail, ensure};
use effect_core::format_timestamp;
use effect_core::{EffectLedger, EffectStatus, ListQuery};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use rusqlite::{Connection, params};

use crate::report::Line;
use crate::rng::Rng;
use crate::workload::Workload;

/// How many times the list query is timed.
const LIST_CALLS: u32 = 50;
/// How many random operations' events are read.
const EVENTS_CALLS: u32 = 100;

/// W6 on a ledger of `large` operations (1% quarantined, 10 events each on
/// average), and the same queries on one of `small` operations holding as
/// many quarantined operations as a page of the large one returns, so both
/// return the same number of rows and differ only in ledger size (the ratios).
/// The queries also run on a `small` ledger with 1% quarantined, as
/// docs/benchmarks.md words it (`*_small_1pct`), whose list returns fewer rows.
pub(crate) fn scan(large: u64, small: u64) -> Line {
    let workload = Workload::W6;
    let page = (large / 100).clamp(1, 100);
    let measured = (|| -> anyhow::Result<Line> {
        let big = measure(large, 100, page)?;
        let little = measure(small, (small / page).max(1), page)?;
        let literal = measure(small, 100, page)?;
        let seconds = big.list.as_secs_f64() + big.events.as_secs_f64();
        let calls = u64::from(LIST_CALLS + EVENTS_CALLS);
        let list_ms = ms_per(big.list, LIST_CALLS);
        let events_ms = ms_per(big.events, EVENTS_CALLS);
        let list_ms_small = ms_per(little.list, LIST_CALLS);
        let events_ms_small = ms_per(little.events, EVENTS_CALLS);
        let mut line = Line::measured(workload, large, 1, Duration::from_secs_f64(seconds));
        // The figure is queries per second, not operations of the ledger.
        line.per_second = Some(crate::report::per_second(calls, seconds));
        Ok(line
            .with("store", "sqlite")
            .with("calls", calls)
            .with("page", page)
            .with("list_ms", list_ms)
            .with("events_ms", events_ms)
            .with("small_n", small)
            .with("list_ms_small", list_ms_small)
            .with("events_ms_small", events_ms_small)
            .with("list_ratio", list_ms / list_ms_small)
            .with("events_ratio", events_ms / events_ms_small)
            .with("list_all_ms", ms_per(big.list_all, LIST_CALLS))
            .with("list_all_ms_small", ms_per(little.list_all, LIST_CALLS))
            .with("list_ms_small_1pct", ms_per(literal.list, LIST_CALLS))
            .with("events_ms_small_1pct", ms_per(literal.events, EVENTS_CALLS))
            .with("fill_seconds", big.fill.as_secs_f64()))
    })();
    measured.unwrap_or_else(|err| Line::failed(workload, large, 1, format!("{err:#}")))
}

struct Timings {
    fill: Duration,
    list: Duration,
    /// The same number of `list` calls without a status filter.
    list_all: Duration,
    events: Duration,
}

fn measure(n: u64, quarantined_every: u64, page: u64) -> anyhow::Result<Timings> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let path = dir.path().join("scan.sqlite3");
    drop(SqliteLedger::open(&path, SqliteOptions::default()).context("creating the ledger")?);
    let start = Instant::now();
    let event_counts = fill(&path, n, quarantined_every)?;
    let fill = start.elapsed();

    let ledger =
        SqliteLedger::open(&path, SqliteOptions::default()).context("opening the ledger")?;
    let limit = usize::try_from(page)?;
    let query = ListQuery::with_status(EffectStatus::Quarantined, limit);
    // Operations 0, every, 2 × every, … are quarantined.
    let expected = limit.min(usize::try_from(n.div_ceil(quarantined_every))?);
    let check_page = |records: &[effect_core::EffectRecord]| -> anyhow::Result<()> {
        ensure!(
            records.len() == expected,
            "list returned {} records instead of {expected}",
            records.len()
        );
        ensure!(
            records
                .iter()
                .all(|r| r.status == EffectStatus::Quarantined),
            "list returned an operation that is not quarantined"
        );
        ensure!(
            records
                .windows(2)
                .all(|w| w[0].updated_at >= w[1].updated_at),
            "list is not ordered newest update first"
        );
        Ok(())
    };
    check_page(&ledger.list(&query)?)?;
    let start = Instant::now();
    for _ in 0..LIST_CALLS {
        check_page(&ledger.list(&query)?)?;
    }
    let list = start.elapsed();

    // Without a filter: every status, newest update first (not a target of
    // docs/benchmarks.md; shows that the merge of one index walk per status does
    // not grow with the ledger).
    let all = ListQuery::new(limit);
    let start = Instant::now();
    for _ in 0..LIST_CALLS {
        let records = ledger.list(&all)?;
        ensure!(
            records.len() == limit.min(usize::try_from(n)?),
            "an unfiltered list returned {} records",
            records.len()
        );
        ensure!(
            records
                .windows(2)
                .all(|w| w[0].updated_at >= w[1].updated_at),
            "an unfiltered list is not ordered newest update first"
        );
    }
    let list_all = start.elapsed();

    let mut rng = Rng::new(n);
    // Warm the connections up on other operations than the measured ones.
    for _ in 0..EVENTS_CALLS {
        ledger.events(&format!("op:{}", rng.below(n)))?;
    }
    let picks: Vec<u64> = (0..EVENTS_CALLS).map(|_| rng.below(n)).collect();
    let ids: Vec<String> = picks.iter().map(|i| format!("op:{i}")).collect();
    let mut read = Vec::with_capacity(ids.len());
    let start = Instant::now();
    for id in &ids {
        read.push(ledger.events(id)?.len());
    }
    let events = start.elapsed();
    for (pick, got) in picks.iter().zip(read) {
        let expected = event_counts[usize::try_from(*pick)?];
        if got != usize::from(expected) {
            bail!("op:{pick} has {got} events instead of {expected}");
        }
    }
    Ok(Timings {
        fill,
        list,
        list_all,
        events,
    })
}

/// Inserts `n` operations and their events in one transaction; returns the
/// number of events of each operation. W9 fills the console's ledger so too.
pub(crate) fn fill(path: &Path, n: u64, quarantined_every: u64) -> anyhow::Result<Vec<u8>> {
    let mut conn = Connection::open(path).context("opening the ledger file")?;
    // Setup, not measured: the ledger reopens the file with its own settings.
    conn.pragma_update(None, "synchronous", "OFF")?;
    let tx = conn.transaction()?;
    let mut counts = Vec::with_capacity(usize::try_from(n)?);
    {
        let mut op = tx.prepare(
            "INSERT INTO effect_operations (operation_id, contract_name, contract_version, \
                request_fingerprint, provider_idempotency_key, status, result_json, \
                provider_operation_id, error, attempts, evidence_json, owner_token, lease_until, \
                created_at, updated_at, last_event_sequence) \
             VALUES (?1, 'bench_capture', '1', ?2, ?3, ?4, ?5, NULL, ?6, ?7, ?8, NULL, NULL, ?9, ?10, ?11)",
        )?;
        let mut event = tx.prepare(
            "INSERT INTO effect_events (sequence, operation_id, event_type, data_json, timestamp) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        let mut sequence: i64 = 0;
        let mut rng = Rng::new(42);
        // 2026-01-01T00:00:00Z, one millisecond per event.
        let mut micros: u64 = 1_767_225_600_000_000;
        let mut stamp = || {
            micros += 1000;
            format_timestamp(UNIX_EPOCH + Duration::from_micros(micros))
        };
        for i in 0..n {
            let id = format!("op:{i}");
            let quarantined = i % quarantined_every == 0;
            // 3 to 17 events, 10 on average.
            let count = 3 + u8::try_from(rng.below(15))?;
            let created = stamp();
            let mut attempts = 1;
            // The operation row goes first (events reference it), so its
            // `updated_at`, the time of its last event, is worked out first.
            let mut history = Vec::with_capacity(usize::from(count));
            for k in 0..count {
                let (kind, data) = event_of(k, count, quarantined, i, &mut attempts);
                let at = if k == 0 { created.clone() } else { stamp() };
                history.push((kind, data, at));
            }
            let last = history
                .last()
                .map_or_else(|| created.clone(), |e| e.2.clone());
            let (status, result, error, evidence) = if quarantined {
                (
                    "quarantined",
                    None,
                    Some("the outcome could not be settled"),
                    r#"{"dispatch_interruption":"handler_exception","handler_may_still_be_running":false}"#,
                )
            } else {
                (
                    "confirmed",
                    Some(format!(r#"{{"ok":{i}}}"#)),
                    None,
                    r#"{"source":"handler_return"}"#,
                )
            };
            op.execute(params![
                id,
                format!("blake3:{:064x}", rng.next_u64()),
                format!("key:{i}"),
                status,
                result,
                error,
                attempts,
                evidence,
                created,
                last,
                sequence + i64::from(count),
            ])?;
            for (kind, data, at) in history {
                sequence += 1;
                event.execute(params![sequence, id, kind, data, at])?;
            }
            counts.push(count);
        }
    }
    tx.commit()?;
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
    Ok(counts)
}

/// The `k`-th of `count` events: prepared, dispatched, then rounds of
/// uncertainty and retry, and the final confirmation or quarantine.
fn event_of(
    k: u8,
    count: u8,
    quarantined: bool,
    i: u64,
    attempts: &mut i64,
) -> (&'static str, String) {
    if k == 0 {
        return (
            "prepared",
            r#"{"contract_name":"bench_capture","contract_version":"1"}"#.to_owned(),
        );
    }
    if k + 1 == count {
        return if quarantined {
            (
                "quarantined",
                r#"{"error":"the outcome could not be settled"}"#.to_owned(),
            )
        } else {
            (
                "confirmed",
                format!(r#"{{"evidence":{{"source":"handler_return"}},"output":{{"ok":{i}}}}}"#),
            )
        };
    }
    match k % 3 {
        1 => {
            let data = format!(r#"{{"attempt":{attempts}}}"#);
            ("dispatched", data)
        }
        2 => (
            "outcome_unknown",
            r#"{"error":"handler failed","evidence":{"dispatch_interruption":"handler_exception"}}"#
                .to_owned(),
        ),
        _ => {
            *attempts += 1;
            ("retry_authorized", r#"{"evidence":{"source":"probe"}}"#.to_owned())
        }
    }
}

fn ms_per(elapsed: Duration, calls: u32) -> f64 {
    elapsed.as_secs_f64() * 1000.0 / f64::from(calls)
}
