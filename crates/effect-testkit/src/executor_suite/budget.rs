//! Budgets (docs/approval.md#budgets): the claim checks and charges a
//! contract's budgets in the store's transaction. A dispatch over the limit
//! is refused with nothing sent or charged, a rejected effect gives its
//! charge back, an uncertain one keeps it, a retry is charged once, and
//! concurrent callers never together exceed a limit.
//!
//! These checks run through the executor, with a fake provider (a handler
//! that records what it committed), and count what the provider committed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use effect_core::EffectLedgerExt as _;
use effect_core::{
    Approval, Budget, BudgetDeferral, BudgetUse, Clock as _, EffectContract, EffectLedger,
    EffectStatus as S, OutcomeProbeResult, SystemClock,
};
use effect_exec::{EffectExecutor, ExecError, HandlerContext, HandlerError};
use serde_json::{Value, json};

use effect_conformance::LedgerFactory;
use effect_conformance::RACERS;
use effect_conformance::harness::{self, Check, race};

/// A fake payment provider: the refunds it committed, `(tenant, cents)`.
#[derive(Debug, Default, Clone)]
struct Provider {
    committed: Arc<Mutex<Vec<(String, u64)>>>,
}

impl Provider {
    fn commit(&self, args: &Value) -> Value {
        let tenant = args["tenant"].as_str().unwrap_or_default().to_owned();
        let cents = args["cents"].as_u64().unwrap_or_default();
        lock(&self.committed).push((tenant, cents));
        json!({"refunded": args["order"], "cents": cents})
    }

    fn count(&self) -> usize {
        lock(&self.committed).len()
    }

    fn cents(&self, tenant: &str) -> u64 {
        lock(&self.committed)
            .iter()
            .filter(|(t, _)| t == tenant)
            .map(|(_, cents)| cents)
            .sum()
    }

    /// A handler that commits every refund.
    fn accepting(&self) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + use<> {
        let provider = self.clone();
        move |args, _ctx| Ok(provider.commit(&args))
    }
}

fn refund_contract(
    c: &Check,
    configure: impl FnOnce(effect_core::EffectContractBuilder) -> effect_core::EffectContractBuilder,
) -> EffectContract {
    let builder = EffectContract::builder("refund", |args| {
        Ok(format!(
            "order:{}:refund",
            args["order"].as_str().ok_or("missing order")?
        ))
    });
    match configure(builder).build() {
        Ok(contract) => contract,
        Err(err) => c.fail(format_args!("building the contract: {err}")),
    }
}

/// A total budget of at most `max_cents` per tenant.
fn cents_per_tenant(max_cents: u64) -> Budget {
    Budget::total("refunds")
        .scope(|args| {
            Ok(format!(
                "tenant:{}",
                args["tenant"].as_str().ok_or("missing tenant")?
            ))
        })
        .max_amount(max_cents, |args| {
            Ok(args["cents"].as_u64().ok_or("missing cents")?)
        })
}

fn refund(order: &str, cents: u64) -> Value {
    json!({"order": order, "tenant": "acme", "cents": cents})
}

/// The ledger's stats entry of `budget`: `None` when the store does not
/// offer stats (the suite accepts that), `Some(None)` when it lists no such
/// budget.
fn budget_use(c: &Check, budget: &str) -> Option<Option<BudgetUse>> {
    match c.ledger.stats() {
        Ok(stats) => Some(stats.budgets.into_iter().find(|b| b.budget == budget)),
        Err(err) if err.kind() == effect_core::LedgerErrorKind::Unsupported => None,
        Err(err) => c.fail(format_args!("stats: {err}")),
    }
}

/// Checks a budget's `(count, amount)` in stats, where the store has stats.
fn check_use(c: &Check, budget: &str, expected: (u64, u64), what: &str) {
    if let Some(entry) = budget_use(c, budget) {
        let used = entry.map_or((0, 0), |b| (b.count, b.amount));
        c.same(used, expected, what);
    }
}

