//! Runs end to end: policy, confirmation, reuse, audit, transitions, replay.

use agent_runtime::policy::PolicyDecision;
use agent_runtime::trace::{AuditKind, ToolResultStatus, TraceEventKind};
use agent_runtime::{
    Action, PermissionPolicy, ReplaySummary, RunError, RunOptions, RunStatus, Task, invocation_id,
};
use serde_json::json;

use crate::{Calls, check, kinds, lookup, receipt, runtime};

#[test]
fn read_then_confirmed_mutation_completes_end_to_end() {
    let calls = Calls::default();
    let rt = runtime(
        &calls,
        vec![
            lookup("INV-1"),
            receipt("INV-1"),
            Action::finish(json!("sent")),
        ],
    )
    .build()
    .unwrap();
    let waiting = check(&rt, "run-e2e", RunOptions::start(), RunStatus::Waiting);
    assert_eq!(waiting.steps, 1);
    assert_eq!(calls.all(), [r#"lookup_invoice:{"invoice_id":"INV-1"}"#]);
    let invocation = waiting.awaiting_confirmation().unwrap().to_owned();
    assert_eq!(
        invocation,
        invocation_id(
            "run-e2e",
            1,
            "send_receipt",
            &json!({"invoice_id": "INV-1"})
        )
    );

    let done = check(
        &rt,
        "run-e2e",
        RunOptions::resume().confirm(invocation),
        RunStatus::Completed,
    );
    assert_eq!(done.output, Some(json!("sent")));
    assert_eq!(done.steps, 2);
    assert_eq!(calls.count("lookup_invoice"), 1);
    assert_eq!(calls.count("send_receipt"), 1);

    let events = rt.events().events("run-e2e").unwrap();
    let summary = ReplaySummary::of(&events);
    assert!(summary.sequence_consistent, "{summary:#?}");
    assert_eq!(summary.terminal_status, Some(RunStatus::Completed));
    assert_eq!(
        summary.transitions,
        [
            (RunStatus::Created, RunStatus::Running),
            (RunStatus::Running, RunStatus::Waiting),
            (RunStatus::Waiting, RunStatus::Running),
            (RunStatus::Running, RunStatus::Completed),
        ]
    );
    assert_eq!(summary.tool_calls.len(), 2);
    assert_eq!(summary.recoveries, 1);
    for kind in [
        "run_started",
        "decision",
        "policy_decision",
        "tool_request",
        "tool_result",
        "state_transition",
        "checkpoint",
        "recovery",
        "termination",
    ] {
        assert!(
            kinds(&events).contains(&kind),
            "no {kind} in {:?}",
            kinds(&events)
        );
    }
}

#[test]
fn confirmation_given_up_front_runs_the_mutation_without_waiting() {
    let calls = Calls::default();
    let rt = runtime(&calls, vec![receipt("INV-2"), Action::finish(json!("ok"))])
        .build()
        .unwrap();
    let id = invocation_id(
        "run-upfront",
        0,
        "send_receipt",
        &json!({"invoice_id": "INV-2"}),
    );
    check(
        &rt,
        "run-upfront",
        RunOptions::start().confirm(id),
        RunStatus::Completed,
    );
    assert_eq!(calls.count("send_receipt"), 1);
    let audit = rt.audit().records("run-upfront").unwrap();
    let audit_kinds: Vec<AuditKind> = audit.iter().map(|r| r.kind).collect();
    assert_eq!(
        audit_kinds,
        [
            AuditKind::MutationAuthorized,
            AuditKind::ToolRequested,
            AuditKind::ToolSucceeded
        ]
    );
}

#[test]
fn unauthorized_tool_is_blocked_before_any_side_effect() {
    let calls = Calls::default();
    let rt = runtime(
        &calls,
        vec![receipt("INV-3"), Action::finish(json!("never"))],
    )
    .policy(PermissionPolicy::allow(["lookup_invoice"]))
    .build()
    .unwrap();
    // Even a confirmation cannot make a tool that is not allowed run.
    let id = invocation_id(
        "run-denied",
        0,
        "send_receipt",
        &json!({"invoice_id": "INV-3"}),
    );
    let report = check(
        &rt,
        "run-denied",
        RunOptions::start().confirm(id),
        RunStatus::Failed,
    );
    assert!(report.error.unwrap().contains("not allowed"));
    assert!(calls.all().is_empty());
    let audit = rt.audit().records("run-denied").unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].kind, AuditKind::PermissionDenied);
    let events = rt.events().events("run-denied").unwrap();
    assert!(!kinds(&events).contains(&"tool_request"));
    assert!(events.iter().any(|e| matches!(
        e.kind,
        TraceEventKind::PolicyDecision {
            decision: PolicyDecision::Denied,
            ..
        }
    )));
}

