//! `/metrics`: the numbers of `stats`, valid for `promtool check metrics`.

use std::io::Write as _;
use std::process::{Command, Stdio};

use super::support::{Site, sqlite_ledger};

/// `promtool`, or `None` (a failure when EFFECT_REQUIRE_PROMTOOL=1).
fn promtool() -> Option<&'static str> {
    let found = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some("promtool");
    }
    assert!(
        std::env::var_os("EFFECT_REQUIRE_PROMTOOL").is_none_or(|v| v != "1"),
        "EFFECT_REQUIRE_PROMTOOL=1 but promtool is not installed (Debian package prometheus)"
    );
    eprintln!("skipped: promtool is not installed (Debian package prometheus)");
    None
}

#[test]
fn metrics_say_what_stats_says_and_promtool_accepts_them() {
    let (dir, db, _ledger) = sqlite_ledger();
    let site = Site::new(dir, db, "");
    let reply = site.get("/metrics", &[]);
    assert_eq!(reply.status, 200);
    assert!(
        reply
            .header("content-type")
            .starts_with("text/plain; version=0.0.4")
    );
    let text = &reply.body;
    for line in [
        "effect_operations{status=\"quarantined\"} 1",
        "effect_operations{status=\"awaiting_approval\"} 1",
        "effect_operations{status=\"confirmed\"} 0",
        "effect_unresolved_operations 1",
        "effect_awaiting_approval 1",
        "effect_stale_dispatches 0",
        "effect_waiting_operations{waiting_for=\"caller\"} 0",
        "effect_oldest_deferred_age_seconds 0",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    let Some(promtool) = promtool() else { return };
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_alert_rules_in_production_md_pass_promtool() {
    let doc = include_str!("../../../../../docs/production.md");
    let start = doc
        .find("### Alert rules for the console's metrics")
        .expect("the section");
    let block = &doc[start..];
    let open = block.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let rules = &block[open..open + block[open..].find("```").unwrap()];
    assert!(rules.matches("- alert:").count() >= 6, "{rules}");
    // Each rule names a metric the console exports.
    let (dir, db, _ledger) = sqlite_ledger();
    let exported = Site::new(dir, db, "").get("/metrics", &[]).body;
    for name in [
        "effect_unresolved_operations",
        "effect_oldest_unresolved_age_seconds",
        "effect_stale_dispatches",
        "effect_oldest_waiting_age_seconds",
        "effect_awaiting_approval",
    ] {
        assert!(
            rules.contains(name) && exported.contains(&format!("# TYPE {name} gauge")),
            "{name}"
        );
    }
    let Some(promtool) = promtool() else { return };
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), rules).unwrap();
    let output = Command::new(promtool)
        .args(["check", "rules"])
        .arg(file.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
