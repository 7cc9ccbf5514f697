//! A lost acknowledgement, a quarantine and a replay, each under an agent
//! framework's span, as the receiver sees them.

use std::sync::Arc;

use effect_core::{EffectStatus, MemoryLedger};
use effect_exec::EffectExecutor;
use effect_testkit::provider::FakePaymentProvider;

use crate::{
    Fate, assert_no_card, charge, children, contract, execution, handler, in_agent_run, keyed,
    point, probe, telemetry,
};

#[test]
fn a_lost_acknowledgement_is_one_span_with_its_probe_under_the_agent_run() {
    let telemetry = telemetry();
    let provider = Arc::new(FakePaymentProvider::new());
    let lost_ack = keyed("otel_lost_ack")
        .outcome_probe(probe(&provider))
        .build()
        .unwrap();
    let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    let (result, (agent_trace, agent_span)) = in_agent_run(|| {
        executor.execute(
            &lost_ack,
            &charge("INV-LA"),
            handler(&provider, Fate::LostAck),
        )
    });
    let result = result.unwrap();
    assert!(result.is_confirmed());
    assert_eq!(
        provider.committed_count().unwrap(),
        1,
        "one capture, not two"
    );

    let (spans, points) = telemetry.flushed();
    let span = execution(&spans, "otel_lost_ack:INV-LA");
    assert_eq!(span.name, "execute_tool otel_lost_ack");
    assert_eq!(span.trace_id, agent_trace, "it joins the agent's trace");
    assert_eq!(
        span.parent_span_id, agent_span,
        "the agent's span is its parent"
    );
    for (key, value) in [
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "otel_lost_ack"),
        ("gen_ai.tool.type", "function"),
        ("effect.contract.version", "1"),
        ("effect.status", "confirmed"),
        ("effect.attempt", "1"),
        // The effect the probe found is one an earlier attempt made.
        ("effect.replayed", "true"),
        ("effect.reconciliation.answer", "committed"),
    ] {
        assert_eq!(span.attr(key), Some(value), "{key} in {span:#?}");
    }
    assert_eq!(span.attr("error.type"), None);
    assert_ne!(span.status_code, 2, "not an error");
    assert_eq!(
        span.scope_schema_url,
        "https://opentelemetry.io/schemas/1.36.0"
    );
    // The opted-in arguments are redacted: the invoice is there, the card is not.
    let arguments = span.attr("effect.arguments").unwrap();
    assert!(
        arguments.contains("INV-LA") && !arguments.contains(crate::CARD),
        "{arguments}"
    );
    assert_eq!(
        children(&spans, span),
        [
            "effect.handler",
            "effect.ledger_write:mark confirmed",
            "effect.ledger_write:mark outcome unknown",
            "effect.ledger_write:prepare and claim",
            "effect.probe",
        ]
    );
    let handler_span = spans
        .iter()
        .find(|s| s.parent_span_id == span.span_id && s.name == "effect.handler")
        .unwrap();
    assert_eq!(handler_span.attr("effect.outcome"), Some("failed"));

    let contract = [
        ("effect.contract.name", "otel_lost_ack"),
        ("effect.contract.version", "1"),
    ];
    let with = |key, value| {
        let mut attributes = contract.to_vec();
        attributes.push((key, value));
        attributes
    };
    assert_eq!(
        point(
            &points,
            "effect.executions",
            &with("effect.status", "confirmed")
        ),
        1.0
    );
    assert_eq!(
        point(
            &points,
            "effect.execution.duration",
            &with("effect.status", "confirmed")
        ),
        1.0
    );
    assert_eq!(
        point(
            &points,
            "effect.attempts",
            &with("effect.status", "confirmed")
        ),
        1.0
    );
    assert_eq!(
        point(
            &points,
            "effect.reconciliations",
            &with("effect.reconciliation.answer", "committed")
        ),
        1.0
    );
    assert_eq!(
        point(
            &points,
            "effect.handler.duration",
            &with("effect.outcome", "failed")
        ),
        1.0
    );
    assert_eq!(point(&points, "effect.replays", &contract), 1.0);
    assert!(
        points
            .iter()
            .all(|p| !p.attributes.values().any(|v| v.contains("INV-LA"))),
        "no operation id in a metric"
    );
    assert_no_card("INV-LA");
}

