//! `agent-effect certify` against a loopback `FakeHttpProvider` and the
//! example MCP server (`examples/certify_payment_server.rs`), honest and with
//! the planted bug (keys ignored under a contract that claims they are
//! guaranteed). Every cell's committed count is checked at the provider
//! itself, not only in the report.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use effect_test_support::snapshots;
use effect_testkit::certify::CertifyFault;
use effect_testkit::http_provider::{FakeHttpOptions, FakeHttpProvider};
use effect_testkit::provider::FakePaymentProvider;
use serde_json::Value;

use crate::{agent_effect, stderr, stdout};

/// The run id the tests pass (`--run-id`), so the invoices are known.
const RUN: &str = "t1";

/// The invoice of each fault under the default `--arguments`.
fn invoice(fault: CertifyFault) -> String {
    format!("INV-certify-{RUN}-{fault}")
}

/// Runs `agent-effect certify ARGS --format json`, checks the exit code,
/// returns the report.
fn certify(args: &[&str], expected_exit: i32) -> Value {
    let mut all = vec!["certify"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "json", "--run-id", RUN]);
    let output = agent_effect(&all);
    assert_eq!(
        output.status.code(),
        Some(expected_exit),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    serde_json::from_str(&stdout(&output)).unwrap()
}

/// Each cell's (fault, handler calls, committed effects, key guarantee, verdict).
fn cells(report: &Value) -> Vec<(String, u64, u64, String, String)> {
    report["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["fault"].as_str().unwrap().to_owned(),
                c["handler_calls"].as_u64().unwrap(),
                c["committed_effects"].as_u64().unwrap(),
                c["key_guarantee"].as_str().unwrap().to_owned(),
                c["verdict"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn row(
    fault: &str,
    handler: u64,
    effects: u64,
    key: &str,
    verdict: &str,
) -> (String, u64, u64, String, String) {
    (
        fault.to_owned(),
        handler,
        effects,
        key.to_owned(),
        verdict.to_owned(),
    )
}

/// The faults certify runs without `--conflicting-arguments`.
fn run_by_default() -> impl Iterator<Item = CertifyFault> {
    CertifyFault::ALL
        .into_iter()
        .filter(|fault| *fault != CertifyFault::ConflictingProvider)
}

/// The charges the fake HTTP provider holds for each fault's invoice.
fn http_counts(provider: &FakeHttpProvider) -> Vec<usize> {
    let charges = provider.charges();
    run_by_default()
        .map(|fault| {
            let invoice = invoice(fault);
            charges
                .iter()
                .filter(|c| c.request["invoice_id"] == invoice.as_str())
                .count()
        })
        .collect()
}

#[test]
fn the_quick_start_contract_over_http_is_certified() {
    let provider = FakeHttpProvider::start().unwrap();
    let url = provider.url("/v1/charges");
    let probe = provider.url("/v1/charges/by-key/{key}");
    let count = provider.url("/v1/charges?invoice_id={invoice_id}");
    // The quick start's contract: the key, a probe by key, no guarantee.
    let report = certify(
        &[
            "--url",
            &url,
            "--key",
            "capture:{invoice_id}",
            "--probe-url",
            &probe,
            "--probe-authoritative",
            "--count-url",
            &count,
        ],
        0,
    );
    assert_eq!(
        cells(&report),
        [
            row("none", 1, 1, "not-declared", "pass"),
            row("failure-before-send", 2, 1, "not-declared", "pass"),
            row("lost-ack", 1, 1, "not-declared", "pass"),
            row("timeout-after-commit", 1, 1, "not-declared", "pass"),
            row("late-commit", 1, 1, "not-declared", "pass"),
            row("crash-after-commit", 1, 1, "not-declared", "pass"),
        ]
    );
    assert_eq!(http_counts(&provider), [1; 6]);
    assert_eq!(provider.committed_count(), 6);
    assert_eq!(report["certified"], true);
    snapshots::settings().bind(|| insta::assert_json_snapshot!("certify_http_quick_start", report));
}

#[test]
fn a_guaranteed_key_the_http_provider_ignores_is_flagged() {
    let provider =
        FakeHttpProvider::start_with(FakeHttpOptions::default().honour_keys(false)).unwrap();
    let url = provider.url("/v1/charges");
    let count = provider.url("/v1/charges?invoice_id={invoice_id}");
    let report = certify(
        &[
            "--url",
            &url,
            "--key",
            "capture:{invoice_id}",
            "--key-guaranteed",
            "--count-url",
            &count,
        ],
        1,
    );
    assert_eq!(
        cells(&report),
        [
            row("none", 1, 1, "held", "pass"),
            row("failure-before-send", 2, 1, "held", "pass"),
            row("lost-ack", 2, 2, "broken", "fail"),
            row("timeout-after-commit", 2, 2, "broken", "fail"),
            row("late-commit", 2, 2, "broken", "fail"),
            row("crash-after-commit", 2, 2, "broken", "fail"),
        ]
    );
    assert_eq!(http_counts(&provider), [1, 1, 2, 2, 2, 2]);
    assert_eq!(provider.committed_count(), 10);
    // The table a person reads says the same, and the exit code is 1.
    let output = agent_effect(&[
        "certify",
        "--url",
        &url,
        "--key",
        "capture:{invoice_id}",
        "--key-guaranteed",
        "--count-url",
        &count,
        "--faults",
        "lost-ack",
        "--arguments",
        r#"{"invoice_id": "INV-table-{fault}", "amount_cents": 1250}"#,
    ]);
    assert_eq!(output.status.code(), Some(1));
    let table = stdout(&output);
    assert!(
        table.contains("BROKEN") && table.contains("NOT certified: 0 of 1 faults passed, 1 failed"),
        "{table}"
    );
    assert_eq!(provider.committed_count(), 12);
}

/// The example server, built by `cargo test` beside the test binaries (or
/// built here when a filtered run did not build examples).
fn server_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let debug = exe.parent().and_then(Path::parent).unwrap();
        let binary = debug.join("examples").join(format!(
            "certify_payment_server{}",
            std::env::consts::EXE_SUFFIX
        ));
        if !binary.exists() {
            let status = std::process::Command::new(env!("CARGO"))
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "agent-effect",
                    "--example",
                    "certify_payment_server",
                ])
                .status()
                .unwrap();
            assert!(status.success(), "building the example server failed");
        }
        binary
    })
}