fn event_types(c: &Check, id: &str) -> Vec<String> {
    c.ok(c.ledger.events(id), "events")
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

fn expect_refused(c: &Check, result: Result<effect_core::EffectResult, ExecError>, what: &str) {
    match result {
        Err(err) if err.is_budget_exceeded() => {
            let text = err.to_string();
            c.ensure(
                text.contains("nothing was sent or charged"),
                format_args!("{what}: the refusal says what happened: {text}"),
            );
        }
        Err(err) => c.fail(format_args!("{what}: expected a budget refusal, got {err}")),
        Ok(result) => c.fail(format_args!(
            "{what}: expected a budget refusal, got {result:?}"
        )),
    }
}

fn expect_deferred(c: &Check, result: Result<effect_core::EffectResult, ExecError>, what: &str) {
    match result {
        Err(err) if err.is_budget_deferred() => {
            let text = err.to_string();
            c.ensure(
                text.contains("deferred until") && text.contains("nothing was sent or charged"),
                format_args!("{what}: the deferral says what happened: {text}"),
            );
        }
        Err(err) => c.fail(format_args!(
            "{what}: expected a budget deferral, got {err}"
        )),
        Ok(result) => c.fail(format_args!(
            "{what}: expected a budget deferral, got {result:?}"
        )),
    }
}

fn expect_confirmed(c: &Check, result: Result<effect_core::EffectResult, ExecError>, what: &str) {
    match result {
        Ok(result) => c.same(result.status, S::Confirmed, what),
        Err(err) => c.fail(format_args!("{what}: {err}")),
    }
}

/// Dispatches within the limit are charged; one over it is refused before
/// dispatch, terminally (a typed error, a `budget_exceeded` event with the
/// budget's state, the operation `rejected`, nothing charged); a cheaper
/// one still fits, and the refused one is answered the same refusal on its
/// next call, which writes nothing and dispatches nothing although the
/// budget has room again.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn budget_refuses_a_dispatch_over_its_limit(factory: LedgerFactory<'_>) {
    let c = Check::new("budget_refuses_a_dispatch_over_its_limit", factory);
    let contract = refund_contract(&c, |b| b.budget(cents_per_tenant(1_000)));
    let executor = EffectExecutor::new(Arc::clone(&c.ledger));
    let provider = Provider::default();
    expect_confirmed(
        &c,
        executor.execute(&contract, &refund("A-1", 600), provider.accepting()),
        "A-1",
    );
    expect_refused(
        &c,
        executor.execute(&contract, &refund("A-2", 500), provider.accepting()),
        "A-2",
    );
    let refused = c.record("order:A-2:refund");
    c.same(
        (refused.status, refused.attempts),
        (S::Rejected, 0),
        "A-2 after its refusal",
    );
    c.ensure(
        refused
            .error
            .as_deref()
            .is_some_and(|e| e.contains("refused by budget")),
        format_args!("A-2's error names the budget: {:?}", refused.error),
    );
    c.same(
        event_types(&c, "order:A-2:refund"),
        vec!["prepared".to_owned(), "budget_exceeded".to_owned()],
        "A-2's events",
    );
    let event = c.last_event("order:A-2:refund");
    c.event_is(
        &event,
        "budget_exceeded",
        &json!({
            "budget": "refunds/tenant:acme",
            "window": "total",
            "max_amount": 1_000,
            "used_count": 1,
            "used_amount": 600,
            "amount": 500,
        }),
    );
    check_use(&c, "refunds/tenant:acme", (1, 600), "use after a refusal");
    expect_confirmed(
        &c,
        executor.execute(&contract, &refund("A-3", 400), provider.accepting()),
        "A-3",
    );
    // A-1 is given back (an operator rejects it after all), so the budget
    // has room: A-2 still is not dispatched, its refusal was the decision.
    let before = c.snapshot("order:A-2:refund");
    expect_refused(
        &c,
        executor.execute(&contract, &refund("A-2", 500), provider.accepting()),
        "A-2 again",
    );
    c.unchanged("order:A-2:refund", &before, "A-2 called again");
    c.same(provider.count(), 2, "refunds the provider committed");
    c.same(provider.cents("acme"), 1_000, "cents the provider refunded");
    if let Some(entry) = budget_use(&c, "refunds/tenant:acme") {
        c.same(
            entry.map(|b| (b.window, b.max_amount, b.count, b.amount)),
            Some(("total".to_owned(), Some(1_000), 2, 1_000)),
            "the budget in stats",
        );
    }
    let a1 = c.ok(c.ledger.events("order:A-1:refund"), "events");
    let dispatched = a1.iter().find(|e| e.event_type == "dispatched");
    c.same(
        dispatched.map(|e| e.data["budget_charges"].clone()),
        Some(json!([{"budget": "refunds/tenant:acme", "amount": 600}])),
        "the dispatched event names the charge",
    );
}

