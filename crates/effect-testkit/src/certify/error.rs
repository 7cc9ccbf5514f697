//! [`CertifyError`]: why a certification could not run.

use effect_core::{BoxError, CallbackError, LedgerError};
use effect_exec::ExecError;

use super::CertifyFault;

/// Why a certification could not run (not: why a cell failed; that is a
/// cell with [`Verdict::Fail`](super::Verdict::Fail)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertifyError {
    /// The contract could not derive an operation id or a key from the
    /// fault's arguments.
    #[error("certify {fault}: the contract refused the arguments")]
    Contract {
        /// The fault.
        fault: CertifyFault,
        /// The contract's error.
        #[source]
        source: CallbackError,
    },
    /// Two faults' arguments derive the same operation: their cells would
    /// meet at the provider.
    #[error("certify {fault}: its arguments derive operation {operation_id:?}, as {other}'s do")]
    SharedOperation {
        /// The fault.
        fault: CertifyFault,
        /// The earlier fault with the same operation.
        other: CertifyFault,
        /// The shared operation id.
        operation_id: String,
    },
    /// The executor could not do its job (not an uncertain outcome).
    #[error("certify {fault}: the executor failed")]
    Execution {
        /// The fault.
        fault: CertifyFault,
        /// The executor's error.
        #[source]
        source: ExecError,
    },
    /// The cell's ledger failed.
    #[error("certify {fault}: the ledger failed")]
    Ledger {
        /// The fault.
        fault: CertifyFault,
        /// The ledger's error.
        #[source]
        source: LedgerError,
    },
    /// The user's counter failed.
    #[error("certify {fault}: counting the provider's effects failed")]
    Counter {
        /// The fault.
        fault: CertifyFault,
        /// The counter's error.
        #[source]
        source: BoxError,
    },
    /// A request never finished.
    #[error("certify {fault}: {message}")]
    Harness {
        /// The fault.
        fault: CertifyFault,
        /// What went wrong.
        message: String,
    },
}