/// The captures the example server's file holds for each fault's invoice.
fn mcp_counts(dir: &Path) -> Vec<usize> {
    let provider = FakePaymentProvider::open(dir.join("provider.jsonl")).unwrap();
    run_by_default()
        .map(|fault| provider.lookup_by_invoice(&invoice(fault)).unwrap().len())
        .collect()
}

#[test]
fn an_mcp_server_with_a_probe_tool_is_certified() {
    let dir = tempfile::tempdir().unwrap();
    let command = format!("{} {}", server_binary().display(), dir.path().display());
    let report = certify(
        &[
            "--mcp-command",
            &command,
            "--tool",
            "capture_payment",
            "--probe-tool",
            "get_capture",
            "--probe-authoritative",
            "--count-tool",
            "count_captures",
            "--key",
            "capture:{invoice_id}",
        ],
        0,
    );
    assert_eq!(
        cells(&report),
        [
            row("none", 1, 1, "not-declared", "pass"),
            row("failure-before-send", 2, 1, "not-declared", "pass"),
            row("lost-ack", 1, 1, "not-declared", "pass"),
            row("timeout-after-commit", 1, 1, "not-declared", "pass"),
            row("late-commit", 1, 1, "not-declared", "pass"),
            // The server was killed with the worker; a new one answered the probe.
            row("crash-after-commit", 1, 1, "not-declared", "pass"),
        ]
    );
    assert_eq!(mcp_counts(dir.path()), [1; 6]);
    // One server, then a new one after the crash killed it.
    assert_eq!(starts(dir.path()), 2);
    snapshots::settings().bind(|| insta::assert_json_snapshot!("certify_mcp", report));
}

#[test]
fn a_guaranteed_key_the_mcp_server_ignores_is_flagged() {
    let temp = tempfile::tempdir().unwrap();
    // A directory that does not exist yet, as /tmp/certify-broken in
    // docs/testkit.md on a fresh machine: the server creates it.
    let dir = temp.path().join("certify-broken");
    let command = format!(
        "{} {} --ignore-keys",
        server_binary().display(),
        dir.display()
    );
    let report = certify(
        &[
            "--mcp-command",
            &command,
            "--tool",
            "capture_payment",
            "--count-tool",
            "count_captures",
            "--key",
            "capture:{invoice_id}",
            "--key-guaranteed",
        ],
        1,
    );
    assert_eq!(
        cells(&report),
        [
            row("none", 1, 1, "held", "pass"),
            row("failure-before-send", 2, 1, "held", "pass"),
            row("lost-ack", 2, 2, "broken", "fail"),
            row("timeout-after-commit", 2, 2, "broken", "fail"),
            row("late-commit", 2, 2, "broken", "fail"),
            row("crash-after-commit", 2, 2, "broken", "fail"),
        ]
    );
    assert_eq!(mcp_counts(&dir), [1, 1, 2, 2, 2, 2]);
    assert_eq!(starts(&dir), 2);
}

