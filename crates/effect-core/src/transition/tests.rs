//! The state machine, one row per rule: a record in a status, a transition,
//! and the plan expected (applied or not, the status after, the events
//! appended, the kind of write). Rows name the rule of docs/spec.md §4 they
//! check, so a failure reads as the rule that broke.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::*;
use crate::EffectStatus as S;
use crate::Guard;
use crate::clock::unix_seconds;
use crate::fingerprint::RequestFingerprint;

/// The planner's clock in every row.
fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

const OWNER: &str = "owner";

/// A record in `status`; a dispatch has a live lease unless `expired`.
fn record(status: S, expired: bool) -> EffectRecord {
    let mut record = EffectRecord::new(
        "op",
        "capture_payment",
        "1",
        RequestFingerprint::of_value(&json!({"invoice_id": "INV-1"})).stored(),
        "2026-01-01T00:00:00.000000+00:00",
    );
    record.provider_idempotency_key = Some("capture:INV-1".into());
    record.status = status;
    if status != S::Prepared {
        record.attempts = 1;
    }
    if status == S::Dispatched {
        record.owner_token = Some(OWNER.into());
        let lease = if expired { -1.0 } else { 60.0 };
        record.lease_until = Some(unix_seconds(now()) + lease);
    }
    if status == S::Confirmed {
        record.output = Some(json!({"payment_id": "pay-1"}));
    }
    record
}

fn new_operation() -> NewOperation {
    NewOperation::new(
        "capture_payment",
        "1",
        RequestFingerprint::of_value(&json!({"invoice_id": "INV-1"})),
    )
    .with_provider_idempotency_key(Some("capture:INV-1".into()))
}

fn claim() -> Claim {
    Claim::new("new owner", Duration::from_secs(30))
}

fn evidence(value: Value) -> Evidence {
    value.as_object().cloned().unwrap_or_default()
}

fn confirm(owner: Option<&str>) -> Transition {
    Transition::MarkConfirmed {
        owner_token: owner.map(str::to_owned),
        confirmation: Confirmation {
            output: json!({"payment_id": "pay-2"}),
            provider_operation_id: Some("pay-2".into()),
            evidence: evidence(json!({"source": "test"})),
        },
    }
}

fn unknown(owner: Option<&str>) -> Transition {
    Transition::MarkOutcomeUnknown {
        owner_token: owner.map(str::to_owned),
        error: "timed out".into(),
        evidence: evidence(json!({"dispatch_interruption": "handler_exception"})),
    }
}

fn manual(action: ManualAction) -> Transition {
    Transition::Resolve(ManualResolution::new(
        action,
        crate::Audit::new("ops@example.com", "checked the dashboard", "TICKET-1"),
    ))
}

/// What a row expects.
#[derive(Debug, PartialEq)]
enum Expect {
    /// Applied, now in this status, with these events and this write.
    Applied(S, &'static [&'static str], Option<WriteKind>),
    /// Not applied; nothing written.
    Refused,
    /// An error of this kind.
    Fails(crate::LedgerErrorKind),
}

/// One rule of the state machine.
struct Row {
    rule: &'static str,
    current: Option<EffectRecord>,
    transition: Transition,
    expect: Expect,
}

fn row(rule: &'static str, from: Option<(S, bool)>, transition: Transition, expect: Expect) -> Row {
    Row {
        rule,
        current: from.map(|(status, expired)| record(status, expired)),
        transition,
        expect,
    }
}

/// A row on a record made by hand.
fn row_on(
    rule: &'static str,
    current: EffectRecord,
    transition: Transition,
    expect: Expect,
) -> Row {
    Row {
        rule,
        current: Some(current),
        transition,
        expect,
    }
}

