//! The payment of issue "finish what the caller never comes back for": a
//! typed capture with stored intent and a `Secret` card token. The agent
//! dies after its claim (before sending, and after the provider committed);
//! a recovery worker in another process finishes each capture exactly once,
//! and no byte of the ledger's files holds the card token in clear.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use production_agent_systems::recovery::RecoveryWorker;
use production_agent_systems::secrets::{Keyring, SealingKey, Secret};
use production_agent_systems::typed::{TypedContract, TypedProbe};
use production_agent_systems::{
    EffectExecutor, EffectLedger, EffectStatus, ExecutorOptions, HandlerContext, HandlerError,
    SqliteLedger, SqliteOptions,
};
use serde::{Deserialize, Serialize};

use crate::provider::FileProvider;

const CHILD_ENV: &str = "PAS_PAYMENT_CHILD_DIR";
const INVOICE_ENV: &str = "PAS_PAYMENT_INVOICE";
/// Set when the agent dies only after the provider committed.
const AFTER_COMMIT_ENV: &str = "PAS_PAYMENT_AFTER_COMMIT";
const LEASE: Duration = Duration::from_millis(400);
const CARD: &str = "tok_visa_4242424242424242";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CapturePayment {
    invoice_id: String,
    amount_cents: u64,
    card_token: Secret<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Payment {
    payment_id: String,
}

fn keyring() -> Keyring {
    Keyring::new("k1", SealingKey::from_bytes([7; 32])).unwrap()
}

fn contract(provider: &FileProvider) -> TypedContract<CapturePayment, Payment> {
    let provider = provider.clone();
    TypedContract::<CapturePayment, Payment>::builder("capture_payment", |args| {
        Ok(format!("invoice:{}:capture", args.invoice_id))
    })
    .provider_idempotency_key(|args| Ok(Some(format!("capture:{}", args.invoice_id))))
    // The provider documents its keys (as Stripe does): a repeat with the
    // same key returns the first capture. A dispatch whose agent died may
    // still be in flight, so only the key makes its retry safe.
    .provider_idempotency_guaranteed(true)
    .outcome_probe(move |_args, key| {
        let key = key.ok_or("missing key")?;
        Ok(if provider.commits().iter().any(|k| k == key) {
            TypedProbe::committed(Payment {
                payment_id: format!("pay-{key}"),
            })
        } else {
            TypedProbe::not_committed()
        })
    })
    .store_intent(true)
    .build()
    .unwrap()
}

fn capture(invoice: &str) -> CapturePayment {
    CapturePayment {
        invoice_id: invoice.to_owned(),
        amount_cents: 1250,
        card_token: Secret::new(CARD.to_owned()),
    }
}

fn paths(dir: &Path) -> (PathBuf, FileProvider) {
    (
        dir.join("effects.sqlite3"),
        FileProvider::new(&dir.join("provider.log")),
    )
}

fn executor(db: &Path) -> EffectExecutor {
    let ledger = SqliteLedger::open(db, SqliteOptions::default().busy_timeout(LEASE / 3)).unwrap();
    EffectExecutor::with_options(
        Arc::new(ledger),
        ExecutorOptions::default().dispatch_lease(LEASE),
    )
    .with_keyring(keyring())
}

/// The agent, run in a child process by the test below: it claims the
/// capture and dies by abort, before sending or right after the provider
/// committed. Run directly (without the environment variable) it has
/// nothing to do.
#[test]
fn payment_agent_role() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let invoice = std::env::var(INVOICE_ENV).unwrap();
    let after_commit = std::env::var_os(AFTER_COMMIT_ENV).is_some();
    let (db, provider) = paths(Path::new(&dir));
    let executor = executor(&db);
    let contract = contract(&provider);
    let _ = executor.execute_typed(
        &contract,
        &capture(&invoice),
        move |args: CapturePayment, ctx: HandlerContext| -> Result<Payment, HandlerError> {
            assert_eq!(
                args.card_token.expose(),
                CARD,
                "the agent sees the real token"
            );
            if after_commit {
                provider.capture_once(ctx.provider_key().unwrap_or_default());
            }
            std::process::abort()
        },
    );
    unreachable!("the agent aborts inside the handler");
}

fn run_agent(dir: &Path, invoice: &str, after_commit: bool) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "payment_recovery::payment_agent_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .env(INVOICE_ENV, invoice);
    if after_commit {
        command.env(AFTER_COMMIT_ENV, "1");
    }
    let status = command.status().unwrap();
    assert!(!status.success(), "the agent must die by abort");
}

