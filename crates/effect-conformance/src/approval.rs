//! Human approval bound to the exact request (docs/approval.md): an
//! operation of a contract that requires approval waits, an approval of its
//! fingerprint lets exactly one claim dispatch it, and a denial rejects it.

use std::time::Duration;

use effect_core::EffectLedgerExt as _;
use effect_core::{
    Approval, Claim, Clock as _, EffectStatus as S, LedgerErrorKind as K, ManualAction,
    SystemClock, Transition,
};
use serde_json::json;

use super::LedgerFactory;
use super::harness::race;
use super::harness::{Check, LIVE, approval_operation, evidence, manual, owner_of, wait_past};
use super::races::RACERS;

const ACTOR: &str = "approver@example.com";
const REASON: &str = "refund matches the ticket";

/// An approval of `id`'s stored fingerprint that expires `valid` from now.
fn approval_of(c: &Check, id: &str, valid: Duration) -> Approval {
    Approval {
        request_fingerprint: c.record(id).request_fingerprint,
        actor: ACTOR.into(),
        reason: REASON.into(),
        expires_at: SystemClock.now() + valid,
    }
}

fn approve(c: &Check, id: &str) {
    let approval = approval_of(c, id, Duration::from_secs(3600));
    let record = c.ok(
        c.ledger.approve(id, &approval),
        format_args!("approve({id:?})"),
    );
    c.same(record.status, S::AwaitingApproval, "status after approve");
    c.same(record, c.record(id), "record returned by approve vs stored");
}

/// A contract that requires approval creates its operation
/// `awaiting_approval` (the `prepared` event says so), and neither a claim
/// nor a prepare-and-claim dispatches it or writes anything before an
/// approval.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn approval_required_operation_waits(factory: LedgerFactory<'_>) {
    let c = Check::new("approval_required_operation_waits", factory);
    let record = c.prepare_awaiting("refund");
    c.same(record.attempts, 0, "attempts while awaiting approval");
    c.evidence_has(
        &record.evidence,
        &json!({"approval_required": true}),
        "record awaiting approval",
    );
    c.event_is(
        &c.last_event("refund"),
        "prepared",
        &json!({"approval_required": true}),
    );
    let before = c.snapshot("refund");
    c.ensure(
        !c.claim("refund", "worker", LIVE),
        "a claim without an approval must return false",
    );
    let both = c.ok(
        c.ledger.apply(
            "refund",
            &Transition::PrepareAndClaim(approval_operation(), Claim::new("worker", LIVE)),
        ),
        "PrepareAndClaim awaiting approval",
    );
    c.ensure(
        !both.applied,
        "PrepareAndClaim without an approval must not claim",
    );
    c.unchanged("refund", &before, "a claim without an approval");
}

/// An approval is recorded with an `approved` event (fingerprint, actor,
/// reason, expiry); the next claim consumes it (the `dispatched` event names
/// the approver), and a retry after an uncertain outcome waits for a new one.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn approval_allows_one_dispatch(factory: LedgerFactory<'_>) {
    let c = Check::new("approval_allows_one_dispatch", factory);
    c.prepare_awaiting("refund");
    let fingerprint = c.record("refund").request_fingerprint;
    approve(&c, "refund");
    c.event_is(
        &c.last_event("refund"),
        "approved",
        &json!({"actor": ACTOR, "reason": REASON, "request_fingerprint": fingerprint}),
    );
    c.must_claim("refund", "worker-1", LIVE);
    let record = c.record("refund");
    c.same(
        record.status,
        S::Dispatched,
        "status after the approved claim",
    );
    c.same(record.attempts, 1, "attempts after the approved claim");
    c.same(record.approval(), None, "approval left after the claim");
    let dispatched = c.last_event("refund");
    c.event_is(&dispatched, "dispatched", &json!({"attempt": 1}));
    c.same(
        dispatched.data.pointer("/approval/actor"),
        Some(&json!(ACTOR)),
        "approver in the dispatched event",
    );
    // The dispatch's outcome is uncertain and a retry is authorized: the
    // used approval does not cover a second dispatch.
    c.applied(
        c.ledger.mark_outcome_unknown(
            "refund",
            Some("worker-1"),
            "timed out",
            &evidence(json!({})),
        ),
        "mark_outcome_unknown by the owner",
    );
    c.applied(
        c.ledger
            .reset_for_retry("refund", &evidence(json!({"retry_basis": "conformance"}))),
        "reset_for_retry",
    );
    c.same(
        c.status("refund"),
        S::AwaitingApproval,
        "status after a retry of an approval-required operation",
    );
    c.ensure(
        !c.claim("refund", "worker-2", LIVE),
        "a second claim on a used approval must return false",
    );
    approve(&c, "refund");
    c.must_claim("refund", "worker-2", LIVE);
    c.same(
        c.record("refund").attempts,
        2,
        "attempts after the second approval",
    );
}

