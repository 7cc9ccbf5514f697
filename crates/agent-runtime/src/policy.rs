//! [`PermissionPolicy`]: which tools a run may call, which calls need a
//! confirmation from a trusted outer layer, and which need a human approval
//! recorded in the effect ledger (by tool and by [`Risk`]).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::tool::{EffectKind, Risk};

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
    /// Tools each of whose calls needs a human approval.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    approval_tools: BTreeSet<String>,
    /// Tools of this risk or higher need a human approval of each call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    approval_from_risk: Option<Risk>,
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
            approval_tools: BTreeSet::new(),
            approval_from_risk: None,
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

    /// Requires a human approval of every call of these tools
    /// (docs/approval.md). The runtime applies it to the call's effect
    /// operation before anything is recorded, as if the tool's contract
    /// required approval: the first call records the operation
    /// `awaiting_approval` and dispatches nothing, and only an approval of
    /// that request's fingerprint (`EffectExecutor::operator().approve`, or
    /// `agent-effect-ops approve`) lets one dispatch through. Each such tool
    /// needs an effect contract: the runtime refuses to build otherwise.
    ///
    /// ```
    /// use agent_runtime::{PermissionPolicy, Risk};
    ///
    /// let policy = PermissionPolicy::allow(["lookup_invoice", "refund", "delete_account"])
    ///     .require_approval_for(["refund"])
    ///     .require_approval_at_risk(Risk::High);
    /// assert!(policy.requires_approval("refund", Risk::Low));
    /// assert!(policy.requires_approval("delete_account", Risk::Critical));
    /// assert!(!policy.requires_approval("lookup_invoice", Risk::Low));
    /// ```
    #[must_use]
    pub fn require_approval_for<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.approval_tools
            .extend(tools.into_iter().map(Into::into));
        self
    }

    /// Requires a human approval of every call of a tool whose declared
    /// [`Risk`] ([`ToolDefinition::risk`](crate::ToolDefinition::risk)) is
    /// `risk` or higher, as [`require_approval_for`](Self::require_approval_for) does by name.
    #[must_use]
    pub fn require_approval_at_risk(mut self, risk: Risk) -> Self {
        self.approval_from_risk = Some(risk);
        self
    }

    /// Whether each call of `tool`, of declared `risk`, needs a human approval.
    pub fn requires_approval(&self, tool: &str, risk: Risk) -> bool {
        self.approval_tools.contains(tool)
            || self.approval_from_risk.is_some_and(|from| risk >= from)
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
