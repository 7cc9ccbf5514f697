//! Operation statuses, probe statuses and the unknown-outcome policy (docs/spec.md §2).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A status string that is not one of the docs/spec.md §2 strings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown status {value:?} (expected one of: {expected})")]
#[non_exhaustive]
pub struct ParseStatusError {
    /// The string that was read.
    pub value: String,
    /// The accepted strings.
    pub expected: &'static str,
}

/// Where an operation stands. The storage and JSON strings are fixed by docs/spec.md §2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectStatus {
    /// Recorded durably, not dispatched (or authorized for another attempt).
    Prepared,
    /// Recorded durably, not dispatched, and not dispatchable until a human
    /// approves exactly this request (docs/approval.md). Its contract requires
    /// approval; a claim dispatches it only with an unused, unexpired approval
    /// of its request fingerprint, which the claim consumes.
    AwaitingApproval,
    /// A caller holds the dispatch lease and may be talking to the provider.
    Dispatched,
    /// The effect happened; the stored output is the result. Terminal.
    Confirmed,
    /// The outcome is uncertain and awaits reconciliation.
    OutcomeUnknown,
    /// Uncertain and parked for an operator decision.
    Quarantined,
    /// The provider definitively refused the effect. Terminal.
    Rejected,
}

impl EffectStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [EffectStatus; 7] = [
        EffectStatus::Prepared,
        EffectStatus::AwaitingApproval,
        EffectStatus::Dispatched,
        EffectStatus::Confirmed,
        EffectStatus::OutcomeUnknown,
        EffectStatus::Quarantined,
        EffectStatus::Rejected,
    ];

    /// The exact storage string.
    pub fn as_str(self) -> &'static str {
        match self {
            EffectStatus::Prepared => "prepared",
            EffectStatus::AwaitingApproval => "awaiting_approval",
            EffectStatus::Dispatched => "dispatched",
            EffectStatus::Confirmed => "confirmed",
            EffectStatus::OutcomeUnknown => "outcome_unknown",
            EffectStatus::Quarantined => "quarantined",
            EffectStatus::Rejected => "rejected",
        }
    }

    /// True for `confirmed` and `rejected`: automatic execution never changes them.
    pub fn is_terminal(self) -> bool {
        matches!(self, EffectStatus::Confirmed | EffectStatus::Rejected)
    }

    /// True for `awaiting_approval`: nothing was dispatched, and nothing is
    /// until a human approves the request (or denies it, which rejects it).
    pub fn is_awaiting_approval(self) -> bool {
        self == EffectStatus::AwaitingApproval
    }

    /// True for `outcome_unknown` and `quarantined`: the outcome is not known.
    pub fn is_uncertain(self) -> bool {
        matches!(
            self,
            EffectStatus::OutcomeUnknown | EffectStatus::Quarantined
        )
    }
}

impl fmt::Display for EffectStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EffectStatus {
    type Err = ParseStatusError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EffectStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| ParseStatusError {
                value: s.to_owned(),
                expected: "prepared, awaiting_approval, dispatched, confirmed, outcome_unknown, quarantined, rejected",
            })
    }
}

/// What an outcome probe learned from the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStatus {
    /// The effect happened; the probe carries evidence.
    Committed,
    /// Authoritative and terminal: the earlier request can never commit later.
    /// An empty read from an eventually consistent index is *not* this.
    NotCommitted,
    /// The provider is still processing the request.
    Pending,
    /// The evidence cannot settle it.
    Unknown,
    /// The provider holds something that contradicts the request (a payment
    /// for the invoice with another amount, a resource of that name with
    /// other settings): the operation is quarantined with the probe's
    /// evidence, never confirmed or retried (docs/spec.md §6).
    Conflict,
}

impl ProbeStatus {
    /// The exact storage string.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeStatus::Committed => "committed",
            ProbeStatus::NotCommitted => "not_committed",
            ProbeStatus::Pending => "pending",
            ProbeStatus::Unknown => "unknown",
            ProbeStatus::Conflict => "conflict",
        }
    }
}

impl fmt::Display for ProbeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ProbeStatus {
    type Err = ParseStatusError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            ProbeStatus::Committed,
            ProbeStatus::NotCommitted,
            ProbeStatus::Pending,
            ProbeStatus::Unknown,
            ProbeStatus::Conflict,
        ]
        .into_iter()
        .find(|status| status.as_str() == s)
        .ok_or_else(|| ParseStatusError {
            value: s.to_owned(),
            expected: "committed, not_committed, pending, unknown, conflict",
        })
    }
}

/// What to do with an operation whose outcome cannot be settled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownOutcomePolicy {
    /// Park it as `quarantined` for an operator (the default).
    #[default]
    Quarantine,
    /// Leave it `outcome_unknown`; the caller manages quarantine elsewhere.
    KeepUnknown,
}

#[cfg(test)]
mod tests;
