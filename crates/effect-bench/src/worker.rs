//! Workloads in child processes: W4 and W4d in one (so its peak RSS is its
//! own), W7 in several sharing one ledger. Children are this binary, re-executed with
//! the hidden `worker` subcommand; they answer with one JSON line on stdout.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use clap::{Args, ValueEnum};
use effect_ledger_sqlite::Synchronous;
use serde_json::{Value, json};

use crate::effects::{self, Runner};
use crate::report::Line;
use crate::rng::Rng;
use crate::store::{Location, Store, Tuning};
use crate::workload::Workload;

/// Arguments of `effect-bench worker`.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// What to run.
    #[arg(long)]
    job: Job,
    /// For `concurrent`: the store to create a fresh ledger in.
    #[arg(long = "db", alias = "store")]
    store: Option<String>,
    /// For `multi`: the SQLite ledger file to share.
    #[arg(long)]
    sqlite: Option<PathBuf>,
    /// For `multi` on SQLite: `full` or `normal`.
    #[arg(long, default_value = "full")]
    durability: String,
    /// For `multi`: the PostgreSQL URL to share.
    #[arg(long)]
    postgres: Option<String>,
    /// For `multi` on PostgreSQL: the schema to share.
    #[arg(long)]
    schema: Option<String>,
    /// How many operations.
    #[arg(long)]
    n: u64,
    /// For `concurrent`: how many threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// For `multi`: the seed of this process's order.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// SQLite only: one transaction per transition.
    #[arg(long)]
    no_group_commit: bool,
    /// SQLite only: no in-memory copy of confirmed records.
    #[arg(long)]
    no_confirmed_cache: bool,
    /// For `concurrent`: deferred outcomes (W4d).
    #[arg(long)]
    deferred: bool,
}