/// An effect the provider rejects gives its charge back (a
/// `budget_refunded` event), so the next dispatch fits again.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn budget_gives_back_a_rejected_charge(factory: LedgerFactory<'_>) {
    let c = Check::new("budget_gives_back_a_rejected_charge", factory);
    let contract = refund_contract(&c, |b| b.budget(cents_per_tenant(1_000).max_count(1)));
    let executor = EffectExecutor::new(Arc::clone(&c.ledger));
    let provider = Provider::default();
    let rejecting = |_args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
        Err(HandlerError::rejected("card expired"))
    };
    match executor.execute(&contract, &refund("A-1", 900), rejecting) {
        Ok(result) => c.same(result.status, S::Rejected, "A-1"),
        Err(err) => c.fail(format_args!("A-1: {err}")),
    }
    check_use(&c, "refunds/tenant:acme", (0, 0), "use after the rejection");
    let types = event_types(&c, "order:A-1:refund");
    c.same(
        types.last().map(String::as_str),
        Some("budget_refunded"),
        "A-1's last event",
    );
    expect_confirmed(
        &c,
        executor.execute(&contract, &refund("A-2", 900), provider.accepting()),
        "A-2",
    );
    expect_refused(
        &c,
        executor.execute(&contract, &refund("A-3", 50), provider.accepting()),
        "A-3 (one dispatch at most)",
    );
    c.same(provider.count(), 1, "refunds the provider committed");
    check_use(&c, "refunds/tenant:acme", (1, 900), "use at the end");
}

/// An uncertain outcome keeps its charge: the effect may have happened.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn budget_keeps_the_charge_of_an_uncertain_outcome(factory: LedgerFactory<'_>) {
    let c = Check::new("budget_keeps_the_charge_of_an_uncertain_outcome", factory);
    let contract = refund_contract(&c, |b| b.budget(cents_per_tenant(1_000)));
    let executor = EffectExecutor::new(Arc::clone(&c.ledger));
    let provider = Provider::default();
    let lost = {
        let provider = provider.clone();
        move |args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            provider.commit(&args);
            Err(HandlerError::unknown(
                "the connection dropped after the request was sent",
            ))
        }
    };
    match executor.execute(&contract, &refund("A-1", 700), lost) {
        Ok(result) => c.ensure(
            result.status.is_uncertain(),
            format_args!("A-1 is uncertain: {result:?}"),
        ),
        Err(err) => c.fail(format_args!("A-1: {err}")),
    }
    check_use(
        &c,
        "refunds/tenant:acme",
        (1, 700),
        "use after the uncertain outcome",
    );
    expect_refused(
        &c,
        executor.execute(&contract, &refund("A-2", 400), provider.accepting()),
        "A-2",
    );
    expect_confirmed(
        &c,
        executor.execute(&contract, &refund("A-3", 300), provider.accepting()),
        "A-3",
    );
    c.same(provider.count(), 2, "refunds the provider committed");
    check_use(&c, "refunds/tenant:acme", (2, 1_000), "use at the end");
}

