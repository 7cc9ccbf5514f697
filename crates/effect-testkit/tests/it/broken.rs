//! The suites can fail: every check of the ledger conformance suite and of
//! the executor suite is shown to catch at least one deliberately broken
//! ledger (a mutant of `MemoryLedger`).

use effect_core::EffectLedgerExt as _;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use effect_conformance::{self as conformance, LedgerFactory};
use effect_core::{
    EffectLedger, EffectRecord, EffectStatus, LedgerError, LedgerEvent, LedgerStats, ListQuery,
    ManualAction, MemoryLedger, NewOperation, RequestFingerprint, Transition, TransitionOutcome,
};
use effect_testkit::executor_suite;
use serde_json::{Value, json};

/// One deliberate deviation from docs/spec.md §4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    /// No bug: the wrapper itself must pass, so a caught mutant is caught for its bug.
    Nothing,
    /// `events_after` and `stats` answer Unsupported, which the suite accepts.
    NoOptionalCapabilities,
    ClaimAlwaysWins,
    StripEventField(&'static str, &'static str),
    StripEvidenceKey(&'static str),
    PrepareReturnsFresh,
    SwallowConflict(&'static str),
    BlankIdsAllowed,
    PrepareAndClaimOnlyPrepares,
    PrepareAndClaimAlwaysApplied,
    PrepareAndClaimSkipsIdentity,
    LeaseInMillis,
    AttemptsCappedAtOne,
    IgnoreOwnerToken,
    ExpireLiveLeases,
    AlwaysApplied(&'static str),
    DropsErrorText,
    RefuseUnknownWithoutOwner,
    DropsProviderOperationId,
    NoConfirmFromPrepared,
    ReconfirmReturnsFalse,
    EvidenceFromLastEventOnly,
    ManualConfirmDropsOutput,
    ManualFromAnywhere,
    BlankAuditAllowed,
    NonAtomicClaim,
    NonAtomicPrepareAndClaim,
    NonAtomicExpiry,
    GetMissingFails,
    UpsertsMissing,
    EventsReversed,
    UncheckedListLimit,
    ListOldestFirst,
    ListIgnoresStatus,
    EventsAfterIgnoresLimit,
    StatsMissingZeros,
    /// Lists from the top whatever the cursor.
    ListIgnoresCursor,
    /// Lists every dispatch as stale, live leases included.
    StaleIgnoresLease,
    /// Counts every dispatch as stale.
    StatsStaleCountsEveryDispatch,
    TruncatesLargeOutput,
    TrimsIds,
    /// Applies a guarded transition without checking its guard.
    IgnoresGuard,
    /// Checks the revision of a guarded transition but not `no_running_handler`.
    IgnoresRunningHandler,
    /// Accepts a guarded prepare.
    GuardedPrepareAllowed,
    /// Appends an event for every uncertain transition, even a repeat, and
    /// renews `updated_at`.
    RepeatsWrite,
    /// Answers every refused approval as if it had been recorded.
    ApproveAnything,
    /// Claims without checking or charging their budgets.
    IgnoreBudgets,
    /// Answers every refused cancel as if it had been applied.
    CancelAnything,
    /// Counts every event of an operation, whatever its type.
    CountEventsIgnoresType,
}

/// For each check, a bug it must catch.
const CAUGHT_BY: &[(&str, Bug)] = &[
    (
        "budget_refuses_a_dispatch_over_its_limit",
        Bug::IgnoreBudgets,
    ),
    ("budget_gives_back_a_rejected_charge", Bug::IgnoreBudgets),
    (
        "budget_keeps_the_charge_of_an_uncertain_outcome",
        Bug::IgnoreBudgets,
    ),
    ("budget_charges_a_retry_once", Bug::IgnoreBudgets),
    ("budget_refusal_keeps_the_approval", Bug::IgnoreBudgets),
    (
        "budget_deferral_dispatches_once_there_is_room",
        Bug::IgnoreBudgets,
    ),
    ("budget_deferral_expires_to_rejected", Bug::IgnoreBudgets),
    (
        "cancel_ends_an_operation_not_yet_dispatched",
        Bug::StripEventField("cancelled", "error"),
    ),
    ("cancel_is_refused_once_dispatched", Bug::CancelAnything),
    ("cancel_gives_back_budget_charges", Bug::IgnoreBudgets),
    ("cancel_races_a_claim", Bug::NonAtomicClaim),
    (
        "concurrent_callers_never_exceed_a_budget",
        Bug::IgnoreBudgets,
    ),
    (
        "prepare_creates_operation",
        Bug::StripEventField("prepared", "contract_version"),
    ),
    ("prepare_is_idempotent", Bug::PrepareReturnsFresh),
    (
        "prepare_and_claim_with_terms_leaves_existing",
        Bug::PrepareAndClaimSkipsIdentity,
    ),
    (
        "stored_terms_refuse_a_weakened_contract",
        Bug::StripEventField("prepared", "contract"),
    ),
    (
        "failed_postcondition_is_quarantined_once",
        Bug::StripEvidenceKey("postcondition"),
    ),
    (
        "probe_conflict_is_quarantined",
        Bug::StripEvidenceKey("probe_status"),
    ),
    (
        "late_observation_is_appended_without_a_transition",
        Bug::StripEventField("late_observation", "output"),
    ),
    (
        "precondition_rejects_before_the_first_dispatch",
        Bug::StripEventField("precondition_failed", "error"),
    ),
    (
        "recovery_reads_an_earlier_versions_intent",
        Bug::StripEventField("prepared", "intent"),
    ),
    (
        "prepare_conflicts_on_contract_name",
        Bug::SwallowConflict("contract name"),
    ),
    (
        "prepare_conflicts_on_contract_version",
        Bug::SwallowConflict("contract version"),
    ),
    (
        "prepare_conflicts_on_fingerprint",
        Bug::SwallowConflict("fingerprint"),
    ),
    (
        "prepare_conflicts_on_provider_key",
        Bug::SwallowConflict("provider"),
    ),
    ("prepare_rejects_blank_operation_id", Bug::BlankIdsAllowed),
    (
        "prepare_and_claim_creates_and_claims",
        Bug::PrepareAndClaimOnlyPrepares,
    ),
    (
        "prepare_and_claim_claims_prepared",
        Bug::PrepareAndClaimOnlyPrepares,
    ),
    (
        "prepare_and_claim_leaves_others",
        Bug::PrepareAndClaimAlwaysApplied,
    ),
    (
        "prepare_and_claim_conflicts",
        Bug::PrepareAndClaimSkipsIdentity,
    ),
    ("claim_from_prepared", Bug::LeaseInMillis),
    ("claim_only_from_prepared", Bug::ClaimAlwaysWins),
    ("claim_counts_attempts", Bug::AttemptsCappedAtOne),
    ("renew_lease_only_for_owner", Bug::IgnoreOwnerToken),
    ("expire_lease_ignores_live_lease", Bug::ExpireLiveLeases),
    (
        "expire_lease_marks_outcome_unknown",
        Bug::StripEvidenceKey("dispatch_interruption"),
    ),
    (
        "expire_lease_only_from_dispatched",
        Bug::AlwaysApplied("expire lease"),
    ),
    ("stale_owner_cannot_finalize", Bug::IgnoreOwnerToken),
    ("mark_unknown_by_owner", Bug::DropsErrorText),
    ("mark_unknown_by_owner_guards", Bug::IgnoreOwnerToken),
    ("mark_unknown_without_owner", Bug::RefuseUnknownWithoutOwner),
    ("mark_confirmed_by_owner", Bug::DropsProviderOperationId),
    ("mark_confirmed_by_owner_guards", Bug::IgnoreOwnerToken),
    ("mark_confirmed_without_owner", Bug::NoConfirmFromPrepared),
    ("mark_confirmed_when_confirmed", Bug::ReconfirmReturnsFalse),
    ("mark_rejected_by_owner", Bug::DropsErrorText),
    ("mark_rejected_guards", Bug::IgnoreOwnerToken),
    (
        "quarantine_only_from_uncertain",
        Bug::AlwaysApplied("quarantine"),
    ),
    (
        "reset_for_retry_only_from_uncertain",
        Bug::AlwaysApplied("reset for retry"),
    ),
    ("evidence_is_merged", Bug::EvidenceFromLastEventOnly),
    ("manual_confirm", Bug::ManualConfirmDropsOutput),
    (
        "manual_reject",
        Bug::StripEventField("manually_rejected", "evidence"),
    ),
    (
        "manual_authorize_retry",
        Bug::StripEvidenceKey("handler_may_still_be_running"),
    ),
    ("manual_only_from_uncertain", Bug::ManualFromAnywhere),
    ("manual_requires_audit_fields", Bug::BlankAuditAllowed),
    ("confirmation_beats_claim", Bug::ClaimAlwaysWins),
    ("concurrent_claims_have_one_winner", Bug::NonAtomicClaim),
    (
        "concurrent_prepare_and_claim_has_one_winner",
        Bug::NonAtomicPrepareAndClaim,
    ),
    ("concurrent_expiry_has_one_winner", Bug::NonAtomicExpiry),
    ("expiry_races_owner_confirmation", Bug::NonAtomicExpiry),
    ("missing_operation_reads", Bug::GetMissingFails),
    ("missing_operation_transitions", Bug::UpsertsMissing),
    ("events_are_ordered", Bug::EventsReversed),
    (
        "count_events_counts_per_operation",
        Bug::CountEventsIgnoresType,
    ),
    ("list_limits", Bug::UncheckedListLimit),
    ("list_newest_update_first", Bug::ListOldestFirst),
    ("list_filters_by_status", Bug::ListIgnoresStatus),
    ("events_after_pages", Bug::EventsAfterIgnoresLimit),
    ("stats_counts", Bug::StatsMissingZeros),
    ("list_pages_after_cursor", Bug::ListIgnoresCursor),
    ("list_stale_dispatches", Bug::StaleIgnoresLease),
    ("stats_counts_stale", Bug::StatsStaleCountsEveryDispatch),
    ("large_output_round_trips", Bug::TruncatesLargeOutput),
    ("unusual_operation_ids_round_trip", Bug::TrimsIds),
    ("stale_reconciliation_is_refused", Bug::IgnoresGuard),
    (
        "guarded_reset_waits_for_running_handler",
        Bug::IgnoresRunningHandler,
    ),
    ("guarded_transition_inputs", Bug::GuardedPrepareAllowed),
    ("unresolved_repeats_write_nothing", Bug::RepeatsWrite),
    (
        "approval_required_operation_waits",
        Bug::StripEventField("prepared", "approval_required"),
    ),
    (
        "approval_allows_one_dispatch",
        Bug::StripEventField("approved", "request_fingerprint"),
    ),
    ("approval_refusals_write_nothing", Bug::ApproveAnything),
    (
        "expired_approval_is_refused_by_the_claim",
        Bug::ClaimAlwaysWins,
    ),
    (
        "denial_is_terminal",
        Bug::StripEventField("approval_denied", "actor"),
    ),
    (
        "manual_retry_waits_for_a_new_approval",
        Bug::StripEvidenceKey("approval_required"),
    ),
    (
        "concurrent_claims_use_one_approval",
        Bug::NonAtomicPrepareAndClaim,
    ),
];

/// The checks of both suites.
fn every_check() -> impl Iterator<Item = &'static conformance::NamedCheck> {
    conformance::CHECKS.iter().chain(executor_suite::CHECKS)
}

#[test]
fn every_check_catches_its_mutant() {
    let mut missed = Vec::new();
    for (name, check) in every_check() {
        let Some((_, bug)) = CAUGHT_BY.iter().find(|(n, _)| n == name) else {
            missed.push(format!("{name}: no mutant listed in CAUGHT_BY"));
            continue;
        };
        let bug = *bug;
        let factory = move || -> Arc<dyn EffectLedger> { Arc::new(Mutant::new(bug)) };
        match panic::catch_unwind(AssertUnwindSafe(|| check(&factory))) {
            Ok(()) => missed.push(format!("{name}: passed on a ledger with {bug:?}")),
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                if !message.contains(&format!("`{name}`")) {
                    missed.push(format!(
                        "{name}: the failure does not name the check: {message}"
                    ));
                }
            }
        }
    }
    for (name, _) in CAUGHT_BY {
        if !every_check().any(|(n, _)| n == name) {
            missed.push(format!("{name}: listed in CAUGHT_BY but not a check"));
        }
    }
    assert!(missed.is_empty(), "{missed:#?}");
}

