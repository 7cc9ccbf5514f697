//! What is approved is visible, and approval can depend on the call
//! (docs/approval.md): `show` and `list --waiting-approval` print the
//! arguments recorded for the approver with secrets redacted, and for a
//! compensation the confirmed output it undoes; a contract requires approval
//! by a rule over the arguments ("refunds above 50.00"), on compensations
//! too; a planted secret appears neither in the output nor in the ledger's
//! files. Through the real binary, counting what the fake provider received.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use effect_core::{EffectContract, EffectLedger, EffectStatus, compensation};
use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use effect_testkit::provider::FakePaymentProvider;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::support::{bin_on, failure, success};

/// The secret planted in every call's arguments.
const SECRET: &str = "tok_PLANTED_9f3c77e1d2";
const CAPTURE: &str = "invoice:INV-11:capture";
const UNDO: &str = "invoice:INV-11:capture:compensation";
const DECISION: [&str; 4] = [
    "--actor",
    "lead@example.com",
    "--reason",
    "matches ticket T-9",
];

/// "Approve refunds above 50.00": the rule over the arguments.
fn above_50(args: &Value) -> Result<bool, effect_core::CallbackError> {
    Ok(args["cents"].as_u64().ok_or("missing cents")? > 5_000)
}

/// A refund of an order, paid back to a card whose token is secret.
fn refund() -> EffectContract {
    EffectContract::builder("refund_order", |args| {
        Ok(format!(
            "order:{}:refund",
            args["order_id"].as_str().ok_or("missing order_id")?
        ))
    })
    .provider_idempotency_key(|args| Ok(args["order_id"].as_str().map(|id| format!("refund-{id}"))))
    .redact(["/card_token"])
    .requires_approval_when(above_50)
    .build()
    .unwrap()
}

/// A capture whose compensation (a refund of what it captured) needs
/// approval above 50.00.
fn capture() -> EffectContract {
    let undo = EffectContract::builder("refund_payment", compensation::operation_id)
        .provider_idempotency_key(|args| {
            Ok(args[compensation::ARGUMENT]
                .as_str()
                .map(|original| format!("refund:{original}")))
        })
        .requires_approval_when(above_50)
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

fn executor(db: &Path) -> EffectExecutor {
    let ledger: Arc<dyn EffectLedger> =
        Arc::new(SqliteLedger::open(db, SqliteOptions::default()).unwrap());
    EffectExecutor::new(ledger)
}

/// The provider: every request it received, with the card token it got.
#[derive(Default)]
struct Provider {
    payments: FakePaymentProvider,
    tokens: Mutex<Vec<String>>,
}

impl Provider {
    fn handler(
        self: &Arc<Self>,
        id_field: &'static str,
    ) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static {
        let provider = Arc::clone(self);
        move |args: Value, ctx: HandlerContext| {
            if let Some(token) = args["card_token"].as_str() {
                provider.tokens.lock().unwrap().push(token.to_owned());
            }
            let cents = args["cents"].as_u64().unwrap_or_default();
            let id = args[id_field].as_str().unwrap_or_default();
            let paid = provider.payments.capture(id, cents, ctx.provider_key())?;
            Ok(json!({"payment_id": paid.payment_id, "cents": cents}))
        }
    }

    fn requests(&self) -> usize {
        self.payments.committed_count().unwrap()
    }
}

fn json_of(db: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&success(&bin_on(db, args))).unwrap()
}

/// Every byte of the ledger's files (the database, its WAL and shared memory).
fn ledger_bytes(dir: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        bytes.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    assert!(bytes.len() > 4096, "no ledger file read");
    bytes
}

fn holds_secret(bytes: &[u8]) -> bool {
    bytes
        .windows(SECRET.len())
        .any(|window| window == SECRET.as_bytes())
}

fn event_types(db: &Path, id: &str) -> Vec<String> {
    let events = json_of(db, &["events", id]);
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["event_type"].as_str().unwrap().to_owned())
        .collect()
}

