//! W1 to W5, W1d, W1i: effects executed through [`EffectExecutor`] on one ledger.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use effect_core::{EffectContract, EffectLedger, EffectResult, EffectStatus};
use effect_exec::{EffectExecutor, ExecutorOptions, HandlerContext, HandlerError};
use serde_json::{Value, json};

pub(crate) use effect_ledger_sqlite::Synchronous;

use crate::report::Line;
use crate::rng::Rng;
use crate::store::Store;
use crate::workload::Workload;

/// The contract of every workload: `bench_capture`, operation id `op:{i}`,
/// provider key `key:{i}`, provider idempotency guaranteed, no probe, no
/// postcondition.
pub(crate) fn contract() -> anyhow::Result<EffectContract> {
    contract_storing_intent(false)
}

/// [`contract`], recording its arguments with each operation when
/// `store_intent` (W1i), so that a recovery worker could dispatch it.
pub(crate) fn contract_storing_intent(store_intent: bool) -> anyhow::Result<EffectContract> {
    let index = |args: &Value| {
        args["i"]
            .as_u64()
            .ok_or_else(|| effect_core::CallbackError::new("missing i"))
    };
    EffectContract::builder("bench_capture", move |args| {
        Ok(format!("op:{}", index(args)?))
    })
    .provider_idempotency_key(move |args| Ok(Some(format!("key:{}", index(args)?))))
    .provider_idempotency_guaranteed(true)
    .store_intent(store_intent)
    .build()
    .context("building the bench_capture contract")
}

/// Executes operations and counts handler calls.
#[derive(Debug, Clone)]
pub(crate) struct Runner {
    executor: EffectExecutor,
    contract: EffectContract,
    calls: Arc<AtomicU64>,
}

impl Runner {
    pub(crate) fn new(ledger: Arc<dyn EffectLedger>) -> anyhow::Result<Self> {
        Runner::with_deferred_outcomes(ledger, false)
    }

    /// A runner whose executor answers before outcomes are durable
    /// (`ExecutorOptions::deferred_outcomes`), when `deferred`.
    pub(crate) fn with_deferred_outcomes(
        ledger: Arc<dyn EffectLedger>,
        deferred: bool,
    ) -> anyhow::Result<Self> {
        let options = ExecutorOptions::default().deferred_outcomes(deferred);
        Ok(Runner {
            executor: EffectExecutor::with_options(ledger, options),
            contract: contract()?,
            calls: Arc::new(AtomicU64::new(0)),
        })
    }

    /// A runner whose contract stores its intent (W1i).
    pub(crate) fn storing_intent(ledger: Arc<dyn EffectLedger>) -> anyhow::Result<Self> {
        Ok(Runner {
            contract: contract_storing_intent(true)?,
            ..Runner::new(ledger)?
        })
    }

    /// Makes the deferred outcomes durable (`EffectLedger::sync`).
    pub(crate) fn sync(&self) -> anyhow::Result<()> {
        self.executor
            .ledger()
            .sync()
            .context("syncing the deferred outcomes")
    }

    /// Executes operation `i`; the handler returns `{"ok": i}` at once.
    pub(crate) fn execute(&self, i: u64) -> anyhow::Result<EffectResult> {
        let calls = Arc::clone(&self.calls);
        let handler = move |args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            calls.fetch_add(1, Ordering::Relaxed);
            Ok(json!({"ok": args["i"]}))
        };
        self.executor
            .execute(&self.contract, &json!({"i": i}), handler)
            .with_context(|| format!("executing op:{i}"))
    }

    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Checks that every one of `0..n` is confirmed with its output.
    pub(crate) fn verify_confirmed(&self, n: u64) -> anyhow::Result<()> {
        let ledger = self.executor.ledger();
        for i in 0..n {
            let id = format!("op:{i}");
            let record = ledger
                .get(&id)
                .with_context(|| format!("reading {id}"))?
                .ok_or_else(|| anyhow!("{id} is missing from the ledger"))?;
            if record.status != EffectStatus::Confirmed || record.output != Some(json!({"ok": i})) {
                bail!("{id} is {} with output {:?}", record.status, record.output);
            }
        }
        Ok(())
    }
}

