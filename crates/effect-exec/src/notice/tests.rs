use effect_core::{EffectRecord, EffectResult, EffectStatus};

use super::UncertainOutcome;

fn result(status: EffectStatus, in_progress: bool) -> EffectResult {
    let mut record = EffectRecord::new("op-1", "c", "1", "blake3:00", "2026-01-01T00:00:00+00:00");
    record.status = status;
    record.error = Some("timed out".into());
    record.attempts = 1;
    let mut result = EffectResult::from_record(&record);
    result.in_progress = in_progress;
    result
}

#[test]
fn settled_results_get_no_notice() {
    for status in [EffectStatus::Confirmed, EffectStatus::Rejected] {
        assert_eq!(
            UncertainOutcome::from_result("t", &result(status, false)),
            None
        );
    }
}

#[test]
fn every_unsettled_result_says_unknown_do_not_retry_and_names_the_operation() {
    for (status, in_progress) in [
        (EffectStatus::OutcomeUnknown, false),
        (EffectStatus::Quarantined, false),
        (EffectStatus::Dispatched, true),
        (EffectStatus::Prepared, false),
    ] {
        let notice = UncertainOutcome::from_result("capture", &result(status, in_progress))
            .unwrap_or_else(|| panic!("{status} gets a notice"));
        assert_eq!(notice.outcome, "unknown");
        assert_eq!(notice.status, status);
        assert!(!notice.retry);
        assert_eq!(notice.operation_id, "op-1");
        assert!(notice.message.contains("not known"), "{}", notice.message);
        assert!(notice.message.contains("Do not call `capture` again"));
        assert!(notice.message.contains("`op-1`"));
        assert!(!notice.message.to_lowercase().contains("fail"));
    }
}

#[test]
fn a_call_awaiting_approval_says_nothing_was_sent_and_not_to_call_again() {
    let notice =
        UncertainOutcome::from_result("refund", &result(EffectStatus::AwaitingApproval, false))
            .expect("a call awaiting approval gets a notice");
    assert_eq!(notice.outcome, "awaiting_approval");
    assert_eq!(notice.status, EffectStatus::AwaitingApproval);
    assert!(!notice.retry);
    assert!(notice.message.contains("was not run"), "{}", notice.message);
    assert!(notice.message.contains("Do not call `refund` again"));
    assert!(notice.message.contains("`op-1`"));
}