fn check(rows: Vec<Row>) {
    let mut failures = Vec::new();
    for Row {
        rule,
        current,
        transition,
        expect,
    } in rows
    {
        let got = match plan("op", current.clone(), &transition, now()) {
            Err(err) => Expect::Fails(err.kind()),
            Ok(plan) if !plan.outcome.applied => {
                if plan.write.is_some() {
                    failures.push(format!("{rule}: refused, but writes {:?}", plan.write));
                }
                if Some(&plan.outcome.record) != current.as_ref() {
                    failures.push(format!("{rule}: refused, but reports a changed record"));
                }
                Expect::Refused
            }
            Ok(plan) => {
                let events: Vec<&'static str> = plan
                    .write
                    .iter()
                    .flat_map(|w| w.events.iter().map(|e| e.event_type))
                    .collect();
                let kind = plan.write.map(|w| w.kind);
                match expect {
                    Expect::Applied(status, expected, expected_kind)
                        if status == plan.outcome.record.status
                            && expected == events.as_slice()
                            && expected_kind == kind =>
                    {
                        continue;
                    }
                    _ => {
                        failures.push(format!(
                            "{rule}: expected {expect:?}, planned applied {} {events:?} {kind:?}",
                            plan.outcome.record.status
                        ));
                        continue;
                    }
                }
            }
        };
        if got != expect {
            failures.push(format!("{rule}: expected {expect:?}, planned {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

use Expect::{Applied, Fails, Refused};
const LIVE: bool = false;
const EXPIRED: bool = true;

#[test]
fn prepare_and_claim_rows() {
    use crate::LedgerErrorKind as K;
    let other_version = NewOperation {
        contract_terms: None,
        requires_approval: false,
        contract_version: "2".into(),
        ..new_operation()
    };
    check(vec![
        row(
            "prepare creates",
            None,
            Transition::Prepare(new_operation()),
            Applied(S::Prepared, &["prepared"], Some(WriteKind::Insert)),
        ),
        row(
            "prepare of the same identity writes nothing",
            Some((S::Dispatched, LIVE)),
            Transition::Prepare(new_operation()),
            Refused,
        ),
        row(
            "prepare with another identity conflicts",
            Some((S::Prepared, LIVE)),
            Transition::Prepare(other_version),
            Fails(K::Conflict),
        ),
        row(
            "prepare and claim creates and claims",
            None,
            Transition::PrepareAndClaim(new_operation(), claim()),
            Applied(
                S::Dispatched,
                &["prepared", "dispatched"],
                Some(WriteKind::Insert),
            ),
        ),
        row(
            "prepare and claim claims a prepared operation",
            Some((S::Prepared, LIVE)),
            Transition::PrepareAndClaim(new_operation(), claim()),
            Applied(S::Dispatched, &["dispatched"], Some(WriteKind::Transition)),
        ),
        row(
            "prepare and claim leaves a dispatch",
            Some((S::Dispatched, LIVE)),
            Transition::PrepareAndClaim(new_operation(), claim()),
            Refused,
        ),
        row(
            "claim from prepared",
            Some((S::Prepared, LIVE)),
            Transition::Claim(claim()),
            Applied(S::Dispatched, &["dispatched"], Some(WriteKind::Transition)),
        ),
        row(
            "claim only from prepared (dispatched)",
            Some((S::Dispatched, EXPIRED)),
            Transition::Claim(claim()),
            Refused,
        ),
        row(
            "claim only from prepared (confirmed)",
            Some((S::Confirmed, LIVE)),
            Transition::Claim(claim()),
            Refused,
        ),
        row(
            "claim only from prepared (quarantined)",
            Some((S::Quarantined, LIVE)),
            Transition::Claim(claim()),
            Refused,
        ),
        row(
            "a missing operation is not found",
            None,
            Transition::Claim(claim()),
            Fails(K::NotFound),
        ),
    ]);
}

#[test]
fn lease_rows() {
    let renew = |token: &str| Transition::RenewLease {
        owner_token: token.into(),
        lease: Duration::from_secs(30),
    };
    check(vec![
        row(
            "the owner renews in place",
            Some((S::Dispatched, LIVE)),
            renew(OWNER),
            Applied(S::Dispatched, &[], Some(WriteKind::InPlace)),
        ),
        row(
            "another token cannot renew",
            Some((S::Dispatched, LIVE)),
            renew("intruder"),
            Refused,
        ),
        row(
            "an expired lease becomes outcome_unknown",
            Some((S::Dispatched, EXPIRED)),
            Transition::ExpireLease,
            Applied(
                S::OutcomeUnknown,
                &["outcome_unknown"],
                Some(WriteKind::Transition),
            ),
        ),
        row(
            "a live lease does not expire",
            Some((S::Dispatched, LIVE)),
            Transition::ExpireLease,
            Refused,
        ),
        row(
            "only a dispatch expires",
            Some((S::OutcomeUnknown, LIVE)),
            Transition::ExpireLease,
            Refused,
        ),
    ]);
}

#[test]
fn outcome_rows() {
    check(vec![
        row(
            "the owner marks unknown",
            Some((S::Dispatched, LIVE)),
            unknown(Some(OWNER)),
            Applied(
                S::OutcomeUnknown,
                &["outcome_unknown"],
                Some(WriteKind::Transition),
            ),
        ),
        row(
            "a stale owner cannot mark unknown",
            Some((S::Dispatched, LIVE)),
            unknown(Some("stale")),
            Refused,
        ),
        row(
            "unknown without owner from unknown",
            Some((S::OutcomeUnknown, LIVE)),
            unknown(None),
            Applied(
                S::OutcomeUnknown,
                &["outcome_unknown"],
                Some(WriteKind::Transition),
            ),
        ),
        row(
            "unknown without owner from quarantined",
            Some((S::Quarantined, LIVE)),
            unknown(None),
            Applied(
                S::OutcomeUnknown,
                &["outcome_unknown"],
                Some(WriteKind::Transition),
            ),
        ),
        row(
            "unknown without owner not from a dispatch",
            Some((S::Dispatched, LIVE)),
            unknown(None),
            Refused,
        ),
        row(
            "the owner confirms",
            Some((S::Dispatched, LIVE)),
            confirm(Some(OWNER)),
            Applied(S::Confirmed, &["confirmed"], Some(WriteKind::Transition)),
        ),
        row(
            "a stale owner cannot confirm",
            Some((S::Dispatched, LIVE)),
            confirm(Some("stale")),
            Refused,
        ),
        row(
            "confirm without owner from prepared",
            Some((S::Prepared, LIVE)),
            confirm(None),
            Applied(S::Confirmed, &["confirmed"], Some(WriteKind::Transition)),
        ),
        row(
            "confirm without owner from unknown",
            Some((S::OutcomeUnknown, LIVE)),
            confirm(None),
            Applied(S::Confirmed, &["confirmed"], Some(WriteKind::Transition)),
        ),
        row(
            "confirm without owner from quarantined",
            Some((S::Quarantined, LIVE)),
            confirm(None),
            Applied(S::Confirmed, &["confirmed"], Some(WriteKind::Transition)),
        ),
        row(
            "confirm without owner of a confirmed operation is a no-op success",
            Some((S::Confirmed, LIVE)),
            confirm(None),
            Applied(S::Confirmed, &[], None),
        ),
        row(
            "confirm without owner not over a live dispatch",
            Some((S::Dispatched, LIVE)),
            confirm(None),
            Refused,
        ),
        row(
            "confirm without owner not after a rejection",
            Some((S::Rejected, LIVE)),
            confirm(None),
            Refused,
        ),
        row(
            "the owner rejects",
            Some((S::Dispatched, LIVE)),
            Transition::MarkRejected {
                owner_token: OWNER.into(),
                error: "declined".into(),
            },
            Applied(S::Rejected, &["rejected"], Some(WriteKind::Transition)),
        ),
        row(
            "a stale owner cannot reject",
            Some((S::Dispatched, LIVE)),
            Transition::MarkRejected {
                owner_token: "stale".into(),
                error: "declined".into(),
            },
            Refused,
        ),
    ]);
}

#[test]
fn reconciliation_rows() {
    let quarantine = || Transition::Quarantine {
        error: "no basis".into(),
        evidence: evidence(json!({"probe_status": "unknown"})),
    };
    let retry = || Transition::ResetForRetry {
        evidence: evidence(json!({"retry_basis": "probe_not_committed"})),
    };
    check(vec![
        row(
            "quarantine from unknown",
            Some((S::OutcomeUnknown, LIVE)),
            quarantine(),
            Applied(
                S::Quarantined,
                &["quarantined"],
                Some(WriteKind::Transition),
            ),
        ),
        row(
            "quarantine only from uncertain",
            Some((S::Prepared, LIVE)),
            quarantine(),
            Refused,
        ),
        row(
            "quarantine not over a dispatch",
            Some((S::Dispatched, LIVE)),
            quarantine(),
            Refused,
        ),
        row(
            "reset for retry from quarantined",
            Some((S::Quarantined, LIVE)),
            retry(),
            Applied(
                S::Prepared,
                &["retry_authorized"],
                Some(WriteKind::Transition),
            ),
        ),
        row(
            "reset for retry from unknown",
            Some((S::OutcomeUnknown, LIVE)),
            retry(),
            Applied(
                S::Prepared,
                &["retry_authorized"],
                Some(WriteKind::Transition),
            ),
        ),
        row(
            "reset for retry only from uncertain",
            Some((S::Confirmed, LIVE)),
            retry(),
            Refused,
        ),
    ]);
}

#[test]
fn manual_rows() {
    use crate::LedgerErrorKind as K;
    let mut running = record(S::OutcomeUnknown, LIVE);
    running.evidence.insert(
        crate::evidence::HANDLER_MAY_STILL_BE_RUNNING.into(),
        true.into(),
    );
    // A record another writer left uncertain with its lease still running.
    let mut leased = record(S::Quarantined, LIVE);
    leased.lease_until = Some(unix_seconds(now()) + 60.0);
    let blank_actor = Transition::Resolve(ManualResolution::new(
        ManualAction::Reject,
        crate::Audit::new(" ", "r", "e"),
    ));
    let confirm = || {
        manual(ManualAction::Confirm {
            output: json!({"payment_id": "pay-9"}),
            provider_operation_id: None,
        })
    };
    check(vec![
        row(
            "manual confirm from quarantined",
            Some((S::Quarantined, LIVE)),
            confirm(),
            Applied(
                S::Confirmed,
                &["manually_confirmed"],
                Some(WriteKind::Transition),
            ),
        ),
        row(
            "manual reject from unknown",
            Some((S::OutcomeUnknown, LIVE)),
            manual(ManualAction::Reject),
            Applied(
                S::Rejected,
                &["manually_rejected"],
                Some(WriteKind::Transition),
            ),
        ),
        row(
            "manual retry from quarantined",
            Some((S::Quarantined, LIVE)),
            manual(ManualAction::AuthorizeRetry {
                handler_stopped: false,
            }),
            Applied(
                S::Prepared,
                &["manual_retry_authorized"],
                Some(WriteKind::Transition),
            ),
        ),
        row_on(
            "manual retry refused while a handler may still run",
            running.clone(),
            manual(ManualAction::AuthorizeRetry {
                handler_stopped: false,
            }),
            Fails(K::InvalidTransition),
        ),
        row_on(
            "manual retry refused while the dispatch lease is live",
            leased,
            manual(ManualAction::AuthorizeRetry {
                handler_stopped: false,
            }),
            Fails(K::InvalidTransition),
        ),
        row_on(
            "manual retry once the operator states the handler stopped",
            running,
            manual(ManualAction::AuthorizeRetry {
                handler_stopped: true,
            }),
            Applied(
                S::Prepared,
                &["manual_retry_authorized"],
                Some(WriteKind::Transition),
            ),
        ),
        row(
            "manual resolution only from uncertain",
            Some((S::Dispatched, LIVE)),
            confirm(),
            Fails(K::InvalidTransition),
        ),
        row(
            "manual resolution needs an actor",
            Some((S::Quarantined, LIVE)),
            blank_actor,
            Fails(K::InvalidInput),
        ),
    ]);
}

#[test]
fn guarded_rows() {
    use crate::LedgerErrorKind as K;
    let read = record(S::Quarantined, LIVE);
    let mut older = read.clone();
    older.attempts = 0;
    let retry = Transition::ResetForRetry {
        evidence: evidence(json!({"retry_basis": "probe_not_committed"})),
    };
    let guarded = |guard: Guard, inner: Transition| Transition::Guarded(guard, Box::new(inner));
    let mut running = record(S::OutcomeUnknown, LIVE);
    running.evidence.insert(
        crate::evidence::HANDLER_MAY_STILL_BE_RUNNING.into(),
        true.into(),
    );
    check(vec![
        row(
            "a guard on the current record holds",
            Some((S::Quarantined, LIVE)),
            guarded(Guard::unchanged(&read), retry.clone()),
            Applied(
                S::Prepared,
                &["retry_authorized"],
                Some(WriteKind::Transition),
            ),
        ),
        row(
            "a guard on an older attempt fails",
            Some((S::Quarantined, LIVE)),
            guarded(Guard::unchanged(&older), retry.clone()),
            Refused,
        ),
        row(
            "a guarded prepare is invalid",
            Some((S::Quarantined, LIVE)),
            guarded(
                Guard::unchanged(&read),
                Transition::Prepare(new_operation()),
            ),
            Fails(K::InvalidInput),
        ),
    ]);
    // The running-handler condition is read from the current record.
    let plan = plan(
        "op",
        Some(running.clone()),
        &guarded(Guard::unchanged(&running).no_running_handler(), retry),
        now(),
    )
    .expect("a guarded reset plans");
    assert!(!plan.outcome.applied && plan.write.is_none());
}

#[test]
fn a_repeat_that_changes_nothing_writes_nothing() {
    let mut quarantined = record(S::Quarantined, LIVE);
    quarantined.error = Some("no basis".into());
    quarantined.evidence = evidence(json!({"probe_status": "unknown"}));
    let plan = plan(
        "op",
        Some(quarantined.clone()),
        &Transition::Quarantine {
            error: "no basis".into(),
            evidence: evidence(json!({"probe_status": "unknown"})),
        },
        now(),
    )
    .expect("a repeated quarantine plans");
    assert!(plan.outcome.applied);
    assert_eq!(plan.write, None);
    assert_eq!(plan.outcome.record, quarantined);
}

#[test]
fn values_too_deep_to_read_back_are_refused() {
    let mut deep = json!(1);
    for _ in 0..crate::canonical::MAX_DEPTH + 1 {
        deep = json!([deep]);
    }
    let transitions = [
        Transition::MarkConfirmed {
            owner_token: Some(OWNER.into()),
            confirmation: Confirmation {
                output: deep.clone(),
                provider_operation_id: None,
                evidence: Evidence::new(),
            },
        },
        Transition::MarkOutcomeUnknown {
            owner_token: Some(OWNER.into()),
            error: "x".into(),
            evidence: evidence(json!({"deep": deep})),
        },
    ];
    for transition in transitions {
        let err = plan("op", Some(record(S::Dispatched, LIVE)), &transition, now())
            .expect_err("a value too deep to read back is refused");
        assert_eq!(err.kind(), crate::LedgerErrorKind::InvalidInput, "{err}");
    }
}

/// A retry authorization keeps what was known and says what the operator
/// stated: the earlier evidence (a handler that may still run) stays on the
/// record and in the event, beside the operator's statement.
#[test]
fn a_manual_retry_keeps_the_evidence_it_replaces() {
    let mut running = record(S::OutcomeUnknown, LIVE);
    running.evidence.insert(
        crate::evidence::HANDLER_MAY_STILL_BE_RUNNING.into(),
        true.into(),
    );
    running.evidence.insert(
        crate::evidence::DISPATCH_INTERRUPTION.into(),
        crate::evidence::INTERRUPTED_BY_LEASE_EXPIRY.into(),
    );
    let retry = manual(ManualAction::AuthorizeRetry {
        handler_stopped: true,
    });
    let plan = plan("op", Some(running), &retry, now()).unwrap();
    let write = plan.write.unwrap();
    let data = &write.events[0].data["evidence"];
    for evidence in [data, &Value::Object(plan.outcome.record.evidence.clone())] {
        assert_eq!(evidence["handler_stopped_asserted"], json!(true));
        assert_eq!(evidence["handler_may_still_be_running"], json!(false));
        assert_eq!(
            evidence["evidence_before_resolution"],
            json!({"handler_may_still_be_running": true, "dispatch_interruption": "lease_expired"})
        );
        assert_eq!(evidence["actor"], json!("ops@example.com"));
    }
    // A second resolution keeps one copy, not a nested chain.
    let mut again = plan.outcome.record;
    again.status = S::Quarantined;
    let plan2 = plan_again(again);
    assert!(
        plan2["evidence_before_resolution"]
            .get("evidence_before_resolution")
            .is_none(),
        "{plan2}"
    );
}

fn plan_again(record: EffectRecord) -> Value {
    let plan = plan("op", Some(record), &manual(ManualAction::Reject), now()).unwrap();
    Value::Object(plan.outcome.record.evidence)
}
