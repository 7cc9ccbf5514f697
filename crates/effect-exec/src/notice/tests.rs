use effect_core::{EffectResult, EffectStatus, Evidence};

use super::UncertainOutcome;

fn result(status: EffectStatus, in_progress: bool) -> EffectResult {
    EffectResult {
        operation_id: "op-1".into(),
        status,
        output: None,
        error: Some("timed out".into()),
        attempts: 1,
        duplicate_suppressed: false,
        in_progress,
        provider_operation_id: None,
        evidence: Evidence::new(),
    }
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