/// How many server processes started in `dir`.
fn starts(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("starts.log"))
        .unwrap()
        .lines()
        .count()
}

#[test]
fn certify_refuses_what_it_cannot_run_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let command = format!("{} {}", server_binary().display(), dir.path().display());
    for (args, expected) in [
        (vec!["certify"], "--url"),
        (
            vec![
                "certify",
                "--url",
                "http://127.0.0.1:9/x",
                "--count-url",
                "http://127.0.0.1:9/{key}",
            ],
            "cannot use {key}",
        ),
        (
            vec![
                "certify",
                "--url",
                "http://127.0.0.1:9/x",
                "--operation-id",
                "op:{nope}",
            ],
            "no \"nope\"",
        ),
        (
            vec![
                "certify",
                "--url",
                "http://127.0.0.1:9/x",
                "--arguments",
                "[1]",
            ],
            "JSON object",
        ),
        (
            vec![
                "certify",
                "--url",
                "http://127.0.0.1:9/x",
                "--faults",
                "lost-answer",
            ],
            "the faults are none, failure-before-send",
        ),
        (
            vec!["certify", "--mcp-command", &command, "--tool", "refund"],
            "no tool \"refund\"",
        ),
        (
            vec![
                "certify",
                "--url",
                "http://127.0.0.1:9/x",
                "--faults",
                "conflicting-provider",
            ],
            "needs --conflicting-arguments",
        ),
        (
            vec![
                "certify",
                "--url",
                "http://127.0.0.1:9/x",
                "--conflicting-arguments",
                r#"{"invoice_id": "INV-other", "amount_cents": 999}"#,
            ],
            "keep the business identity of --arguments",
        ),
        (
            vec![
                "certify",
                "--url",
                "http://127.0.0.1:9/x",
                "--probe-match",
                "amount_cents",
            ],
            "--probe-match needs a probe",
        ),
        (
            vec![
                "certify",
                "--url",
                "http://127.0.0.1:9/x",
                "--probe-url",
                "http://127.0.0.1:9/{key}",
                "--probe-match",
                "currency",
            ],
            "--arguments has no \"currency\"",
        ),
    ] {
        let output = agent_effect(&args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        let err = stderr(&output);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    // Nothing was captured by the refused runs.
    assert_eq!(mcp_counts(dir.path()), [0; 6]);
}

/// `certify ARGS --format json` without a fixed run id.
fn certify_fresh(args: &[&str], expected_exit: i32) -> Value {
    let mut all = vec!["certify"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "json"]);
    let output = agent_effect(&all);
    assert_eq!(
        output.status.code(),
        Some(expected_exit),
        "{}",
        stderr(&output)
    );
    serde_json::from_str(&stdout(&output)).unwrap()
}

#[test]
fn a_rerun_against_the_same_sandbox_exercises_the_faults_again() {
    let provider = FakeHttpProvider::start().unwrap();
    let (url, probe, count) = (
        provider.url("/v1/charges"),
        provider.url("/v1/charges/by-key/{key}"),
        provider.url("/v1/charges?invoice_id={invoice_id}"),
    );
    let args = [
        "--url",
        &url,
        "--key",
        "capture:{invoice_id}",
        "--probe-url",
        &probe,
        "--probe-authoritative",
        "--count-url",
        &count,
    ];
    // Each run draws its own id: two runs, twelve operations, all certified.
    for run in 1..=2 {
        let report = certify_fresh(&args, 0);
        assert_eq!(report["certified"], true, "run {run}: {report}");
        assert_eq!(provider.committed_count(), 6 * run);
    }
    // The same run id twice: the provider already holds every operation, so
    // the second run dispatches nothing new and fails instead of passing.
    assert_eq!(certify(&args, 0)["certified"], true);
    assert_eq!(provider.committed_count(), 18);
    let again = certify(&args, 1);
    assert_eq!(again["failed"], true);
    for cell in again["cells"].as_array().unwrap() {
        assert_eq!(cell["verdict"], "fail", "{cell}");
        let findings = cell["findings"].to_string();
        assert!(findings.contains("already held 1 effect(s)"), "{findings}");
    }
    assert_eq!(http_counts(&provider), [1; 6]);
    assert_eq!(provider.committed_count(), 18);
}