#[test]
fn the_mutant_wrapper_without_a_bug_passes() {
    let factory = || -> Arc<dyn EffectLedger> { Arc::new(Mutant::new(Bug::Nothing)) };
    conformance::run_all(&factory);
    executor_suite::run_all(&factory);
}

#[test]
fn a_ledger_without_optional_capabilities_passes() {
    let factory =
        || -> Arc<dyn EffectLedger> { Arc::new(Mutant::new(Bug::NoOptionalCapabilities)) };
    conformance::run_all(&factory);
    executor_suite::run_all(&factory);
}

#[test]
fn run_all_panics_naming_every_failed_check() {
    let factory: LedgerFactory<'_> =
        &|| -> Arc<dyn EffectLedger> { Arc::new(Mutant::new(Bug::ClaimAlwaysWins)) };
    let payload = panic::catch_unwind(AssertUnwindSafe(|| conformance::run_all(factory)))
        .expect_err("run_all must panic for a ledger whose claim always wins");
    let message = panic_message(payload.as_ref());
    assert!(
        message.contains("ledger conformance checks failed"),
        "{message}"
    );
    for name in [
        "claim_only_from_prepared",
        "confirmation_beats_claim",
        "concurrent_claims_have_one_winner",
    ] {
        assert!(
            message.contains(&format!("`{name}`")),
            "{name} missing from: {message}"
        );
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

/// `MemoryLedger` with one bug.
#[derive(Debug)]
struct Mutant {
    inner: MemoryLedger,
    bug: Bug,
    /// How many transitions have returned, for the non-atomic bugs' window.
    finished: Mutex<u64>,
    finished_changed: Condvar,
}

/// How long a non-atomic bug holds its window open when no other
/// transition comes (a check that does not race): only a bound, never what
/// a racing check relies on.
const WINDOW_BOUND: Duration = Duration::from_secs(1);

fn outcome(applied: bool, record: EffectRecord) -> TransitionOutcome {
    TransitionOutcome { applied, record }
}

impl Mutant {
    fn new(bug: Bug) -> Self {
        Mutant {
            inner: MemoryLedger::new(),
            bug,
            finished: Mutex::new(0),
            finished_changed: Condvar::new(),
        }
    }

    /// The window of a non-atomic bug, between its check of the status and
    /// its write: open until another transition has returned (a racer's,
    /// which then acted on the status this one checked), so that a race
    /// lands in it whatever the scheduler does.
    fn window(&self) {
        let finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
        let start = *finished;
        let _unused = self
            .finished_changed
            .wait_timeout_while(finished, WINDOW_BOUND, |n| *n == start)
            .unwrap_or_else(PoisonError::into_inner);
    }

    fn id<'a>(&self, id: &'a str) -> &'a str {
        match self.bug {
            Bug::TrimsIds => id.trim(),
            Bug::BlankIdsAllowed if id.trim().is_empty() => "<blank>",
            _ => id,
        }
    }

    fn existing(&self, id: &str) -> Result<EffectRecord, LedgerError> {
        self.inner.get(id)?.ok_or_else(|| LedgerError::NotFound {
            operation_id: id.to_owned(),
        })
    }

    fn mutate(
        &self,
        id: &str,
        t: &Transition,
        current: Option<EffectRecord>,
    ) -> Result<TransitionOutcome, LedgerError> {
        let inner = &self.inner;
        let status = current.as_ref().map(|r| r.status);
        let owner = current.as_ref().and_then(|r| r.owner_token.clone());
        match (self.bug, t) {
            (Bug::IgnoreBudgets, Transition::Claim(claim)) => {
                let mut claim = claim.clone();
                claim.budgets.clear();
                inner.apply(id, &Transition::Claim(claim))
            }
            (Bug::IgnoreBudgets, Transition::PrepareAndClaim(op, claim)) => {
                let mut claim = claim.clone();
                claim.budgets.clear();
                inner.apply(id, &Transition::PrepareAndClaim(op.clone(), claim))
            }
            (Bug::ClaimAlwaysWins, Transition::Claim(_)) => {
                Ok(outcome(true, inner.apply(id, t)?.record))
            }
            (Bug::PrepareReturnsFresh, Transition::Prepare(_)) => {
                let mut o = inner.apply(id, t)?;
                o.record.status = EffectStatus::Prepared;
                o.record.attempts = 0;
                Ok(o)
            }
            (
                Bug::SwallowConflict(field),
                Transition::Prepare(_) | Transition::PrepareAndClaim(..),
            ) => match inner.apply(id, t) {
                Err(LedgerError::Conflict { field: f, .. }) if f.contains(field) => {
                    Ok(outcome(false, self.existing(id)?))
                }
                other => other,
            },
            (Bug::PrepareAndClaimOnlyPrepares, Transition::PrepareAndClaim(op, _)) => {
                inner.apply(id, &Transition::Prepare(op.clone()))
            }
            (Bug::PrepareAndClaimAlwaysApplied, Transition::PrepareAndClaim(..)) => {
                Ok(outcome(true, inner.apply(id, t)?.record))
            }
            (Bug::PrepareAndClaimSkipsIdentity, Transition::PrepareAndClaim(_, claim))
                if current.is_some() =>
            {
                inner.apply(id, &Transition::Claim(claim.clone()))
            }
            (Bug::IgnoreOwnerToken, _) if owner.is_some() => {
                let owner = owner.unwrap_or_default();
                let t = match t.clone() {
                    Transition::MarkConfirmed {
                        owner_token: Some(_),
                        confirmation,
                    } => Transition::MarkConfirmed {
                        owner_token: Some(owner),
                        confirmation,
                    },
                    Transition::MarkOutcomeUnknown {
                        owner_token: Some(_),
                        error,
                        evidence,
                    } => Transition::MarkOutcomeUnknown {
                        owner_token: Some(owner),
                        error,
                        evidence,
                    },
                    Transition::MarkRejected { error, .. } => Transition::MarkRejected {
                        owner_token: owner,
                        error,
                    },
                    Transition::RenewLease { lease, .. } => Transition::RenewLease {
                        owner_token: owner,
                        lease,
                    },
                    other => other,
                };
                inner.apply(id, &t)
            }
            (Bug::ExpireLiveLeases, Transition::ExpireLease)
                if status == Some(EffectStatus::Dispatched) =>
            {
                let evidence = json!({"handler_may_still_be_running": true, "dispatch_interruption": "lease_expired"});
                let t = Transition::MarkOutcomeUnknown {
                    owner_token: owner,
                    error: "lease expired".into(),
                    evidence: evidence.as_object().cloned().unwrap_or_default(),
                };
                inner.apply(id, &t)
            }
            (Bug::AlwaysApplied(name), t) if t.name() == name => {
                Ok(outcome(true, inner.apply(id, t)?.record))
            }
            (
                Bug::DropsErrorText,
                Transition::MarkOutcomeUnknown {
                    owner_token,
                    evidence,
                    ..
                },
            ) => {
                let t = Transition::MarkOutcomeUnknown {
                    owner_token: owner_token.clone(),
                    error: "error".into(),
                    evidence: evidence.clone(),
                };
                inner.apply(id, &t)
            }
            (Bug::DropsErrorText, Transition::MarkRejected { owner_token, .. }) => {
                let t = Transition::MarkRejected {
                    owner_token: owner_token.clone(),
                    error: "error".into(),
                };
                inner.apply(id, &t)
            }
            (
                Bug::RefuseUnknownWithoutOwner,
                Transition::MarkOutcomeUnknown {
                    owner_token: None, ..
                },
            ) => Ok(outcome(false, self.existing(id)?)),
            (
                Bug::DropsProviderOperationId,
                Transition::MarkConfirmed {
                    owner_token,
                    confirmation,
                },
            ) => {
                let mut confirmation = confirmation.clone();
                confirmation.provider_operation_id = None;
                let t = Transition::MarkConfirmed {
                    owner_token: owner_token.clone(),
                    confirmation,
                };
                inner.apply(id, &t)
            }
            (
                Bug::NoConfirmFromPrepared,
                Transition::MarkConfirmed {
                    owner_token: None, ..
                },
            ) if status == Some(EffectStatus::Prepared) => Ok(outcome(false, self.existing(id)?)),
            (
                Bug::ReconfirmReturnsFalse,
                Transition::MarkConfirmed {
                    owner_token: None, ..
                },
            ) if status == Some(EffectStatus::Confirmed) => Ok(outcome(false, self.existing(id)?)),
            (Bug::ManualConfirmDropsOutput, Transition::Resolve(r)) => {
                let mut r = r.clone();
                if let ManualAction::Confirm { output, .. } = &mut r.action {
                    *output = Value::Null;
                }
                inner.apply(id, &Transition::Resolve(r))
            }
            (Bug::ManualFromAnywhere, Transition::Resolve(_))
                if status.is_some_and(|s| !s.is_uncertain()) =>
            {
                Ok(outcome(true, self.existing(id)?))
            }
            (Bug::BlankAuditAllowed, Transition::Resolve(r)) => {
                let mut r = r.clone();
                for field in [
                    &mut r.audit.actor,
                    &mut r.audit.reason,
                    &mut r.audit.evidence_reference,
                ] {
                    if field.trim().is_empty() {
                        *field = "unknown".into();
                    }
                }
                inner.apply(id, &Transition::Resolve(r))
            }
            (Bug::NonAtomicClaim, Transition::Claim(_))
                if status == Some(EffectStatus::Prepared) =>
            {
                self.window();
                Ok(outcome(true, inner.apply(id, t)?.record))
            }
            (Bug::NonAtomicPrepareAndClaim, Transition::PrepareAndClaim(..))
                if status.is_none_or(|s| {
                    matches!(s, EffectStatus::Prepared | EffectStatus::AwaitingApproval)
                }) =>
            {
                self.window();
                Ok(outcome(true, inner.apply(id, t)?.record))
            }
            (Bug::NonAtomicExpiry, Transition::ExpireLease)
                if status == Some(EffectStatus::Dispatched) =>
            {
                self.window();
                Ok(outcome(true, inner.apply(id, t)?.record))
            }
            (Bug::UpsertsMissing, _) if current.is_none() => {
                let op =
                    NewOperation::new("upserted", "1", RequestFingerprint::of_value(&json!({})));
                inner.prepare(id, &op)?;
                inner.apply(id, t)
            }
            (Bug::IgnoresGuard, Transition::Guarded(_, inner_transition)) => {
                inner.apply(id, inner_transition)
            }
            (Bug::IgnoresRunningHandler, Transition::Guarded(guard, inner_transition))
                if current
                    .as_ref()
                    .is_some_and(|r| r.revision() == guard.revision) =>
            {
                inner.apply(id, inner_transition)
            }
            (Bug::GuardedPrepareAllowed, Transition::Guarded(_, inner_transition))
                if matches!(**inner_transition, Transition::Prepare(_)) =>
            {
                inner.apply(id, inner_transition)
            }
            (Bug::RepeatsWrite, Transition::Quarantine { error, evidence })
                if status == Some(EffectStatus::Quarantined) =>
            {
                // Make the repeat look new: a fresh evidence entry each time.
                let mut evidence = evidence.clone();
                evidence.insert("repeat".into(), json!(inner.events(id)?.len()));
                inner.apply(
                    id,
                    &Transition::Quarantine {
                        error: error.clone(),
                        evidence,
                    },
                )
            }
            (Bug::ApproveAnything, Transition::Approve(_)) => match inner.apply(id, t) {
                Err(_) => Ok(outcome(true, self.existing(id)?)),
                other => other,
            },
            (Bug::CancelAnything, Transition::Cancel { .. }) => match inner.apply(id, t) {
                Err(_) => Ok(outcome(true, self.existing(id)?)),
                other => other,
            },
            _ => inner.apply(id, t),
        }
    }
}

