//! The terminal-status counters `stats` reads equal a full count after a
//! seeded random mix of transitions, raw writes, prunes and transactions cut
//! off mid-way (a connection killed inside one), and under callers
//! confirming at once (the counters are sharded per session).

use std::time::Duration;

use effect_core::{
    Claim, Confirmation, EffectLedger, EffectLedgerExt as _, EffectStatus, Evidence, PruneRequest,
};
use postgres::Client;

use crate::support::{TestResult, TestSchema, new_operation, server_url};

fn full_count(
    admin: &mut Client,
    q: &str,
) -> Result<Vec<(EffectStatus, u64)>, Box<dyn std::error::Error>> {
    let mut counts: Vec<(EffectStatus, u64)> =
        EffectStatus::ALL.into_iter().map(|s| (s, 0)).collect();
    for row in admin.query(
        &format!("SELECT status, count(*) FROM {q}.effect_operations GROUP BY status"),
        &[],
    )? {
        let status: EffectStatus = row.try_get::<_, String>(0)?.parse()?;
        let n: i64 = row.try_get(1)?;
        if let Some(entry) = counts.iter_mut().find(|(s, _)| *s == status) {
            entry.1 = u64::try_from(n)?;
        }
    }
    Ok(counts)
}

/// A small deterministic generator: the mix is the same on every run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[test]
fn the_counters_equal_a_full_count_after_a_random_mix_of_writes() -> TestResult {
    let Some(url) = server_url("the_counters_equal_a_full_count_after_a_random_mix_of_writes")
    else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "counts")?;
    let ledger = schema.ledger()?;
    let q = schema.q();
    let mut admin = schema.admin()?;
    let claim = Claim::new("w", Duration::from_secs(60));
    let confirmation = Confirmation {
        output: serde_json::json!({"ok": true}),
        provider_operation_id: None,
        evidence: Evidence::new(),
    };
    let mut rng = Lcg(42);
    let mut terminal_seen = 0;
    for step in 0..240 {
        let n = rng.below(10) as usize;
        let id = format!("op-{n}");
        let status = EffectStatus::ALL[rng.below(EffectStatus::ALL.len() as u64) as usize];
        // Refusals are part of the mix: only the counts matter.
        match rng.below(9) {
            0 => drop(ledger.prepare(&id, &new_operation(n))),
            1 => drop(ledger.claim_dispatch(&id, &claim)),
            2 => drop(ledger.mark_confirmed(&id, Some("w"), &confirmation)),
            3 => drop(ledger.mark_rejected(&id, "w", "declined")),
            4 => drop(ledger.mark_outcome_unknown(&id, Some("w"), "timeout", &Evidence::new())),
            5 => {
                admin.execute(
                    &format!(
                        "UPDATE {q}.effect_operations SET status = $1 WHERE operation_id = $2"
                    ),
                    &[&status.as_str(), &id],
                )?;
            }
            6 => {
                ledger.prune(
                    &PruneRequest::before("9999-01-01T00:00:00+00:00"),
                    &mut std::io::sink(),
                )?;
            }
            7 => {
                // A connection killed inside its transaction: nothing of it
                // stays, the counters' changes included.
                let mut doomed = schema.admin()?;
                let mut tx = doomed.transaction()?;
                tx.execute(
                    &format!("UPDATE {q}.effect_operations SET status = $1"),
                    &[&status.as_str()],
                )?;
                tx.execute(
                    &format!("DELETE FROM {q}.effect_events WHERE operation_id = $1"),
                    &[&id],
                )?;
                tx.execute(
                    &format!("DELETE FROM {q}.effect_operations WHERE operation_id = $1"),
                    &[&id],
                )?;
                let pid: i32 = tx.query_one("SELECT pg_backend_pid()", &[])?.try_get(0)?;
                admin.execute("SELECT pg_terminate_backend($1)", &[&pid])?;
                assert!(
                    tx.commit().is_err(),
                    "the killed transaction did not commit"
                );
            }
            _ => {
                let _ = ledger.prepare(&id, &new_operation(n));
                let _ = ledger.mark_confirmed(&id, None, &confirmation);
            }
        }
        let counts = ledger.stats()?.counts;
        assert_eq!(counts, full_count(&mut admin, &q)?, "step {step}");
        terminal_seen += counts
            .iter()
            .filter(|(s, n)| {
                matches!(s, EffectStatus::Confirmed | EffectStatus::Rejected) && *n > 0
            })
            .count();
    }
    assert!(terminal_seen > 20, "the mix reached terminal statuses");

    // Callers confirming at once, on sessions of their own.
    std::thread::scope(|scope| {
        for t in 0..4 {
            let ledger = ledger.clone();
            let confirmation = confirmation.clone();
            scope.spawn(move || {
                for i in 0..25 {
                    let id = format!("thread-{t}-{i}");
                    ledger
                        .prepare(&id, &new_operation(100 + t * 25 + i))
                        .expect("prepare");
                    ledger
                        .mark_confirmed(&id, None, &confirmation)
                        .expect("confirm");
                }
            });
        }
    });
    let counts = ledger.stats()?.counts;
    assert_eq!(counts, full_count(&mut admin, &q)?);
    let confirmed = counts.iter().find(|(s, _)| *s == EffectStatus::Confirmed);
    assert!(confirmed.is_some_and(|(_, n)| *n >= 100), "{counts:?}");
    Ok(())
}
