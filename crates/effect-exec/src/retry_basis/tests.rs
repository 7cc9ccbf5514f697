//! Every basis in every state it can be recorded from: the full table of
//! statuses, handler flags, key guarantees and what reconciliation learned.

use effect_core::EffectStatus::{self, OutcomeUnknown, Quarantined};

use super::Learned::{NoProbe, ProbeFailed, ProbeNotCommitted, ProbeUnknown, ReportedNotSent};
use super::RetryBasis::{GuaranteedKey, NotSent, ProbeNotCommitted as Probe};
use super::{Facts, Learned, RetryBasis, retry_basis};

const LEARNED: [Learned; 5] = [
    ReportedNotSent,
    NoProbe,
    ProbeFailed,
    ProbeNotCommitted,
    ProbeUnknown,
];

/// One row: the facts (status, handler may still run, guaranteed key,
/// idempotent retry allowed) and the basis for each of [`LEARNED`].
type Row = (
    (EffectStatus, bool, bool, bool),
    [Option<RetryBasis>; LEARNED.len()],
);

#[rustfmt::skip]
const TABLE: [Row; 16] = [
    //                                          reported not sent  no probe             probe failed         probe not committed  probe unknown
    ((OutcomeUnknown, false, false, false), [None,              None,                None,                Some(Probe),         None]),
    ((OutcomeUnknown, false, false, true),  [Some(NotSent),     None,                None,                Some(Probe),         None]),
    ((OutcomeUnknown, false, true,  false), [None,              None,                None,                Some(Probe),         None]),
    ((OutcomeUnknown, false, true,  true),  [Some(NotSent),     Some(GuaranteedKey), Some(GuaranteedKey), Some(Probe),         Some(GuaranteedKey)]),
    // A previous handler may still send: only the key is a basis.
    ((OutcomeUnknown, true,  false, false), [None,              None,                None,                None,                None]),
    ((OutcomeUnknown, true,  false, true),  [None,              None,                None,                None,                None]),
    ((OutcomeUnknown, true,  true,  false), [None,              None,                None,                None,                None]),
    ((OutcomeUnknown, true,  true,  true),  [Some(GuaranteedKey), Some(GuaranteedKey), Some(GuaranteedKey), Some(GuaranteedKey), Some(GuaranteedKey)]),
    // A quarantine never takes the not-sent shortcut.
    ((Quarantined,    false, false, false), [None,              None,                None,                Some(Probe),         None]),
    ((Quarantined,    false, false, true),  [None,              None,                None,                Some(Probe),         None]),
    ((Quarantined,    false, true,  false), [None,              None,                None,                Some(Probe),         None]),
    ((Quarantined,    false, true,  true),  [Some(GuaranteedKey), Some(GuaranteedKey), Some(GuaranteedKey), Some(Probe),       Some(GuaranteedKey)]),
    ((Quarantined,    true,  false, false), [None,              None,                None,                None,                None]),
    ((Quarantined,    true,  false, true),  [None,              None,                None,                None,                None]),
    ((Quarantined,    true,  true,  false), [None,              None,                None,                None,                None]),
    ((Quarantined,    true,  true,  true),  [Some(GuaranteedKey), Some(GuaranteedKey), Some(GuaranteedKey), Some(GuaranteedKey), Some(GuaranteedKey)]),
];

#[test]
fn every_basis_in_every_state() {
    let mut checked = 0;
    for ((status, running, key, allowed), expected) in TABLE {
        let facts = Facts {
            status,
            handler_may_still_be_running: running,
            guaranteed_key: key,
            idempotent_retry_allowed: allowed,
        };
        for (learned, expected) in LEARNED.into_iter().zip(expected) {
            assert_eq!(
                retry_basis(facts, learned),
                expected,
                "{facts:?} after {learned:?}"
            );
            checked += 1;
        }
    }
    // 2 statuses x 2 handler flags x 2 key guarantees x 2 permissions x 5 answers.
    assert_eq!(checked, 80);
}

#[test]
fn a_basis_that_needs_the_handler_stopped_is_never_named_while_it_may_run() {
    for ((status, running, key, allowed), _) in TABLE.into_iter().filter(|(facts, _)| facts.1) {
        let facts = Facts {
            status,
            handler_may_still_be_running: running,
            guaranteed_key: key,
            idempotent_retry_allowed: allowed,
        };
        for learned in LEARNED {
            if let Some(basis) = retry_basis(facts, learned) {
                assert!(!basis.needs_no_running_handler(), "{facts:?}: {basis:?}");
            }
        }
    }
}

#[test]
fn each_basis_has_its_evidence_value() {
    assert_eq!(GuaranteedKey.as_str(), "provider_idempotency_guaranteed");
    assert_eq!(NotSent.as_str(), "handler_reported_not_sent");
    assert_eq!(Probe.as_str(), "probe_not_committed");
}
