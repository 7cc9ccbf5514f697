//! The basis of an automatic retry (docs/spec.md §6), decided in one place
//! from what the record says and what reconciliation learned, so the audit
//! trail's `retry_basis` is always the rule that allowed the retry.
//!
//! Reconciliation calls [`retry_basis`] before every reset for retry and
//! records its answer; `None` means no rule allows a retry now (the caller
//! then leaves a resend pending under a guaranteed key, or applies the
//! contract's unknown-outcome policy).

use effect_core::EffectStatus;
use effect_core::evidence::{
    RETRY_BASIS_GUARANTEED_KEY, RETRY_BASIS_NOT_SENT, RETRY_BASIS_PROBE_NOT_COMMITTED,
};

/// What the record of an uncertain operation says, and what this call may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Facts {
    /// `outcome_unknown` or `quarantined`.
    pub(crate) status: EffectStatus,
    /// The record says a previous handler may still send the request (its
    /// deadline passed or its lease expired).
    pub(crate) handler_may_still_be_running: bool,
    /// The contract's provider key is guaranteed idempotent, the record has
    /// one, and it has not outlived the contract's key lifetime.
    pub(crate) guaranteed_key: bool,
    /// A guaranteed key may authorize the retry in this call (false once a
    /// postcondition failed or an output could not be stored).
    pub(crate) idempotent_retry_allowed: bool,
}

/// What reconciliation learned about the last dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Learned {
    /// The handler reported that nothing left the process.
    ReportedNotSent,
    /// The contract has no probe.
    NoProbe,
    /// The probe failed (or its evidence could not be stored).
    ProbeFailed,
    /// An authoritative probe said the request did not commit (and the
    /// contract's settle time has passed).
    ProbeNotCommitted,
    /// The probe could not tell.
    ProbeUnknown,
}

/// Why an automatic retry was authorized: recorded as `retry_basis`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryBasis {
    /// The provider's documented idempotency key covers the repeat, even if
    /// a previous handler still sends its request.
    GuaranteedKey,
    /// The handler reported that nothing was sent.
    NotSent,
    /// An authoritative probe said the request did not commit, and no
    /// previous handler may still send it.
    ProbeNotCommitted,
}

impl RetryBasis {
    /// The evidence value (`effect_core::evidence::RETRY_BASIS_*`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RetryBasis::GuaranteedKey => RETRY_BASIS_GUARANTEED_KEY,
            RetryBasis::NotSent => RETRY_BASIS_NOT_SENT,
            RetryBasis::ProbeNotCommitted => RETRY_BASIS_PROBE_NOT_COMMITTED,
        }
    }

    /// True when the basis holds only while no previous handler runs: the
    /// reset is then guarded by re-reading that in the write transaction.
    /// A guaranteed key holds whatever a previous handler does.
    pub(crate) fn needs_no_running_handler(self) -> bool {
        !matches!(self, RetryBasis::GuaranteedKey)
    }
}

/// The rule that allows a retry of an operation with these `facts` after
/// reconciliation `learned` this, or `None` when none does.
///
/// A report that nothing was sent, or an authoritative negative probe, is a
/// basis only while no previous handler may still send the request; a
/// guaranteed key (when this call may use it) is a basis in every case, and
/// is named as the basis whenever it is the only one.
pub(crate) fn retry_basis(facts: Facts, learned: Learned) -> Option<RetryBasis> {
    let key = (facts.guaranteed_key && facts.idempotent_retry_allowed)
        .then_some(RetryBasis::GuaranteedKey);
    match learned {
        // Only an `outcome_unknown` record reports how its dispatch ended;
        // a quarantine is decided by the probe like any other.
        Learned::ReportedNotSent
            if facts.status == EffectStatus::OutcomeUnknown
                && facts.idempotent_retry_allowed
                && !facts.handler_may_still_be_running =>
        {
            Some(RetryBasis::NotSent)
        }
        Learned::ProbeNotCommitted if !facts.handler_may_still_be_running => {
            Some(RetryBasis::ProbeNotCommitted)
        }
        _ => key,
    }
}

#[cfg(test)]
mod tests;