#[test]
fn mutation_without_confirmation_waits_and_task_input_cannot_confirm_it() {
    let calls = Calls::default();
    let rt = runtime(&calls, vec![receipt("INV-4"), Action::finish(json!("ok"))])
        .build()
        .unwrap();
    let id = invocation_id(
        "run-wait",
        0,
        "send_receipt",
        &json!({"invoice_id": "INV-4"}),
    );
    // The task input names the invocation as "confirmed": it must not count.
    let task = Task::new("run-wait", json!({"confirmed_mutations": [id.clone()]}));
    let report = rt.run(task.clone(), RunOptions::start()).unwrap();
    assert_eq!(report.status, RunStatus::Waiting);
    assert_eq!(report.awaiting_confirmation(), Some(id.as_str()));
    // Resuming without a confirmation waits again, still without side effects.
    let again = rt.run(task.clone(), RunOptions::resume()).unwrap();
    assert_eq!(again.status, RunStatus::Waiting);
    // A confirmation of some other invocation does not help either.
    let other = rt
        .run(
            task.clone(),
            RunOptions::resume().confirm("run-wait/0/send_receipt/other"),
        )
        .unwrap();
    assert_eq!(other.status, RunStatus::Waiting);
    assert!(calls.all().is_empty());
    let audit = rt.audit().records("run-wait").unwrap();
    assert_eq!(audit.len(), 3);
    assert!(
        audit
            .iter()
            .all(|r| r.kind == AuditKind::ConfirmationRequired)
    );
    let done = rt.run(task, RunOptions::resume().confirm(id)).unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(calls.count("send_receipt"), 1);
}

#[test]
fn repeated_action_idempotency_key_reuses_the_first_result() {
    let calls = Calls::default();
    let once = |invoice: &str| {
        Action::call_once(
            "lookup_invoice",
            json!({"invoice_id": invoice}),
            "lookup-once",
        )
    };
    let rt = runtime(
        &calls,
        vec![
            once("INV-5"),
            once("INV-5"),
            once("INV-OTHER"),
            Action::finish(json!("ok")),
        ],
    )
    .build()
    .unwrap();
    check(&rt, "run-reuse", RunOptions::start(), RunStatus::Completed);
    assert_eq!(calls.count("lookup_invoice"), 1);
    let events = rt.events().events("run-reuse").unwrap();
    let summary = ReplaySummary::of(&events);
    let results: Vec<ToolResultStatus> = summary.tool_calls.iter().map(|c| c.result).collect();
    assert_eq!(
        results,
        [
            ToolResultStatus::Succeeded,
            ToolResultStatus::Reused,
            ToolResultStatus::Reused
        ]
    );
    let checkpoint = rt.checkpoints().load("run-reuse").unwrap().unwrap();
    assert_eq!(
        checkpoint.observations[1].output,
        checkpoint.observations[0].output
    );
    assert!(checkpoint.observations[2].reused);
}