impl WorkerArgs {
    fn tuning(&self) -> Tuning {
        Tuning {
            group_commit: !self.no_group_commit,
            confirmed_cache: !self.no_confirmed_cache,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Job {
    /// W4 in this process: a fresh ledger, `threads` threads.
    Concurrent,
    /// One process of W7: waits for `go` on stdin, then executes `0..n` in its order.
    Multi,
}

/// The `worker` subcommand: runs its job and prints one JSON line.
pub(crate) fn run(args: &WorkerArgs) -> anyhow::Result<()> {
    let answer = match args.job {
        Job::Concurrent => concurrent_here(args),
        Job::Multi => multi_here(args),
    };
    let answer = answer.unwrap_or_else(|err| json!({"error": format!("{err:#}")}));
    let mut out = std::io::stdout().lock();
    writeln!(out, "{answer}").context("writing to stdout")?;
    out.flush().context("writing to stdout")
}

/// W4, run in a child process; the line carries the child's peak RSS.
pub(crate) fn concurrent_in_child(store: &Store, n: u64, threads: usize) -> Line {
    concurrent_child(Workload::W4, store, n, threads)
}

/// W4d: W4 with the executor's deferred outcomes, in a child process.
pub(crate) fn concurrent_deferred_in_child(store: &Store, n: u64, threads: usize) -> Line {
    concurrent_child(Workload::W4d, store, n, threads)
}

fn concurrent_child(workload: Workload, store: &Store, n: u64, threads: usize) -> Line {
    let (store_arg, tuning) = match store {
        Store::Sqlite(tuning, dir) => (
            dir.as_ref()
                .map_or_else(|| "sqlite".to_owned(), |d| d.display().to_string()),
            *tuning,
        ),
        #[cfg(feature = "postgres")]
        Store::Postgres { url } => (url.clone(), Tuning::DEFAULT),
    };
    let answer = (|| -> anyhow::Result<Value> {
        let mut args = vec![
            "--job".into(),
            "concurrent".into(),
            "--db".into(),
            store_arg,
            "--n".into(),
            n.to_string(),
            "--threads".into(),
            threads.to_string(),
        ];
        args.extend(tuning.to_args());
        if workload == Workload::W4d {
            args.push("--deferred".into());
        }
        let mut child = spawn(&args)?;
        let mut stdout = take_stdout(&mut child)?;
        let answer = read_answer(&mut stdout)?;
        finish(child)?;
        Ok(answer)
    })();
    let threads_u64 = threads as u64;
    let answer = match answer {
        Ok(answer) => answer,
        Err(err) => return Line::failed(workload, n, threads_u64, format!("{err:#}")),
    };
    if let Some(error) = answer["error"].as_str() {
        return Line::failed(workload, n, threads_u64, error);
    }
    let seconds = answer["seconds"].as_f64().unwrap_or(f64::NAN);
    let calls = answer["handler_calls"].as_u64().unwrap_or(0);
    let mut line = Line::measured(workload, n, threads_u64, Duration::from_secs_f64(seconds))
        .handler_calls(calls)
        .with("store", store.name());
    if let Some(kb) = answer["peak_rss_kb"].as_u64() {
        line = line.with("peak_rss_mb", kb as f64 / 1024.0);
    }
    line.require(calls == n, || {
        format!("{calls} handler calls instead of {n}")
    })
}

/// W7: `processes` processes share one ledger, each executing the same `n`
/// operations in its own order. The clock runs from the moment all of them
/// are ready until the last one has answered.
pub(crate) fn multi_process(store: &Store, n: u64, processes: usize) -> Line {
    let workload = Workload::W7;
    let procs = processes as u64;
    let measured = (|| -> anyhow::Result<(Duration, u64, u64)> {
        let fresh = store.fresh(Synchronous::Full)?;
        let mut children = Vec::new();
        for p in 0..processes {
            let mut args = vec!["--job".into(), "multi".into()];
            args.extend(fresh.location.to_args());
            args.extend([
                "--n".into(),
                n.to_string(),
                "--seed".into(),
                (p as u64 + 1).to_string(),
            ]);
            let mut child = spawn(&args)?;
            let stdin = child.stdin.take().context("the worker has no stdin")?;
            let stdout = take_stdout(&mut child)?;
            children.push((child, stdin, stdout));
        }
        for (_, _, stdout) in &mut children {
            let ready = read_line(stdout)?;
            if ready.trim() != "ready" {
                bail!("a worker did not get ready: {ready}");
            }
        }
        let start = Instant::now();
        for (_, stdin, _) in &mut children {
            go(stdin)?;
        }
        let mut answers = Vec::new();
        for (_, _, stdout) in &mut children {
            answers.push(read_answer(stdout)?);
        }
        let elapsed = start.elapsed();
        for (child, _, _) in children {
            finish(child)?;
        }
        let mut calls = 0;
        let mut in_progress = 0;
        for answer in &answers {
            if let Some(error) = answer["error"].as_str() {
                bail!("a worker failed: {error}");
            }
            calls += answer["handler_calls"].as_u64().unwrap_or(0);
            in_progress += answer["in_progress"].as_u64().unwrap_or(0);
        }
        Runner::new(fresh.ledger.clone())?.verify_confirmed(n)?;
        Ok((elapsed, calls, in_progress))
    })();
    match measured {
        Ok((elapsed, calls, in_progress)) => Line::measured(workload, n, procs, elapsed)
            .handler_calls(calls)
            .with("store", store.name())
            .with("processes", procs)
            .with("in_progress_results", in_progress)
            .require(calls == n, || {
                format!("{calls} handler calls instead of {n}")
            }),
        Err(err) => Line::failed(workload, n, procs, format!("{err:#}")),
    }
}

fn concurrent_here(args: &WorkerArgs) -> anyhow::Result<Value> {
    let store = Store::parse(args.store.as_deref().unwrap_or("sqlite"), args.tuning())?;
    let fresh = store.fresh(Synchronous::Full)?;
    let (elapsed, calls) =
        effects::concurrent(fresh.ledger.clone(), args.n, args.threads, args.deferred)?;
    Ok(json!({
        "seconds": elapsed.as_secs_f64(),
        "handler_calls": calls,
        "peak_rss_kb": peak_rss_kb(),
    }))
}

fn multi_here(args: &WorkerArgs) -> anyhow::Result<Value> {
    let location = match (&args.sqlite, &args.postgres) {
        (Some(path), None) => Location::Sqlite {
            path: path.clone(),
            durability: match args.durability.as_str() {
                "normal" => Synchronous::Normal,
                _ => Synchronous::Full,
            },
            tuning: args.tuning(),
        },
        #[cfg(feature = "postgres")]
        (None, Some(url)) => Location::Postgres {
            url: url.clone(),
            schema: args.schema.clone().context("--postgres needs --schema")?,
        },
        _ => bail!("the multi job needs exactly one of --sqlite and --postgres"),
    };
    let runner = Runner::new(location.open()?)?;
    let order = Rng::new(args.seed).permutation(args.n);
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").context("writing to stdout")?;
    out.flush().context("writing to stdout")?;
    drop(out);
    let mut go = String::new();
    std::io::stdin()
        .read_line(&mut go)
        .context("waiting for go")?;
    let mut in_progress = 0u64;
    for i in order {
        let result = runner.execute(i)?;
        if result.in_progress {
            in_progress += 1;
        } else if !result.is_confirmed() {
            bail!("op:{i} ended {}: {result:?}", result.status);
        }
    }
    Ok(json!({"handler_calls": runner.calls(), "in_progress": in_progress}))
}

/// The peak resident set of this process (`VmHWM`), in KiB, where Linux tells it.
fn peak_rss_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn spawn(args: &[String]) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("locating the effect-bench binary")?;
    let mut command = Command::new(exe);
    if crate::otel::enabled() {
        command.env(crate::otel::CHILD_ENV, "1");
    }
    command
        .arg("worker")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting a worker process")
}

fn take_stdout(child: &mut Child) -> anyhow::Result<BufReader<ChildStdout>> {
    Ok(BufReader::new(
        child.stdout.take().context("the worker has no stdout")?,
    ))
}

fn go(stdin: &mut ChildStdin) -> anyhow::Result<()> {
    stdin.write_all(b"go\n").context("starting a worker")?;
    stdin.flush().context("starting a worker")
}

fn read_line(stdout: &mut BufReader<ChildStdout>) -> anyhow::Result<String> {
    let mut line = String::new();
    let read = stdout
        .read_line(&mut line)
        .context("reading a worker's answer")?;
    if read == 0 {
        bail!("a worker exited without answering");
    }
    Ok(line)
}

fn read_answer(stdout: &mut BufReader<ChildStdout>) -> anyhow::Result<Value> {
    let line = read_line(stdout)?;
    serde_json::from_str(&line).map_err(|e| anyhow!("a worker answered {line:?}: {e}"))
}

fn finish(mut child: Child) -> anyhow::Result<()> {
    let status = child.wait().context("waiting for a worker")?;
    if !status.success() {
        bail!("a worker exited with {status}");
    }
    Ok(())
}