#[test]
#[allow(clippy::disallowed_methods)] // Leases run out on the real clock; this bounds the wait.
fn a_recovery_worker_captures_once_and_the_ledger_holds_no_card_token() {
    let dir = tempfile::tempdir().unwrap();
    let (db, provider) = paths(dir.path());
    // INV-1: the agent dies after its claim, before sending.
    // INV-2: the agent dies after the provider committed.
    run_agent(dir.path(), "INV-1", false);
    run_agent(dir.path(), "INV-2", true);
    assert_eq!(provider.commits(), ["capture:INV-2"]);

    let executor = executor(&db);
    let dispatched = Arc::new(AtomicUsize::new(0));
    let worker = {
        let (provider, dispatched) = (provider.clone(), Arc::clone(&dispatched));
        RecoveryWorker::new(executor.clone())
            .register_typed(
                &contract(&provider),
                move |args: CapturePayment, ctx: HandlerContext| {
                    dispatched.fetch_add(1, Ordering::SeqCst);
                    // The worker dispatches with the real token, opened from
                    // the sealed intent.
                    if args.card_token.expose() != CARD {
                        return Err(HandlerError::rejected("wrong card token"));
                    }
                    let key = ctx.provider_key().unwrap_or_default().to_owned();
                    provider.capture_once(&key);
                    Ok(Payment {
                        payment_id: format!("pay-{key}"),
                    })
                },
            )
            .unwrap()
            .min_age(Duration::ZERO)
    };
    // Both dispatches are `dispatched` until their leases run out on the
    // ledger's clock; pass until both are confirmed.
    let ledger = executor.ledger();
    let ids = ["invoice:INV-1:capture", "invoice:INV-2:capture"];
    let give_up = Instant::now() + Duration::from_secs(30);
    let mut passes = 0;
    while !ids
        .iter()
        .all(|id| ledger.get(id).unwrap().map(|r| r.status) == Some(EffectStatus::Confirmed))
    {
        assert!(
            Instant::now() < give_up,
            "not recovered after {passes} passes: {:?}",
            ids.map(|id| ledger.get(id).unwrap())
        );
        let report = worker.run_once().unwrap();
        let unusable = report.failed + report.unusable_intent + report.unregistered;
        assert_eq!(unusable, 0, "{report:?}");
        passes += 1;
        std::thread::sleep(LEASE / 4);
    }
    // A pass after recovery finds nothing left to do.
    let last = worker.run_once().unwrap();
    assert_eq!(last.examined, 0);

    // INV-1 dispatched once by the worker; INV-2 found committed by the
    // probe, never dispatched again: one capture each at the provider.
    assert_eq!(dispatched.load(Ordering::SeqCst), 1);
    let mut commits = provider.commits();
    commits.sort();
    assert_eq!(commits, ["capture:INV-1", "capture:INV-2"]);

    // The stored intent is sealed, and nothing the ledger wrote holds the
    // token in clear: the file, its WAL and its shared memory, byte by byte.
    let events = ledger.events(ids[0]).unwrap();
    let intent = production_agent_systems::effect_core::intent::stored(&events).unwrap();
    assert!(production_agent_systems::exec::secrets::sealed_info(intent).is_some());
    drop(worker);
    drop(executor);
    let mut checked = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("effects.sqlite3")
        {
            let bytes = std::fs::read(&path).unwrap();
            checked += 1;
            assert!(
                !bytes.windows(CARD.len()).any(|w| w == CARD.as_bytes()),
                "{} holds the card token in clear",
                path.display()
            );
            assert!(
                !bytes.windows(16).any(|w| w == b"4242424242424242"),
                "{} holds the card number in clear",
                path.display()
            );
        }
    }
    assert!(checked >= 1, "the ledger file was checked");
}

#[test]
fn stored_intent_with_a_secret_and_no_keyring_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let (db, provider) = paths(dir.path());
    let ledger = SqliteLedger::open(&db, SqliteOptions::default()).unwrap();
    let executor = EffectExecutor::new(Arc::new(ledger));
    let err = executor
        .execute_typed(
            &contract(&provider),
            &capture("INV-3"),
            |_args, _ctx| -> Result<Payment, HandlerError> { panic!("must not dispatch") },
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            production_agent_systems::ExecError::SecretsNeedSealing { .. }
        ),
        "{err:?}"
    );
    assert!(
        executor
            .ledger()
            .get("invoice:INV-3:capture")
            .unwrap()
            .is_none()
    );
    assert!(provider.commits().is_empty());
}
