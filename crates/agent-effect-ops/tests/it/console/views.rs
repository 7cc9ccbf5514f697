//! What the views show, and that ledger values render as text.

use effect_core::EffectLedgerExt as _;
use serde_json::json;

use super::support::{CAPTURE, REFUND, Site, quarantined, sqlite_ledger};

#[test]
fn the_queue_lists_what_needs_a_person_with_counts_and_filters() {
    let (dir, db, _ledger) = sqlite_ledger();
    let site = Site::new(dir, db, "");
    let page = site.get("/", &[]);
    assert_eq!(page.status, 200);
    // Strict CSP on every page: only the console's own files.
    assert!(
        page.header("content-security-policy")
            .starts_with("default-src 'none'; script-src 'self'")
    );
    assert!(
        page.body
            .contains(r#"data-operation="invoice:INV-1042:capture" data-kind="quarantined""#),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains(r#"data-operation="refund:INV-1042" data-kind="awaiting_approval""#)
    );
    assert!(page.body.contains(r#"data-kind="quarantined"><b>1</b>"#));
    assert!(
        page.body
            .contains(r#"data-kind="awaiting_approval"><b>1</b>"#)
    );
    assert_eq!(page.body.matches("<tr data-operation=").count(), 2);
    // Filters: by kind and by contract.
    let only = site.get("/?kind=awaiting_approval", &[]);
    assert_eq!(only.body.matches("<tr data-operation=").count(), 1);
    assert!(only.body.contains("refund:INV-1042"));
    let by_contract = site.get("/?contract=capture_payment", &[]);
    assert_eq!(by_contract.body.matches("<tr data-operation=").count(), 1);
    assert!(by_contract.body.contains(CAPTURE));
    let none = site.get("/?older_than=3650d", &[]);
    assert_eq!(none.body.matches("<tr data-operation=").count(), 0);
    assert!(none.body.contains("Nothing needs attention."));
}

#[test]
fn an_operation_shows_its_state_timeline_and_arguments_never_its_output() {
    let (dir, db, ledger) = sqlite_ledger();
    let site = Site::new(
        dir,
        db,
        "[dashboards]\ncapture_payment = \"https://dashboard.example/payments?op={operation_id}\"\n",
    );
    let page = site.get("/operations/invoice%3AINV-1042%3Acapture", &[]);
    assert_eq!(page.status, 200, "{}", page.body);
    let timeline: Vec<&str> = page
        .body
        .match_indices("data-event=\"")
        .map(|(at, _)| {
            let rest = &page.body[at + 12..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect();
    assert_eq!(
        timeline,
        ["prepared", "dispatched", "outcome_unknown", "quarantined"]
    );
    assert!(
        page.body
            .contains("timed out waiting for the provider&#39;s acknowledgement")
            || page
                .body
                .contains("timed out waiting for the provider's acknowledgement")
    );
    assert!(
        page.body.contains(
            r#"href="https://dashboard.example/payments?op=invoice%3AINV%2D1042%3Acapture""#
        ),
        "{}",
        page.body
    );
    // Read-only: no forms.
    assert!(!page.body.contains("<form id=\"form-"), "{}", page.body);
    // The refund's arguments show its amount.
    let refund = site.get("/operations/refund%3AINV-1042", &[]);
    assert!(
        refund.body.contains("&quot;amount_cents&quot;: 1250")
            || refund.body.contains("\"amount_cents\": 1250"),
        "{}",
        refund.body
    );
    // A confirmed operation's output is never rendered.
    ledger
        .resolve_manually(
            CAPTURE,
            &effect_core::ManualResolution::new(
                effect_core::ManualAction::Confirm {
                    output: json!({"payment_id": "pay-SECRET-OUTPUT"}),
                    provider_operation_id: Some("pay-1".into()),
                },
                effect_core::Audit::new("alice", "seen", "INC-1"),
            ),
        )
        .unwrap();
    let confirmed = site.get("/operations/invoice%3AINV-1042%3Acapture", &[]);
    assert!(confirmed.body.contains("stored (not shown"));
    assert!(!confirmed.body.contains("pay-SECRET-OUTPUT"));
    // Missing: 404.
    assert_eq!(site.get("/operations/nope", &[]).status, 404);
}

#[test]
fn hostile_ids_errors_and_evidence_render_as_text() {
    let (dir, db, ledger) = sqlite_ledger();
    let hostile = "<script>alert('id')</script>";
    quarantined(ledger.as_ref(), hostile, "<img src=x onerror=alert(1)>");
    let site = Site::new(dir, db, "");
    for path in [
        "/".to_owned(),
        format!("/operations/{}", super::support::enc(hostile)),
        format!("/search?q={}", super::support::enc(hostile)),
    ] {
        let page = site.get(&path, &[]);
        assert!(
            page.status == 200 || page.status == 303,
            "{path}: {}",
            page.status
        );
        assert!(
            !page.body.contains("<script>alert"),
            "{path}: {}",
            page.body
        );
        assert!(!page.body.contains("<img src=x"), "{path}: {}", page.body);
    }
    let page = site.get(
        &format!("/operations/{}", super::support::enc(hostile)),
        &[],
    );
    assert!(
        page.body
            .contains("&lt;script&gt;alert('id')&lt;/script&gt;")
            || page
                .body
                .contains("&lt;script&gt;alert(&#39;id&#39;)&lt;/script&gt;"),
        "{}",
        page.body
    );
}

#[test]
fn approvals_show_the_amount_budgets_and_search_find_operations() {
    let (dir, db, _ledger) = sqlite_ledger();
    let site = Site::new(dir, db, "");
    let approvals = site.get("/approvals", &[]);
    assert_eq!(approvals.body.matches("<tr data-operation=").count(), 1);
    assert!(approvals.body.contains(REFUND));
    assert!(approvals.body.contains("amount_cents"));
    assert!(approvals.body.contains("1250"));
    let budgets = site.get("/budgets", &[]);
    assert!(
        budgets
            .body
            .contains("No dispatch was ever charged to a budget.")
    );
    // By id: straight to the operation; by provider key: listed.
    let by_id = site.get("/search?q=invoice%3AINV-1042%3Acapture", &[]);
    assert_eq!(by_id.status, 303);
    assert_eq!(
        by_id.header("location"),
        "/operations/invoice%3AINV%2D1042%3Acapture"
    );
    let by_key = site.get("/search?q=refund-key-INV-1042", &[]);
    assert_eq!(by_key.status, 303);
    assert_eq!(by_key.header("location"), "/operations/refund%3AINV%2D1042");
    let nothing = site.get("/search?q=nothing-like-it", &[]);
    assert!(nothing.body.contains("id=\"no-results\""));
}

#[test]
fn charts_are_svg_from_the_event_history() {
    let (dir, db, _ledger) = sqlite_ledger();
    let site = Site::new(dir, db, "");
    let page = site.get("/charts?period=24h", &[]);
    assert_eq!(page.body.matches("<img src=\"/charts/").count(), 3);
    for name in ["transitions", "rates", "claim-to-confirm"] {
        let svg = site.get(&format!("/charts/{name}.svg?period=24h"), &[]);
        assert_eq!(svg.status, 200, "{name}");
        assert_eq!(svg.header("content-type"), "image/svg+xml");
        assert!(svg.body.starts_with("<svg"), "{name}: {}", &svg.body[..100]);
        // The seeded events (now) are in the last bucket: the lines are drawn.
        assert!(svg.body.contains("<polyline"), "{name}");
    }
    assert_eq!(site.get("/charts/nope.svg", &[]).status, 404);
}