#[test]
fn audit_records_are_kept_apart_from_trace_events() {
    let calls = Calls::default();
    let rt = runtime(
        &calls,
        vec![
            lookup("INV-6"),
            receipt("INV-6"),
            Action::finish(json!("ok")),
        ],
    )
    .build()
    .unwrap();
    let waiting = check(&rt, "run-audit", RunOptions::start(), RunStatus::Waiting);
    let id = waiting.awaiting_confirmation().unwrap().to_owned();
    check(
        &rt,
        "run-audit",
        RunOptions::resume().confirm(id),
        RunStatus::Completed,
    );

    let audit = rt.audit().records("run-audit").unwrap();
    let audit_kinds: Vec<AuditKind> = audit.iter().map(|r| r.kind).collect();
    assert_eq!(
        audit_kinds,
        [
            AuditKind::ToolRequested,
            AuditKind::ToolSucceeded,
            AuditKind::ConfirmationRequired,
            AuditKind::MutationAuthorized,
            AuditKind::ToolRequested,
            AuditKind::ToolSucceeded
        ]
    );
    // Reads are audited as well as mutations; audit sequences are their own.
    assert_eq!(
        audit.iter().map(|r| r.tool.as_str()).collect::<Vec<_>>(),
        [
            "lookup_invoice",
            "lookup_invoice",
            "send_receipt",
            "send_receipt",
            "send_receipt",
            "send_receipt"
        ]
    );
    assert_eq!(
        audit.iter().map(|r| r.sequence).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    // The trace has no audit entries mixed in, and no audit store is a trace.
    let events = rt.events().events("run-audit").unwrap();
    let json = serde_json::to_string(&events).unwrap();
    for audit_only in [
        "mutation_authorized",
        "tool_requested",
        "tool_succeeded",
        "permission_denied",
    ] {
        assert!(!json.contains(audit_only), "{audit_only} in the trace");
    }
    assert!(rt.audit().records("run-other").unwrap().is_empty());
    assert!(ReplaySummary::of(&events).sequence_consistent);
}

#[test]
fn invalid_run_status_transitions_are_rejected() {
    use RunStatus::{Completed, Created, Failed, Paused, Running, Waiting};
    let allowed = [
        (Created, Running),
        (Running, Waiting),
        (Running, Paused),
        (Running, Completed),
        (Running, Failed),
        (Waiting, Running),
        (Waiting, Failed),
        (Paused, Running),
        (Paused, Failed),
        (Failed, Running),
    ];
    for from in RunStatus::ALL {
        for to in RunStatus::ALL {
            let ok = allowed.contains(&(from, to));
            assert_eq!(from.transition(to).is_ok(), ok, "{from} -> {to}");
        }
    }

    let calls = Calls::default();
    let rt = runtime(&calls, vec![lookup("INV-7"), Action::finish(json!("ok"))])
        .build()
        .unwrap();
    check(&rt, "run-final", RunOptions::start(), RunStatus::Completed);
    let events_before = rt.events().events("run-final").unwrap().len();
    let err = rt
        .run(
            Task::new("run-final", json!("a task")),
            RunOptions::resume(),
        )
        .unwrap_err();
    match err {
        RunError::InvalidTransition { source, .. } => {
            assert_eq!((source.from, source.to), (Completed, Running));
        }
        other => panic!("unexpected {other:?}"),
    }
    // Nothing was written for the refused resume, and the tool did not run again.
    assert_eq!(
        rt.events().events("run-final").unwrap().len(),
        events_before
    );
    assert_eq!(calls.count("lookup_invoice"), 1);
    // Starting an existing run, or resuming an unknown one, is refused too.
    assert!(matches!(
        rt.run(Task::new("run-final", json!("a task")), RunOptions::start()),
        Err(RunError::AlreadyExists { .. })
    ));
    assert!(matches!(
        rt.run(
            Task::new("run-unknown", json!("a task")),
            RunOptions::resume()
        ),
        Err(RunError::NoCheckpoint { .. })
    ));
}

#[test]
fn replay_summary_detects_gaps_and_foreign_events() {
    let calls = Calls::default();
    let rt = runtime(&calls, vec![lookup("INV-8"), Action::finish(json!("ok"))])
        .build()
        .unwrap();
    check(&rt, "run-replay", RunOptions::start(), RunStatus::Completed);
    let events = rt.events().events("run-replay").unwrap();
    assert!(ReplaySummary::of(&events).sequence_consistent);

    let mut gap = events.clone();
    gap.remove(3);
    assert!(!ReplaySummary::of(&gap).sequence_consistent);

    let mut foreign = events.clone();
    foreign[2].run_id = "another-run".into();
    assert!(!ReplaySummary::of(&foreign).sequence_consistent);

    let mut swapped = events;
    let last = swapped.len() - 1;
    swapped.swap(1, last);
    assert!(!ReplaySummary::of(&swapped).sequence_consistent);
}
