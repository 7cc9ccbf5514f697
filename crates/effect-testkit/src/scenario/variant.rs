//! [`ContractVariant`]: what makes a retry safe, in the four combinations.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The contract variants of the fault matrix: what makes a retry safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContractVariant {
    /// A provider key the contract claims is guaranteed idempotent; no probe.
    GuaranteedKey,
    /// An outcome probe, and a provider key without a guarantee.
    ProbeOnly,
    /// A guaranteed provider key and an outcome probe.
    Both,
    /// Neither a probe nor a key.
    Neither,
}

impl ContractVariant {
    /// Every variant, in matrix order.
    pub const ALL: [ContractVariant; 4] = [
        ContractVariant::GuaranteedKey,
        ContractVariant::ProbeOnly,
        ContractVariant::Both,
        ContractVariant::Neither,
    ];

    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ContractVariant::GuaranteedKey => "guaranteed-key",
            ContractVariant::ProbeOnly => "probe-only",
            ContractVariant::Both => "both",
            ContractVariant::Neither => "neither",
        }
    }

    /// Whether the contract derives a provider key.
    pub fn has_key(self) -> bool {
        self != ContractVariant::Neither
    }

    /// Whether the contract claims the key is guaranteed idempotent.
    pub fn guaranteed(self) -> bool {
        matches!(self, ContractVariant::GuaranteedKey | ContractVariant::Both)
    }

    /// Whether the contract has an outcome probe.
    pub fn has_probe(self) -> bool {
        matches!(self, ContractVariant::ProbeOnly | ContractVariant::Both)
    }
}

impl fmt::Display for ContractVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ContractVariant {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ContractVariant::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                format!("unknown contract variant {s:?}; valid: guaranteed-key, probe-only, both, neither")
            })
    }
}
