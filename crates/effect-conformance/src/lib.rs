//! The ledger conformance suite: docs/spec.md §4 as small, named checks that any
//! [`EffectLedger`] implementation runs with one line. It depends on
//! effect-core only, so a store's author needs nothing but the trait the
//! store implements.
//!
//! A store author adds this crate and effect-testkit as dev-dependencies and
//! runs both suites from the store's tests: this one
//! ([`run_all`] and [`run_all_deferred`]) checks the [`EffectLedger`]
//! methods one by one; `effect_testkit::executor_suite` checks the same store
//! under effect-exec's executor and recovery worker (budgets, stored terms,
//! pre- and postconditions, intent across versions).
//!
//! ```
//! use std::sync::Arc;
//! use effect_core::{EffectLedger, MemoryLedger};
//!
//! // A store's test module does the same with its own fresh ledger.
//! let factory = || -> Arc<dyn EffectLedger> { Arc::new(MemoryLedger::new()) };
//! effect_conformance::run_all(&factory);
//! effect_conformance::run_all_deferred(&factory);
//! ```
//!
//! # The factory
//!
//! Every check calls the factory for a **fresh, empty** ledger (for a durable
//! store: a new temporary file, or a new schema) and owns it for the check.
//! The suite is backend-neutral:
//!
//! - It never injects a clock. Expired leases are claimed with a zero lease
//!   (expired at once on any clock); live leases last 60 s. Checks of
//!   `list` ordering wait, without sleeping, for the system clock to move
//!   past the microsecond of the last write ([`harness::tick`]), and a check
//!   of an approval's expiry waits for the clock to pass it, so the store's
//!   clock must be the system clock or keep pace with it (a database
//!   server's on the same host does). No check sleeps.
//! - Timestamps are compared as strings only where any store's format agrees
//!   with time order (one store, one format).
//! - Errors are compared by [`LedgerErrorKind`](effect_core::LedgerErrorKind), never by message.
//! - Concurrency checks call the ledger from 16 threads at once: a store must
//!   serialize them itself (busy timeouts, retries), not fail them.
//! - `events_after` and `stats` are optional capabilities: a store may answer
//!   them with [`LedgerErrorKind::Unsupported`](effect_core::LedgerErrorKind::Unsupported),
//!   and the suite accepts that explicitly (their checks then pass without
//!   checking, and "nothing written" compares the operation's own events only).
//!   Any other error fails the check.
//!
//! Each check is a `pub fn name(factory: LedgerFactory)`, listed in
//! [`CHECKS`]; run one alone while debugging a store.
//!
//! # Deferred outcomes
//!
//! [`run_all_deferred`] runs the same checks with the store asked to defer
//! the outcomes of dispatches ([`WriteDurability::Deferrable`](effect_core::WriteDurability::Deferrable)),
//! as the executor's deferred-outcomes mode does: a store must keep every
//! guarantee of the suite in that mode too. A store's test runs both.
//!
//! # Writing checks
//!
//! [`harness`] is the vocabulary the checks are written in (a [`harness::Check`]
//! owns one fresh ledger and turns every surprise into a panic naming the
//! check); effect-testkit's executor suite is written in it too.
//!
//! This is test-support code: the checks panic on the first disagreement, with
//! the check's name and what differed, as test assertions do.
#![warn(missing_docs)]

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use effect_core::EffectLedger;

mod approval;
mod cancel;
mod contracts;
mod data;
mod deferred;
mod dispatch;
mod finalize;
mod guards;
pub mod harness;
mod manual;
mod paging;
mod prepare;
mod races;
mod reads;