/// A retry of the same operation (an uncertain dispatch that the probe
/// found not committed) is not charged again: a budget of one dispatch lets
/// its second attempt through.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn budget_charges_a_retry_once(factory: LedgerFactory<'_>) {
    let c = Check::new("budget_charges_a_retry_once", factory);
    let provider = Provider::default();
    let contract = {
        let provider = provider.clone();
        refund_contract(&c, move |b| {
            b.budget(cents_per_tenant(1_000).max_count(1))
                .outcome_probe(move |args, _key| {
                    let order = args["order"].as_str().unwrap_or_default().to_owned();
                    let found = lock(&provider.committed)
                        .iter()
                        .any(|(_, cents)| *cents == args["cents"].as_u64().unwrap_or(0))
                        && !order.is_empty();
                    Ok(if found {
                        OutcomeProbeResult::committed(json!({"refunded": order}))
                    } else {
                        OutcomeProbeResult::not_committed()
                    })
                })
        })
    };
    let executor = EffectExecutor::new(Arc::clone(&c.ledger));
    let attempts = Arc::new(Mutex::new(0_u32));
    let flaky = {
        let (provider, attempts) = (provider.clone(), Arc::clone(&attempts));
        move |args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            let mut n = lock(&attempts);
            *n += 1;
            if *n == 1 {
                // Times out before the provider took it.
                return Err(HandlerError::unknown("timed out"));
            }
            Ok(provider.commit(&args))
        }
    };
    match executor.execute(&contract, &refund("A-1", 800), flaky) {
        Ok(result) => c.same((result.status, result.attempts), (S::Confirmed, 2), "A-1"),
        Err(err) => c.fail(format_args!("A-1: {err}")),
    }
    c.same(*lock(&attempts), 2, "handler calls");
    c.same(provider.count(), 1, "refunds the provider committed");
    check_use(&c, "refunds/tenant:acme", (1, 800), "use after the retry");
    expect_refused(
        &c,
        executor.execute(&contract, &refund("A-2", 100), provider.accepting()),
        "A-2",
    );
    c.same(
        provider.count(),
        1,
        "refunds the provider committed at the end",
    );
}

/// A claim a deferring budget refuses leaves the operation's approval
/// unused, and the operation waiting for room.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn budget_refusal_keeps_the_approval(factory: LedgerFactory<'_>) {
    let c = Check::new("budget_refusal_keeps_the_approval", factory);
    let contract = refund_contract(&c, |b| {
        b.budget(cents_per_tenant(1_000).defer(BudgetDeferral::For(Duration::from_secs(3600))))
            .requires_approval(true)
    });
    let executor = EffectExecutor::new(Arc::clone(&c.ledger));
    let provider = Provider::default();
    let approve = |id: &str| {
        let approval = Approval {
            request_fingerprint: c.record(id).request_fingerprint,
            actor: "lead@example.com".into(),
            reason: "matches the ticket".into(),
            expires_at: SystemClock.now() + Duration::from_secs(3600),
        };
        if let Err(err) = executor.operator().approve(id, approval) {
            c.fail(format_args!("approving {id}: {err}"));
        }
    };
    let rejecting = |_args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
        Err(HandlerError::rejected("account closed"))
    };
    for (order, cents) in [("A-1", 800), ("A-2", 500)] {
        match executor.execute(&contract, &refund(order, cents), provider.accepting()) {
            Ok(result) => c.same(result.status, S::AwaitingApproval, order),
            Err(err) => c.fail(format_args!("{order}: {err}")),
        }
        approve(&format!("order:{order}:refund"));
    }
    match executor.execute(&contract, &refund("A-1", 800), rejecting) {
        Ok(result) => c.same(result.status, S::Rejected, "A-1"),
        Err(err) => c.fail(format_args!("A-1: {err}")),
    }
    // A-1's rejection gave its 800 back, so A-2 fits; first fill the budget
    // with an approved A-3 to refused while its approval stays.
    match executor.execute(&contract, &refund("A-3", 600), provider.accepting()) {
        Ok(result) => c.same(result.status, S::AwaitingApproval, "A-3"),
        Err(err) => c.fail(format_args!("A-3: {err}")),
    }
    approve("order:A-3:refund");
    expect_confirmed(
        &c,
        executor.execute(&contract, &refund("A-3", 600), provider.accepting()),
        "A-3",
    );
    expect_deferred(
        &c,
        executor.execute(&contract, &refund("A-2", 500), provider.accepting()),
        "A-2",
    );
    let waiting = c.record("order:A-2:refund");
    c.same(waiting.status, S::AwaitingApproval, "A-2 after its refusal");
    c.ensure(
        waiting.approval().is_some(),
        "A-2 keeps its approval after the refusal",
    );
    c.same(provider.count(), 1, "refunds the provider committed");
    check_use(&c, "refunds/tenant:acme", (1, 600), "use at the end");
}