/// A ledger where a refund of 80.00 and the compensation of a 99.00
/// capture wait for approval, and a refund of 42.00 went out at once.
fn world() -> (TempDir, PathBuf, Arc<Provider>, Arc<Provider>) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let executor = executor(&db);
    let (refunds, captures) = (Arc::new(Provider::default()), Arc::new(Provider::default()));
    let big = json!({"order_id": "A-1", "cents": 8_000, "card_token": SECRET});
    let small = json!({"order_id": "A-2", "cents": 4_200, "card_token": SECRET});
    let waiting = executor
        .execute(&refund(), &big, refunds.handler("order_id"))
        .unwrap();
    assert_eq!(waiting.status, EffectStatus::AwaitingApproval);
    let sent = executor
        .execute(&refund(), &small, refunds.handler("order_id"))
        .unwrap();
    assert!(sent.is_confirmed(), "{sent:?}");
    // One refund was sent: the small one; the big one waits.
    assert_eq!(refunds.requests(), 1);
    let captured = executor
        .execute(
            &capture(),
            &json!({"invoice_id": "INV-11", "cents": 9_900, "card_token": SECRET}),
            captures.handler("invoice_id"),
        )
        .unwrap();
    assert!(captured.is_confirmed(), "{captured:?}");
    let undo = executor
        .compensate(&capture(), CAPTURE, refunds.handler("payment_id"))
        .unwrap();
    assert_eq!(undo.status, EffectStatus::AwaitingApproval);
    assert_eq!((captures.requests(), refunds.requests()), (1, 1));
    (dir, db, refunds, captures)
}

