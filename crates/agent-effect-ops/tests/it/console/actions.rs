//! Actions: enabled only by configuration, authenticated, CSRF-protected,
//! recorded with the authenticated identity, refused as the CLI refuses.

use effect_core::{EffectLedger as _, EffectStatus};

use super::WITH_ACTIONS;
use super::support::{
    APPROVER_TOKEN, CAPTURE, OPERATOR_TOKEN, REFUND, Site, events, sqlite_ledger,
};

const CAPTURE_PATH: &str = "/operations/invoice%3AINV-1042%3Acapture";
const REFUND_PATH: &str = "/operations/refund%3AINV-1042";

fn confirm_form<'a>(csrf: &'a str, evidence: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("csrf", csrf),
        ("expect_attempts", "1"),
        (
            "output_json",
            r#"{"payment_id":"pay-000001","status":"captured"}"#,
        ),
        ("provider_operation_id", "pay-000001"),
        (
            "reason",
            "capture pay-000001 visible in the provider dashboard",
        ),
        ("evidence_reference", evidence),
    ]
}

#[test]
fn a_read_only_console_refuses_every_action_and_writes_nothing() {
    let (dir, db, ledger) = sqlite_ledger();
    let site = Site::new(dir, db, "");
    let reply = site.post(
        &format!("{CAPTURE_PATH}/confirm"),
        &confirm_form("", "INC-1"),
        &[],
    );
    assert_eq!(reply.status, 403, "{reply:?}");
    assert!(reply.body.contains("actions are disabled"));
    assert_eq!(events(ledger.as_ref(), CAPTURE).len(), 4);
}

#[test]
fn actions_need_authentication_and_listening_beyond_loopback_needs_it_too() {
    let (dir, db, ledger) = sqlite_ledger();
    let site = Site::new(dir, db, WITH_ACTIONS);
    // No credentials: pages redirect to the login, actions are refused.
    let page = site.get("/", &[]);
    assert_eq!(page.status, 303);
    assert_eq!(page.header("location"), "/login");
    let refused = site.post(
        &format!("{CAPTURE_PATH}/confirm"),
        &confirm_form("x", "INC-1"),
        &[],
    );
    assert_eq!(refused.status, 401);
    let wrong = site.post(
        &format!("{CAPTURE_PATH}/confirm"),
        &confirm_form("x", "INC-1"),
        &[("authorization", "Bearer not-a-token")],
    );
    assert_eq!(wrong.status, 401);
    assert_eq!(site.get("/metrics", &[]).status, 303);
    assert_eq!(events(ledger.as_ref(), CAPTURE).len(), 4);

    // Actions without any authentication configured: the console does not start.
    let (dir, db, _) = sqlite_ledger();
    let config = agent_effect_ops::ConsoleConfig::parse("[actions]\nenabled = true\n").unwrap();
    let err = agent_effect_ops::Console::new(
        &db,
        false,
        config,
        std::sync::Arc::new(effect_core::SystemClock),
    )
    .unwrap_err();
    assert!(
        format!("{err:#}").contains("no authentication is configured"),
        "{err:#}"
    );
    drop(dir);
    // Nor does one listening on every address without authentication.
    let (dir, db, _) = sqlite_ledger();
    let path = match &db {
        production_agent_systems::open::LedgerUrl::Sqlite(path) => path.clone(),
        _ => unreachable!(),
    };
    let output = crate::support::bin_on(&path, &["serve", "--listen", "0.0.0.0:0"]);
    let (code, stderr) = crate::support::failure(&output);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:0 without authentication"),
        "{stderr}"
    );
    drop(dir);
}

#[test]
fn a_signed_in_operator_confirms_with_csrf_and_is_recorded_as_the_actor() {
    let (dir, db, ledger) = sqlite_ledger();
    let site = Site::new(dir, db, WITH_ACTIONS);
    let cookie = site.login(OPERATOR_TOKEN);
    let page = site.get(CAPTURE_PATH, &[("cookie", &cookie)]);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("id=\"form-confirm\""));
    assert!(page.body.contains("name=\"handler_stopped\""));
    let csrf = site.csrf(&page.body);
    // Without the CSRF token (a cross-site form): refused, nothing written.
    let forged = site.post(
        &format!("{CAPTURE_PATH}/confirm"),
        &confirm_form("", "INC-1"),
        &[("cookie", &cookie)],
    );
    assert_eq!(forged.status, 403);
    assert!(forged.body.contains("CSRF"));
    assert_eq!(events(ledger.as_ref(), CAPTURE).len(), 4);
    // With it: confirmed, audited with the session's identity.
    let hostile = "<img src=x onerror=alert(1)>INC-2042";
    let done = site.post(
        &format!("{CAPTURE_PATH}/confirm"),
        &confirm_form(&csrf, hostile),
        &[("cookie", &cookie)],
    );
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(
        done.body
            .contains("confirm: done; the operation is now confirmed"),
        "{}",
        done.body
    );
    assert!(!done.body.contains("<img src=x"));
    assert!(
        done.body
            .contains("&lt;img src=x onerror=alert(1)&gt;INC-2042")
    );
    let record = ledger.get(CAPTURE).unwrap().unwrap();
    assert_eq!(record.status, EffectStatus::Confirmed);
    let history = events(ledger.as_ref(), CAPTURE);
    assert_eq!(history.len(), 5);
    let (kind, data) = &history[4];
    assert_eq!(kind, "manually_confirmed");
    assert_eq!(data["evidence"]["actor"], "alice@example.com");
    assert_eq!(data["evidence"]["evidence_reference"], hostile);
    // Again: refused as the CLI refuses (exit 4 → 409), nothing written.
    let again = site.post(
        &format!("{CAPTURE_PATH}/confirm"),
        &confirm_form(&csrf, "INC-3"),
        &[("cookie", &cookie)],
    );
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("refused:"), "{}", again.body);
    assert_eq!(events(ledger.as_ref(), CAPTURE).len(), 5);
}