/// An approval of other arguments is a conflict; an approval already
/// expired, a second one while an unused one stands, one of an operation not
/// awaiting approval, and one without an actor or reason are refused. None
/// writes anything.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn approval_refusals_write_nothing(factory: LedgerFactory<'_>) {
    let c = Check::new("approval_refusals_write_nothing", factory);
    c.prepare_awaiting("refund");
    let refused = |approval: Approval, kind: K, what: &str| {
        let before = c.snapshot("refund");
        c.err(c.ledger.approve("refund", &approval), kind, what);
        c.unchanged("refund", &before, what);
    };
    let valid = approval_of(&c, "refund", Duration::from_secs(3600));
    refused(
        Approval {
            request_fingerprint: "blake3:other-arguments".into(),
            ..valid.clone()
        },
        K::Conflict,
        "an approval of another fingerprint",
    );
    refused(
        Approval {
            expires_at: SystemClock.now() - Duration::from_secs(1),
            ..valid.clone()
        },
        K::InvalidTransition,
        "an approval already expired",
    );
    refused(
        Approval {
            actor: " ".into(),
            ..valid.clone()
        },
        K::InvalidInput,
        "an approval without an actor",
    );
    refused(
        Approval {
            reason: String::new(),
            ..valid.clone()
        },
        K::InvalidInput,
        "an approval without a reason",
    );
    approve(&c, "refund");
    refused(
        valid.clone(),
        K::InvalidTransition,
        "a second approval while one is unused",
    );
    c.must_claim("refund", "worker", LIVE);
    refused(
        valid,
        K::InvalidTransition,
        "an approval after the dispatch",
    );
    for from in [S::Prepared, S::Quarantined, S::Confirmed] {
        let id = format!("from {from}");
        c.in_status(&id, from);
        let before = c.snapshot(&id);
        let approval = approval_of(&c, &id, Duration::from_secs(3600));
        c.err(
            c.ledger.approve(&id, &approval),
            K::InvalidTransition,
            format_args!("an approval from {from}"),
        );
        c.unchanged(&id, &before, format_args!("an approval from {from}"));
    }
}

/// An approval that expires before the claim does not dispatch: the claim
/// drops it (an `approval_expired` event) and the operation keeps waiting.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn expired_approval_is_refused_by_the_claim(factory: LedgerFactory<'_>) {
    let c = Check::new("expired_approval_is_refused_by_the_claim", factory);
    c.prepare_awaiting("refund");
    // Short-lived, so the check waits little; a loaded machine that takes
    // longer than that to record it sees it refused as expired already
    // (nothing written), and the check tries again with a longer one.
    let mut valid = Duration::from_millis(20);
    let approval = loop {
        let approval = approval_of(&c, "refund", valid);
        match c.ledger.approve("refund", &approval) {
            Err(err)
                if err.kind() == K::InvalidTransition
                    && err.to_string().contains("already expired")
                    && valid < Duration::from_secs(60) =>
            {
                valid *= 4;
            }
            result => {
                c.ok(result, "approve");
                break approval;
            }
        }
    };
    // Waits for the store's clock (the system clock here) to pass the expiry.
    wait_past(approval.expires_at);
    c.ensure(
        !c.claim("refund", "worker", LIVE),
        "a claim with an expired approval must return false",
    );
    let record = c.record("refund");
    c.same(
        record.status,
        S::AwaitingApproval,
        "status after the refused claim",
    );
    c.same(record.attempts, 0, "attempts after the refused claim");
    c.same(record.approval(), None, "approval left after it expired");
    c.event_is(
        &c.last_event("refund"),
        "approval_expired",
        &json!({"actor": ACTOR}),
    );
}