#[test]
fn the_approver_sees_the_request_without_its_secrets() {
    let (dir, db, refunds, _captures) = world();

    let waiting = json_of(&db, &["list", "--waiting-approval"]);
    let waiting = waiting.as_array().unwrap();
    assert_eq!(waiting.len(), 2, "{waiting:?}");
    let by_id = |id: &str| {
        waiting
            .iter()
            .find(|op| op["operation_id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(
        by_id("order:A-1:refund")["arguments"],
        json!({"order_id": "A-1", "cents": 8_000, "card_token": "[redacted]"})
    );
    let undo = by_id(UNDO);
    assert_eq!(undo["arguments"]["cents"], 9_900);
    assert_eq!(undo["arguments"]["compensates"], CAPTURE);
    assert_eq!(
        undo["compensates_output"],
        json!({"payment_id": "pay_000001", "cents": 9_900})
    );

    let shown = json_of(&db, &["show", "order:A-1:refund"]);
    assert_eq!(shown["arguments"]["cents"], 8_000);
    assert_eq!(shown["arguments"]["card_token"], "[redacted]");
    assert_eq!(
        shown["events"][0]["data"]["redacted_arguments"],
        "recorded (see arguments)"
    );
    let table = success(&bin_on(&db, &["--format", "table", "show", UNDO]));
    assert!(
        table.contains("arguments (as recorded for approval"),
        "{table}"
    );
    assert!(table.contains("\"payment_id\": \"pay_000001\""), "{table}");
    let listed = success(&bin_on(
        &db,
        &["--format", "table", "list", "--waiting-approval"],
    ));
    assert!(listed.contains("ARGUMENTS"), "{listed}");

    // The secret is in no output and nowhere in the ledger's files.
    for args in [
        &["list", "--waiting-approval"][..],
        &["show", "order:A-1:refund"],
        &["show", "order:A-2:refund"],
        &["show", UNDO],
        &["events", "order:A-1:refund"],
        &["export"],
    ] {
        let out = success(&bin_on(&db, args));
        assert!(!holds_secret(out.as_bytes()), "{args:?}: {out}");
    }
    assert!(!holds_secret(&ledger_bytes(dir.path())));
    // The call that needed no approval recorded no copy of its arguments.
    let sent = json_of(&db, &["show", "order:A-2:refund"]);
    assert!(sent.get("arguments").is_none(), "{sent}");
    assert_eq!(refunds.requests(), 1);
}

#[test]
fn an_approval_of_what_was_shown_dispatches_it_once() {
    let (_dir, db, refunds, _captures) = world();
    let shown = json_of(&db, &["show", "order:A-1:refund"]);
    let fingerprint = shown["request_fingerprint"].as_str().unwrap();
    let approve = ["approve", "order:A-1:refund", "--fingerprint", fingerprint];
    let approve: Vec<&str> = approve.into_iter().chain(DECISION).collect();
    success(&bin_on(&db, &approve));
    let big = json!({"order_id": "A-1", "cents": 8_000, "card_token": SECRET});
    let done = executor(&db)
        .execute(&refund(), &big, refunds.handler("order_id"))
        .unwrap();
    assert!(done.is_confirmed(), "{done:?}");
    // The handler got the secret in clear; the provider received two refunds.
    assert_eq!(refunds.tokens.lock().unwrap().as_slice(), [SECRET, SECRET]);
    assert_eq!(refunds.requests(), 2);
    assert_eq!(
        event_types(&db, "order:A-1:refund"),
        ["prepared", "approved", "dispatched", "confirmed"]
    );
}

#[test]
fn the_decision_is_recorded_with_the_operation_and_does_not_change() {
    let (_dir, db, refunds, _captures) = world();
    // The same call under a contract whose rule now lets it through still
    // waits: the decision was recorded when the operation was created.
    let lenient = EffectContract::builder("refund_order", |args| {
        Ok(format!(
            "order:{}:refund",
            args["order_id"].as_str().ok_or("missing order_id")?
        ))
    })
    .provider_idempotency_key(|args| Ok(args["order_id"].as_str().map(|id| format!("refund-{id}"))))
    .redact(["/card_token"])
    .requires_approval_when(|_| Ok(false))
    .build()
    .unwrap();
    let big = json!({"order_id": "A-1", "cents": 8_000, "card_token": SECRET});
    let still = executor(&db)
        .execute(&lenient, &big, refunds.handler("order_id"))
        .unwrap();
    assert_eq!(still.status, EffectStatus::AwaitingApproval);
    assert_eq!(refunds.requests(), 1);
    assert_eq!(event_types(&db, "order:A-1:refund"), ["prepared"]);
    let shown = json_of(&db, &["show", "order:A-1:refund"]);
    assert_eq!(shown["events"][0]["data"]["approval_required"], true);
    // A rule that fails refuses the call and writes nothing.
    let missing = json!({"order_id": "A-9", "card_token": SECRET});
    let refused = executor(&db).execute(&refund(), &missing, refunds.handler("order_id"));
    assert!(refused.is_err(), "{refused:?}");
    let (code, _) = failure(&bin_on(&db, &["show", "order:A-9:refund"]));
    assert_eq!(code, 3);
    assert_eq!(refunds.requests(), 1);
}

#[test]
fn compensate_after_a_denied_compensation_is_refused_with_what_to_do() {
    let (_dir, db, refunds, captures) = world();
    let deny: Vec<&str> = ["deny", UNDO].into_iter().chain(DECISION).collect();
    success(&bin_on(&db, &deny));
    assert_eq!(json_of(&db, &["show", UNDO])["status"], "rejected");
    let before = json_of(&db, &["events", CAPTURE]);
    let request = [
        "compensate",
        CAPTURE,
        "--actor",
        "ops@example.com",
        "--reason",
        "customer cancelled",
        "--evidence-reference",
        "T-8",
    ];
    let (code, message) = failure(&bin_on(&db, &request));
    assert_eq!(code, 4, "{message}");
    assert!(message.contains("was rejected"), "{message}");
    assert!(message.contains("matches ticket T-9"), "{message}");
    assert!(
        message.contains("undo it at the provider directly"),
        "{message}"
    );
    assert!(
        message.contains(&format!("agent-effect-ops show {UNDO}")),
        "{message}"
    );
    // Nothing was written, and nothing was sent.
    assert_eq!(json_of(&db, &["events", CAPTURE]), before);
    assert_eq!((captures.requests(), refunds.requests()), (1, 1));
}
