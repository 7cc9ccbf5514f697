//! [`PermissionPolicy`]: which tools a run may call, and which calls need a
//! confirmation from a trusted outer layer.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::tool::EffectKind;

/// Which tools may run. It is evaluated before any handler.
///
/// A mutation also needs a confirmation of its exact invocation, passed by the
/// caller of [`AgentRuntime::run`](crate::AgentRuntime::run) in
/// [`RunOptions::confirmed_mutations`](crate::RunOptions::confirmed_mutations).
/// Confirmations are never taken from the task or from planner output.
///
/// ```
/// use agent_runtime::policy::PolicyDecision;
/// use agent_runtime::{EffectKind, PermissionPolicy};
///
/// let policy = PermissionPolicy::allow(["lookup_invoice", "capture_payment"]);
/// assert_eq!(policy.decide("lookup_invoice", EffectKind::Read, false), PolicyDecision::Allowed);
/// assert_eq!(
///     policy.decide("capture_payment", EffectKind::Mutation, false),
///     PolicyDecision::ConfirmationRequired
/// );
/// assert_eq!(policy.decide("delete_everything", EffectKind::Read, false), PolicyDecision::Denied);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionPolicy {
    allowed: BTreeSet<String>,
    require_mutation_confirmation: bool,
}

/// What the policy decided for one invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyDecision {
    /// The call may proceed.
    Allowed,
    /// The tool is not allowed: the run fails before any side effect.
    Denied,
    /// A mutation without a confirmation: the run waits for one.
    ConfirmationRequired,
}

impl PermissionPolicy {
    /// Allows exactly these tools; mutations need confirmation.
    pub fn allow<I, S>(tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        PermissionPolicy {
            allowed: tools.into_iter().map(Into::into).collect(),
            require_mutation_confirmation: true,
        }
    }

    /// Allows nothing.
    pub fn deny_all() -> Self {
        PermissionPolicy::allow(std::iter::empty::<String>())
    }

    /// Lets mutations run without a confirmation. Use only where a trusted
    /// layer has already approved every mutation the run can make.
    #[must_use]
    pub fn without_mutation_confirmation(mut self) -> Self {
        self.require_mutation_confirmation = false;
        self
    }

    /// Whether `tool` is allowed at all.
    pub fn is_allowed(&self, tool: &str) -> bool {
        self.allowed.contains(tool)
    }

    /// Decides one invocation; `confirmed` says whether the trusted outer
    /// layer confirmed this exact invocation.
    pub fn decide(&self, tool: &str, kind: EffectKind, confirmed: bool) -> PolicyDecision {
        if !self.is_allowed(tool) {
            PolicyDecision::Denied
        } else if kind == EffectKind::Mutation && self.require_mutation_confirmation && !confirmed {
            PolicyDecision::ConfirmationRequired
        } else {
            PolicyDecision::Allowed
        }
    }
}
