//! The database's answer to a commit lost: the ledger reaches the server
//! through testkit's `CommitCutProxy`, which cuts the connection at the next
//! commit, either before the commit reaches the server (nothing is written)
//! or after the server committed and answered (the write is durable, the
//! answer never arrives). Either way the ledger's caller sees an error.
//!
//! Properties, for the claim, the outcome and a manual resolution:
//! - the executor never dispatches on a claim it does not know it holds;
//! - a confirmation whose answer was lost is durable or reported as an error,
//!   never reported confirmed and lost;
//! - the next call (once the lease has ended on the database clock), with an
//!   operator's decision where the rules quarantine, converges to exactly one
//!   effect at the provider.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use effect_core::OutcomeProbeResult;
use effect_core::{EffectContract, EffectLedger, EffectResult, EffectStatus, LedgerErrorKind};
use effect_exec::{
    Audit, EffectExecutor, ExecError, ExecutorOptions, HandlerContext, HandlerError,
};
use effect_ledger_postgres::PostgresLedger;
use effect_test_support::pg_proxy::{CommitCutProxy, Cut};
use effect_testkit::provider::FakePaymentProvider;
use serde_json::{Value, json};

use crate::support::{TestResult, TestSchema, server_url};

/// Short, so a test waits out a lease on the database clock quickly.
const LEASE: Duration = Duration::from_secs(1);
const ID: &str = "invoice:INV-1:capture";

/// A schema, the proxy in front of its server, a ledger through the proxy
/// and one straight to the server (to see what is really stored).
struct Setup {
    _schema: TestSchema,
    proxy: Arc<CommitCutProxy>,
    proxied: PostgresLedger,
    direct: PostgresLedger,
    provider: Arc<FakePaymentProvider>,
    handler_calls: Arc<AtomicUsize>,
}

impl Setup {
    fn new(test: &str) -> Result<Option<Setup>, Box<dyn std::error::Error>> {
        let Some(url) = server_url(test) else {
            return Ok(None);
        };
        let schema = TestSchema::new(&url, test)?;
        let direct = schema.ledger()?;
        let (proxy, proxied_url) = CommitCutProxy::for_url(&url)?;
        let proxied = PostgresLedger::connect(&proxied_url, schema.options().pool_size(2))?;
        Ok(Some(Setup {
            _schema: schema,
            proxy: Arc::new(proxy),
            proxied,
            direct,
            // Keys are ignored: a second dispatch would be a second effect.
            provider: Arc::new(FakePaymentProvider::new().honour_idempotency_keys(false)),
            handler_calls: Arc::new(AtomicUsize::new(0)),
        }))
    }

    fn executor(&self) -> EffectExecutor {
        EffectExecutor::with_options(
            Arc::new(self.proxied.clone()),
            ExecutorOptions::default().dispatch_lease(LEASE),
        )
    }

    /// The capture contract, its probe asking the provider by invoice.
    fn contract(&self) -> Result<EffectContract, Box<dyn std::error::Error>> {
        let provider = Arc::clone(&self.provider);
        Ok(EffectContract::builder("capture_payment", |args| {
            Ok(format!(
                "invoice:{}:capture",
                args["invoice_id"].as_str().ok_or("missing invoice_id")?
            ))
        })
        .provider_idempotency_key(|args| {
            Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
        })
        .outcome_probe(move |args, _key| {
            let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
            let found = provider
                .lookup_by_invoice(invoice)
                .map_err(|e| e.to_string())?;
            Ok(match found.first() {
                Some(capture) => OutcomeProbeResult::committed(
                    serde_json::to_value(capture).map_err(|e| e.to_string())?,
                ),
                None => OutcomeProbeResult::not_committed(),
            })
        })
        .build()?)
    }

    /// A handler that captures, after arming `cut` (for the confirmation).
    fn handler(
        &self,
        cut: Option<Cut>,
    ) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static {
        let provider = Arc::clone(&self.provider);
        let calls = Arc::clone(&self.handler_calls);
        let proxy = Arc::clone(&self.proxy);
        move |args, ctx| {
            calls.fetch_add(1, Ordering::SeqCst);
            let invoice = args["invoice_id"].as_str().unwrap_or_default();
            let capture = provider.capture(invoice, 1250, ctx.provider_key())?;
            if let Some(cut) = cut {
                proxy.cut_next_commit(cut);
            }
            serde_json::to_value(capture).map_err(HandlerError::from_error)
        }
    }

    fn effects(&self) -> usize {
        self.provider.committed_count().unwrap_or(usize::MAX)
    }

    fn stored(&self) -> Result<Option<EffectStatus>, effect_core::LedgerError> {
        Ok(self.direct.get(ID)?.map(|r| r.status))
    }