#[test]
fn a_quarantine_is_an_error_span_with_its_reason() {
    let telemetry = telemetry();
    let provider = Arc::new(FakePaymentProvider::new());
    // No probe and no provider key: nothing can settle a lost acknowledgement.
    let bare = contract("otel_quarantine").build().unwrap();
    let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    let (result, _) = in_agent_run(|| {
        executor.execute(&bare, &charge("INV-Q"), handler(&provider, Fate::LostAck))
    });
    assert_eq!(result.unwrap().status, EffectStatus::Quarantined);
    assert_eq!(provider.committed_count().unwrap(), 1);

    let (spans, points) = telemetry.flushed();
    let span = execution(&spans, "otel_quarantine:INV-Q");
    assert_eq!(span.attr("error.type"), Some("quarantined"));
    assert_eq!(span.status_code, 2, "an error status");
    assert_eq!(span.attr("effect.status"), Some("quarantined"));
    assert_eq!(span.attr("effect.quarantine.reason"), Some("no_basis"));
    assert_eq!(span.attr("effect.reconciliation.answer"), Some("none"));
    assert!(
        !children(&spans, span).contains(&"effect.probe".to_owned()),
        "no probe to call"
    );

    let contract = [
        ("effect.contract.name", "otel_quarantine"),
        ("effect.contract.version", "1"),
    ];
    let with = |key, value| {
        let mut attributes = contract.to_vec();
        attributes.push((key, value));
        attributes
    };
    assert_eq!(
        point(
            &points,
            "effect.quarantined",
            &with("effect.quarantine.reason", "no_basis")
        ),
        1.0
    );
    assert_eq!(
        point(
            &points,
            "effect.executions",
            &with("effect.status", "quarantined")
        ),
        1.0
    );
    assert_no_card("INV-Q");
}

#[test]
fn a_replay_is_a_span_without_a_handler() {
    let telemetry = telemetry();
    let provider = Arc::new(FakePaymentProvider::new());
    let replayed = keyed("otel_replay").build().unwrap();
    let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    let (answers, _) = in_agent_run(|| {
        let first = executor.execute(
            &replayed,
            &charge("INV-R"),
            handler(&provider, Fate::Answered),
        );
        let again = executor.execute(
            &replayed,
            &charge("INV-R"),
            handler(&provider, Fate::Answered),
        );
        (first.unwrap(), again.unwrap())
    });
    assert!(answers.0.is_confirmed() && !answers.0.duplicate_suppressed);
    assert!(answers.1.duplicate_suppressed);
    assert_eq!(answers.1.output, answers.0.output);
    assert_eq!(
        provider.committed_count().unwrap(),
        1,
        "the replay sent nothing"
    );

    let (spans, points) = telemetry.flushed();
    let executions: Vec<_> = spans
        .iter()
        .filter(|s| s.attr("gen_ai.tool.call.id") == Some("otel_replay:INV-R"))
        .collect();
    assert_eq!(executions.len(), 2);
    let replay = executions
        .iter()
        .find(|s| s.attr("effect.replayed") == Some("true"))
        .unwrap();
    assert_eq!(replay.attr("effect.status"), Some("confirmed"));
    assert_eq!(
        children(&spans, replay),
        ["effect.ledger_write:prepare and claim"],
        "a replay reads its answer; no handler runs"
    );

    let contract = [
        ("effect.contract.name", "otel_replay"),
        ("effect.contract.version", "1"),
    ];
    let mut confirmed = contract.to_vec();
    confirmed.push(("effect.status", "confirmed"));
    assert_eq!(point(&points, "effect.replays", &contract), 1.0);
    assert_eq!(point(&points, "effect.executions", &confirmed), 2.0);
    assert_no_card("INV-R");
}
