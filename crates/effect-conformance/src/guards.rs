//! Guarded transitions: a decision made on an earlier read lands only on the
//! record it was made about, and a repeat that changes nothing writes nothing.

use effect_core::EffectLedgerExt as _;
use effect_core::{
    EffectRecord, EffectStatus as S, Guard, LedgerErrorKind, ManualAction, Transition,
};
use serde_json::json;

use super::LedgerFactory;
use super::harness::{Check, EXPIRED, LIVE, confirmation, evidence, manual, new_operation, tick};

impl Check {
    /// Applies `transition` guarded by `guard`; returns whether it applied.
    fn guarded(&self, id: &str, guard: &Guard, transition: Transition) -> bool {
        let name = transition.name();
        let outcome = self.ok(
            self.ledger.apply(
                id,
                &Transition::Guarded(guard.clone(), Box::new(transition)),
            ),
            format_args!("guarded {name} of {id:?}"),
        );
        outcome.applied
    }

    /// Dispatches a `prepared` operation as `token` and loses its outcome
    /// (the provider may have committed, the response was lost).
    fn dispatch_and_lose(&self, id: &str, token: &str) -> EffectRecord {
        self.must_claim(id, token, LIVE);
        self.applied(
            self.ledger.mark_outcome_unknown(
                id,
                Some(token),
                "response lost",
                &evidence(json!({"dispatch_interruption": "handler_exception"})),
            ),
            format_args!("mark_outcome_unknown by {token}"),
        );
        self.record(id)
    }
}

/// The interleaving of a stale reconciliation, step by step. Attempt 1 fails
/// and is quarantined. Caller B reads the record and asks its probe, which
/// (correctly) says attempt 1 never committed. Before B acts, caller A resets
/// the operation on its own probe, dispatches attempt 2, and loses that
/// response. B's reset, confirmation, quarantine and manual resolution,
/// guarded by the record B read, must all be refused and write nothing: the
/// answer B holds is about attempt 1, and acting on it would dispatch
/// attempt 3 while attempt 2 may have charged the customer. A reset guarded
/// by the current record applies.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn stale_reconciliation_is_refused(factory: LedgerFactory<'_>) {
    let c = Check::new("stale_reconciliation_is_refused", factory);
    c.prepare("op");
    c.dispatch_and_lose("op", "attempt 1");
    c.applied(
        c.ledger
            .quarantine("op", "no basis yet", &evidence(json!({"probe": "slow"}))),
        "quarantine after attempt 1",
    );
    // B reads the record its probe answer will be about.
    let read_by_b = Guard::unchanged(&c.record("op"));
    // A reconciles on its own read, first.
    tick();
    let read_by_a = Guard::unchanged(&c.record("op"));
    let retry = || Transition::ResetForRetry {
        evidence: evidence(json!({"retry_basis": "probe_not_committed"})),
    };
    c.ensure(
        c.guarded("op", &read_by_a, retry()),
        "a reset guarded by the current record must apply",
    );
    tick();
    let after_attempt_2 = c.dispatch_and_lose("op", "attempt 2");
    c.same(after_attempt_2.attempts, 2, "attempts after attempt 2");
    let before = c.snapshot("op");
    tick();
    c.ensure(
        !c.guarded("op", &read_by_b, retry()),
        "a reset guarded by a read from before attempt 2 must be refused",
    );
    c.ensure(
        !c.guarded(
            "op",
            &read_by_b,
            Transition::MarkConfirmed {
                owner_token: None,
                confirmation: confirmation(json!({"charged": true})),
            },
        ),
        "a confirmation guarded by a stale read must be refused",
    );
    c.ensure(
        !c.guarded(
            "op",
            &read_by_b,
            Transition::Quarantine {
                error: "stale".into(),
                evidence: evidence(json!({"stale": true})),
            },
        ),
        "a quarantine guarded by a stale read must be refused",
    );
    c.ensure(
        !c.guarded(
            "op",
            &read_by_b,
            Transition::Resolve(manual(ManualAction::AuthorizeRetry {
                handler_stopped: false,
            })),
        ),
        "a manual retry authorization guarded by a stale read must be refused",
    );
    c.unchanged("op", &before, "transitions guarded by a stale read");
    let current = Guard::unchanged(&c.record("op"));
    c.ensure(
        c.guarded(
            "op",
            &current,
            Transition::Quarantine {
                error: "attempt 2 lost".into(),
                evidence: evidence(json!({"probe_status": "pending"})),
            },
        ),
        "a quarantine guarded by the current record must apply",
    );
    c.same(
        c.event_types("op"),
        [
            "prepared",
            "dispatched",
            "outcome_unknown",
            "quarantined",
            "retry_authorized",
            "dispatched",
            "outcome_unknown",
            "quarantined",
        ]
        .map(String::from)
        .to_vec(),
        "events",
    );
}

