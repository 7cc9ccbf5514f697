//! What a scenario asks of a provider fake: [`ScenarioProvider`] and the
//! [`Lookup`] its outcome probe answers with.

use std::fmt;

use effect_core::BoxError;
use serde_json::Value;

/// A fake of an external system, as a scenario drives it.
///
/// Implementations must be deterministic and thread-safe: the harness calls
/// them from several threads (concurrent callers, late commits).
pub trait ScenarioProvider: Send + Sync + fmt::Debug {
    /// Performs the effect (commits it at the provider) and returns its output.
    /// A provider that honours idempotency keys returns the earlier output for
    /// a key it has seen, without committing again.
    ///
    /// # Errors
    ///
    /// The provider refused or failed; the harness reports it to the executor
    /// as a failure with an unknown outcome.
    fn perform(&self, arguments: &Value, idempotency_key: Option<&str>) -> Result<Value, BoxError>;

    /// Looks up what became of the operation (the outcome probe's source).
    /// Answer [`Lookup::NotCommitted`] only when the provider is sure.
    ///
    /// # Errors
    ///
    /// The lookup itself failed.
    fn look_up(&self, arguments: &Value, idempotency_key: Option<&str>)
    -> Result<Lookup, BoxError>;

    /// How many effects the provider committed, duplicates included.
    ///
    /// # Errors
    ///
    /// The provider's state could not be read.
    fn committed_effects(&self) -> Result<usize, BoxError>;
}

/// What a provider lookup found.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Lookup {
    /// The effect happened.
    Committed {
        /// Its output, stored as the operation's result.
        output: Value,
        /// The provider's id for it.
        provider_operation_id: Option<String>,
    },
    /// Authoritatively not committed: the request can never commit later.
    NotCommitted,
    /// The provider is still processing it.
    Pending,
    /// The provider cannot tell (for example an eventually-consistent read).
    Unknown,
    /// The provider holds something that contradicts the request (a capture
    /// of the invoice with another amount): never confirmed or retried.
    Conflict {
        /// What the provider holds, as evidence (no secrets).
        held: Value,
    },
}
