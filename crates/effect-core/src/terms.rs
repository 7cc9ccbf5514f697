//! The safety terms an operation is claimed under, stored with it
//! (docs/spec.md §3.1).
//!
//! Operations outlive the code that claimed them: a payment claimed by
//! today's build is reconciled, retried or replayed by tomorrow's. The
//! executor records the [`ContractTerms`] of the running contract in the
//! operation's `prepared` event (key [`EVENT_KEY`]), in the commit that
//! creates it, and every later call compares the contract it runs with
//! them before it decides anything: a running contract that would allow
//! what the stored terms forbid ([`ContractTerms::weakened_by`]) is refused,
//! one that only forbids more is allowed. Operations written without terms
//! (by the Python package, or by a version before this one) are decided
//! under the running contract, as before.
//!
//! ```
//! use effect_core::terms::ContractTerms;
//! use effect_core::EffectContract;
//!
//! let key = |args: &serde_json::Value| Ok(args["key"].as_str().map(str::to_owned));
//! let claimed = EffectContract::builder("capture_payment", |_| Ok("op".into()))
//!     .provider_idempotency_key(key)
//!     .build()?;
//! let flipped = EffectContract::builder("capture_payment", |_| Ok("op".into()))
//!     .provider_idempotency_key(key)
//!     .provider_idempotency_guaranteed(true)
//!     .build()?;
//! let stored = ContractTerms::of(&claimed);
//! let changes = stored.weakened_by(&ContractTerms::of(&flipped));
//! assert_eq!(changes.len(), 1);
//! assert_eq!(changes[0].term, "provider_idempotency_guaranteed");
//! // The other way round only forbids more: allowed.
//! assert!(ContractTerms::of(&flipped).weakened_by(&stored).is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::EffectContract;
use crate::event;
use crate::record::LedgerEvent;
use crate::status::UnknownOutcomePolicy;

/// The field of the `prepared` event's data that holds the terms.
pub const EVENT_KEY: &str = "contract";

/// The version of the stored form; a reader refuses another.
const VERSION: u64 = 1;

/// Whether, and how, a contract requires a human's approval, from the
/// weakest to the strictest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalTerm {
    /// Never.
    Never,
    /// For the calls a rule over the arguments selects.
    Rule,
    /// Before every dispatch.
    Always,
}

/// What a contract promises about the safety of an operation, as stored
/// with it: everything a reconciliation, a retry, a worker's dispatch or
/// a replay decides on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ContractTerms {
    /// The version of the stored form (1).
    pub v: u64,
    /// The contract's version: the handler version it was claimed for.
    pub version: String,
    /// Whether the provider's documented key semantics make a repeat safe.
    pub provider_idempotency_guaranteed: bool,
    /// How long the provider honours its key, in seconds, if it says.
    pub provider_key_ttl_secs: Option<f64>,
    /// Whether the contract asks the provider what became of an attempt.
    pub probe: bool,
    /// How long after an attempt a commit can still appear, in seconds.
    pub settle_secs: Option<f64>,
    /// Whether outputs are checked by a postcondition.
    pub postcondition: bool,
    /// What happens to an operation nothing can settle.
    pub unknown_outcome: UnknownOutcomePolicy,
    /// Whether dispatches wait for a human's approval.
    pub approval: ApprovalTerm,
    /// The names of the budgets every dispatch is charged to.
    pub budgets: Vec<String>,
}

/// One term a running contract would weaken: its name and both values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Weakening {
    /// The term, spelt as in the stored form.
    pub term: &'static str,
    /// Its stored value.
    pub stored: String,
    /// Its value in the running contract.
    pub running: String,
}

impl fmt::Display for Weakening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is {} in the stored contract but {} in the running one",
            self.term, self.stored, self.running
        )
    }
}

impl ContractTerms {
    /// The terms of `contract`.
    pub fn of(contract: &EffectContract) -> Self {
        let approval = if contract.requires_approval() {
            ApprovalTerm::Always
        } else if contract.may_require_approval() {
            ApprovalTerm::Rule
        } else {
            ApprovalTerm::Never
        };
        ContractTerms {
            v: VERSION,
            version: contract.version().to_owned(),
            provider_idempotency_guaranteed: contract.provider_idempotency_guaranteed(),
            provider_key_ttl_secs: contract.provider_key_ttl().map(|d| d.as_secs_f64()),
            probe: contract.has_probe(),
            settle_secs: contract.settle().map(|d| d.as_secs_f64()),
            postcondition: contract.postcondition().is_some(),
            unknown_outcome: contract.unknown_outcome(),
            approval,
            budgets: contract
                .budgets()
                .iter()
                .map(|b| b.name().to_owned())
                .collect(),
        }
    }

