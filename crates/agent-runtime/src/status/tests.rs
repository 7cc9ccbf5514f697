use super::RunStatus;

#[test]
fn only_stopped_non_final_runs_can_resume() {
    let resumable: Vec<RunStatus> = RunStatus::ALL
        .into_iter()
        .filter(|s| s.is_resumable())
        .collect();
    assert_eq!(
        resumable,
        [
            RunStatus::Created,
            RunStatus::Waiting,
            RunStatus::Paused,
            RunStatus::Failed
        ]
    );
    assert!(RunStatus::Completed.transition(RunStatus::Failed).is_err());
    assert!(RunStatus::Running.transition(RunStatus::Running).is_err());
}

#[test]
fn strings_match_the_serde_names() {
    for status in RunStatus::ALL {
        assert_eq!(
            serde_json::to_value(status).unwrap(),
            serde_json::Value::String(status.to_string())
        );
    }
}