/// W1 (or W2 with normal durability), then W3 on the same ledger: `n` fresh
/// operations one after another, then the same `n` again, each of which must
/// replay its stored result without calling the handler. Prints the lines asked for.
pub(crate) fn fresh_and_replay(
    store: &Store,
    n: u64,
    durability: Synchronous,
    report_fresh: bool,
    report_replay: bool,
) -> Vec<Line> {
    let fresh_workload = match durability {
        Synchronous::Normal => Workload::W2,
        _ => Workload::W1,
    };
    let mut lines = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        let ledger = store.fresh(durability)?;
        let runner = Runner::new(Arc::clone(&ledger.ledger))?;
        let fresh = timed(|| {
            for i in 0..n {
                let result = runner.execute(i)?;
                if !result.is_confirmed() || result.duplicate_suppressed {
                    bail!("op:{i} was not freshly confirmed: {result:?}");
                }
            }
            Ok(())
        });
        let fresh_calls = runner.calls();
        if report_fresh {
            lines.push(
                line(fresh_workload, n, 1, fresh)
                    .handler_calls(fresh_calls)
                    .with("store", store.name())
                    .require(fresh_calls == n, || {
                        format!("{fresh_calls} handler calls instead of {n}")
                    }),
            );
        }
        if report_replay {
            let replay = timed(|| {
                for i in 0..n {
                    let result = runner.execute(i)?;
                    if !result.is_confirmed() || !result.duplicate_suppressed {
                        bail!("op:{i} was not replayed: {result:?}");
                    }
                }
                Ok(())
            });
            let replay_calls = runner.calls() - fresh_calls;
            lines.push(
                line(Workload::W3, n, 1, replay)
                    .handler_calls(replay_calls)
                    .with("store", store.name())
                    .require(replay_calls == 0, || {
                        format!("a replay called the handler {replay_calls} times")
                    }),
            );
        }
        runner.verify_confirmed(n)
    })();
    if let Err(err) = result {
        let message = format!("{err:#}");
        if report_fresh && !lines.iter().any(|l| l.workload == fresh_workload) {
            lines.push(Line::failed(fresh_workload, n, 1, message.clone()));
        }
        if report_replay && !lines.iter().any(|l| l.workload == Workload::W3) {
            lines.push(Line::failed(Workload::W3, n, 1, message.clone()));
        }
        // The final check failed after both loops: both lines are in doubt.
        lines = lines
            .into_iter()
            .map(|l| l.require(false, || message.clone()))
            .collect();
    }
    lines
}

/// W1i: W1 with a contract that stores its intent: the canonical arguments
/// are written in each operation's `prepared` event. Every operation must
/// read back confirmed, with its intent stored.
pub(crate) fn fresh_intent(store: &Store, n: u64) -> Line {
    let workload = Workload::W1i;
    let measured = (|| -> anyhow::Result<(Duration, u64)> {
        let ledger = store.fresh(Synchronous::Full)?;
        let runner = Runner::storing_intent(Arc::clone(&ledger.ledger))?;
        let elapsed = timed(|| {
            for i in 0..n {
                let result = runner.execute(i)?;
                if !result.is_confirmed() || result.duplicate_suppressed {
                    bail!("op:{i} was not freshly confirmed: {result:?}");
                }
            }
            Ok(())
        })?;
        runner.verify_confirmed(n)?;
        for i in 0..n {
            let id = format!("op:{i}");
            let events = ledger
                .ledger
                .events(&id)
                .with_context(|| format!("reading the events of {id}"))?;
            if effect_core::intent::stored(&events) != Some(&json!({"i": i})) {
                bail!("{id} has no stored intent");
            }
        }
        Ok((elapsed, runner.calls()))
    })();
    match measured {
        Ok((elapsed, calls)) => Line::measured(workload, n, 1, elapsed)
            .handler_calls(calls)
            .with("store", store.name())
            .require(calls == n, || {
                format!("{calls} handler calls instead of {n}")
            }),
        Err(err) => Line::failed(workload, n, 1, format!("{err:#}")),
    }
}