/// A denial makes the operation `rejected` (actor and reason in its error,
/// evidence and `approval_denied` event); nothing claims or approves it
/// afterwards, and only an operation awaiting approval can be denied.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn denial_is_terminal(factory: LedgerFactory<'_>) {
    let c = Check::new("denial_is_terminal", factory);
    c.prepare_awaiting("refund");
    approve(&c, "refund");
    let record = c.ok(
        c.ledger
            .deny_approval("refund", "lead@example.com", "duplicate request"),
        "deny_approval",
    );
    c.same(record.status, S::Rejected, "status after the denial");
    c.same(record.approval(), None, "approval left after the denial");
    c.ensure(
        record
            .error
            .as_deref()
            .is_some_and(|e| e.contains("lead@example.com") && e.contains("duplicate request")),
        format_args!(
            "error after the denial names actor and reason: {:?}",
            record.error
        ),
    );
    c.event_is(
        &c.last_event("refund"),
        "approval_denied",
        &json!({"actor": "lead@example.com", "reason": "duplicate request"}),
    );
    let before = c.snapshot("refund");
    c.ensure(
        !c.claim("refund", "worker", LIVE),
        "a claim after a denial must return false",
    );
    let approval = approval_of(&c, "refund", Duration::from_secs(3600));
    c.err(
        c.ledger.approve("refund", &approval),
        K::InvalidTransition,
        "an approval after a denial",
    );
    c.err(
        c.ledger.deny_approval("refund", ACTOR, "again"),
        K::InvalidTransition,
        "a second denial",
    );
    c.unchanged("refund", &before, "refusals after a denial");
    c.prepare_awaiting("blank");
    c.err(
        c.ledger.deny_approval("blank", "", REASON),
        K::InvalidInput,
        "a denial without an actor",
    );
    c.in_status("prepared", S::Prepared);
    c.err(
        c.ledger.deny_approval("prepared", ACTOR, REASON),
        K::InvalidTransition,
        "a denial of a prepared operation",
    );
}

/// An operator's retry authorization of an uncertain approval-required
/// operation makes it wait for a new approval, not `prepared`.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn manual_retry_waits_for_a_new_approval(factory: LedgerFactory<'_>) {
    let c = Check::new("manual_retry_waits_for_a_new_approval", factory);
    c.prepare_awaiting("refund");
    approve(&c, "refund");
    let token = owner_of("refund");
    c.must_claim("refund", &token, Duration::ZERO);
    c.applied(
        c.ledger
            .mark_outcome_unknown("refund", Some(&token), "timed out", &evidence(json!({}))),
        "mark_outcome_unknown by the owner",
    );
    let record = c.ok(
        c.ledger.resolve_manually(
            "refund",
            &manual(ManualAction::AuthorizeRetry {
                handler_stopped: true,
            }),
        ),
        "manual retry authorization",
    );
    c.same(
        record.status,
        S::AwaitingApproval,
        "status after a manual retry authorization",
    );
    c.ensure(
        c.record("refund").requires_approval(),
        "the stored record still requires approval after the manual resolution",
    );
}

/// 16 threads claim one approved operation at once: exactly one dispatches
/// it, once.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn concurrent_claims_use_one_approval(factory: LedgerFactory<'_>) {
    let c = Check::new("concurrent_claims_use_one_approval", factory);
    c.prepare_awaiting("contended");
    approve(&c, "contended");
    let results = race(&c, RACERS, |i| {
        let claim = Claim::new(format!("racer {i}"), LIVE);
        c.ledger
            .apply(
                "contended",
                &Transition::PrepareAndClaim(approval_operation(), claim),
            )
            .map(|outcome| outcome.applied)
    });
    let won: Vec<usize> = results
        .into_iter()
        .enumerate()
        .filter_map(|(i, r)| c.ok(r, format_args!("racer {i}")).then_some(i))
        .collect();
    c.same(
        won.len(),
        1,
        format_args!("claims that won (racers {won:?})"),
    );
    let record = c.record("contended");
    c.same(record.attempts, 1, "attempts after the race");
    let dispatches = c
        .event_types("contended")
        .iter()
        .filter(|t| *t == "dispatched")
        .count();
    c.same(dispatches, 1, "dispatched events after the race");
}
