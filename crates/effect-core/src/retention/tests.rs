use std::sync::Mutex;
use std::time::{Duration, UNIX_EPOCH};

use super::*;

const DAY: Duration = Duration::from_secs(86_400);

/// A store that has `left` batches of 10 operations to prune per status,
/// and records every request it is asked.
#[derive(Default)]
struct Batches {
    left: Mutex<Vec<(EffectStatus, u64)>>,
    asked: Mutex<Vec<PruneRequest>>,
}

impl PruneLedger for Batches {
    fn prune_with_progress(
        &self,
        request: &PruneRequest,
        _archive: &mut dyn PruneArchive,
        progress: &mut dyn FnMut(&PruneReport),
    ) -> Result<PruneReport, LedgerError> {
        self.asked.lock().unwrap().push(request.clone());
        let mut left = self.left.lock().unwrap();
        let entry = left
            .iter_mut()
            .find(|(status, _)| *status == request.statuses[0])
            .unwrap();
        let mut report = PruneReport::new(0, 0, false);
        while entry.1 > 0 {
            if request.limits.reached(report.batches, Duration::ZERO) {
                report.complete = false;
                break;
            }
            entry.1 -= 1;
            report.batches += 1;
            report.operations += 10;
            report.events += 40;
            progress(&report);
        }
        Ok(report)
    }
}

fn check_parse(text: &str, expected: Result<&str, &str>) {
    match (text.parse::<RetentionPolicy>(), expected) {
        (Ok(policy), Ok(shown)) => assert_eq!(policy.to_string(), shown, "{text}"),
        (Err(err), Err(reason)) => assert!(err.to_string().contains(reason), "{text}: {err}"),
        (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
    }
}

#[test]
fn policies_read_and_print_as_operators_write_them() {
    check_parse(
        "confirmed=30d,rejected=90d",
        Ok("confirmed=30d,rejected=90d"),
    );
    check_parse(
        " rejected = 2w , confirmed=48h",
        Ok("rejected=2w,confirmed=2d"),
    );
    check_parse("confirmed=90m", Ok("confirmed=90m"));
    check_parse("confirmed", Err("is not STATUS=AGE"));
    check_parse("confirmed=30", Err("is not an age"));
    check_parse("confirmed=d", Err("is not an age"));
    check_parse("confirmed=30y", Err("is not an age"));
    check_parse("confirmed=30d,confirmed=40d", Err("named twice"));
    check_parse("prepared=30d", Err("not prepared"));
    check_parse("cancelled=30d", Err("unknown status"));
}

#[test]
fn a_rule_below_the_minimum_retention_is_refused() {
    let policy = RetentionPolicy::new().keep(EffectStatus::Rejected, Duration::from_secs(3600));
    let err = policy.validate().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid ledger request: keeping rejected operations 1h is below the minimum retention of 1d"
    );
    let lowered = policy.clone().min_retention(Duration::from_secs(60));
    assert!(lowered.validate().is_ok());
    assert!(RetentionPolicy::new().validate().is_err(), "no rule");
    let mut twice = RetentionPolicy::new().keep(EffectStatus::Confirmed, DAY);
    twice.rules.push(twice.rules[0]);
    assert!(twice.validate().is_err());
}

#[test]
fn each_rule_prunes_its_status_up_to_its_own_cutoff() -> Result<(), LedgerError> {
    let policy = RetentionPolicy::new()
        .keep(EffectStatus::Confirmed, 30 * DAY)
        .keep(EffectStatus::Rejected, 90 * DAY);
    let store = Batches::default();
    *store.left.lock().unwrap() = vec![(EffectStatus::Confirmed, 3), (EffectStatus::Rejected, 2)];
    let now = UNIX_EPOCH + 100 * DAY;
    let mut calls = 0;
    let report = policy.apply(&store, now, false, &mut Vec::new(), &mut |_| calls += 1)?;
    assert_eq!((report.operations(), report.total.events), (50, 200));
    assert!(report.total.complete);
    assert_eq!(calls, 5, "progress after every batch");
    let asked = store.asked.lock().unwrap();
    let cutoffs: Vec<(EffectStatus, &str)> = asked
        .iter()
        .map(|r| (r.statuses[0], r.before.as_str()))
        .collect();
    assert_eq!(
        cutoffs,
        [
            (EffectStatus::Confirmed, "1970-03-12T00:00:00.000000+00:00"),
            (EffectStatus::Rejected, "1970-01-11T00:00:00.000000+00:00"),
        ]
    );
    let by_rule: Vec<u64> = report.rules.iter().map(|r| r.operations).collect();
    assert_eq!(by_rule, [30, 20]);
    Ok(())
}

#[test]
fn max_batches_bounds_the_whole_application_across_rules() -> Result<(), LedgerError> {
    let policy = RetentionPolicy::new()
        .keep(EffectStatus::Confirmed, 30 * DAY)
        .keep(EffectStatus::Rejected, 30 * DAY)
        .limits(PruneLimits::default().max_batches(Some(4)));
    let store = Batches::default();
    *store.left.lock().unwrap() = vec![(EffectStatus::Confirmed, 3), (EffectStatus::Rejected, 3)];
    let now = UNIX_EPOCH + 100 * DAY;
    let first = policy.apply(&store, now, false, &mut Vec::new(), &mut |_| {})?;
    assert_eq!((first.operations(), first.total.batches), (40, 4));
    assert!(!first.total.complete);
    assert_eq!(store.asked.lock().unwrap()[1].limits.max_batches, Some(1));
    // The next application goes on where this one stopped.
    let second = policy.apply(&store, now, false, &mut Vec::new(), &mut |_| {})?;
    assert_eq!(second.operations(), 20);
    assert!(second.total.complete);
    assert_eq!(
        *store.left.lock().unwrap(),
        [(EffectStatus::Confirmed, 0), (EffectStatus::Rejected, 0)]
    );
    Ok(())
}