/// A reset guarded with `no_running_handler` is refused, and writes nothing,
/// when the current record says a previous handler may still be running (an
/// expired lease); the same reset without that condition applies.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn guarded_reset_waits_for_running_handler(factory: LedgerFactory<'_>) {
    let c = Check::new("guarded_reset_waits_for_running_handler", factory);
    c.prepare("op");
    c.must_claim("op", "crashed worker", EXPIRED);
    c.applied(
        c.ledger
            .apply("op", &Transition::ExpireLease)
            .map(|o| o.applied),
        "expire_lease of an expired dispatch",
    );
    let record = c.record("op");
    c.ensure(
        record.handler_may_still_be_running(),
        "an expired lease must leave handler_may_still_be_running=true",
    );
    let before = c.snapshot("op");
    let retry = || Transition::ResetForRetry {
        evidence: evidence(json!({"retry_basis": "probe_not_committed"})),
    };
    let guard = Guard::unchanged(&record);
    c.ensure(
        !c.guarded("op", &guard.clone().no_running_handler(), retry()),
        "a reset that needs no running handler must be refused after a lease expiry",
    );
    c.unchanged("op", &before, "a refused guarded reset");
    c.ensure(
        c.guarded("op", &guard, retry()),
        "a reset guarded by the current record alone must apply",
    );
    c.same(c.status("op"), S::Prepared, "status after the reset");
}

/// A guarded prepare is invalid input, and a guarded transition of a missing
/// operation is not found; neither writes anything.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn guarded_transition_inputs(factory: LedgerFactory<'_>) {
    let c = Check::new("guarded_transition_inputs", factory);
    let record = c.prepare("op");
    let guard = Guard::unchanged(&record);
    let before = c.snapshot("op");
    c.err(
        c.ledger.apply(
            "op",
            &Transition::Guarded(
                guard.clone(),
                Box::new(Transition::Prepare(new_operation())),
            ),
        ),
        LedgerErrorKind::InvalidInput,
        "a guarded prepare",
    );
    c.unchanged("op", &before, "a guarded prepare");
    c.err(
        c.ledger.apply(
            "missing",
            &Transition::Guarded(guard, Box::new(Transition::ExpireLease)),
        ),
        LedgerErrorKind::NotFound,
        "a guarded transition of a missing operation",
    );
}

/// Quarantining a quarantined operation again with the same error and
/// evidence (an agent calling again) writes nothing, and moving between
/// uncertain statuses keeps `updated_at`: an unresolved operation's age
/// counts from when it became unresolved.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn unresolved_repeats_write_nothing(factory: LedgerFactory<'_>) {
    let c = Check::new("unresolved_repeats_write_nothing", factory);
    c.prepare("op");
    let unresolved = c.dispatch_and_lose("op", "worker");
    tick();
    let quarantine = || {
        c.ledger.quarantine(
            "op",
            "no basis",
            &evidence(json!({"probe_status": "unknown"})),
        )
    };
    c.applied(quarantine(), "quarantine from outcome_unknown");
    let quarantined = c.record("op");
    c.same(
        quarantined.updated_at.as_str(),
        unresolved.updated_at.as_str(),
        "updated_at after moving from outcome_unknown to quarantined",
    );
    let before = c.snapshot("op");
    for _ in 0..3 {
        tick();
        c.applied(quarantine(), "the same quarantine again");
    }
    c.unchanged("op", &before, "repeating the same quarantine");
    if let Some(stats) = c.optional(c.ledger.stats(), "stats") {
        c.same(
            stats.oldest_unresolved_updated_at.as_deref(),
            Some(unresolved.updated_at.as_str()),
            "oldest_unresolved_updated_at",
        );
    }
}
