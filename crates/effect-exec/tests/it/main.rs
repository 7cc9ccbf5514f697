//! Integration tests of the recovery executor: every docs/spec.md §7 scenario, counting
//! the effects the fake provider committed.
#![allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failing test with its message.

mod approval;
mod approval_processes;
mod approval_properties;
mod approval_rule;
mod asynchronous;
mod bad_input;
mod budget;
mod budget_worker;
mod compensation;
mod concurrency;
mod decide_by;
mod deferred;
mod evidence;
mod late;
mod prepared;
mod properties;
mod provider;
mod provider_id;
mod recovery;
mod resolution;
mod retry_basis;
mod scenarios;
mod stale;
mod sweep;
#[cfg(feature = "metrics")]
mod telemetry;
mod typed_compensation;
mod versions;
mod world;

use std::sync::Arc;

use effect_core::{EffectLedger, MemoryLedger};
use effect_exec::{EffectExecutor, ExecutorOptions};

pub fn ledger() -> Arc<dyn EffectLedger> {
    Arc::new(MemoryLedger::new())
}

pub fn executor(ledger: &Arc<dyn EffectLedger>) -> EffectExecutor {
    EffectExecutor::new(Arc::clone(ledger))
}

pub fn executor_with(ledger: &Arc<dyn EffectLedger>, options: ExecutorOptions) -> EffectExecutor {
    EffectExecutor::with_options(Arc::clone(ledger), options)
}

pub fn event_types(ledger: &Arc<dyn EffectLedger>, id: &str) -> Vec<String> {
    ledger
        .events(id)
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}
