use super::*;

#[test]
fn storage_strings_round_trip_through_serde_and_from_str() {
    for status in EffectStatus::ALL {
        let json = serde_json::to_string(&status).unwrap();
        assert_eq!(json, format!("\"{}\"", status.as_str()));
        assert_eq!(status.as_str().parse::<EffectStatus>().unwrap(), status);
    }
    assert_eq!(EffectStatus::OutcomeUnknown.as_str(), "outcome_unknown");
    assert_eq!(ProbeStatus::NotCommitted.as_str(), "not_committed");
    assert_eq!(
        serde_json::to_string(&UnknownOutcomePolicy::KeepUnknown).unwrap(),
        "\"keep_unknown\""
    );
}

#[test]
fn unknown_status_string_is_an_error_naming_the_valid_ones() {
    let err = "done".parse::<EffectStatus>().unwrap_err();
    assert!(err.to_string().contains("outcome_unknown"), "{err}");
}