pub use approval::{
    approval_allows_one_dispatch, approval_refusals_write_nothing,
    approval_required_operation_waits, concurrent_claims_use_one_approval, denial_is_terminal,
    expired_approval_is_refused_by_the_claim, manual_retry_waits_for_a_new_approval,
};
pub use cancel::{
    cancel_ends_an_operation_not_yet_dispatched, cancel_is_refused_once_dispatched,
    cancel_races_a_claim,
};
pub use contracts::{
    late_observation_is_appended_without_a_transition, prepare_and_claim_with_terms_leaves_existing,
};
pub use data::{UNUSUAL_OPERATION_IDS, large_output_round_trips, unusual_operation_ids_round_trip};
pub use deferred::{DeferredOutcomes, is_dispatch_outcome, run_all_deferred, run_checks_deferred};
pub use dispatch::{
    claim_counts_attempts, claim_from_prepared, claim_only_from_prepared,
    expire_lease_ignores_live_lease, expire_lease_marks_outcome_unknown,
    expire_lease_only_from_dispatched, renew_lease_only_for_owner, stale_owner_cannot_finalize,
};
pub use finalize::{
    evidence_is_merged, mark_confirmed_by_owner, mark_confirmed_by_owner_guards,
    mark_confirmed_when_confirmed, mark_confirmed_without_owner, mark_rejected_by_owner,
    mark_rejected_guards, mark_unknown_by_owner, mark_unknown_by_owner_guards,
    mark_unknown_without_owner, quarantine_only_from_uncertain,
    reset_for_retry_only_from_uncertain,
};
pub use guards::{
    guarded_reset_waits_for_running_handler, guarded_transition_inputs,
    stale_reconciliation_is_refused, unresolved_repeats_write_nothing,
};
pub use manual::{
    manual_authorize_retry, manual_confirm, manual_only_from_uncertain, manual_reject,
    manual_requires_audit_fields,
};
pub use paging::{list_pages_after_cursor, list_stale_dispatches, stats_counts_stale};
pub use prepare::{
    prepare_and_claim_claims_prepared, prepare_and_claim_conflicts,
    prepare_and_claim_creates_and_claims, prepare_and_claim_leaves_others,
    prepare_conflicts_on_contract_name, prepare_conflicts_on_contract_version,
    prepare_conflicts_on_fingerprint, prepare_conflicts_on_provider_key, prepare_creates_operation,
    prepare_is_idempotent, prepare_rejects_blank_operation_id,
};
pub use races::{
    RACERS, concurrent_claims_have_one_winner, concurrent_expiry_has_one_winner,
    concurrent_prepare_and_claim_has_one_winner, confirmation_beats_claim,
    expiry_races_owner_confirmation,
};
pub use reads::{
    count_events_counts_per_operation, events_after_pages, events_are_ordered,
    list_filters_by_status, list_limits, list_newest_update_first, missing_operation_reads,
    missing_operation_transitions, stats_counts,
};

/// Makes a fresh, empty ledger for one check.
pub type LedgerFactory<'a> = &'a dyn Fn() -> Arc<dyn EffectLedger>;

/// One named check of the suite.
pub type NamedCheck = (&'static str, fn(LedgerFactory<'_>));