impl EffectLedger for Mutant {
    fn apply_with(
        &self,
        id: &str,
        transition: &Transition,
        _durability: effect_core::WriteDurability,
    ) -> Result<TransitionOutcome, LedgerError> {
        let id = self.id(id);
        let current = self.inner.get(id)?;
        let result = self.mutate(id, transition, current);
        *self.finished.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.finished_changed.notify_all();
        result
    }

    fn get(&self, id: &str) -> Result<Option<EffectRecord>, LedgerError> {
        let id = self.id(id);
        let Some(mut record) = self.inner.get(id)? else {
            return match self.bug {
                Bug::GetMissingFails => Err(LedgerError::NotFound {
                    operation_id: id.to_owned(),
                }),
                _ => Ok(None),
            };
        };
        match self.bug {
            Bug::LeaseInMillis => record.lease_until = record.lease_until.map(|s| s * 1000.0),
            Bug::AttemptsCappedAtOne => record.attempts = record.attempts.min(1),
            Bug::StripEvidenceKey(key) => {
                record.evidence.remove(key);
            }
            Bug::EvidenceFromLastEventOnly => {
                let last = self.inner.events(id)?.pop();
                if let Some(Value::Object(evidence)) =
                    last.and_then(|e| e.data.get("evidence").cloned())
                {
                    record.evidence = evidence;
                }
            }
            Bug::TruncatesLargeOutput => {
                if let Some(Value::Object(output)) = &mut record.output {
                    for value in output.values_mut() {
                        if let Value::String(text) = value {
                            *text = text.chars().take(1_000_000).collect();
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(Some(record))
    }

    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError> {
        let mut query = query.clone();
        match self.bug {
            Bug::UncheckedListLimit if query.limit == 0 => return Ok(Vec::new()),
            Bug::UncheckedListLimit => query.limit = query.limit.min(1000),
            Bug::ListIgnoresStatus => query.status = None,
            Bug::ListIgnoresCursor => query.after = None,
            Bug::StaleIgnoresLease if query.stale => {
                query.stale = false;
                query.status = Some(EffectStatus::Dispatched);
            }
            _ => {}
        }
        let mut records = self.inner.list(&query)?;
        if self.bug == Bug::ListOldestFirst {
            records.reverse();
        }
        Ok(records)
    }

    fn events(&self, id: &str) -> Result<Vec<LedgerEvent>, LedgerError> {
        let mut events = self.inner.events(self.id(id))?;
        match self.bug {
            Bug::StripEventField(event_type, field) => {
                for event in events.iter_mut().filter(|e| e.event_type == event_type) {
                    if let Value::Object(data) = &mut event.data {
                        data.remove(field);
                    }
                }
            }
            Bug::EventsReversed => events.reverse(),
            _ => {}
        }
        Ok(events)
    }

    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        if self.bug == Bug::NoOptionalCapabilities {
            return Err(LedgerError::Unsupported {
                capability: "events_after",
            });
        }
        let limit = if self.bug == Bug::EventsAfterIgnoresLimit {
            usize::MAX
        } else {
            limit
        };
        self.inner.events_after(after, limit)
    }

    fn count_events(&self, ids: &[&str], event_type: &str) -> Result<Vec<u64>, LedgerError> {
        if self.bug != Bug::CountEventsIgnoresType {
            return self.inner.count_events(ids, event_type);
        }
        ids.iter()
            .map(|id| Ok(self.events(id)?.len() as u64))
            .collect()
    }

    fn stats(&self) -> Result<LedgerStats, LedgerError> {
        if self.bug == Bug::NoOptionalCapabilities {
            return Err(LedgerError::Unsupported {
                capability: "stats",
            });
        }
        let mut stats = self.inner.stats()?;
        if self.bug == Bug::StatsMissingZeros {
            stats.counts.retain(|(_, n)| *n > 0);
        }
        if self.bug == Bug::StatsStaleCountsEveryDispatch {
            stats.stale_dispatched = stats
                .counts
                .iter()
                .filter(|(s, _)| *s == EffectStatus::Dispatched)
                .map(|(_, n)| *n)
                .sum();
        }
        Ok(stats)
    }
}
