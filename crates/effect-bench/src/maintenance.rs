//! W8: maintenance on a large ledger. A ledger (a SQLite file, or a fresh
//! PostgreSQL schema) of `n` operations (1 % of the first 100,000
//! quarantined and 1 % prepared, so at most 1,000 of each at any size, the
//! rest confirmed; 4 events each, all a month old) is filled directly in
//! the ledger's layout (on SQLite its triggers keep the status counters as
//! the rows go in; on PostgreSQL they are set from a count), then: `stats` and the queue listing are timed (and nothing more
//! with `reads_only`); a writer executing fresh effects on a second handle
//! of the ledger (as another process would) is timed alone; the older half
//! of the confirmed operations is pruned with no writer, then the rest
//! beside the writer (or, with `prune`, the oldest `prune` alone and the
//! next `prune` beside it), and both prunes' throughput is measured. The
//! correctness check: each archive holds exactly the operations deleted
//! (the dry run's count), `stats` equals a full count, and the confirmed
//! operations left are the fill's not pruned and every one of the writer's.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::{Context, ensure};
use effect_core::format_timestamp;
use effect_core::{
    ArchiveFile, Claim, Confirmation, EffectLedger, EffectLedgerExt as _, EffectStatus, Evidence,
    ListQuery, NewOperation, PruneRequest, RequestFingerprint, Transition,
};
use effect_ledger_sqlite::Synchronous;
use production_agent_systems::open::Ledger;
use rusqlite::{Connection, params};

use crate::report::Line;
use crate::store::{Location, Store};
use crate::workload::Workload;

/// The fill starts at 2026-01-01T00:00:00Z (microseconds since the epoch).
const FILL_START_MICROS: u64 = 1_767_225_600_000_000;
/// Each operation of the fill has four events, one millisecond apart.
const EVENTS: u64 = 4;

/// Effects the writer executes before it is timed alone (the first opens
/// its connections and reads the file's pages in).
const WARM_UP: u64 = 50;

/// How many times `stats` and the queue listing are timed.
const READ_CALLS: usize = 20;

/// The fill's unresolved operations are 2 % of its first this many: a live
/// ledger's queue does not grow with its history.
const UNRESOLVED_SPAN: u64 = 100_000;

/// W8 on a ledger of `n` operations; `writer_effects` effects time the
/// writer alone; `prune` operations are pruned alone and as many beside the
/// writer (`None`: the older half, then the rest). With `reads_only`, only
/// the fill and the reads.
pub(crate) fn maintenance(
    store: &Store,
    n: u64,
    writer_effects: u64,
    prune: Option<u64>,
    reads_only: bool,
) -> Line {
    let workload = Workload::W8;
    measure(store, n, writer_effects, prune, reads_only)
        .unwrap_or_else(|err| Line::failed(workload, n, 1, format!("{err:#}")))
}

/// The fill's confirmed operations last updated before its `operations`th
/// began (about the first `operations`: operation `i` is updated at
/// `FILL_START + 4 ms × (i + 1)`, a little earlier on SQLite).
fn fill_cutoff(operations: u64) -> PruneRequest {
    PruneRequest::before(format_timestamp(
        UNIX_EPOCH + Duration::from_micros(FILL_START_MICROS + operations * EVENTS * 1000),
    ))
    .statuses(vec![EffectStatus::Confirmed])
}

