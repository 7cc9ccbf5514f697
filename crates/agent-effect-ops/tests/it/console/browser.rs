//! The console in a real headless Chromium, driven over WebDriver
//! (chromedriver) as an operator would use it: sign in, find the quarantined
//! capture an `agent-effect` scenario made, read its timeline, confirm it
//! with evidence, approve a refund after reading its amount, and watch the
//! queue update when another process writes. Screenshots of each page go to
//! `<target>/tmp/console-screenshots/<store>/`.
//!
//! Needs `chromium` and `chromedriver` (Debian's chromium and
//! chromium-driver); without them the tests say they skipped, and fail when
//! `EFFECT_REQUIRE_BROWSER=1` (as in CI). The PostgreSQL run needs
//! `EFFECT_TEST_POSTGRES_URL`, as the other PostgreSQL tests.

use std::fmt::Display;
use std::future::Future;
use std::io::{BufRead as _, BufReader};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use effect_core::{EffectLedger, EffectLedgerExt as _, NewOperation, RequestFingerprint};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use super::WITH_ACTIONS;
use super::support::{CAPTURE, OPERATOR_TOKEN, REFUND, tokens_file};

/// How long a page may take to show what the test waits for: a bound on a
/// broken run, not a pause (every wait returns as soon as its condition holds).
const PATIENCE: Duration = Duration::from_secs(20);

/// How long one WebDriver command may take before the test fails naming
/// it: fantoccini's commands have no timeout of their own, so a browser or
/// driver that stops answering would otherwise hang the suite.
const STEP: Duration = Duration::from_secs(30);

/// A child process in its own process group, the whole group killed when
/// dropped: chromedriver's Chromium and its helpers go with it, even when
/// the test fails before closing the session.
struct Running(Child);

impl Running {
    fn spawn(command: &mut Command) -> Running {
        let child = command
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        Running(child)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `what`, failing the test with its name when it errs or takes longer than
/// [`STEP`].
async fn step<T, E: Display>(what: &str, command: impl Future<Output = Result<T, E>>) -> T {
    match tokio::time::timeout(STEP, command).await {
        Ok(Ok(value)) => value,
        Ok(Err(e)) => panic!("browser step {what:?} failed: {e}"),
        Err(_) => panic!("browser step {what:?} did not answer within {STEP:?}"),
    }
}

/// `work` on a thread, failing the test with `what` when it takes longer
/// than `bound`: a blocking read of a child process cannot hang the suite.
fn bounded<T: Send + 'static>(
    what: &str,
    bound: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(work());
    });
    match rx.recv_timeout(bound) {
        Ok(value) => value,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what} did not finish within {bound:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what} failed (see above)"),
    }
}

