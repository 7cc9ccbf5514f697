//! The audit trail names the true basis of every automatic retry
//! (docs/spec.md §6): a table of every state a retry can be authorized from
//! (an uncertain dispatch, a report that nothing was sent, a handler that
//! may still run, an expired lease, a quarantine, an operator's decision)
//! against every contract, through `execute`, counting what the provider
//! received and reading the `retry_authorized` event.

use std::sync::Arc;
use std::time::Duration;

use effect_core::{
    Claim, EffectLedger, EffectLedgerExt as _, EffectStatus, NewOperation, RequestFingerprint,
    Transition,
};
use effect_exec::Audit;
use serde_json::{Value, json};

use crate::provider::{
    BOTH, FakeProvider, GUARANTEED_ONLY, NEITHER, PROBE_ONLY, ProbeAnswer, Variant, contract,
    handler, invoice,
};
use crate::{executor, ledger};

/// Where the operation is when the next call reconciles it.
#[derive(Debug, Clone, Copy)]
enum State {
    /// `outcome_unknown`: the handler failed; no handler still runs.
    Unknown,
    /// `outcome_unknown`: the handler reported that nothing was sent.
    NotSent,
    /// `outcome_unknown`: the handler missed its deadline and may still send.
    TimedOut,
    /// `dispatched` under a lease that has ended: the next call records
    /// `handler_may_still_be_running` and reconciles.
    LeaseExpired,
    /// `quarantined` after a failed handler.
    Quarantined,
    /// `quarantined` with a handler that may still send.
    QuarantinedRunning,
}

/// The recorded basis, or `None` when no retry was authorized.
struct Row {
    state: State,
    variant: Variant,
    probe: ProbeAnswer,
    basis: Option<&'static str>,
}

const KEY: Option<&str> = Some("provider_idempotency_guaranteed");
const PROBE: Option<&str> = Some("probe_not_committed");
const NOT_SENT: Option<&str> = Some("handler_reported_not_sent");

const fn row(
    state: State,
    variant: Variant,
    probe: ProbeAnswer,
    basis: Option<&'static str>,
) -> Row {
    Row {
        state,
        variant,
        probe,
        basis,
    }
}

#[rustfmt::skip]
const TABLE: [Row; 24] = {
    use ProbeAnswer::{Fail, Lookup, Unknown as Unsure};
    use State::*;
    [
        row(Unknown,            PROBE_ONLY,      Lookup, PROBE),
        row(Unknown,            PROBE_ONLY,      Unsure, None),
        row(Unknown,            PROBE_ONLY,      Fail,   None),
        row(Unknown,            GUARANTEED_ONLY, Lookup, KEY),
        row(Unknown,            BOTH,            Lookup, PROBE),
        row(Unknown,            BOTH,            Unsure, KEY),
        row(Unknown,            BOTH,            Fail,   KEY),
        row(Unknown,            NEITHER,         Lookup, None),
        row(NotSent,            NEITHER,         Lookup, NOT_SENT),
        row(NotSent,            PROBE_ONLY,      Lookup, NOT_SENT),
        row(NotSent,            BOTH,            Lookup, NOT_SENT),
        row(TimedOut,           PROBE_ONLY,      Lookup, None),
        row(TimedOut,           GUARANTEED_ONLY, Lookup, KEY),
        row(TimedOut,           BOTH,            Lookup, KEY),
        row(LeaseExpired,       PROBE_ONLY,      Lookup, None),
        row(LeaseExpired,       GUARANTEED_ONLY, Lookup, KEY),
        row(LeaseExpired,       BOTH,            Lookup, KEY),
        row(LeaseExpired,       BOTH,            Unsure, KEY),
        row(Quarantined,        PROBE_ONLY,      Lookup, PROBE),
        row(Quarantined,        BOTH,            Unsure, KEY),
        row(Quarantined,        NEITHER,         Lookup, None),
        row(QuarantinedRunning, PROBE_ONLY,      Lookup, None),
        row(QuarantinedRunning, GUARANTEED_ONLY, Lookup, KEY),
        row(QuarantinedRunning, BOTH,            Lookup, KEY),
    ]
};

/// Records `state` for the operation of `args`, as another caller would
/// have left it: its handler never committed anything.
fn leave(ledger: &Arc<dyn EffectLedger>, id: &str, args: &Value, variant: Variant, state: State) {
    let operation = NewOperation::new("capture_payment", "1", RequestFingerprint::of_value(args))
        .with_provider_idempotency_key(
            variant
                .key
                .then(|| format!("capture:{}", args["invoice_id"].as_str().unwrap())),
        );
    let lease = match state {
        State::LeaseExpired => Duration::ZERO,
        _ => Duration::from_secs(3600),
    };
    let claim = Claim::new("elsewhere", lease);
    let claimed = ledger
        .apply(id, &Transition::PrepareAndClaim(operation, claim))
        .unwrap();
    assert!(claimed.applied);
    let (running, interruption) = match state {
        State::LeaseExpired => return,
        State::Unknown | State::Quarantined => (false, "handler_exception"),
        State::NotSent => (false, "not_sent"),
        State::TimedOut | State::QuarantinedRunning => (true, "handler_timeout"),
    };
    let evidence =
        json!({"handler_may_still_be_running": running, "dispatch_interruption": interruption});
    let unknown = Transition::MarkOutcomeUnknown {
        owner_token: Some("elsewhere".into()),
        error: "the dispatch ended without an outcome".into(),
        evidence: evidence.as_object().unwrap().clone(),
    };
    assert!(ledger.apply(id, &unknown).unwrap().applied);
    if matches!(state, State::Quarantined | State::QuarantinedRunning) {
        let quarantine = Transition::Quarantine {
            error: "an operator must decide".into(),
            evidence: effect_core::Evidence::new(),
        };
        assert!(ledger.apply(id, &quarantine).unwrap().applied);
    }
}