/// [`callers_never_exceed_a_budget`] with 16 callers on one ledger.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn concurrent_callers_never_exceed_a_budget(factory: LedgerFactory<'_>) {
    let ledger = factory();
    let handles: Vec<Arc<dyn EffectLedger>> = (0..RACERS).map(|_| Arc::clone(&ledger)).collect();
    never_exceed("concurrent_callers_never_exceed_a_budget", &handles);
}

/// One caller per handle (threads released together, each with its own
/// executor) refunds 80 orders of 100 cents, half for each of two tenants,
/// under a total budget of 2,550 cents per tenant and one of 40 refunds in
/// all. Every budget holds: each tenant's dispatches are within its amount,
/// the count is within the global one, and since every call is charged or
/// refused exactly 40 refunds went out, each committed once. A store's own
/// tests pass handles on several connections (or processes' worth of pools).
///
/// # Panics
///
/// When the ledger behaves otherwise, or `handles` is empty.
pub fn callers_never_exceed_a_budget(handles: &[Arc<dyn EffectLedger>]) {
    never_exceed("callers_never_exceed_a_budget", handles);
}

fn never_exceed(name: &'static str, handles: &[Arc<dyn EffectLedger>]) {
    const ORDERS: usize = 80;
    const CENTS: u64 = 100;
    const PER_TENANT: u64 = 2_550;
    const IN_ALL: u64 = 40;
    let Some(first) = handles.first() else {
        panic!("{name} needs ledger handles");
    };
    let factory = || Arc::clone(first);
    let c = Check::new(name, &factory);
    let contract = refund_contract(&c, |b| {
        b.budget(cents_per_tenant(PER_TENANT))
            .budget(Budget::total("all_refunds").max_count(IN_ALL))
    });
    let args = |n: usize| {
        let tenant = if n.is_multiple_of(2) {
            "acme"
        } else {
            "globex"
        };
        json!({"order": format!("A-{n}"), "tenant": tenant, "cents": CENTS})
    };
    let provider = Provider::default();
    let outcomes = race(&c, handles.len(), |caller| {
        let executor = EffectExecutor::new(Arc::clone(&handles[caller]));
        let (mut confirmed, mut refused) = (0_usize, 0_usize);
        for i in 0..ORDERS {
            // Each caller walks the orders in an order of its own; the
            // first to claim an order dispatches it, the others replay it.
            let n = (i * 7 + caller * 13) % ORDERS;
            match executor.execute(&contract, &args(n), provider.accepting()) {
                Ok(result) if result.status == S::Confirmed && !result.duplicate_suppressed => {
                    confirmed += 1
                }
                Ok(result) if matches!(result.status, S::Confirmed | S::Dispatched) => {}
                Ok(result) => c.fail(format_args!("caller {caller}, A-{n}: {result:?}")),
                Err(err) if err.is_budget_exceeded() => refused += 1,
                Err(err) => c.fail(format_args!(
                    "caller {caller}, A-{n}: {}",
                    effect_core::error_chain(&err)
                )),
            }
        }
        (confirmed, refused)
    });
    let dispatched: usize = outcomes.iter().map(|(confirmed, _)| confirmed).sum();
    let refused: usize = outcomes.iter().map(|(_, refused)| refused).sum();
    c.ensure(refused > 0, "some calls were refused");
    c.same(
        provider.count(),
        IN_ALL as usize,
        "refunds the provider committed",
    );
    c.same(dispatched, IN_ALL as usize, "calls that dispatched");
    for tenant in ["acme", "globex"] {
        let cents = provider.cents(tenant);
        c.ensure(
            cents <= PER_TENANT,
            format_args!("{tenant} was refunded {cents} cents, over {PER_TENANT}"),
        );
        check_use(
            &c,
            &format!("refunds/tenant:{tenant}"),
            (cents / CENTS, cents),
            "a tenant's budget use",
        );
    }
    check_use(&c, "all_refunds", (IN_ALL, 0), "the global budget's use");
    let mut charged = 0;
    for n in 0..ORDERS {
        let record = c.record(&format!("order:A-{n}:refund"));
        match record.status {
            S::Confirmed => charged += 1,
            S::Rejected => c.same(record.attempts, 0, format_args!("refused A-{n}'s attempts")),
            other => c.fail(format_args!("A-{n} is {other}")),
        }
    }
    c.same(charged, IN_ALL as usize, "confirmed operations");
}