/// chromedriver on a free loopback port, or `None` after saying the test skipped.
#[allow(clippy::disallowed_methods)] // Instant::now: a bound on a broken run, in real time.
fn chromedriver() -> Option<(Running, String)> {
    let found = Command::new("chromedriver")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("EFFECT_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "EFFECT_REQUIRE_BROWSER=1 but chromedriver is not installed (Debian's chromium and chromium-driver)"
        );
        eprintln!(
            "skipped: the console's browser tests need chromium and chromedriver (Debian's chromium and chromium-driver)"
        );
        return None;
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let running = Running::spawn(
        Command::new("chromedriver")
            .args([
                format!("--port={port}"),
                "--allowed-ips=127.0.0.1".to_owned(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < PATIENCE,
            "chromedriver did not listen on {port}"
        );
        std::thread::yield_now();
    }
    Some((running, format!("http://127.0.0.1:{port}")))
}

/// A fresh headless Chromium session.
async fn browser(driver: &str, profile: &Path) -> Client {
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_owned(),
        json!({
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--window-size=1280,1000",
                format!("--user-data-dir={}", profile.display()),
            ]
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    step(
        "start a Chromium session",
        ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(driver),
    )
    .await
}

/// `agent-effect-ops --db DB serve` on a free port, as a child process:
/// the process and the console's base URL. Its diagnostics go to `log`, not
/// to the test's output: no pipe of the test harness outlives the test.
fn serve(db: &str, schema: Option<&str>, config: &Path, log: &Path) -> (Running, String) {
    let log = std::fs::File::create(log).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-effect-ops"));
    command
        .args(["--db", db, "serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(log);
    if let Some(schema) = schema {
        command.env("EFFECT_LEDGER_SCHEMA", schema);
    }
    let mut running = Running::spawn(&mut command);
    let stdout = running.0.stdout.take().expect("stdout is piped");
    let line = bounded("the console's first line", PATIENCE, move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .expect("cannot read the console's output");
    let base = line
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .trim_end_matches('/')
        .to_owned();
    (running, base)
}

/// `agent-effect-ops ARGS` on the ledger, as another process.
fn ops(db: &str, schema: Option<&str>, args: &[&str]) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-effect-ops"));
    command.args(["--db", db]).args(args);
    if let Some(schema) = schema {
        command.env("EFFECT_LEDGER_SCHEMA", schema);
    }
    let what = format!("agent-effect-ops {args:?}");
    let output: Output = bounded(&what, PATIENCE, move || command.output())
        .unwrap_or_else(|e| panic!("cannot run agent-effect-ops: {e}"));
    assert!(output.status.success(), "{args:?}: {output:?}");
}

/// The directory holding agent-effect-ops, where cargo builds agent-effect
/// too (built on demand when a run of this crate's tests alone has none).
fn agent_effect() -> PathBuf {
    let ops = PathBuf::from(env!("CARGO_BIN_EXE_agent-effect-ops"));
    let scenario = ops
        .parent()
        .unwrap()
        .join(format!("agent-effect{}", std::env::consts::EXE_SUFFIX));
    if !scenario.exists() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--package",
                "agent-effect",
                "--bin",
                "agent-effect",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(status.success(), "cannot build agent-effect: {status}");
    }
    scenario
}

/// The refund awaiting approval, its amount in its stored intent.
fn add_refund(ledger: &dyn EffectLedger) {
    let refund = json!({"invoice_id": "INV-1042", "amount_cents": 1250, "currency": "EUR"});
    ledger
        .prepare(
            REFUND,
            &NewOperation::new("refund_payment", "1", RequestFingerprint::of_value(&refund))
                .with_provider_idempotency_key(Some("refund-key-INV-1042".into()))
                .with_intent(Some(refund))
                .with_requires_approval(true),
        )
        .unwrap();
}

#[test]
fn an_operator_works_the_incident_in_chromium_on_sqlite() {
    let Some((_driver, driver_url)) = chromedriver() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The incident as the runbook makes it: a capture whose acknowledgement
    // was lost, quarantined (agent-effect exits 1: not confirmed).
    let db = dir.path().join("incident.sqlite3");
    let mut scenario = Command::new(agent_effect());
    scenario
        .args([
            "--scenario",
            "after-commit-before-ack",
            "--contract",
            "neither",
            "--db",
        ])
        .arg(&db)
        .stdout(Stdio::null());
    let status = bounded("the agent-effect scenario", PATIENCE, move || {
        scenario.status()
    })
    .unwrap();
    assert_eq!(status.code(), Some(1));
    let ledger = effect_ledger_sqlite::SqliteLedger::open(
        &db,
        effect_ledger_sqlite::SqliteOptions::default(),
    )
    .unwrap();
    add_refund(&ledger);
    let ledger: Arc<dyn EffectLedger> = Arc::new(ledger);
    walk(
        &driver_url,
        dir.path(),
        db.to_str().unwrap(),
        None,
        &ledger,
        "sqlite",
    );
}

#[test]
fn an_operator_works_the_incident_in_chromium_on_postgres() {
    let Some(url) =
        effect_test_support::servers::postgres_url("the console's browser test on PostgreSQL")
    else {
        return;
    };
    let Some((_driver, driver_url)) = chromedriver() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let schema = format!("console_browser_{}", std::process::id());
    let ledger = effect_ledger_postgres::PostgresLedger::connect(
        &url,
        effect_ledger_postgres::PostgresOptions::default().schema(schema.clone()),
    )
    .unwrap();
    super::support::quarantined(&ledger, CAPTURE, "capture_payment");
    add_refund(&ledger);
    let ledger: Arc<dyn EffectLedger> = Arc::new(ledger);
    walk(
        &driver_url,
        dir.path(),
        &url,
        Some(&schema),
        &ledger,
        "postgres",
    );
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .unwrap();
}

/// The operator's walk through the console on `db`.
fn walk(
    driver: &str,
    dir: &Path,
    db: &str,
    schema: Option<&str>,
    ledger: &Arc<dyn EffectLedger>,
    store: &str,
) {
    let config = dir.join("console.toml");
    std::fs::write(
        &config,
        WITH_ACTIONS.replace("{tokens}", tokens_file(dir).to_str().unwrap()),
    )
    .unwrap();
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("console-screenshots")
        .join(store);
    std::fs::create_dir_all(&shots).unwrap();
    let (_console, base) = serve(db, schema, &config, &shots.join("console.log"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = browser(driver, &dir.join("chromium-profile")).await;
        steps(&client, &base, db, schema, ledger, &shots).await;
        step("close the session", client.close()).await;
    });
}

async fn shot(client: &Client, dir: &Path, name: &str) {
    let png = step(&format!("screenshot {name}"), client.screenshot()).await;
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// The text of the element `css`, waited for. Read in one script: a live
/// refresh may replace the element between two WebDriver calls.
async fn text(client: &Client, css: &str) -> String {
    wait_until(
        client,
        &format!("document.querySelector({}) !== null", json!(css)),
    )
    .await;
    let text = step(
        &format!("read the text of {css}"),
        client.execute(
            "const e = document.querySelector(arguments[0]); return e === null ? null : e.innerText;",
            vec![json!(css)],
        ),
    )
    .await;
    match text {
        Value::String(text) => text,
        // Replaced in between: read the new one.
        _ => Box::pin(text_again(client, css)).await,
    }
}

async fn text_again(client: &Client, css: &str) -> String {
    text(client, css).await
}

async fn fill(client: &Client, form: &str, field: &str, value: &str) {
    let css = format!("{form} [name={field}]");
    let input = step(&format!("find {css}"), client.find(Locator::Css(&css))).await;
    step(&format!("type into {css}"), input.send_keys(value)).await;
}

async fn submit(client: &Client, form: &str) {
    click(client, &format!("{form} button[type=submit]")).await;
}

/// Clicks the element `css`, finding it again when a live refresh replaced
/// it in between.
async fn click(client: &Client, css: &str) {
    for _ in 0..5 {
        let element = match tokio::time::timeout(
            PATIENCE,
            client
                .wait()
                .at_most(PATIENCE)
                .for_element(Locator::Css(css)),
        )
        .await
        {
            Ok(Ok(element)) => element,
            Ok(Err(e)) => panic!("browser step \"find {css}\" failed: {e}"),
            Err(_) => panic!("browser step \"find {css}\" did not answer within {PATIENCE:?}"),
        };
        match tokio::time::timeout(STEP, element.click()).await {
            Ok(Ok(())) => return,
            Ok(Err(fantoccini::error::CmdError::Standard(e)))
                if e.error == fantoccini::error::ErrorStatus::StaleElementReference => {}
            Ok(Err(e)) => panic!("browser step \"click {css}\" failed: {e}"),
            Err(_) => panic!("browser step \"click {css}\" did not answer within {STEP:?}"),
        }
    }
    panic!("{css} kept being replaced");
}

async fn steps(
    client: &Client,
    base: &str,
    db: &str,
    schema: Option<&str>,
    ledger: &Arc<dyn EffectLedger>,
    shots: &Path,
) {
    // Unauthenticated: the queue sends the browser to sign in, and an
    // action posted from the page is refused.
    step("open the queue", client.goto(&format!("{base}/"))).await;
    let url = step("read the URL", client.current_url()).await;
    assert_eq!(url.path(), "/login");
    let refused = step(
        "post an action unauthenticated",
        client.execute_async(
            "const done = arguments[arguments.length - 1];
             fetch('/operations/' + encodeURIComponent(arguments[0]) + '/confirm', {method: 'POST',
               headers: {'content-type': 'application/x-www-form-urlencoded'},
               body: 'output_json=%7B%7D&reason=r&evidence_reference=e'})
               .then(r => done(r.status));",
            vec![json!(CAPTURE)],
        ),
    )
    .await;
    assert_eq!(refused, json!(401));
    assert_eq!(read(ledger, |l| l.events(CAPTURE)).await.len(), 4);
    shot(client, shots, "login").await;

    // Sign in; the queue shows the quarantined capture.
    fill(client, "form", "token", OPERATOR_TOKEN).await;
    submit(client, "form").await;
    let row = format!("tr[data-operation=\"{CAPTURE}\"][data-kind=quarantined]");
    assert!(text(client, &row).await.contains("quarantined"));
    assert!(text(client, "a.count[data-kind=quarantined] b").await == "1");
    // The live stream is connected before anything is written.
    wait_until(
        client,
        "document.body.getAttribute('data-live') === 'connected'",
    )
    .await;
    shot(client, shots, "queue").await;

    // Its timeline.
    click(client, &format!("{row} a")).await;
    assert_eq!(text(client, "#operation-id").await, CAPTURE);
    let events: Value = step(
        "read the timeline",
        client.execute(
            "return [...document.querySelectorAll('#timeline li')].map(li => li.dataset.event)",
            vec![],
        ),
    )
    .await;
    assert_eq!(
        events,
        json!(["prepared", "dispatched", "outcome_unknown", "quarantined"])
    );
    assert!(
        text(client, "#timeline li[data-event=outcome_unknown]")
            .await
            .contains("timed out")
    );
    shot(client, shots, "operation").await;

    // Confirm it with evidence; a hostile evidence string stays text.
    let hostile = "<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">INC-2042";
    fill(
        client,
        "#form-confirm",
        "output_json",
        r#"{"payment_id":"pay-000001","status":"captured"}"#,
    )
    .await;
    fill(
        client,
        "#form-confirm",
        "provider_operation_id",
        "pay-000001",
    )
    .await;
    fill(
        client,
        "#form-confirm",
        "reason",
        "capture pay-000001 visible in the provider dashboard",
    )
    .await;
    fill(client, "#form-confirm", "evidence_reference", hostile).await;
    submit(client, "#form-confirm").await;
    assert!(
        text(client, ".banner")
            .await
            .contains("confirm: done; the operation is now confirmed")
    );
    assert_eq!(text(client, "#status").await, "confirmed");
    assert_eq!(
        text(
            client,
            "#timeline li[data-event=manually_confirmed] [data-fact=evidence_reference]"
        )
        .await,
        hostile
    );
    assert_eq!(
        step(
            "count the scripts and images",
            client.execute("return [window.pwned === undefined, document.scripts.length, document.querySelectorAll('img').length]", vec![]),
        )
        .await,
        json!([true, 2, 0])
    );
    let confirmed = read(ledger, |l| l.events(CAPTURE)).await;
    assert_eq!(confirmed.len(), 5);
    assert_eq!(confirmed[4].data["evidence"]["actor"], "alice@example.com");
    assert_eq!(confirmed[4].data["evidence"]["evidence_reference"], hostile);
    shot(client, shots, "confirmed").await;

    // Approvals: read the refund's amount, then approve it.
    step(
        "open the approvals",
        client.goto(&format!("{base}/approvals")),
    )
    .await;
    let asked = text(client, &format!("tr[data-operation=\"{REFUND}\"]")).await;
    assert!(asked.contains("\"amount_cents\": 1250"), "{asked}");
    shot(client, shots, "approvals").await;
    click(client, &format!("tr[data-operation=\"{REFUND}\"] a")).await;
    assert!(
        text(client, "#arguments")
            .await
            .contains("\"amount_cents\": 1250")
    );
    fill(
        client,
        "#form-approve",
        "reason",
        "refund of 12.50 EUR matches ticket T-9",
    )
    .await;
    submit(client, "#form-approve").await;
    assert!(text(client, ".banner").await.contains("approve: done"));
    let approval: Value = read(ledger, |l| l.get(REFUND))
        .await
        .expect("the refund exists")
        .approval()
        .map(|a| Value::Object(a.clone()))
        .unwrap();
    assert_eq!(approval["actor"], "alice@example.com");
    shot(client, shots, "approved").await;

    // The budgets and the charts (each chart an SVG image, loaded).
    step("open the budgets", client.goto(&format!("{base}/budgets"))).await;
    text(client, "#budgets").await;
    shot(client, shots, "budgets").await;
    step("open the charts", client.goto(&format!("{base}/charts"))).await;
    wait_until(
        client,
        "document.images.length === 3 && [...document.images].every(i => i.complete && i.naturalWidth > 0)",
    )
    .await;
    shot(client, shots, "charts").await;

    // The queue updates live when another process writes: a deny by the
    // CLI takes the refund out of the queue, with no reload of the page.
    step("open the queue again", client.goto(&format!("{base}/"))).await;
    let refund_row = format!("tr[data-operation=\"{REFUND}\"]");
    text(client, &refund_row).await;
    wait_until(
        client,
        "document.body.getAttribute('data-live') === 'connected'",
    )
    .await;
    step(
        "mark the document",
        client.execute("window.sameDocument = true", vec![]),
    )
    .await;
    ops(
        db,
        schema,
        &[
            "deny",
            REFUND,
            "--actor",
            "lead@example.com",
            "--reason",
            "customer withdrew the request",
        ],
    );
    wait_until(
        client,
        &format!("document.querySelector({}) === null", json!(refund_row)),
    )
    .await;
    assert_eq!(
        step(
            "check the document is the same",
            client.execute("return window.sameDocument === true", vec![]),
        )
        .await,
        json!(true),
        "the page was refreshed in place, not reloaded"
    );
    shot(client, shots, "queue-after").await;
}

/// `read` on the test's own ledger handle, on a blocking thread: the
/// PostgreSQL client blocks on a runtime of its own, which cannot start
/// inside this test's runtime (it panicked there, and the panic while
/// unwinding aborted the test binary with the console still running).
async fn read<T: Send + 'static>(
    ledger: &Arc<dyn EffectLedger>,
    read: impl FnOnce(&dyn EffectLedger) -> Result<T, effect_core::LedgerError> + Send + 'static,
) -> T {
    let ledger = Arc::clone(ledger);
    step(
        "read the ledger",
        tokio::task::spawn_blocking(move || read(ledger.as_ref())),
    )
    .await
    .unwrap_or_else(|e| panic!("cannot read the ledger: {e}"))
}

/// Waits until the script expression holds in the page.
#[allow(clippy::disallowed_methods)] // Instant::now: a bound on a broken run, in real time.
async fn wait_until(client: &Client, condition: &str) {
    let started = Instant::now();
    loop {
        let held = step(
            &format!("check {condition}"),
            client.execute(&format!("return !!({condition})"), vec![]),
        )
        .await;
        if held == json!(true) {
            return;
        }
        assert!(started.elapsed() < PATIENCE, "never held: {condition}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