    /// The stored form, as the `prepared` event holds it.
    pub fn to_value(&self) -> Value {
        // A struct of plain fields always serializes.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Every term `running` would weaken: what it allows that these terms
    /// forbid. Empty when `running` keeps or strengthens every term.
    ///
    /// A guarantee newly claimed, a longer (or dropped) key lifetime, a
    /// shorter (or dropped) settle time, a dropped postcondition, a
    /// quarantine policy turned into keeping the operation unknown, a
    /// weaker approval rule, or a dropped budget weaken. Adding or removing
    /// a probe does not: a probe asks the provider, and its answer is
    /// evidence, not an assumption (its settle time is a term).
    pub fn weakened_by(&self, running: &ContractTerms) -> Vec<Weakening> {
        let mut out = Vec::new();
        let mut weak = |term: &'static str, stored: String, running: String| {
            out.push(Weakening {
                term,
                stored,
                running,
            });
        };
        if running.provider_idempotency_guaranteed && !self.provider_idempotency_guaranteed {
            weak(
                "provider_idempotency_guaranteed",
                "false".into(),
                "true".into(),
            );
        }
        if let Some(stored) = self.provider_key_ttl_secs
            && running.provider_key_ttl_secs.is_none_or(|ttl| ttl > stored)
        {
            weak(
                "provider_key_ttl",
                seconds(Some(stored)),
                seconds(running.provider_key_ttl_secs),
            );
        }
        if let Some(stored) = self.settle_secs
            && running.settle_secs.is_none_or(|settle| settle < stored)
        {
            weak(
                "settle",
                seconds(Some(stored)),
                seconds(running.settle_secs),
            );
        }
        if self.postcondition && !running.postcondition {
            weak("postcondition", "present".into(), "absent".into());
        }
        if self.unknown_outcome == UnknownOutcomePolicy::Quarantine
            && running.unknown_outcome != UnknownOutcomePolicy::Quarantine
        {
            weak(
                "unknown_outcome",
                policy(self.unknown_outcome),
                policy(running.unknown_outcome),
            );
        }
        if running.approval < self.approval {
            weak(
                "approval",
                approval(self.approval),
                approval(running.approval),
            );
        }
        let dropped: Vec<&str> = self
            .budgets
            .iter()
            .filter(|name| !running.budgets.contains(name))
            .map(String::as_str)
            .collect();
        if !dropped.is_empty() {
            weak(
                "budgets",
                format!("[{}]", self.budgets.join(", ")),
                format!(
                    "[{}] (without {})",
                    running.budgets.join(", "),
                    dropped.join(", ")
                ),
            );
        }
        out
    }
}

/// The terms an operation was claimed under, from its events: `Ok(None)`
/// when its `prepared` event holds none (the Python package, or a version
/// before terms were stored, created it), or when its `prepared` event is
/// gone (pruned).
///
/// # Errors
///
/// A description of stored terms that cannot be read (another version of
/// the stored form, or a malformed value): decide nothing on them.
pub fn stored(events: &[LedgerEvent]) -> Result<Option<ContractTerms>, String> {
    let Some(value) = events
        .iter()
        .find(|event| event.event_type == event::PREPARED)
        .and_then(|event| event.data.get(EVENT_KEY))
    else {
        return Ok(None);
    };
    match value.get("v").and_then(Value::as_u64) {
        Some(VERSION) => {}
        other => {
            return Err(format!(
                "stored contract terms of version {other:?}, this build reads version {VERSION}"
            ));
        }
    }
    serde_json::from_value(value.clone())
        .map(Some)
        .map_err(|err| format!("stored contract terms cannot be read: {err}"))
}

fn seconds(value: Option<f64>) -> String {
    value.map_or_else(|| "unset".to_owned(), |s| format!("{s}s"))
}

fn policy(policy: UnknownOutcomePolicy) -> String {
    match policy {
        UnknownOutcomePolicy::Quarantine => "quarantine".into(),
        UnknownOutcomePolicy::KeepUnknown => "keep_unknown".into(),
    }
}

fn approval(term: ApprovalTerm) -> String {
    match term {
        ApprovalTerm::Never => "never".into(),
        ApprovalTerm::Rule => "by rule".into(),
        ApprovalTerm::Always => "always".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::budget::Budget;
    use crate::error::CallbackError;

    fn id(_: &Value) -> Result<String, CallbackError> {
        Ok("op".into())
    }

    fn key(args: &Value) -> Result<Option<String>, CallbackError> {
        Ok(args["key"].as_str().map(str::to_owned))
    }

    fn strict() -> ContractTerms {
        ContractTerms::of(
            &EffectContract::builder("c", id)
                .provider_idempotency_key(key)
                .provider_key_ttl(Duration::from_secs(3600))
                .settle(Duration::from_secs(60))
                .postcondition(|_, _| Ok(true))
                .requires_approval(true)
                .budget(Budget::per_day("daily").max_count(10))
                .build()
                .expect("a valid contract"),
        )
    }

    #[test]
    fn every_weakened_term_is_named_with_both_values() {
        let stored = strict();
        let loose = ContractTerms::of(
            &EffectContract::builder("c", id)
                .provider_idempotency_key(key)
                .provider_idempotency_guaranteed(true)
                .unknown_outcome(UnknownOutcomePolicy::KeepUnknown)
                .build()
                .expect("a valid contract"),
        );
        let changes = stored.weakened_by(&loose);
        let terms: Vec<&str> = changes.iter().map(|w| w.term).collect();
        assert_eq!(
            terms,
            [
                "provider_idempotency_guaranteed",
                "provider_key_ttl",
                "settle",
                "postcondition",
                "unknown_outcome",
                "approval",
                "budgets"
            ]
        );
        assert_eq!(
            changes[1].to_string(),
            "provider_key_ttl is 3600s in the stored contract but unset in the running one"
        );
        assert!(stored.weakened_by(&stored).is_empty());
        // Everything the loose contract allows, the strict one forbids.
        assert!(loose.weakened_by(&stored).is_empty());
    }

    #[test]
    fn the_stored_form_reads_back_and_other_versions_are_refused() {
        let terms = strict();
        let event = |data: Value| LedgerEvent {
            sequence: 1,
            operation_id: "op".into(),
            event_type: event::PREPARED.into(),
            data,
            timestamp: "2026-01-01T00:00:00.000000+00:00".into(),
        };
        let stored_events = [event(json!({ EVENT_KEY: terms.to_value() }))];
        assert_eq!(stored(&stored_events), Ok(Some(terms)));
        assert_eq!(stored(&[event(json!({}))]), Ok(None));
        assert!(stored(&[event(json!({ EVENT_KEY: {"v": 2} }))]).is_err());
        assert!(stored(&[event(json!({ EVENT_KEY: {"v": 1, "version": 3} }))]).is_err());
    }
}
