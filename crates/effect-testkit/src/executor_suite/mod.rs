//! The executor over a store: the checks of a store that only effect-exec's
//! executor and recovery worker can drive (budgets charged and given back,
//! stored terms, pre- and postconditions, probe conflicts, intent read across
//! contract versions, callers racing through the executor), each counting what
//! a fake provider committed. A store runs this suite beside the ledger
//! conformance suite of the effect-conformance crate, which checks the
//! `EffectLedger` methods on effect-core alone:
//!
//! ```
//! use std::sync::Arc;
//! use effect_core::{EffectLedger, MemoryLedger};
//!
//! let factory = || -> Arc<dyn EffectLedger> { Arc::new(MemoryLedger::new()) };
//! effect_conformance::run_all(&factory);
//! effect_testkit::executor_suite::run_all(&factory);
//! ```
//!
//! The factory is the conformance suite's
//! ([`LedgerFactory`]): a fresh, empty
//! ledger per check. Checks are listed in [`CHECKS`]; run a subset with
//! [`effect_conformance::run_checks`], and in the executor's deferred-outcomes
//! mode with [`run_all_deferred`].

use effect_conformance::{LedgerFactory, NamedCheck};

mod approval;
mod budget;
mod cancel;
mod contracts;
mod versions;

pub use approval::callers_dispatch_each_approved_operation_once;
pub use budget::{
    budget_charges_a_retry_once, budget_deferral_dispatches_once_there_is_room,
    budget_deferral_expires_to_rejected, budget_gives_back_a_rejected_charge,
    budget_keeps_the_charge_of_an_uncertain_outcome, budget_refusal_keeps_the_approval,
    budget_refuses_a_dispatch_over_its_limit, callers_never_exceed_a_budget,
    concurrent_callers_never_exceed_a_budget,
};
pub use cancel::cancel_gives_back_budget_charges;
pub use contracts::{
    failed_postcondition_is_quarantined_once, precondition_rejects_before_the_first_dispatch,
    probe_conflict_is_quarantined, stored_terms_refuse_a_weakened_contract,
};
pub use versions::recovery_reads_an_earlier_versions_intent;

/// Every check of the suite, by name, in the order [`run_all`] runs them.
pub const CHECKS: &[NamedCheck] = &[
    (
        "budget_refuses_a_dispatch_over_its_limit",
        budget_refuses_a_dispatch_over_its_limit,
    ),
    (
        "budget_gives_back_a_rejected_charge",
        budget_gives_back_a_rejected_charge,
    ),
    (
        "budget_keeps_the_charge_of_an_uncertain_outcome",
        budget_keeps_the_charge_of_an_uncertain_outcome,
    ),
    ("budget_charges_a_retry_once", budget_charges_a_retry_once),
    (
        "budget_refusal_keeps_the_approval",
        budget_refusal_keeps_the_approval,
    ),
    (
        "budget_deferral_dispatches_once_there_is_room",
        budget_deferral_dispatches_once_there_is_room,
    ),
    (
        "budget_deferral_expires_to_rejected",
        budget_deferral_expires_to_rejected,
    ),
    (
        "concurrent_callers_never_exceed_a_budget",
        concurrent_callers_never_exceed_a_budget,
    ),
    (
        "cancel_gives_back_budget_charges",
        cancel_gives_back_budget_charges,
    ),
    (
        "stored_terms_refuse_a_weakened_contract",
        stored_terms_refuse_a_weakened_contract,
    ),
    (
        "failed_postcondition_is_quarantined_once",
        failed_postcondition_is_quarantined_once,
    ),
    (
        "probe_conflict_is_quarantined",
        probe_conflict_is_quarantined,
    ),
    (
        "precondition_rejects_before_the_first_dispatch",
        precondition_rejects_before_the_first_dispatch,
    ),
    (
        "recovery_reads_an_earlier_versions_intent",
        recovery_reads_an_earlier_versions_intent,
    ),
];

/// Runs every check of [`CHECKS`] against fresh ledgers from `factory`.
///
/// Every check runs even when an earlier one fails, so one run reports all
/// disagreements.
///
/// # Panics
///
/// When any check fails, with one line per failed check: its name and what
/// differed.
pub fn run_all(factory: LedgerFactory<'_>) {
    report(effect_conformance::run_checks(factory, CHECKS));
}

/// [`run_all`] in the executor's deferred-outcomes mode: every ledger of
/// `factory` in [`DeferredOutcomes`](effect_conformance::DeferredOutcomes),
/// synced at the end of each check.
///
/// # Panics
///
/// As [`run_all`].
pub fn run_all_deferred(factory: LedgerFactory<'_>) {
    report(effect_conformance::run_checks_deferred(factory, CHECKS));
}

fn report(failures: Vec<String>) {
    if !failures.is_empty() {
        panic!(
            "{} of {} executor-over-a-store checks failed:\n{}",
            failures.len(),
            CHECKS.len(),
            failures.join("\n")
        );
    }
}
