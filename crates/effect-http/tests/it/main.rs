//! effect-http through EffectExecutor against the fake HTTP provider on
//! loopback: every cell counts the effects the provider committed.
#![allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failing test with its message.

mod keys;
mod matrix;
mod probe;
mod retry_after;
mod transport;

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use effect_core::{
    EffectContract, EffectContractBuilder, EffectLedger, EffectResult, ManualClock, MemoryLedger,
};
use effect_exec::{CallOptions, EffectExecutor, ExecutorOptions};
use effect_http::{HttpEffect, HttpEffectBuilder, HttpRequest};
use effect_testkit::http_provider::FakeHttpProvider;
use serde_json::{Value, json};

/// How the operation is executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Sync,
    Async,
}

pub const MODES: [Mode; 2] = [Mode::Sync, Mode::Async];

/// One executor on a manual clock shared with the HTTP effect's
/// `Retry-After` waits and, when a test gives it, the provider's stale reads.
#[derive(Debug)]
pub struct Rig {
    pub clock: Arc<ManualClock>,
    pub ledger: Arc<dyn EffectLedger>,
    pub executor: EffectExecutor,
    pub http: HttpEffect,
}

pub fn start() -> Duration {
    Duration::from_secs(1_700_000_000)
}

impl Rig {
    pub fn new(configure: impl FnOnce(HttpEffectBuilder) -> HttpEffectBuilder) -> Self {
        Rig::on_clock(Arc::new(ManualClock::new(UNIX_EPOCH + start())), configure)
    }

    pub fn on_clock(
        clock: Arc<ManualClock>,
        configure: impl FnOnce(HttpEffectBuilder) -> HttpEffectBuilder,
    ) -> Self {
        let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::with_clock(clock.clone()));
        let executor = EffectExecutor::with_clock(
            Arc::clone(&ledger),
            ExecutorOptions::default(),
            clock.clone(),
        )
        .with_sleeper(clock.clone());
        let http = configure(
            HttpEffect::builder()
                .clock(clock.clone())
                .sleeper(clock.clone()),
        )
        .build()
        .unwrap();
        Rig {
            clock,
            ledger,
            executor,
            http,
        }
    }

    /// How far the manual clock moved: the `Retry-After` waits.
    pub fn waited(&self) -> Duration {
        use effect_core::Clock;
        self.clock
            .now()
            .duration_since(UNIX_EPOCH + start())
            .unwrap()
    }

    /// Executes the capture of `arguments` under `contract`, posting the
    /// arguments to `url`, sync or async.
    pub fn capture(
        &self,
        contract: &EffectContract,
        arguments: &Value,
        url: &str,
        mode: Mode,
    ) -> EffectResult {
        let url = url.to_owned();
        let build = move |args: &Value, _ctx: &effect_exec::HandlerContext| {
            Ok(HttpRequest::post(url.clone()).json(args))
        };
        match mode {
            Mode::Sync => self
                .executor
                .execute(contract, arguments, self.http.handler(build))
                .unwrap(),
            Mode::Async => runtime()
                .block_on(self.executor.execute_async(
                    contract,
                    arguments,
                    CallOptions::default(),
                    self.http.async_handler(build),
                ))
                .unwrap(),
        }
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub fn invoice(id: &str) -> Value {
    json!({"invoice": id, "amount": 1250, "reference": id})
}

/// The capture contract's start: one operation per invoice.
pub fn capture_contract() -> EffectContractBuilder {
    EffectContract::builder("capture", |args| {
        Ok(format!(
            "capture:{}",
            args["invoice"].as_str().ok_or("missing invoice")?
        ))
    })
}

/// Its provider key, the same on every attempt.
pub fn with_key(builder: EffectContractBuilder) -> EffectContractBuilder {
    builder.provider_idempotency_key(|args| {
        Ok(args["invoice"].as_str().map(|i| format!("capture:{i}")))
    })
}

/// The keys the provider's POSTs carried.
pub fn posted_keys(provider: &FakeHttpProvider) -> Vec<Option<String>> {
    provider
        .posts()
        .into_iter()
        .map(|p| p.idempotency_key)
        .collect()
}