fn measure(
    store: &Store,
    n: u64,
    writer_effects: u64,
    prune: Option<u64>,
    reads_only: bool,
) -> anyhow::Result<Line> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let fresh = store.fresh(Synchronous::Full)?;
    let location = &fresh.location;
    let start = Instant::now();
    fill(location, n)?;
    let fill_seconds = start.elapsed().as_secs_f64();
    let size_mb = size(location)? as f64 / 1e6;

    let ledger = location.open_ledger()?;
    let stats_ms = median_ms(|| ledger.as_dyn().stats().map(drop))?;
    let queue = ListQuery::with_status(EffectStatus::Quarantined, 100);
    let queue_ms = median_ms(|| ledger.as_dyn().list(&queue).map(drop))?;
    let prepared = ListQuery::with_status(EffectStatus::Prepared, 100);
    let waiting_ms = median_ms(|| ledger.as_dyn().list(&prepared).map(drop))?;
    let with_reads = |line: Line| {
        line.with("store", store.name())
            .with("ledger_operations", n)
            .with("size_mb", size_mb)
            .with("fill_seconds", fill_seconds)
            .with("stats_ms", stats_ms)
            .with("queue_list_ms", queue_ms)
            .with("waiting_list_ms", waiting_ms)
    };
    if reads_only {
        check_counts(&ledger, location)?;
        let fill = Duration::from_secs_f64(fill_seconds);
        return Ok(with_reads(Line::measured(Workload::W8, n, 1, fill)));
    }

    let fill_confirmed = confirmed(&ledger.as_dyn().stats()?);

    // The writer alone.
    let writer = location.open_ledger()?;
    for i in 0..WARM_UP {
        effect(writer.as_dyn(), &format!("warm-up:{i}"))?;
    }
    let mut alone = Vec::new();
    for i in 0..writer_effects {
        alone.push(effect(writer.as_dyn(), &format!("alone:{i}"))?);
    }

    // The older half of the confirmed operations (or the oldest `prune`),
    // pruned with no writer.
    let half = fill_cutoff(prune.unwrap_or(n / 2));
    let expected_alone = ledger.prune(&half.clone().dry_run(true), &mut std::io::sink())?;
    let mut archive_alone = ArchiveFile::create(&dir.path().join("archive-alone.jsonl"))?;
    let start = Instant::now();
    let alone_report = ledger.prune(&half, &mut archive_alone)?;
    let alone_elapsed = start.elapsed();
    ensure!(
        alone_report.operations == expected_alone.operations
            && archive_alone.lines() == expected_alone.operations,
        "pruned {} operations alone with {} archive lines; the dry run counted {}",
        alone_report.operations,
        archive_alone.lines(),
        expected_alone.operations
    );

    // The rest (or the next `prune`), with the writer beside the prune
    // until it ends.
    let request = match prune {
        Some(p) => fill_cutoff(2 * p),
        None => PruneRequest::before("2026-02-01T00:00:00.000000+00:00")
            .statuses(vec![EffectStatus::Confirmed]),
    };
    let expected = ledger.prune(&request.clone().dry_run(true), &mut std::io::sink())?;
    let done = Arc::new(AtomicBool::new(false));
    // Before the writer starts: an error inside the scope before `done` is
    // set would leave it running.
    let mut archive = ArchiveFile::create(&dir.path().join("archive.jsonl"))?;
    let log_start = log_position(location)?;
    let beside = std::thread::scope(|scope| -> anyhow::Result<_> {
        let handle = scope.spawn({
            let done = Arc::clone(&done);
            let writer = &writer;
            move || -> anyhow::Result<Vec<Duration>> {
                let mut latencies = Vec::new();
                let mut i = 0;
                while !done.load(Ordering::Acquire) {
                    latencies.push(effect(writer.as_dyn(), &format!("beside:{i}"))?);
                    i += 1;
                }
                Ok(latencies)
            }
        });
        let start = Instant::now();
        let pruned = ledger.prune(&request, &mut archive);
        let prune_elapsed = start.elapsed();
        let log_end = log_position(location);
        done.store(true, Ordering::Release);
        let latencies = handle
            .join()
            .map_err(|_| anyhow::anyhow!("the writer panicked"))??;
        let log_bytes = log_start.zip(log_end?).map(|(a, b)| b.saturating_sub(a));
        Ok((
            pruned?,
            prune_elapsed,
            archive.lines(),
            latencies,
            log_bytes,
        ))
    })?;
    let (report, prune_elapsed, lines, beside, log_bytes) = beside;

    ensure!(
        report.operations == expected.operations && lines == expected.operations,
        "pruned {} operations with {lines} archive lines; the dry run counted {}",
        report.operations,
        expected.operations
    );
    let stats = check_counts(&ledger, location)?;
    let confirmed_writes = WARM_UP + alone.len() as u64 + beside.len() as u64;
    let fill_left = fill_confirmed
        .checked_sub(alone_report.operations + report.operations)
        .with_context(|| {
            format!(
                "pruned {} confirmed operations of a fill of {fill_confirmed}",
                alone_report.operations + report.operations
            )
        })?;
    let left = confirmed(&stats);
    ensure!(
        left == fill_left + confirmed_writes,
        "{left} confirmed operations left; the fill's not pruned are {fill_left} and the \
         writer confirmed {confirmed_writes}"
    );
    ensure!(
        prune.is_some() || fill_left == 0,
        "{fill_left} confirmed operations of the fill were not pruned"
    );
    let prune_seconds = prune_elapsed.as_secs_f64();
    let mut line = Line::measured(Workload::W8, report.operations, 1, prune_elapsed);
    line.per_second = Some(crate::report::per_second(report.operations, prune_seconds));
    let p99_alone = p99_ms(&mut alone);
    let p99_beside = p99_ms(&mut beside.clone());
    let line = with_reads(line)
        .with("batches", report.batches)
        .with("prune_alone_operations", alone_report.operations)
        .with(
            "prune_alone_per_second",
            crate::report::per_second(alone_report.operations, alone_elapsed.as_secs_f64()),
        )
        .with("writer_effects_alone", alone.len() as u64)
        .with("writer_p99_ms", p99_alone)
        .with("writer_p99_ms_during_prune", p99_beside)
        .with("writer_p99_ratio", p99_beside / p99_alone.max(f64::EPSILON))
        .with(
            "writer_max_ms_during_prune",
            beside
                .iter()
                .max()
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0),
        )
        .with("writer_effects_during_prune", beside.len() as u64);
    Ok(match log_bytes {
        Some(bytes) => line.with("log_mb_during_prune", bytes as f64 / 1e6),
        None => line,
    })
}

