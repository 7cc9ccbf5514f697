//! What the console shows an approver and lets an operator cancel, made by
//! the executor as agents make it: the approvals show the redacted copy of
//! the arguments (never the secret) and, for a compensation, the original's
//! confirmed output, as `agent-effect-ops show` does; `cancel` ends an
//! operation never dispatched and is refused, writing nothing, as the CLI
//! refuses it; the queue's counts are the numbers of `stats`. The fake
//! providers count every request: reading and cancelling send none.

use std::sync::Arc;
use std::time::Duration;

use effect_core::{
    Budget, BudgetDeferral, EffectContract, EffectLedger, EffectStatus, compensation,
};
use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use effect_testkit::provider::FakePaymentProvider;
use production_agent_systems::open::LedgerUrl;
use serde_json::{Value, json};

use super::WITH_ACTIONS;
use super::support::{APPROVER_TOKEN, OPERATOR_TOKEN, Site, enc, events};

/// The secret planted in every call's arguments.
const SECRET: &str = "tok_CONSOLE_PLANTED_51c9";
const REFUND: &str = "order:A-1:refund";
const CAPTURE: &str = "invoice:INV-11:capture";
const UNDO: &str = "invoice:INV-11:capture:compensation";

/// Refunds above 50.00 need an approval; the card token is redacted.
fn refund() -> EffectContract {
    EffectContract::builder("refund_order", |args| {
        Ok(format!(
            "order:{}:refund",
            args["order_id"].as_str().ok_or("missing order_id")?
        ))
    })
    .redact(["/card_token"])
    .requires_approval_when(|args| Ok(args["cents"].as_u64().ok_or("missing cents")? > 5_000))
    .build()
    .unwrap()
}

/// A capture whose compensation (a refund of what it captured) always
/// needs an approval.
fn capture() -> EffectContract {
    let undo = EffectContract::builder("refund_payment", compensation::operation_id)
        .requires_approval(true)
        .build()
        .unwrap();
    effect_test_support::contracts::capture_payment()
        .redact(["/card_token"])
        .compensation(undo, |original| {
            Ok(json!({"payment_id": original.output["payment_id"], "cents": original.output["cents"]}))
        })
        .build()
        .unwrap()
}

/// At most one capture a day; a second is deferred by the budget.
fn budgeted() -> EffectContract {
    effect_test_support::contracts::capture_payment()
        .budget(
            Budget::per_day("captures")
                .max_count(1)
                .defer(BudgetDeferral::For(Duration::from_secs(2 * 86_400))),
        )
        .store_intent(true)
        .build()
        .unwrap()
}

fn pays(
    provider: &Arc<FakePaymentProvider>,
    id_field: &'static str,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static + Clone {
    let provider = Arc::clone(provider);
    move |args: Value, ctx: HandlerContext| {
        let cents = args["cents"].as_u64().unwrap_or_default();
        let id = args[id_field].as_str().unwrap_or_default();
        let paid = provider.capture(id, cents, ctx.provider_key())?;
        Ok(json!({"payment_id": paid.payment_id, "cents": cents}))
    }
}

