//! [`ScenarioError`]: why a scenario could not run.

use std::fmt;

use effect_core::{ContractError, LedgerError};
use effect_exec::ExecError;

/// Why a scenario could not run (not: why it failed; that is a report with
/// `passed: false`).
#[derive(Debug)]
#[non_exhaustive]
pub enum ScenarioError {
    /// The contract could not be built.
    Contract {
        /// The scenario.
        scenario: String,
        /// The contract error.
        source: ContractError,
    },
    /// The executor could not do its job (not an uncertain outcome).
    Execution {
        /// The scenario.
        scenario: String,
        /// The executor's error.
        source: ExecError,
    },
    /// The ledger could not be created or read.
    Ledger {
        /// The scenario.
        scenario: String,
        /// The ledger's error.
        source: LedgerError,
    },
    /// The provider's state could not be read, or a thread never finished.
    Harness {
        /// The scenario.
        scenario: String,
        /// What went wrong.
        message: String,
    },
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScenarioError::Contract { scenario, .. } => {
                write!(f, "scenario {scenario:?}: invalid contract")
            }
            ScenarioError::Execution { scenario, .. } => {
                write!(f, "scenario {scenario:?}: execution failed")
            }
            ScenarioError::Ledger { scenario, .. } => {
                write!(f, "scenario {scenario:?}: ledger failed")
            }
            ScenarioError::Harness { scenario, message } => {
                write!(f, "scenario {scenario:?}: {message}")
            }
        }
    }
}

impl std::error::Error for ScenarioError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ScenarioError::Contract { source, .. } => Some(source),
            ScenarioError::Execution { source, .. } => Some(source),
            ScenarioError::Ledger { source, .. } => Some(source),
            ScenarioError::Harness { .. } => None,
        }
    }
}
