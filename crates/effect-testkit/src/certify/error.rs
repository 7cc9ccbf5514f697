//! [`CertifyError`]: why a certification could not run.
//!
//! Each message says what failed and why, the cause's own chain included
//! (`certify lost-ack: the executor failed: ...`), so `{}` and a `main`
//! returning the error print the cause in words. The cause is kept as a
//! field, not as `source()`, so it never prints twice.

use effect_core::{BoxError, CallbackError, LedgerError, error_chain};
use effect_exec::ExecError;

use super::CertifyFault;

/// Why a certification could not run (not: why a cell failed; that is a
/// cell with [`Verdict::Fail`](super::Verdict::Fail)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertifyError {
    /// The contract could not derive an operation id or a key from the
    /// fault's arguments.
    #[error(
        "certify {fault}: the contract refused the arguments: {}",
        error_chain(cause)
    )]
    Contract {
        /// The fault.
        fault: CertifyFault,
        /// The contract's error.
        cause: CallbackError,
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
    #[error("certify {fault}: the executor failed: {}", error_chain(cause))]
    Execution {
        /// The fault.
        fault: CertifyFault,
        /// The executor's error.
        cause: ExecError,
    },
    /// The cell's ledger failed.
    #[error("certify {fault}: the ledger failed: {}", error_chain(cause))]
    Ledger {
        /// The fault.
        fault: CertifyFault,
        /// The ledger's error.
        cause: LedgerError,
    },
    /// The user's counter failed.
    #[error("certify {fault}: counting the provider's effects failed: {}", error_chain(cause.as_ref()))]
    Counter {
        /// The fault.
        fault: CertifyFault,
        /// The counter's error.
        cause: BoxError,
    },
    /// [`Certification::conflicting`](super::Certification::conflicting)
    /// could not make the conflicting effect.
    #[error("certify {fault}: making the conflicting effect failed: {}", error_chain(cause.as_ref()))]
    Conflicting {
        /// The fault.
        fault: CertifyFault,
        /// The error it returned.
        cause: BoxError,
    },
    /// A request never finished, or the conflicting effect was not counted.
    #[error("certify {fault}: {message}")]
    Harness {
        /// The fault.
        fault: CertifyFault,
        /// What went wrong.
        message: String,
    },
}