/// A refund of 80.00 and the compensation of a 99.00 capture awaiting
/// approval, a capture confirmed, and one deferred by its budget.
struct World {
    site: Site,
    ledger: Arc<dyn EffectLedger>,
    refunds: Arc<FakePaymentProvider>,
    captures: Arc<FakePaymentProvider>,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("effects.sqlite3");
        let ledger: Arc<dyn EffectLedger> =
            Arc::new(SqliteLedger::open(&path, SqliteOptions::default()).unwrap());
        let executor = EffectExecutor::new(Arc::clone(&ledger));
        let refunds = Arc::new(FakePaymentProvider::default());
        let captures = Arc::new(FakePaymentProvider::default());
        let waiting = executor
            .execute(
                &refund(),
                &json!({"order_id": "A-1", "cents": 8_000, "card_token": SECRET}),
                pays(&refunds, "order_id"),
            )
            .unwrap();
        assert_eq!(waiting.status, EffectStatus::AwaitingApproval);
        let captured = executor
            .execute(
                &capture(),
                &json!({"invoice_id": "INV-11", "cents": 9_900, "card_token": SECRET}),
                pays(&captures, "invoice_id"),
            )
            .unwrap();
        assert!(captured.is_confirmed(), "{captured:?}");
        let undo = executor
            .compensate(&capture(), CAPTURE, pays(&refunds, "payment_id"))
            .unwrap();
        assert_eq!(undo.status, EffectStatus::AwaitingApproval);
        let first = executor
            .execute(
                &budgeted(),
                &json!({"invoice_id": "B-1", "cents": 100}),
                pays(&captures, "invoice_id"),
            )
            .unwrap();
        assert!(first.is_confirmed());
        let deferred = executor
            .execute(
                &budgeted(),
                &json!({"invoice_id": "B-2", "cents": 100}),
                pays(&captures, "invoice_id"),
            )
            .unwrap_err();
        assert!(deferred.is_budget_deferred(), "{deferred}");
        // Sent: the 99.00 capture and the first budgeted one; no refund.
        assert_eq!(
            (
                captures.committed_count().unwrap(),
                refunds.committed_count().unwrap()
            ),
            (2, 0)
        );
        let site = Site::new(dir, LedgerUrl::Sqlite(path), WITH_ACTIONS);
        World {
            site,
            ledger,
            refunds,
            captures,
        }
    }

    fn sent(&self) -> (usize, usize) {
        (
            self.captures.committed_count().unwrap(),
            self.refunds.committed_count().unwrap(),
        )
    }
}

fn operation_path(id: &str) -> String {
    format!("/operations/{}", enc(id))
}

#[test]
fn approvals_show_the_redacted_arguments_and_a_compensations_original_output() {
    let world = World::new();
    let bearer = format!("Bearer {APPROVER_TOKEN}");
    let auth = [("authorization", bearer.as_str())];
    let page = world.site.get("/approvals", &auth);
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(page.body.matches("<tr data-operation=").count(), 2);
    assert!(!page.body.contains(SECRET), "{}", page.body);
    // The refund: its amount, the card token as the marker.
    assert!(page.body.contains("&quot;cents&quot;: 8000") || page.body.contains("\"cents\": 8000"));
    assert!(page.body.contains("[redacted]"), "{}", page.body);
    // The compensation: what it would undo, the original's confirmed output.
    assert!(page.body.contains("compensates-output"), "{}", page.body);
    assert!(page.body.contains("pay_000001"), "{}", page.body);
    for id in [REFUND, UNDO, CAPTURE] {
        let page = world.site.get(&operation_path(id), &auth);
        assert_eq!(page.status, 200, "{id}");
        assert!(!page.body.contains(SECRET), "{id}: {}", page.body);
    }
    let undo = world.site.get(&operation_path(UNDO), &auth);
    assert!(
        undo.body.contains("id=\"original-output\""),
        "{}",
        undo.body
    );
    assert!(undo.body.contains("pay_000001"));
    let refund = world.site.get(&operation_path(REFUND), &auth);
    assert!(refund.body.contains("[redacted]"), "{}", refund.body);
    // Reading sent nothing to either provider.
    assert_eq!(world.sent(), (2, 0));
}

