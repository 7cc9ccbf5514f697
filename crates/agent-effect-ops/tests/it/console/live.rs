//! Live refresh: a transition written by another process reaches an open
//! `/live` stream.

use effect_core::EffectLedger as _;

use super::support::{CAPTURE, Site, live, next_ledger_event, sqlite_ledger};

#[test]
fn a_transition_by_another_process_reaches_the_live_stream() {
    let (dir, db, ledger) = sqlite_ledger();
    let path = match &db {
        production_agent_systems::open::LedgerUrl::Sqlite(path) => path.clone(),
        _ => unreachable!(),
    };
    let site = Site::new(dir, db, "");
    let address = site.listen();
    let mut stream = live(address, "");
    // On connecting: the newest sequence now.
    let before = ledger.events(CAPTURE).unwrap().last().unwrap().sequence;
    assert!(next_ledger_event(&mut stream) >= before);
    // Another process confirms the capture: the CLI binary.
    let output = crate::support::bin_on(
        &path,
        &[
            "confirm",
            CAPTURE,
            "--output-json",
            r#"{"payment_id":"pay-1"}"#,
            "--actor",
            "alice@example.com",
            "--reason",
            "seen in the dashboard",
            "--evidence-reference",
            "INC-1",
        ],
    );
    crate::support::success(&output);
    let last = ledger.events(CAPTURE).unwrap().last().unwrap().sequence;
    assert!(last > before);
    // Events until the confirmation's (each names the newest sequence).
    let mut seen = Vec::new();
    while seen.last().is_none_or(|s| *s < last) {
        seen.push(next_ledger_event(&mut stream));
    }
    assert_eq!(seen.last(), Some(&last), "{seen:?}");
}