/// Every check, by name, in the order [`run_all`] runs them.
pub const CHECKS: &[NamedCheck] = &[
    ("prepare_creates_operation", prepare_creates_operation),
    ("prepare_is_idempotent", prepare_is_idempotent),
    (
        "prepare_conflicts_on_contract_name",
        prepare_conflicts_on_contract_name,
    ),
    (
        "prepare_conflicts_on_contract_version",
        prepare_conflicts_on_contract_version,
    ),
    (
        "prepare_conflicts_on_fingerprint",
        prepare_conflicts_on_fingerprint,
    ),
    (
        "prepare_conflicts_on_provider_key",
        prepare_conflicts_on_provider_key,
    ),
    (
        "prepare_rejects_blank_operation_id",
        prepare_rejects_blank_operation_id,
    ),
    (
        "prepare_and_claim_creates_and_claims",
        prepare_and_claim_creates_and_claims,
    ),
    (
        "prepare_and_claim_claims_prepared",
        prepare_and_claim_claims_prepared,
    ),
    (
        "prepare_and_claim_leaves_others",
        prepare_and_claim_leaves_others,
    ),
    ("prepare_and_claim_conflicts", prepare_and_claim_conflicts),
    ("claim_from_prepared", claim_from_prepared),
    ("claim_only_from_prepared", claim_only_from_prepared),
    ("claim_counts_attempts", claim_counts_attempts),
    ("renew_lease_only_for_owner", renew_lease_only_for_owner),
    (
        "expire_lease_ignores_live_lease",
        expire_lease_ignores_live_lease,
    ),
    (
        "expire_lease_marks_outcome_unknown",
        expire_lease_marks_outcome_unknown,
    ),
    (
        "expire_lease_only_from_dispatched",
        expire_lease_only_from_dispatched,
    ),
    ("stale_owner_cannot_finalize", stale_owner_cannot_finalize),
    ("mark_unknown_by_owner", mark_unknown_by_owner),
    ("mark_unknown_by_owner_guards", mark_unknown_by_owner_guards),
    ("mark_unknown_without_owner", mark_unknown_without_owner),
    ("mark_confirmed_by_owner", mark_confirmed_by_owner),
    (
        "mark_confirmed_by_owner_guards",
        mark_confirmed_by_owner_guards,
    ),
    ("mark_confirmed_without_owner", mark_confirmed_without_owner),
    (
        "mark_confirmed_when_confirmed",
        mark_confirmed_when_confirmed,
    ),
    ("mark_rejected_by_owner", mark_rejected_by_owner),
    ("mark_rejected_guards", mark_rejected_guards),
    (
        "quarantine_only_from_uncertain",
        quarantine_only_from_uncertain,
    ),
    (
        "reset_for_retry_only_from_uncertain",
        reset_for_retry_only_from_uncertain,
    ),
    ("evidence_is_merged", evidence_is_merged),
    ("manual_confirm", manual_confirm),
    ("manual_reject", manual_reject),
    ("manual_authorize_retry", manual_authorize_retry),
    ("manual_only_from_uncertain", manual_only_from_uncertain),
    ("manual_requires_audit_fields", manual_requires_audit_fields),
    ("confirmation_beats_claim", confirmation_beats_claim),
    (
        "concurrent_claims_have_one_winner",
        concurrent_claims_have_one_winner,
    ),
    (
        "concurrent_prepare_and_claim_has_one_winner",
        concurrent_prepare_and_claim_has_one_winner,
    ),
    (
        "concurrent_expiry_has_one_winner",
        concurrent_expiry_has_one_winner,
    ),
    (
        "expiry_races_owner_confirmation",
        expiry_races_owner_confirmation,
    ),
    ("missing_operation_reads", missing_operation_reads),
    (
        "missing_operation_transitions",
        missing_operation_transitions,
    ),
    ("events_are_ordered", events_are_ordered),
    ("list_limits", list_limits),
    ("list_newest_update_first", list_newest_update_first),
    ("list_filters_by_status", list_filters_by_status),
    ("events_after_pages", events_after_pages),
    ("stats_counts", stats_counts),
    (
        "count_events_counts_per_operation",
        count_events_counts_per_operation,
    ),
    ("list_pages_after_cursor", list_pages_after_cursor),
    ("list_stale_dispatches", list_stale_dispatches),
    ("stats_counts_stale", stats_counts_stale),
    (
        "stale_reconciliation_is_refused",
        stale_reconciliation_is_refused,
    ),
    (
        "guarded_reset_waits_for_running_handler",
        guarded_reset_waits_for_running_handler,
    ),
    ("guarded_transition_inputs", guarded_transition_inputs),
    (
        "unresolved_repeats_write_nothing",
        unresolved_repeats_write_nothing,
    ),
    (
        "approval_required_operation_waits",
        approval_required_operation_waits,
    ),
    ("approval_allows_one_dispatch", approval_allows_one_dispatch),
    (
        "approval_refusals_write_nothing",
        approval_refusals_write_nothing,
    ),
    (
        "expired_approval_is_refused_by_the_claim",
        expired_approval_is_refused_by_the_claim,
    ),
    ("denial_is_terminal", denial_is_terminal),
    (
        "manual_retry_waits_for_a_new_approval",
        manual_retry_waits_for_a_new_approval,
    ),
    (
        "concurrent_claims_use_one_approval",
        concurrent_claims_use_one_approval,
    ),
    (
        "cancel_ends_an_operation_not_yet_dispatched",
        cancel_ends_an_operation_not_yet_dispatched,
    ),
    (
        "cancel_is_refused_once_dispatched",
        cancel_is_refused_once_dispatched,
    ),
    ("cancel_races_a_claim", cancel_races_a_claim),
    (
        "prepare_and_claim_with_terms_leaves_existing",
        prepare_and_claim_with_terms_leaves_existing,
    ),
    (
        "late_observation_is_appended_without_a_transition",
        late_observation_is_appended_without_a_transition,
    ),
    ("large_output_round_trips", large_output_round_trips),
    (
        "unusual_operation_ids_round_trip",
        unusual_operation_ids_round_trip,
    ),
];

/// Runs every check of [`CHECKS`] against fresh ledgers from `factory`.
///
/// Every check runs even when an earlier one fails, so one run reports all
/// disagreements with docs/spec.md §4.
///
/// # Panics
///
/// When any check fails, with one line per failed check: its name and what
/// differed (each failure is also printed as it happens).
pub fn run_all(factory: &dyn Fn() -> Arc<dyn EffectLedger>) {
    let failures = run_checks(factory, CHECKS);
    if !failures.is_empty() {
        panic!(
            "{} of {} ledger conformance checks failed:\n{}",
            failures.len(),
            CHECKS.len(),
            failures.join("\n")
        );
    }
}

/// Runs `checks` and returns one message per failed check (empty when all pass).
///
/// This is [`run_all`] without the final panic, for callers that run a subset
/// or report failures their own way.
pub fn run_checks(factory: LedgerFactory<'_>, checks: &[NamedCheck]) -> Vec<String> {
    let mut failures = Vec::new();
    for (name, check) in checks {
        // A check owns nothing shared with the others: its ledger comes from the
        // factory and is dropped with it, so unwinding cannot leave state behind.
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| check(factory))) {
            let message = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("(non-string panic payload)");
            let message = if message.contains(name) {
                message.to_owned()
            } else {
                format!("ledger conformance check `{name}` failed: {message}")
            };
            failures.push(message);
        }
    }
    failures
}