/// A mutex's value, also after a panicking holder (the panic fails the check).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A budget declared with a deferral keeps the operation it refuses
/// `prepared`, deferred (one `budget_deferred` event naming the bound);
/// calls within the bound write nothing while the budget has no room, and
/// the first call once it has (an operator rejected an uncertain charge)
/// dispatches it, once.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn budget_deferral_dispatches_once_there_is_room(factory: LedgerFactory<'_>) {
    let c = Check::new("budget_deferral_dispatches_once_there_is_room", factory);
    let contract = refund_contract(&c, |b| {
        b.budget(cents_per_tenant(1_000).defer(BudgetDeferral::For(Duration::from_secs(3600))))
    });
    let executor = EffectExecutor::new(Arc::clone(&c.ledger));
    let provider = Provider::default();
    let lost = |_args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
        Err(HandlerError::unknown("the connection dropped"))
    };
    match executor.execute(&contract, &refund("A-1", 700), lost) {
        Ok(result) => c.ensure(
            result.status.is_uncertain(),
            format_args!("A-1 is uncertain: {result:?}"),
        ),
        Err(err) => c.fail(format_args!("A-1: {err}")),
    }
    let id = "order:A-2:refund";
    expect_deferred(
        &c,
        executor.execute(&contract, &refund("A-2", 500), provider.accepting()),
        "A-2",
    );
    let deferred = c.record(id);
    c.same(
        (deferred.status, deferred.attempts),
        (S::Prepared, 0),
        "A-2 deferred",
    );
    c.same(
        event_types(&c, id),
        vec!["prepared".to_owned(), "budget_deferred".to_owned()],
        "A-2's events",
    );
    let event = c.last_event(id);
    c.event_is(
        &event,
        "budget_deferred",
        &json!({"budget": "refunds/tenant:acme", "used_amount": 700, "amount": 500}),
    );
    c.ensure(
        event.data["deferred_until"].is_string(),
        format_args!("the deferral names its bound: {}", event.data),
    );
    let before = c.snapshot(id);
    for n in 0..3 {
        expect_deferred(
            &c,
            executor.execute(&contract, &refund("A-2", 500), provider.accepting()),
            &format!("A-2, call {n} within the deferral"),
        );
    }
    c.unchanged(id, &before, "A-2 called again while deferred");
    c.same(
        provider.count(),
        0,
        "refunds the provider committed while deferred",
    );
    let rejected = c.ledger.resolve_manually(
        "order:A-1:refund",
        &effect_conformance::harness::manual(effect_core::ManualAction::Reject),
    );
    c.ok(rejected, "rejecting A-1");
    expect_confirmed(
        &c,
        executor.execute(&contract, &refund("A-2", 500), provider.accepting()),
        "A-2 once the budget has room",
    );
    c.same(provider.count(), 1, "refunds the provider committed");
    check_use(&c, "refunds/tenant:acme", (1, 500), "use at the end");
    let done = c.record(id);
    c.ensure(
        !done
            .evidence
            .contains_key(effect_core::evidence::BUDGET_DEFERRAL),
        "the dispatch drops the deferral",
    );
}