/// One fresh effect through the ledger as the executor writes it: prepared
/// and claimed in one commit, then confirmed. Its latency.
fn effect(ledger: &dyn EffectLedger, id: &str) -> anyhow::Result<Duration> {
    let op = NewOperation::new(
        "bench_capture",
        "1",
        RequestFingerprint::of_canonical(&format!(r#"{{"id":"{id}"}}"#)),
    );
    let claim = Claim::new("writer", Duration::from_secs(60));
    let start = Instant::now();
    let claimed = ledger.apply(id, &Transition::PrepareAndClaim(op, claim))?;
    ensure!(claimed.applied, "the claim of {id} was refused");
    let confirmation = Confirmation {
        output: serde_json::json!({"ok": true}),
        provider_operation_id: None,
        evidence: Evidence::new(),
    };
    ensure!(
        ledger.mark_confirmed(id, Some("writer"), &confirmation)?,
        "the confirmation of {id} was refused"
    );
    Ok(start.elapsed())
}

fn median_ms(
    mut call: impl FnMut() -> Result<(), effect_core::LedgerError>,
) -> anyhow::Result<f64> {
    call()?;
    let mut times = Vec::with_capacity(READ_CALLS);
    for _ in 0..READ_CALLS {
        let start = Instant::now();
        call()?;
        times.push(start.elapsed());
    }
    times.sort();
    Ok(times[READ_CALLS / 2].as_secs_f64() * 1000.0)
}

fn p99_ms(latencies: &mut [Duration]) -> f64 {
    latencies.sort();
    let at = (latencies.len() * 99 / 100).min(latencies.len().saturating_sub(1));
    latencies.get(at).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// `stats`, checked against a full count of the rows.
/// The confirmed operations `stats` counts.
fn confirmed(stats: &effect_core::LedgerStats) -> u64 {
    stats
        .counts
        .iter()
        .find(|(s, _)| *s == EffectStatus::Confirmed)
        .map_or(0, |(_, n)| *n)
}

fn check_counts(ledger: &Ledger, location: &Location) -> anyhow::Result<effect_core::LedgerStats> {
    let stats = ledger.as_dyn().stats()?;
    ensure!(
        stats.counts == full_count(location)?,
        "stats {:?} differs from a full count",
        stats.counts
    );
    Ok(stats)
}

/// Every status and its number of rows, counted row by row.
fn full_count(location: &Location) -> anyhow::Result<Vec<(EffectStatus, u64)>> {
    const COUNT: &str = "SELECT status, COUNT(*) FROM effect_operations GROUP BY status";
    let mut found: Vec<(String, i64)> = Vec::new();
    match location {
        Location::Sqlite { path, .. } => {
            let conn = Connection::open(path)?;
            let mut stmt = conn.prepare(COUNT)?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                found.push((row.get(0)?, row.get(1)?));
            }
        }
        #[cfg(feature = "postgres")]
        Location::Postgres { .. } => {
            let mut client = postgres_client(location)?;
            for row in client.query(COUNT, &[])? {
                found.push((row.try_get(0)?, row.try_get(1)?));
            }
        }
    }
    let mut counts: Vec<(EffectStatus, u64)> =
        EffectStatus::ALL.into_iter().map(|s| (s, 0)).collect();
    for (status, n) in found {
        let status: EffectStatus = status.parse()?;
        if let Some(entry) = counts.iter_mut().find(|(s, _)| *s == status) {
            entry.1 = u64::try_from(n)?;
        }
    }
    Ok(counts)
}

/// The ledger's size on disk: its SQLite file, or its PostgreSQL schema's
/// tables and indexes.
fn size(location: &Location) -> anyhow::Result<u64> {
    match location {
        Location::Sqlite { path, .. } => Ok(std::fs::metadata(path)?.len()),
        #[cfg(feature = "postgres")]
        Location::Postgres { schema, .. } => {
            let mut client = postgres_client(location)?;
            let bytes: i64 = client
                .query_one(
                    "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::BIGINT \
                     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                     WHERE n.nspname = $1 AND c.relkind = 'r'",
                    &[schema],
                )?
                .try_get(0)?;
            Ok(u64::try_from(bytes)?)
        }
    }
}

/// A plain connection to the ledger's schema, for the fill and the counts.
#[cfg(feature = "postgres")]
fn postgres_client(location: &Location) -> anyhow::Result<postgres::Client> {
    let Location::Postgres { url, schema } = location else {
        anyhow::bail!("not a PostgreSQL ledger");
    };
    let mut client =
        postgres::Client::connect(url, postgres::NoTls).context("connecting to postgres")?;
    client.batch_execute(&format!("SET search_path TO \"{schema}\""))?;
    Ok(client)
}

/// The PostgreSQL server's write-ahead log position in bytes (none on
/// SQLite): what the server wrote between two readings, the prune's
/// deletions and the writer's effects alike.
fn log_position(location: &Location) -> anyhow::Result<Option<u64>> {
    match location {
        Location::Sqlite { .. } => Ok(None),
        #[cfg(feature = "postgres")]
        Location::Postgres { .. } => {
            let text: String = postgres_client(location)?
                .query_one(
                    "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text",
                    &[],
                )?
                .get(0);
            Ok(Some(text.parse().context("reading the log position")?))
        }
    }
}

/// Inserts `n` operations of January 2026 and their events, in the ledger's
/// layout.
fn fill(location: &Location, n: u64) -> anyhow::Result<()> {
    match location {
        Location::Sqlite { path, .. } => fill_sqlite(path, n),
        #[cfg(feature = "postgres")]
        Location::Postgres { .. } => fill_postgres(location, n),
    }
}

/// The fill on PostgreSQL, generated by the server in one transaction: the
/// same operations, statuses and events as on SQLite, each operation's
/// events in the four milliseconds from `FILL_START + 4 ms × i`. The
/// counter trigger is off while the rows go in (each of its updates of the
/// one counter row would add a version that the next must walk past, until
/// the transaction ends) and the counters are set from a count, as the
/// migration that added them does; then `VACUUM (ANALYZE)` and a
/// `CHECKPOINT`.
#[cfg(feature = "postgres")]
fn fill_postgres(location: &Location, n: u64) -> anyhow::Result<()> {
    let mut client = postgres_client(location)?;
    let n = i64::try_from(n)?;
    let span = i64::try_from(UNRESOLVED_SPAN)?;
    // The ledger's timestamp format (`format_timestamp`), `ms` milliseconds
    // after the fill's start.
    let stamp = |ms: &str| {
        format!(
            "to_char(timestamp '2026-01-01' + ({ms}) * interval '1 millisecond', \
             'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')"
        )
    };
    // Each operation `i` and its status `s`.
    let operations = "(SELECT i, CASE WHEN i < $2::BIGINT AND i % 100 = 0 THEN 'quarantined' \
                      WHEN i < $2::BIGINT AND i % 100 = 1 THEN 'prepared' ELSE 'confirmed' END \
                      AS s FROM generate_series(0::BIGINT, $1::BIGINT - 1) AS i) AS g";
    let mut tx = client.transaction()?;
    tx.batch_execute("ALTER TABLE effect_operations DISABLE TRIGGER effect_status_counts_insert")?;
    tx.execute(
        &format!(
            "INSERT INTO effect_operations (operation_id, contract_name, contract_version, \
                request_fingerprint, provider_idempotency_key, status, result_json, attempts, \
                evidence_json, created_at, updated_at) \
             SELECT 'op:' || i, 'bench_capture', '1', 'blake3:' || lpad(to_hex(i), 64, '0'), \
                'key:' || i, s, CASE WHEN s = 'confirmed' THEN '{{\"ok\":' || i || '}}' END, 1, \
                '{{}}', {created}, \
                CASE WHEN s = 'prepared' THEN {created} ELSE {updated} END \
             FROM {operations}",
            created = stamp("i * 4 + 1"),
            updated = stamp("i * 4 + 4"),
        ),
        &[&n, &span],
    )?;
    tx.execute(
        &format!(
            "INSERT INTO effect_events (operation_id, event_type, data_json, timestamp) \
             SELECT 'op:' || i, \
                CASE WHEN k = 1 THEN 'prepared' WHEN k = 2 THEN 'dispatched' \
                     WHEN k = 3 AND s = 'quarantined' THEN 'outcome_unknown' \
                     WHEN k = 3 THEN 'lease_renewed' ELSE s END, \
                '{{\"bench\":true}}', {at} \
             FROM {operations}, \
                generate_series(1, 4) AS k \
             WHERE s <> 'prepared' OR k = 1 \
             ORDER BY i, k",
            at = stamp("i * 4 + k"),
        ),
        &[&n, &span],
    )?;
    tx.batch_execute(
        "INSERT INTO effect_status_counts AS c (status, shard, operations) \
            SELECT status, 0, count(*) FROM effect_operations \
            WHERE status IN ('confirmed', 'rejected') GROUP BY status \
            ON CONFLICT (status, shard) DO UPDATE SET operations = c.operations + EXCLUDED.operations; \
         ALTER TABLE effect_operations ENABLE TRIGGER effect_status_counts_insert",
    )?;
    tx.commit()?;
    // A live ledger's month-old rows have long been vacuumed (hint bits
    // set, pages all-visible); without it autovacuum and the first readers
    // of the fill write its pages back through the timings.
    client.batch_execute("VACUUM (ANALYZE) effect_operations")?;
    client.batch_execute("VACUUM (ANALYZE) effect_events")?;
    // As the SQLite fill ends with a checkpoint: the fill's log (1.3 GB at
    // 1M) is otherwise written back by a spread checkpoint through the
    // writer's timing alone, which then measured 1.7 to 3.3 ms.
    if let Err(err) = client.batch_execute("CHECKPOINT") {
        eprintln!(
            "W8: no CHECKPOINT after the fill ({err}); the writer alone is timed while the server writes the fill back (CHECKPOINT needs a superuser or pg_checkpoint)"
        );
    }
    Ok(())
}

/// The fill on SQLite, in one transaction.
fn fill_sqlite(path: &Path, n: u64) -> anyhow::Result<()> {
    let mut conn = Connection::open(path).context("opening the ledger file")?;
    // Setup, not measured: the ledger reopens the file with its own settings.
    conn.pragma_update(None, "synchronous", "OFF")?;
    let tx = conn.transaction()?;
    {
        let mut op = tx.prepare(
            "INSERT INTO effect_operations (operation_id, contract_name, contract_version, \
                request_fingerprint, provider_idempotency_key, status, result_json, \
                provider_operation_id, error, attempts, evidence_json, owner_token, lease_until, \
                created_at, updated_at, last_event_sequence) \
             VALUES (?1, 'bench_capture', '1', ?2, ?3, ?4, ?5, NULL, NULL, 1, '{}', NULL, NULL, ?6, ?7, ?8)",
        )?;
        let mut event = tx.prepare(
            "INSERT INTO effect_events (sequence, operation_id, event_type, data_json, timestamp) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        let mut sequence: i64 = 0;
        // One millisecond per event.
        let mut micros: u64 = FILL_START_MICROS;
        let mut stamp = || {
            micros += 1000;
            format_timestamp(UNIX_EPOCH + Duration::from_micros(micros))
        };
        for i in 0..n {
            let id = format!("op:{i}");
            let (status, kinds): (&str, &[&str]) = match i % 100 {
                _ if i >= UNRESOLVED_SPAN => (
                    "confirmed",
                    &["prepared", "dispatched", "lease_renewed", "confirmed"],
                ),
                0 => (
                    "quarantined",
                    &["prepared", "dispatched", "outcome_unknown", "quarantined"],
                ),
                1 => ("prepared", &["prepared"]),
                _ => (
                    "confirmed",
                    &["prepared", "dispatched", "lease_renewed", "confirmed"],
                ),
            };
            let stamps: Vec<String> = kinds.iter().map(|_| stamp()).collect();
            let result = (status == "confirmed").then(|| format!(r#"{{"ok":{i}}}"#));
            op.execute(params![
                id,
                format!("blake3:{i:064x}"),
                format!("key:{i}"),
                status,
                result,
                stamps[0],
                stamps[stamps.len() - 1],
                sequence + kinds.len() as i64,
            ])?;
            for (kind, at) in kinds.iter().zip(&stamps) {
                sequence += 1;
                event.execute(params![sequence, id, kind, r#"{"bench":true}"#, at])?;
            }
        }
    }
    tx.commit()?;
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
    Ok(())
}