#[test]
fn cancel_ends_what_was_never_dispatched_and_is_refused_as_the_cli_refuses() {
    let world = World::new();
    let operator = format!("Bearer {OPERATOR_TOKEN}");
    let approver = format!("Bearer {APPROVER_TOKEN}");
    let audit = [
        ("reason", "the customer withdrew the request"),
        ("evidence_reference", "TICKET-9"),
    ];
    // The form is offered on an operation awaiting approval, with its rules.
    let cookie = world.site.login(OPERATOR_TOKEN);
    let page = world
        .site
        .get(&operation_path(REFUND), &[("cookie", &cookie)]);
    assert!(page.body.contains("id=\"form-cancel\""), "{}", page.body);
    assert!(page.body.contains("Only while prepared"));
    let confirmed = world
        .site
        .get(&operation_path(CAPTURE), &[("cookie", &cookie)]);
    assert!(!confirmed.body.contains("id=\"form-cancel\""));

    // An approver may not cancel: refused before anything runs.
    let refused = world.site.post(
        &format!("{}/cancel", operation_path(REFUND)),
        &audit,
        &[("authorization", &approver)],
    );
    assert_eq!(refused.status, 403, "{refused:?}");
    assert!(refused.body.contains("may not cancel"), "{}", refused.body);
    assert_eq!(events(world.ledger.as_ref(), REFUND).len(), 1);

    // A confirmed capture: refused in the CLI's words (exit 4 is 409), nothing written.
    let before = events(world.ledger.as_ref(), CAPTURE).len();
    let settled = world.site.post(
        &format!("{}/cancel", operation_path(CAPTURE)),
        &audit,
        &[("authorization", &operator)],
    );
    assert_eq!(settled.status, 409, "{settled:?}");
    assert!(settled.body.starts_with("refused: "), "{}", settled.body);
    assert!(settled.body.contains("confirmed"), "{}", settled.body);
    assert_eq!(events(world.ledger.as_ref(), CAPTURE).len(), before);

    // The refund awaiting approval and the capture deferred by its budget:
    // cancelled, audited with the authenticated identity as the actor.
    for id in [REFUND, "invoice:B-2:capture"] {
        let done = world.site.post(
            &format!("{}/cancel", operation_path(id)),
            &audit,
            &[("authorization", &operator)],
        );
        assert_eq!(done.status, 200, "{id}: {done:?}");
        assert_eq!(
            done.body, "cancel: done; the operation is now rejected\n",
            "{id}"
        );
        let record = world.ledger.get(id).unwrap().unwrap();
        assert_eq!(record.status, EffectStatus::Rejected);
        let (kind, data) = events(world.ledger.as_ref(), id).pop().unwrap();
        assert_eq!(kind, "cancelled");
        assert_eq!(data["evidence"]["actor"], "alice@example.com");
        assert_eq!(data["evidence"]["evidence_reference"], "TICKET-9");
    }
    // A second cancel of the same operation is refused, writing nothing.
    let again = world.site.post(
        &format!("{}/cancel", operation_path(REFUND)),
        &audit,
        &[("authorization", &operator)],
    );
    assert_eq!(again.status, 409, "{again:?}");
    assert_eq!(events(world.ledger.as_ref(), REFUND).len(), 2);
    // Nothing was sent by any of it.
    assert_eq!(world.sent(), (2, 0));
}

#[test]
fn the_queue_counts_are_the_numbers_of_stats() {
    let world = World::new();
    let bearer = format!("Bearer {OPERATOR_TOKEN}");
    let auth = [("authorization", bearer.as_str())];
    let page = world.site.get("/", &auth);
    assert_eq!(page.status, 200);
    for (kind, count) in [
        ("awaiting_approval", 2),
        ("deferred_by_budget", 1),
        ("quarantined", 0),
        ("waiting_for_recovery_worker", 0),
    ] {
        assert!(
            page.body
                .contains(&format!("data-kind=\"{kind}\"><b>{count}</b>")),
            "{kind}: {}",
            page.body
        );
    }
    assert!(
        page.body
            .contains("data-operation=\"invoice:B-2:capture\" data-kind=\"deferred_by_budget\""),
        "{}",
        page.body
    );
    let metrics = world.site.get("/metrics", &auth);
    assert!(
        metrics
            .body
            .contains("effect_waiting_operations{waiting_for=\"budget\"} 1\n"),
        "{}",
        metrics.body
    );
    assert!(metrics.body.contains("effect_awaiting_approval 2\n"));
    assert_eq!(world.sent(), (2, 0));
}