#[test]
fn a_contract_with_secrets_and_stored_intent_needs_the_sealing_key() {
    let provider = FakeHttpProvider::start().unwrap();
    let (url, count) = (
        provider.url("/v1/charges"),
        provider.url("/v1/charges?invoice_id={invoice_id}"),
    );
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("sealing.key");
    std::fs::write(
        &key,
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n",
    )
    .unwrap();
    let key = key.to_str().unwrap();
    let args = [
        "certify",
        "--url",
        &url,
        "--key",
        "capture:{invoice_id}",
        "--key-guaranteed",
        "--count-url",
        &count,
        "--arguments",
        r#"{"invoice_id": "INV-sealed-{run}-{fault}", "amount_cents": 1250, "card": "tok_4242"}"#,
        "--store-intent",
        "--redact",
        "/card",
        "--faults",
        "none,crash-after-commit",
    ];
    // Without the key the run cannot start, and says why in words.
    let output = agent_effect(&args);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let message = stderr(&output);
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(message.contains("the executor failed"), "{message}");
    assert!(message.contains("seal"), "{message}");
    assert_eq!(provider.committed_count(), 0);
    // With it (and a fingerprint key), the contract is certified.
    let mut sealed: Vec<&str> = args.to_vec();
    sealed.extend_from_slice(&[
        "--sealing-key",
        key,
        "--fingerprint-key",
        key,
        "--format",
        "json",
    ]);
    let output = agent_effect(&sealed);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["certified"], true, "{report}");
    assert_eq!(provider.committed_count(), 2);
}

/// The conflicting-provider fault over HTTP: the probe looks the charge up
/// by the arguments' reference, and another client has charged the same
/// reference for 999 cents. `extra` is added to the command line.
fn beside_a_conflicting_charge(
    provider: &FakeHttpProvider,
    reference: &str,
    extra: &[&str],
    expected_exit: i32,
) -> Value {
    let url = provider.url("/v1/charges");
    let probe = provider.url("/v1/charges/by-reference/{reference}");
    let count = provider.url("/v1/charges?reference={reference}");
    let arguments = format!(r#"{{"reference": "{reference}", "amount_cents": 1250}}"#);
    let conflicting = format!(r#"{{"reference": "{reference}", "amount_cents": 999}}"#);
    let mut args = vec![
        "--url",
        &url,
        "--operation-id",
        "invoice:{reference}:capture",
        "--key",
        "capture:{reference}",
        "--probe-url",
        &probe,
        "--probe-authoritative",
        "--count-url",
        &count,
        "--arguments",
        &arguments,
        "--conflicting-arguments",
        &conflicting,
        "--faults",
        "conflicting-provider",
    ];
    args.extend_from_slice(extra);
    certify(&args, expected_exit)
}

/// The amounts of the charges the provider holds for `reference`.
fn charged(provider: &FakeHttpProvider, reference: &str) -> Vec<u64> {
    provider
        .charges()
        .iter()
        .filter(|c| c.request["reference"] == reference)
        .map(|c| c.request["amount_cents"].as_u64().unwrap())
        .collect()
}

#[test]
fn a_probe_that_matches_the_amount_is_certified_beside_a_conflicting_charge() {
    let provider = FakeHttpProvider::start().unwrap();
    let report = beside_a_conflicting_charge(
        &provider,
        "REF-matched",
        &["--probe-match", "amount_cents"],
        0,
    );
    let cell = &report["cells"][0];
    assert_eq!(
        cells(&report),
        [row("conflicting-provider", 1, 0, "not-declared", "pass")]
    );
    assert_eq!(
        (
            &cell["status"],
            &cell["probe_after"],
            &cell["conflicting_effects"]
        ),
        (
            &Value::from("quarantined"),
            &Value::from("conflict"),
            &Value::from(1)
        ),
        "{cell}"
    );
    // The other client's charge only: nothing was sent beside it.
    assert_eq!(charged(&provider, "REF-matched"), [999]);
    assert_eq!(provider.committed_count(), 1);
}

#[test]
fn a_probe_that_takes_the_conflicting_charge_for_its_own_is_flagged() {
    let provider = FakeHttpProvider::start().unwrap();
    let report = beside_a_conflicting_charge(&provider, "REF-naive", &[], 1);
    let cell = &report["cells"][0];
    assert_eq!(
        cells(&report),
        [row("conflicting-provider", 1, 0, "not-declared", "fail")]
    );
    assert_eq!(
        (&cell["status"], &cell["probe_after"]),
        (&Value::from("confirmed"), &Value::from("committed")),
        "{cell}"
    );
    let findings = cell["findings"].to_string();
    assert!(
        findings.contains("confirmed by an effect that contradicts"),
        "{findings}"
    );
    // Confirmed by the other client's 999-cent charge; ours was never sent.
    assert_eq!(charged(&provider, "REF-naive"), [999]);
    assert_eq!(provider.committed_count(), 1);
}
