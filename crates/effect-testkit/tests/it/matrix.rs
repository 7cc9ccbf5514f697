//! The fault matrix: the guarantee holds wherever the library claims it, and
//! the naive baseline shows the duplicates it is there to show.

use std::sync::OnceLock;

use effect_core::EffectStatus;
use effect_test_support::snapshots;
use effect_testkit::matrix::{Matrix, MatrixReport};
use effect_testkit::scenario::{ContractVariant, FaultPoint};

use ContractVariant::{Both, GuaranteedKey, Neither, ProbeOnly};
use EffectStatus::{Confirmed, Quarantined};
use FaultPoint::*;

/// The whole matrix, run once for every test here (it takes well under a second).
fn matrix() -> &'static MatrixReport {
    static MATRIX: OnceLock<MatrixReport> = OnceLock::new();
    MATRIX.get_or_init(|| Matrix::new().run().unwrap())
}

/// One cell: final status, handler calls, committed effects.
fn check(fault: FaultPoint, variant: ContractVariant, expected: (EffectStatus, usize, usize)) {
    let cell = matrix().cell(fault, variant).unwrap();
    assert_eq!(
        (cell.status, cell.handler_calls, cell.committed_effect_count),
        expected,
        "{fault} x {variant}: {cell:#?}"
    );
}

#[test]
fn every_cell_ran() {
    assert_eq!(
        matrix().cells.len(),
        FaultPoint::ALL.len() * ContractVariant::ALL.len()
    );
    assert_eq!(matrix().baselines.len(), FaultPoint::ALL.len());
}

#[test]
fn every_cell_where_the_guarantee_is_claimed_commits_at_most_one_effect() {
    for cell in &matrix().cells {
        if cell.guarantee.claimed {
            assert!(
                cell.committed_effect_count <= 1 && !cell.guarantee.blind_retry,
                "{} x {}: {cell:#?}",
                cell.scenario,
                cell.contract
            );
            assert!(cell.passed && !cell.in_progress);
        }
    }
    assert!(matrix().guarantee_kept);
}

#[test]
fn the_guarantee_is_not_claimed_only_for_a_false_key_guarantee() {
    let unclaimed: Vec<_> = matrix()
        .cells
        .iter()
        .filter(|c| !c.guarantee.claimed)
        .map(|c| (c.scenario.as_str(), c.contract))
        .collect();
    assert_eq!(
        unclaimed,
        [
            ("no-provider-idempotency", GuaranteedKey),
            ("no-provider-idempotency", Both)
        ]
    );
    // The false claim is what makes the blind-by-key retry charge twice;
    // with a probe as well, the probe finds the first capture first.
    check(NoProviderIdempotency, GuaranteedKey, (Confirmed, 2, 2));
    assert!(
        !matrix()
            .cell(NoProviderIdempotency, GuaranteedKey)
            .unwrap()
            .guarantee
            .held
    );
    check(NoProviderIdempotency, Both, (Confirmed, 1, 1));
}

#[test]
fn cells_follow_spec_section_7() {
    // Provider commits, ack lost: the probe finds it, the handler ran once.
    check(AfterCommitBeforeAck, ProbeOnly, (Confirmed, 1, 1));
    // Guaranteed key, no probe: a safe replay with the same key.
    check(AfterCommitBeforeAck, GuaranteedKey, (Confirmed, 2, 1));
    // No probe, no guarantee: quarantined, never re-run.
    check(AfterCommitBeforeAck, Neither, (Quarantined, 1, 1));
    check(BeforeCommit, Neither, (Quarantined, 1, 0));
    // An authoritative negative probe allows one retry.
    check(BeforeCommit, ProbeOnly, (Confirmed, 2, 1));
    // Deadline + late commit: quarantined (the old handler may still send),
    // then confirmed by the probe on resume; never re-run.
    check(TimeoutLateCommit, ProbeOnly, (Confirmed, 1, 1));
    check(TimeoutLateCommit, Neither, (Quarantined, 1, 1));
    // Pending / unknown lookups are never a reason to dispatch again.
    check(EventuallyConsistent, ProbeOnly, (Confirmed, 1, 1));
    check(ProbeUnavailable, ProbeOnly, (Confirmed, 1, 1));
    // Probe unavailable with a guaranteed key: retry with the same key.
    check(ProbeUnavailable, Both, (Confirmed, 2, 1));
    // The crashed worker's handler is not re-run when the probe can tell.
    check(CrashAfterCommit, Both, (Confirmed, 1, 1));
    check(CrashAfterCommit, Neither, (Quarantined, 1, 1));
    // A lookup that finds a conflicting capture: quarantined, never confirmed
    // or retried, even under a guaranteed key; without a probe, the key
    // alone replays the capture.
    check(ConflictingProvider, ProbeOnly, (Quarantined, 1, 1));
    check(ConflictingProvider, Both, (Quarantined, 1, 1));
    check(ConflictingProvider, GuaranteedKey, (Confirmed, 2, 1));
    check(ConflictingProvider, Neither, (Quarantined, 1, 1));
    for variant in ContractVariant::ALL {
        check(ConcurrentCallers, variant, (Confirmed, 1, 1));
        let cell = matrix().cell(ConcurrentCallers, variant).unwrap();
        assert_eq!(cell.in_progress_callers, 2, "{variant}");
    }
}

#[test]
fn the_naive_baseline_shows_the_duplicates() {
    let naive = |fault| {
        let baseline = matrix().baseline(fault).unwrap();
        assert!(baseline.ledger_max_committed <= 1, "{baseline:?}");
        baseline.naive.committed_effect_count
    };
    assert_eq!(naive(None), 1);
    assert_eq!(naive(BeforeCommit), 1);
    assert_eq!(naive(AfterCommitBeforeAck), 2);
    assert_eq!(naive(TimeoutLateCommit), 2);
    assert_eq!(naive(ProbeUnavailable), 2);
    assert_eq!(naive(EventuallyConsistent), 2);
    assert_eq!(naive(NoProviderIdempotency), 2);
    assert_eq!(naive(ConcurrentCallers), 3);
    assert_eq!(naive(CrashAfterCommit), 2);
    assert_eq!(naive(ConflictingProvider), 2);
}

#[test]
fn matrix_report_snapshots() {
    let settings = snapshots::settings();
    settings.bind(|| {
        insta::assert_snapshot!("matrix_table", matrix().to_table());
        insta::assert_json_snapshot!("matrix_report", matrix());
    });
}