/// The `retry_basis` of each `retry_authorized` and `manual_retry_authorized` event.
fn bases(ledger: &Arc<dyn EffectLedger>, id: &str) -> Vec<(String, Value)> {
    ledger
        .events(id)
        .unwrap()
        .into_iter()
        .filter(|event| event.event_type.ends_with("retry_authorized"))
        .map(|event| {
            (
                event.event_type,
                event.data["evidence"]["retry_basis"].clone(),
            )
        })
        .collect()
}

#[test]
fn every_automatic_retry_names_the_rule_that_allowed_it() {
    for (i, case) in TABLE.iter().enumerate() {
        let what = format!(
            "row {i}: {:?} {:?} {:?}",
            case.state, case.variant, case.probe
        );
        let provider = FakeProvider::new(true).probe_script(&[case.probe]);
        let ledger = ledger();
        let args = invoice(&format!("INV-B{i}"));
        let id = format!("invoice:INV-B{i}:capture");
        leave(&ledger, &id, &args, case.variant, case.state);
        let result = executor(&ledger)
            .execute(
                &contract(&provider, case.variant),
                &args,
                handler(&provider),
            )
            .unwrap();
        let recorded = bases(&ledger, &id);
        match case.basis {
            Some(basis) => {
                assert_eq!(
                    recorded,
                    [("retry_authorized".to_owned(), json!(basis))],
                    "{what}"
                );
                assert!(result.is_confirmed(), "{what}: {result:?}");
                // The retry was sent once and committed once.
                assert_eq!(
                    (provider.handler_calls(), provider.committed()),
                    (1, 1),
                    "{what}"
                );
            }
            None => {
                assert!(recorded.is_empty(), "{what}: {recorded:?}");
                assert!(result.status.is_uncertain(), "{what}: {result:?}");
                assert_eq!(
                    (provider.handler_calls(), provider.committed()),
                    (0, 0),
                    "{what}"
                );
            }
        }
    }
}

#[test]
fn a_retry_after_a_lease_expiry_rests_on_the_guaranteed_key_not_the_probe() {
    // The case: a negative probe proves nothing while the expired
    // owner may still send; only the guaranteed key allows the retry.
    let provider = FakeProvider::new(true);
    let ledger = ledger();
    let args = invoice("INV-LEASE");
    let id = "invoice:INV-LEASE:capture";
    leave(&ledger, id, &args, BOTH, State::LeaseExpired);
    let result = executor(&ledger)
        .execute(&contract(&provider, BOTH), &args, handler(&provider))
        .unwrap();
    assert!(result.is_confirmed());
    let events = ledger.events(id).unwrap();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "prepared",
            "dispatched",
            "outcome_unknown",
            "retry_authorized",
            "dispatched",
            "confirmed"
        ]
    );
    assert_eq!(
        events[2].data["evidence"]["handler_may_still_be_running"],
        true
    );
    assert_eq!(events[3].data["evidence"]["probe_status"], "not_committed");
    assert_eq!(
        events[3].data["evidence"]["retry_basis"],
        "provider_idempotency_guaranteed"
    );
    assert_eq!(
        (
            provider.probe_calls(),
            provider.handler_calls(),
            provider.committed()
        ),
        (1, 1, 1)
    );
}

#[test]
fn an_operators_retry_is_recorded_as_the_operators() {
    let provider = FakeProvider::new(false);
    let ledger = ledger();
    let args = invoice("INV-OP");
    let id = "invoice:INV-OP:capture";
    leave(&ledger, id, &args, NEITHER, State::QuarantinedRunning);
    let exec = executor(&ledger);
    let audit = Audit::new("alice", "the worker's host was powered off", "INC-7");
    let authorized = exec
        .operator()
        .authorize_retry_handler_stopped(id, audit)
        .unwrap();
    assert_eq!(authorized.status, EffectStatus::Prepared);
    assert!(
        exec.execute(&contract(&provider, NEITHER), &args, handler(&provider))
            .unwrap()
            .is_confirmed()
    );
    assert_eq!(
        bases(&ledger, id),
        [("manual_retry_authorized".to_owned(), json!("operator"))]
    );
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}