/// W1d: W1 with the executor's deferred outcomes (claims durable, outcomes
/// answered before their commit is synced). The measured time includes the
/// final sync; then every operation must read back confirmed with its output.
pub(crate) fn fresh_deferred(store: &Store, n: u64) -> Line {
    let workload = Workload::W1d;
    let measured = (|| -> anyhow::Result<(Duration, u64)> {
        let ledger = store.fresh(Synchronous::Full)?;
        let runner = Runner::with_deferred_outcomes(Arc::clone(&ledger.ledger), true)?;
        let elapsed = timed(|| {
            for i in 0..n {
                let result = runner.execute(i)?;
                if !result.is_confirmed() || result.duplicate_suppressed {
                    bail!("op:{i} was not freshly confirmed: {result:?}");
                }
            }
            runner.sync()
        })?;
        runner.verify_confirmed(n)?;
        Ok((elapsed, runner.calls()))
    })();
    match measured {
        Ok((elapsed, calls)) => Line::measured(workload, n, 1, elapsed)
            .handler_calls(calls)
            .with("store", store.name())
            .require(calls == n, || {
                format!("{calls} handler calls instead of {n}")
            }),
        Err(err) => Line::failed(workload, n, 1, format!("{err:#}")),
    }
}

/// W4 (or W4d with `deferred` outcomes): `threads` threads, each executing
/// its own `n / threads` fresh operations. Returns the elapsed time (with
/// deferred outcomes, up to their final sync) and the handler calls.
pub(crate) fn concurrent(
    ledger: Arc<dyn EffectLedger>,
    n: u64,
    threads: usize,
    deferred: bool,
) -> anyhow::Result<(Duration, u64)> {
    let runner = Runner::with_deferred_outcomes(ledger, deferred)?;
    let per_thread = n / threads as u64;
    let elapsed = in_threads(threads, |t| {
        let first = t as u64 * per_thread;
        for i in first..first + per_thread {
            let result = runner.execute(i)?;
            if !result.is_confirmed() || result.duplicate_suppressed {
                bail!("op:{i} was not freshly confirmed: {result:?}");
            }
        }
        Ok(())
    })?;
    let elapsed = if deferred {
        let start = Instant::now();
        runner.sync()?;
        elapsed + start.elapsed()
    } else {
        elapsed
    };
    runner.verify_confirmed(per_thread * threads as u64)?;
    Ok((elapsed, runner.calls()))
}

/// W5: `threads` threads all executing the same `ids` operations, each in its
/// own order. Every operation must be dispatched exactly once.
pub(crate) fn contention(store: &Store, ids: u64, threads: usize) -> Line {
    let workload = Workload::W5;
    let measured = (|| -> anyhow::Result<(Duration, u64)> {
        let ledger = store.fresh(Synchronous::Full)?;
        let runner = Runner::new(Arc::clone(&ledger.ledger))?;
        let elapsed = in_threads(threads, |t| {
            for i in Rng::new(t as u64 + 1).permutation(ids) {
                let result = runner.execute(i)?;
                // Another thread's live dispatch is reported, never joined.
                if !result.is_confirmed() && !result.in_progress {
                    bail!("op:{i} ended {}: {result:?}", result.status);
                }
            }
            Ok(())
        })?;
        runner.verify_confirmed(ids)?;
        Ok((elapsed, runner.calls()))
    })();
    match measured {
        Ok((elapsed, calls)) => Line::measured(workload, ids, threads as u64, elapsed)
            .handler_calls(calls)
            .with("store", store.name())
            .require(calls == ids, || {
                format!("{calls} handler calls instead of {ids}")
            }),
        Err(err) => Line::failed(workload, ids, threads as u64, format!("{err:#}")),
    }
}

/// Runs `work(t)` on `threads` threads started together; the time from the
/// start to the last thread's end.
fn in_threads(
    threads: usize,
    work: impl Fn(usize) -> anyhow::Result<()> + Sync,
) -> anyhow::Result<Duration> {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                let work = &work;
                scope.spawn(move || {
                    barrier.wait();
                    work(t)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut first_error = None;
        for handle in handles {
            let outcome = handle
                .join()
                .unwrap_or_else(|_| Err(anyhow!("a benchmark thread panicked")));
            if let Err(err) = outcome {
                first_error.get_or_insert(err);
            }
        }
        let elapsed = start.elapsed();
        first_error.map_or(Ok(elapsed), Err)
    })
}

fn timed(work: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<Duration> {
    let start = Instant::now();
    work()?;
    Ok(start.elapsed())
}

fn line(workload: Workload, n: u64, threads: u64, elapsed: anyhow::Result<Duration>) -> Line {
    match elapsed {
        Ok(elapsed) => Line::measured(workload, n, threads, elapsed),
        Err(err) => Line::failed(workload, n, threads, format!("{err:#}")),
    }
}