#[test]
fn an_approver_approves_the_refund_it_read_and_may_do_nothing_else() {
    let (dir, db, ledger) = sqlite_ledger();
    let site = Site::new(dir, db, WITH_ACTIONS);
    let bearer = format!("Bearer {APPROVER_TOKEN}");
    let auth = [("authorization", bearer.as_str())];
    // The approver sees only approve and deny.
    let page = site.get(REFUND_PATH, &auth);
    assert!(page.body.contains("id=\"form-approve\""));
    assert!(page.body.contains("amount_cents"));
    let capture = site.get(CAPTURE_PATH, &auth);
    assert!(!capture.body.contains("id=\"form-confirm\""));
    let refused = site.post(
        &format!("{CAPTURE_PATH}/reject"),
        &[("reason", "r"), ("evidence_reference", "e")],
        &auth,
    );
    assert_eq!(refused.status, 403);
    assert!(
        refused
            .body
            .contains("bob@example.com (role approver) may not reject")
    );
    // An approval bound to another fingerprint than the operation's: refused.
    let stale = site.post(
        &format!("{REFUND_PATH}/approve"),
        &[
            ("reason", "matches T-9"),
            ("expires", "1h"),
            ("fingerprint", "blake3:00"),
        ],
        &auth,
    );
    assert_eq!(stale.status, 409, "{}", stale.body);
    let fingerprint = ledger.get(REFUND).unwrap().unwrap().request_fingerprint;
    let approved = site.post(
        &format!("{REFUND_PATH}/approve"),
        &[
            ("reason", "matches T-9"),
            ("expires", "1h"),
            ("fingerprint", &fingerprint),
        ],
        &auth,
    );
    assert_eq!(approved.status, 200, "{}", approved.body);
    let approval = ledger.get(REFUND).unwrap().unwrap();
    assert_eq!(approval.approval().unwrap()["actor"], "bob@example.com");
    let history = events(ledger.as_ref(), REFUND);
    assert_eq!(
        history
            .iter()
            .filter(|(kind, _)| kind == "approved")
            .count(),
        1
    );
    assert_eq!(events(ledger.as_ref(), CAPTURE).len(), 4);
}

#[test]
fn authorize_retry_asks_for_the_handler_stopped_assertion_as_the_cli_does() {
    let (dir, db, ledger) = sqlite_ledger();
    // A capture whose handler may still run.
    super::support::quarantined_with(ledger.as_ref(), "late:1", "capture_payment", true);
    assert!(
        ledger
            .get("late:1")
            .unwrap()
            .unwrap()
            .handler_may_still_be_running()
    );
    let site = Site::new(dir, db, WITH_ACTIONS);
    let bearer = format!("Bearer {OPERATOR_TOKEN}");
    let auth = [("authorization", bearer.as_str())];
    let form = [
        ("reason", "never reached the provider"),
        ("evidence_reference", "INC-9"),
    ];
    let refused = site.post("/operations/late%3A1/authorize-retry", &form, &auth);
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(
        refused.body.contains("may still be running"),
        "{}",
        refused.body
    );
    assert_eq!(events(ledger.as_ref(), "late:1").len(), 4);
    let mut ticked = form.to_vec();
    ticked.push(("handler_stopped", "on"));
    let done = site.post("/operations/late%3A1/authorize-retry", &ticked, &auth);
    assert_eq!(done.status, 200, "{}", done.body);
    let history = events(ledger.as_ref(), "late:1");
    let (kind, data) = history.last().unwrap();
    assert_eq!(kind, "manual_retry_authorized");
    assert_eq!(data["evidence"]["actor"], "alice@example.com");
}

#[test]
fn a_trusted_header_counts_only_from_the_proxy_address() {
    let (dir, db, ledger) = sqlite_ledger();
    let config = "[actions]\nenabled = true\n[auth.trusted_header]\nname = \"X-Forwarded-User\"\nproxy = \"127.0.0.9\"\n";
    let mut site = Site::new(dir, db, config);
    let user = [("x-forwarded-user", "carol@example.com")];
    // From elsewhere: the header is not believed.
    assert_eq!(site.get("/", &user).status, 401);
    site.peer = "127.0.0.9:40000".parse().unwrap();
    let page = site.get(CAPTURE_PATH, &user);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("carol@example.com"));
    let csrf = site.csrf(&page.body);
    let done = site.post(
        &format!("{CAPTURE_PATH}/reject"),
        &[
            ("csrf", &csrf),
            ("reason", "provider shows no capture"),
            ("evidence_reference", "INC-7"),
        ],
        &user,
    );
    assert_eq!(done.status, 200, "{}", done.body);
    let (kind, data) = events(ledger.as_ref(), CAPTURE).pop().unwrap();
    assert_eq!(kind, "manually_rejected");
    assert_eq!(data["evidence"]["actor"], "carol@example.com");
}
