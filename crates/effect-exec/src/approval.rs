//! Human approval of one exact call (docs/approval.md): a service with its
//! own approval UI approves or denies through [`Operator`](crate::Operator),
//! operators through `agent-effect-ops approve|deny`; a caller waits for the
//! decision here.
//!
//! A contract built with
//! [`requires_approval(true)`](effect_core::EffectContractBuilder::requires_approval)
//! records a new operation `awaiting_approval` and dispatches nothing. An
//! [`Approval`] names the request fingerprint it approves; the claim that
//! dispatches the operation checks it (same fingerprint, not expired) and
//! consumes it in the store's transaction, so two callers or workers racing
//! on one approved operation dispatch it once.

use effect_core::EffectRecord;

use crate::error::ExecError;
use crate::executor::EffectExecutor;

impl EffectExecutor {
    /// Waits until operation `operation_id`, `awaiting_approval`, has an
    /// approval recorded or is decided otherwise (denied, or any status
    /// but `awaiting_approval`), or `timeout` passes; dispatches nothing.
    /// Polls every [`ExecutorOptions::poll_interval`](crate::ExecutorOptions::poll_interval)
    /// on the executor's clock and sleeper, so a test drives it with a fake
    /// clock. Returns the record as last read: `record.approval()` is set
    /// when an approval landed, the status is `rejected` after a denial, and
    /// it is still `awaiting_approval` without an approval at the timeout.
    ///
    /// # Errors
    ///
    /// [`ExecError::Ledger`] with kind `NotFound` for an unknown id, or a
    /// failing store.
    pub fn wait_for_approval(
        &self,
        operation_id: &str,
        timeout: std::time::Duration,
    ) -> Result<EffectRecord, ExecError> {
        let until = self.clock().now() + timeout;
        loop {
            let record = self.get(operation_id)?;
            let decided = record.status != effect_core::EffectStatus::AwaitingApproval
                || record.approval().is_some();
            if decided || self.clock().now() >= until {
                return Ok(record);
            }
            self.sleeper().sleep(self.options().poll_interval);
        }
    }
}