/// A deferral past its bound rejects the operation at its next claim
/// (`budget_deferral_expired`), with nothing dispatched, however many
/// claims were refused before: the trail holds one event per change.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn budget_deferral_expires_to_rejected(factory: LedgerFactory<'_>) {
    let c = Check::new("budget_deferral_expires_to_rejected", factory);
    // Long enough that the first call returns before it has passed on a
    // loaded machine, short enough that the check waits little; the ledger's
    // own clock (a database server's, for PostgreSQL) decides.
    let bound = Duration::from_millis(300);
    let contract = refund_contract(&c, |b| {
        b.budget(cents_per_tenant(100).defer(BudgetDeferral::For(bound)))
    });
    let executor = EffectExecutor::new(Arc::clone(&c.ledger));
    let provider = Provider::default();
    let id = "order:A-1:refund";
    expect_deferred(
        &c,
        executor.execute(&contract, &refund("A-1", 500), provider.accepting()),
        "A-1",
    );
    // The deferral began during that call: its bound has passed once the
    // clock has passed `bound` after the call returned.
    let passed = SystemClock.now() + bound;
    let mut calls = 1;
    let expired = loop {
        let started = SystemClock.now();
        match executor.execute(&contract, &refund("A-1", 500), provider.accepting()) {
            // Two more refused claims within the bound, each writing nothing.
            Err(err) if err.is_budget_deferred() && calls < 3 && started <= passed => {
                calls += 1;
                harness::tick();
            }
            // Then one past it, which must end the deferral.
            Err(err) if err.is_budget_deferred() && started <= passed => {
                calls += 1;
                harness::wait_past(passed);
            }
            other => break other,
        }
    };
    match expired {
        Err(err @ ExecError::BudgetDeferralExpired { .. }) => c.ensure(
            err.to_string().contains("nothing was sent or charged"),
            format_args!("the expiry says what happened: {err}"),
        ),
        other => c.fail(format_args!(
            "expected the deferral to expire after {calls} calls, got {other:?}"
        )),
    }
    let record = c.record(id);
    c.same(
        (record.status, record.attempts),
        (S::Rejected, 0),
        "A-1 after its deferral",
    );
    c.same(
        event_types(&c, id),
        vec![
            "prepared".to_owned(),
            "budget_deferred".to_owned(),
            "budget_deferral_expired".to_owned(),
        ],
        format_args!("A-1's events after {calls} refused calls"),
    );
    let before = c.snapshot(id);
    c.ensure(
        executor
            .execute(&contract, &refund("A-1", 500), provider.accepting())
            .is_err_and(|err| matches!(err, ExecError::BudgetDeferralExpired { .. })),
        "a later call is told the same",
    );
    c.unchanged(id, &before, "A-1 called after its expiry");
    c.same(provider.count(), 0, "refunds the provider committed");
    check_use(&c, "refunds/tenant:acme", (0, 0), "use at the end");
}
