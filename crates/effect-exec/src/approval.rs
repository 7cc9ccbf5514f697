//! Human approval of one exact call (docs/approval.md), for a service with
//! its own approval UI; operators use `agent-effect-ops approve|deny`.
//!
//! A contract built with
//! [`requires_approval(true)`](effect_core::EffectContractBuilder::requires_approval)
//! records a new operation `awaiting_approval` and dispatches nothing. An
//! [`Approval`] names the request fingerprint it approves; the claim that
//! dispatches the operation checks it (same fingerprint, not expired) and
//! consumes it in the store's transaction, so two callers or workers racing
//! on one approved operation dispatch it once.

use effect_core::{Approval, EffectLedgerExt as _, EffectRecord, Transition};

use crate::error::ExecError;
use crate::executor::EffectExecutor;

impl EffectExecutor {
    /// Records `approval` of one dispatch of operation `operation_id`, which
    /// must be `awaiting_approval`. The next call of the operation (its
    /// caller's, or a [`RecoveryWorker`](crate::RecoveryWorker)'s with stored
    /// intent) dispatches it and uses the approval up.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use effect_core::{Approval, Clock as _, EffectContract, MemoryLedger, Outcome, SystemClock};
    /// use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
    /// use serde_json::{json, Value};
    ///
    /// let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    /// let refund = EffectContract::builder("refund", |args| {
    ///     Ok(format!("order:{}:refund", args["order"].as_str().ok_or("missing order")?))
    /// })
    /// .requires_approval(true)
    /// .build()?;
    /// let handler = |_args: Value, _ctx: HandlerContext| Ok::<_, HandlerError>(json!({"refunded": true}));
    /// let args = json!({"order": "A-1", "cents": 4200});
    ///
    /// let first = executor.execute(&refund, &args, handler)?;
    /// assert_eq!(first.outcome(), Outcome::AwaitingApproval);
    ///
    /// let waiting = executor.ledger().get("order:A-1:refund")?.ok_or("not recorded")?;
    /// executor.approve("order:A-1:refund", Approval {
    ///     request_fingerprint: waiting.request_fingerprint,
    ///     actor: "lead@example.com".into(),
    ///     reason: "matches ticket T-9".into(),
    ///     expires_at: SystemClock.now() + Duration::from_secs(3600),
    /// })?;
    /// let second = executor.execute(&refund, &args, handler)?;
    /// assert!(second.is_confirmed());
    /// assert_eq!(second.attempts, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ExecError::Conflict`] when the approval names another fingerprint
    /// (other arguments); [`ExecError::Ledger`] with kind `InvalidTransition`
    /// when the operation is not awaiting approval (already dispatched: an
    /// approval is never used twice), when the approval has expired or an
    /// unused one stands; `InvalidInput` for a blank actor or reason;
    /// `NotFound` for an unknown id; or a failing store. Nothing is written
    /// on an error.
    pub fn approve(
        &self,
        operation_id: &str,
        approval: Approval,
    ) -> Result<EffectRecord, ExecError> {
        let outcome = self.apply(operation_id, Transition::Approve(approval))?;
        Ok(outcome.record)
    }

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

    /// Denies operation `operation_id`, which must be `awaiting_approval`: it
    /// becomes `rejected`, terminally, with `actor` and `reason` in its
    /// error, evidence and `approval_denied` event. Its caller's next call
    /// returns the rejection.
    ///
    /// # Errors
    ///
    /// [`ExecError::Ledger`] with kind `InvalidTransition` outside
    /// `awaiting_approval`, `InvalidInput` for a blank actor or reason,
    /// `NotFound` for an unknown id, or a failing store.
    pub fn deny(
        &self,
        operation_id: &str,
        actor: &str,
        reason: &str,
    ) -> Result<EffectRecord, ExecError> {
        self.ledger
            .deny_approval(operation_id, actor, reason)
            .map_err(|source| ExecError::ledger(operation_id, source))
    }
}