    /// Calls again until the answer is no longer `in_progress`: the lease
    /// of a caller that never heard back runs out on the database clock.
    fn call_until_settled(
        &self,
        executor: &EffectExecutor,
    ) -> Result<EffectResult, Box<dyn std::error::Error>> {
        let contract = self.contract()?;
        let start = Instant::now();
        loop {
            let result = executor.execute(&contract, &args(), self.handler(None))?;
            if !result.in_progress {
                return Ok(result);
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the lease never ended: {result:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn args() -> Value {
    json!({"invoice_id": "INV-1", "amount_cents": 1250})
}

/// The ledger error an execution failed with.
fn ledger_kind(result: Result<EffectResult, ExecError>) -> LedgerErrorKind {
    match result {
        Err(ExecError::Ledger { source, .. }) => source.kind(),
        other => panic!("expected a ledger error, got {other:?}"),
    }
}

fn audit() -> Audit {
    Audit::new(
        "lost-commit test",
        "checked the provider",
        "provider records",
    )
}

#[test]
fn a_claim_whose_commit_answer_is_lost_is_never_dispatched() -> TestResult {
    let Some(setup) = Setup::new("a_claim_whose_commit_answer_is_lost_is_never_dispatched")? else {
        return Ok(());
    };
    let executor = setup.executor();
    setup.proxy.cut_next_commit(Cut::AfterCommit);
    let first = executor.execute(&setup.contract()?, &args(), setup.handler(None));
    assert_eq!(ledger_kind(first), LedgerErrorKind::Unavailable);
    assert_eq!(setup.proxy.cuts(), 1);
    assert_eq!(
        setup.handler_calls.load(Ordering::SeqCst),
        0,
        "not dispatched"
    );
    // The claim committed: the caller that lost its answer holds a lease it
    // does not know of, and nobody else may dispatch while it lasts.
    assert_eq!(setup.stored()?, Some(EffectStatus::Dispatched));

    // Once it ends, the rules cannot tell whether that caller's handler
    // runs (nothing proves it never started): quarantined, not re-sent.
    let settled = setup.call_until_settled(&executor)?;
    assert_eq!(settled.status, EffectStatus::Quarantined, "{settled:?}");
    assert_eq!(setup.handler_calls.load(Ordering::SeqCst), 0);
    assert_eq!(setup.effects(), 0);

    // The operator knows it never ran (the handler count says so): retry.
    executor
        .operator()
        .authorize_retry_handler_stopped(ID, audit())?;
    let retried = executor.execute(&setup.contract()?, &args(), setup.handler(None))?;
    assert_eq!(retried.status, EffectStatus::Confirmed, "{retried:?}");
    assert_eq!(setup.handler_calls.load(Ordering::SeqCst), 1);
    assert_eq!(setup.effects(), 1, "exactly one effect");
    Ok(())
}

#[test]
fn a_claim_cut_before_its_commit_leaves_nothing_and_the_next_call_dispatches_once() -> TestResult {
    let Some(setup) = Setup::new("a_claim_cut_before_its_commit_leaves_nothing")? else {
        return Ok(());
    };
    let executor = setup.executor();
    setup.proxy.cut_next_commit(Cut::BeforeCommit);
    let first = executor.execute(&setup.contract()?, &args(), setup.handler(None));
    assert_eq!(ledger_kind(first), LedgerErrorKind::Unavailable);
    assert_eq!(setup.proxy.cuts(), 1);
    assert_eq!(setup.handler_calls.load(Ordering::SeqCst), 0);
    assert_eq!(setup.stored()?, None, "nothing was committed");

    let next = executor.execute(&setup.contract()?, &args(), setup.handler(None))?;
    assert_eq!(next.status, EffectStatus::Confirmed, "{next:?}");
    assert_eq!(setup.handler_calls.load(Ordering::SeqCst), 1);
    assert_eq!(setup.effects(), 1);
    Ok(())
}

#[test]
fn a_confirmation_whose_commit_answer_is_lost_is_durable_and_reported_as_an_error() -> TestResult {
    let Some(setup) = Setup::new("a_confirmation_whose_commit_answer_is_lost")? else {
        return Ok(());
    };
    let executor = setup.executor();
    let first = executor.execute(
        &setup.contract()?,
        &args(),
        setup.handler(Some(Cut::AfterCommit)),
    );
    // Never reported confirmed: the caller cannot know the commit held.
    assert_eq!(ledger_kind(first), LedgerErrorKind::Unavailable);
    assert_eq!(setup.proxy.cuts(), 1);
    assert_eq!(setup.effects(), 1);
    // But it did: the confirmation is durable, with the provider's output.
    let stored = setup.direct.get(ID)?.ok_or("the record is missing")?;
    assert_eq!(stored.status, EffectStatus::Confirmed);
    let capture = serde_json::to_value(&setup.provider.captures()?[0])?;
    assert_eq!(stored.output, Some(capture.clone()));

    // The next call replays it; nothing is sent again.
    let next = executor.execute(&setup.contract()?, &args(), setup.handler(None))?;
    assert_eq!(next.status, EffectStatus::Confirmed);
    assert_eq!(next.output, Some(capture));
    assert_eq!(setup.handler_calls.load(Ordering::SeqCst), 1);
    assert_eq!(setup.effects(), 1);
    Ok(())
}

#[test]
fn a_confirmation_cut_before_its_commit_is_an_error_and_the_probe_settles_it() -> TestResult {
    let Some(setup) = Setup::new("a_confirmation_cut_before_its_commit")? else {
        return Ok(());
    };
    let executor = setup.executor();
    let first = executor.execute(
        &setup.contract()?,
        &args(),
        setup.handler(Some(Cut::BeforeCommit)),
    );
    assert_eq!(ledger_kind(first), LedgerErrorKind::Unavailable);
    assert_eq!(setup.effects(), 1);
    // The confirmation was not written: the dispatch is still leased.
    assert_eq!(setup.stored()?, Some(EffectStatus::Dispatched));

    // After the lease, the probe finds the capture: confirmed, not re-sent.
    let settled = setup.call_until_settled(&executor)?;
    assert_eq!(settled.status, EffectStatus::Confirmed, "{settled:?}");
    assert_eq!(
        settled.output,
        Some(serde_json::to_value(&setup.provider.captures()?[0])?)
    );
    assert_eq!(setup.handler_calls.load(Ordering::SeqCst), 1);
    assert_eq!(setup.effects(), 1);
    Ok(())
}

#[test]
fn a_manual_resolution_whose_commit_answer_is_lost_is_durable_or_an_error() -> TestResult {
    let Some(setup) = Setup::new("a_manual_resolution_whose_commit_answer_is_lost")? else {
        return Ok(());
    };
    let executor = setup.executor();
    // A claim whose answer was lost, then quarantined once its lease ended
    // (as in the first test): an operator must decide.
    setup.proxy.cut_next_commit(Cut::AfterCommit);
    let _ = executor.execute(&setup.contract()?, &args(), setup.handler(None));
    let settled = setup.call_until_settled(&executor)?;
    assert_eq!(settled.status, EffectStatus::Quarantined, "{settled:?}");

    // The operator's decision is cut before it reaches the server: an
    // error, and nothing changed.
    setup.proxy.cut_next_commit(Cut::BeforeCommit);
    let lost = executor
        .operator()
        .authorize_retry_handler_stopped(ID, audit());
    assert!(
        matches!(&lost, Err(ExecError::Ledger { source, .. }) if source.kind() == LedgerErrorKind::Unavailable),
        "{lost:?}"
    );
    assert_eq!(setup.stored()?, Some(EffectStatus::Quarantined));

    // Again, with the answer lost after the commit: an error, but durable.
    setup.proxy.cut_next_commit(Cut::AfterCommit);
    let lost = executor
        .operator()
        .authorize_retry_handler_stopped(ID, audit());
    assert!(
        matches!(&lost, Err(ExecError::Ledger { source, .. }) if source.kind() == LedgerErrorKind::Unavailable),
        "{lost:?}"
    );
    assert_eq!(
        setup.stored()?,
        Some(EffectStatus::Prepared),
        "the retry is recorded"
    );
    assert_eq!(setup.proxy.cuts(), 3);
    let resolutions = setup
        .direct
        .events(ID)?
        .into_iter()
        .filter(|e| e.event_type == effect_core::event::MANUAL_RETRY_AUTHORIZED)
        .count();
    assert_eq!(resolutions, 1, "one audited decision");

    // The next call dispatches once.
    let next = executor.execute(&setup.contract()?, &args(), setup.handler(None))?;
    assert_eq!(next.status, EffectStatus::Confirmed, "{next:?}");
    assert_eq!(setup.handler_calls.load(Ordering::SeqCst), 1);
    assert_eq!(setup.effects(), 1);
    Ok(())
}

// ---------------------------------------------------------------------------
// Seeded: a cut at a random commit of each operation.
// ---------------------------------------------------------------------------

const SEEDS_VAR: &str = "EFFECT_LOST_COMMIT_SEEDS";
const DEFAULT_SEEDS: [u64; 3] = [1, 2, 3];
const INVOICES: usize = 6;

#[test]
fn seeded_lost_commits_lose_no_confirmation_and_leave_one_effect_each() -> TestResult {
    let seeds: Vec<u64> = match std::env::var(SEEDS_VAR) {
        Ok(list) => list
            .split(',')
            .map(|s| s.trim().parse())
            .collect::<Result<_, _>>()?,
        Err(_) => DEFAULT_SEEDS.to_vec(),
    };
    for seed in seeds {
        let Some(setup) = Setup::new(&format!("seeded_lost_commits_{seed}"))? else {
            return Ok(());
        };
        match run_seed(&setup, seed) {
            Ok(counts) => println!("lost commits: seed {seed}: {counts}"),
            Err(why) => panic!(
                "lost commits: seed {seed} failed: {why}\n\
                 rerun it with: {SEEDS_VAR}={seed} cargo test -p effect-ledger-postgres --test it \
                 lost_commit::seeded -- --nocapture"
            ),
        }
    }
    Ok(())
}

fn invoice_args(i: usize) -> Value {
    json!({"invoice_id": format!("INV-S{i}"), "amount_cents": 1250})
}

fn invoice_id(i: usize) -> String {
    format!("invoice:INV-S{i}:capture")
}

fn run_seed(setup: &Setup, seed: u64) -> Result<String, Box<dyn std::error::Error>> {
    let executor = setup.executor();
    let contract = setup.contract()?;
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = |n: u64| {
        // xorshift64: the cut points, reproducible from the seed.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut told = std::collections::BTreeMap::new();
    let (mut errors, mut plan) = (0, Vec::new());
    for i in 0..INVOICES {
        let cut = match next(2) {
            0 => Cut::BeforeCommit,
            _ => Cut::AfterCommit,
        };
        // 0: no cut, 1: the claim, 2: the confirmation.
        let point = next(3);
        plan.push(match point {
            0 => format!("{i}: no cut"),
            1 => format!("{i}: claim {cut:?}"),
            _ => format!("{i}: confirmation {cut:?}"),
        });
        let calls_before = setup.handler_calls.load(Ordering::SeqCst);
        if point == 1 {
            setup.proxy.cut_next_commit(cut);
        }
        let handler = setup.handler((point == 2).then_some(cut));
        match executor.execute(&contract, &invoice_args(i), handler) {
            Ok(result) if result.status == EffectStatus::Confirmed => {
                told.insert(invoice_id(i), result.output);
            }
            Ok(result) => {
                return Err(format!("{}: unexpected answer {result:?}", invoice_id(i)).into());
            }
            Err(ExecError::Ledger { source, .. })
                if source.kind() == LedgerErrorKind::Unavailable =>
            {
                errors += 1;
            }
            Err(other) => return Err(format!("{}: untyped error {other:?}", invoice_id(i)).into()),
        }
        setup.proxy.disarm();
        let dispatched = setup.handler_calls.load(Ordering::SeqCst) - calls_before;
        if point == 1 && dispatched != 0 {
            return Err(format!(
                "{} was dispatched on a claim whose commit was cut",
                invoice_id(i)
            )
            .into());
        }
    }
    // Every confirmation a caller was told of is durable.
    for (id, output) in &told {
        let stored = setup.direct.get(id)?;
        if stored.as_ref().map(|r| (r.status, &r.output)) != Some((EffectStatus::Confirmed, output))
        {
            return Err(
                format!("{id} was told confirmed with {output:?}, stored {stored:?}").into(),
            );
        }
    }
    // The next calls converge, an operator deciding from the provider's
    // records what the rules quarantined.
    let mut decisions = 0;
    for i in 0..INVOICES {
        let start = Instant::now();
        let mut result = loop {
            let result = executor.execute(&contract, &invoice_args(i), setup.handler(None))?;
            if !result.in_progress {
                break result;
            }
            if start.elapsed() > Duration::from_secs(60) {
                return Err(format!("{}: the lease never ended", invoice_id(i)).into());
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if result.status.is_uncertain() {
            decisions += 1;
            let invoice = format!("INV-S{i}");
            match setup.provider.lookup_by_invoice(&invoice)?.first() {
                Some(capture) => {
                    executor.operator().confirm_manually(
                        &invoice_id(i),
                        serde_json::to_value(capture)?,
                        None,
                        audit(),
                    )?;
                }
                None => {
                    executor
                        .operator()
                        .authorize_retry_handler_stopped(&invoice_id(i), audit())?;
                }
            }
            result = executor.execute(&contract, &invoice_args(i), setup.handler(None))?;
        }
        if result.status != EffectStatus::Confirmed {
            return Err(format!("{}: {result:?} after recovery", invoice_id(i)).into());
        }
        let effects = setup
            .provider
            .lookup_by_invoice(&format!("INV-S{i}"))?
            .len();
        if effects != 1 {
            return Err(format!("{}: {effects} effects", invoice_id(i)).into());
        }
    }
    Ok(format!(
        "{INVOICES} operations, cuts {plan:?}: {} commits cut, {} told confirmed, {errors} errors; \
         {decisions} operator decisions after; {} effects",
        setup.proxy.cuts(),
        told.len(),
        setup.effects()
    ))
}
