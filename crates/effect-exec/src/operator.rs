//! The operator's calls (docs/operations.md): the audited decisions a
//! person takes on one operation (manual resolution, cancellation,
//! approval and denial, a compensation request), behind one handle,
//! [`Operator`], so that what agent code calls on an [`EffectExecutor`] is
//! kept apart from what an operator's tool calls. Each goes through the
//! executor's ledger write, with the same refusals as the store's planner.

use effect_core::compensation::CompensationStep;
use effect_core::{
    Approval, Audit, EffectLedgerExt as _, EffectRecord, Guard, LedgerError, ManualAction,
    ManualResolution, Transition,
};
use serde_json::Value;

use crate::error::ExecError;
use crate::executor::EffectExecutor;
use crate::observe::EffectEvent;

/// An operator's calls on an executor's ledger, from
/// [`EffectExecutor::operator`]: manual resolution of an uncertain
/// operation, cancellation before dispatch, approval and denial, and a
/// request to compensate a confirmed operation. Every call is audited (an
/// actor and a reason, most with an evidence reference) and refused, with
/// nothing written, where the ledger's rules refuse it.
#[derive(Debug, Clone, Copy)]
pub struct Operator<'a> {
    executor: &'a EffectExecutor,
}

impl EffectExecutor {
    /// The operator's calls on this executor's ledger (see [`Operator`]).
    pub fn operator(&self) -> Operator<'_> {
        Operator { executor: self }
    }
}

impl Operator<'_> {
    /// Applies an operator's audited decision: only from `outcome_unknown` or
    /// `quarantined`, with a non-empty actor, reason and evidence reference.
    ///
    /// # Errors
    ///
    /// [`ExecError::Ledger`] with kind `InvalidInput` (blank fields, or an
    /// output nested deeper than [`MAX_DEPTH`](effect_core::canonical::MAX_DEPTH)),
    /// `InvalidTransition` (wrong status, or a retry authorization while a
    /// previous handler may still run) or `NotFound`; nothing is written then.
    pub fn resolve(
        &self,
        operation_id: &str,
        resolution: &ManualResolution,
    ) -> Result<EffectRecord, ExecError> {
        let span =
            tracing::info_span!("effect.resolve", operation_id, actor = %resolution.audit.actor);
        let _entered = span.enter();
        if let ManualAction::Confirm { output, .. } = &resolution.action {
            // An output the ledger could not read back is refused, not stored.
            effect_core::canonical::check_depth(output).map_err(|err| ExecError::Ledger {
                operation_id: operation_id.to_owned(),
                source: LedgerError::InvalidInput {
                    message: format!("the confirmed output cannot be stored: {err}"),
                },
            })?;
        }
        let outcome = self
            .executor
            .apply(operation_id, Transition::Resolve(resolution.clone()))?;
        self.resolved(&outcome);
        Ok(outcome.record)
    }

    /// [`resolve`](Self::resolve), only if the operation is still as the
    /// operator saw it in `seen` (same status, attempts and last status
    /// change): `None`, with nothing written, when it moved on meanwhile (for
    /// example another dispatch), since the decision was about the older
    /// attempt. Checked inside the ledger's write transaction.
    ///
    /// # Errors
    ///
    /// As [`resolve`](Self::resolve).
    pub fn resolve_if_unchanged(
        &self,
        operation_id: &str,
        resolution: &ManualResolution,
        seen: &EffectRecord,
    ) -> Result<Option<EffectRecord>, ExecError> {
        let span =
            tracing::info_span!("effect.resolve", operation_id, actor = %resolution.audit.actor);
        let _entered = span.enter();
        let guarded = Transition::Guarded(
            Guard::unchanged(seen),
            Box::new(Transition::Resolve(resolution.clone())),
        );
        let outcome = self.executor.apply(operation_id, guarded)?;
        self.resolved(&outcome);
        Ok(outcome.applied.then_some(outcome.record))
    }

    /// An operator's resolution was applied: a reconciliation by `operator`.
    fn resolved(&self, outcome: &effect_core::TransitionOutcome) {
        if outcome.applied {
            self.executor.emit(&EffectEvent::Reconciled {
                contract: crate::observe::ContractRef {
                    name: &outcome.record.contract_name,
                    version: &outcome.record.contract_version,
                },
                answer: "operator",
            });
        }
    }

    /// Manually confirms an uncertain operation with the output the provider shows.
    ///
    /// # Errors
    ///
    /// As [`resolve`](Self::resolve).
    pub fn confirm_manually(
        &self,
        operation_id: &str,
        output: Value,
        provider_operation_id: Option<String>,
        audit: Audit,
    ) -> Result<EffectRecord, ExecError> {
        self.resolve(
            operation_id,
            &ManualResolution::new(
                ManualAction::Confirm {
                    output,
                    provider_operation_id,
                },
                audit,
            ),
        )
    }

    /// Manually rejects an uncertain operation: it did not happen and must not be retried.
    ///
    /// # Errors
    ///
    /// As [`resolve`](Self::resolve).
    pub fn reject_manually(
        &self,
        operation_id: &str,
        audit: Audit,
    ) -> Result<EffectRecord, ExecError> {
        self.resolve(
            operation_id,
            &ManualResolution::new(ManualAction::Reject, audit),
        )
    }

    /// Authorizes another dispatch of an uncertain operation. Refused while
    /// the record says a previous handler may still be running (a missed
    /// deadline, an expired lease) or its dispatch lease has not ended; see
    /// [`authorize_retry_handler_stopped`](Self::authorize_retry_handler_stopped).
    ///
    /// # Errors
    ///
    /// As [`resolve`](Self::resolve), and kind `InvalidTransition`
    /// ([`LedgerError::HandlerMayStillRun`]) while a previous handler may still run.
    pub fn authorize_retry(
        &self,
        operation_id: &str,
        audit: Audit,
    ) -> Result<EffectRecord, ExecError> {
        self.resolve(
            operation_id,
            &ManualResolution::new(
                ManualAction::AuthorizeRetry {
                    handler_stopped: false,
                },
                audit,
            ),
        )
    }

    /// [`authorize_retry`](Self::authorize_retry) with the operator's
    /// statement that no previous handler is still running (recorded as
    /// `handler_stopped_asserted`), for an operation whose record says one
    /// may be.
    ///
    /// # Errors
    ///
    /// As [`resolve`](Self::resolve).
    pub fn authorize_retry_handler_stopped(
        &self,
        operation_id: &str,
        audit: Audit,
    ) -> Result<EffectRecord, ExecError> {
        self.resolve(
            operation_id,
            &ManualResolution::new(
                ManualAction::AuthorizeRetry {
                    handler_stopped: true,
                },
                audit,
            ),
        )
    }

    /// Cancels an operation that has not been dispatched: `prepared`
    /// (waiting for its caller or a recovery worker, retry-authorized, or
    /// deferred by a budget) or `awaiting_approval`. It becomes `rejected`
    /// with a `cancelled` event holding the audit, and its budget charges,
    /// if any, are given back (kept when its retry rested on a guaranteed
    /// provider key: the earlier attempt may have committed). The decision
    /// is planned in the store's write transaction, as a claim is, so a
    /// worker or caller racing it either dispatched first (then this is
    /// refused: the operation is `dispatched`) or never dispatches.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use effect_core::{EffectContract, EffectLedger as _, EffectStatus, MemoryLedger};
    /// use effect_exec::{Audit, EffectExecutor, HandlerContext, HandlerError};
    /// use serde_json::{json, Value};
    ///
    /// let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    /// let refund = EffectContract::builder("refund", |args| {
    ///     Ok(format!("order:{}:refund", args["order"].as_str().ok_or("missing order")?))
    /// })
    /// .requires_approval(true)
    /// .build()?;
    /// let handler = |_args: Value, _ctx: HandlerContext| Ok::<_, HandlerError>(json!({"refunded": true}));
    /// executor.execute(&refund, &json!({"order": "A-1"}), handler)?;
    ///
    /// let cancelled = executor.operator().cancel(
    ///     "order:A-1:refund",
    ///     Audit::new("ops@example.com", "customer withdrew the request", "TICKET-7"),
    /// )?;
    /// assert_eq!(cancelled.status, EffectStatus::Rejected);
    /// let again = executor.execute(&refund, &json!({"order": "A-1"}), handler)?;
    /// assert_eq!((again.status, again.attempts), (EffectStatus::Rejected, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ExecError::Ledger`] with kind `InvalidTransition` when the
    /// operation is not `prepared` or `awaiting_approval` (dispatched,
    /// uncertain or settled: a `dispatched` or uncertain one is settled by
    /// reconciliation or [`reject_manually`](Self::reject_manually)),
    /// `InvalidInput` for a blank actor, reason or evidence reference,
    /// `NotFound` for an unknown id, or a failing store. Nothing is written
    /// on an error.
    pub fn cancel(&self, operation_id: &str, audit: Audit) -> Result<EffectRecord, ExecError> {
        let span = tracing::info_span!("effect.cancel", operation_id, actor = %audit.actor);
        let _entered = span.enter();
        let transition = Transition::Cancel {
            actor: audit.actor,
            reason: audit.reason,
            evidence_reference: audit.evidence_reference,
        };
        Ok(self.executor.apply(operation_id, transition)?.record)
    }

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
    /// executor.operator().approve("order:A-1:refund", Approval {
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
        let outcome = self
            .executor
            .apply(operation_id, Transition::Approve(approval))?;
        Ok(outcome.record)
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
        self.executor
            .ledger
            .deny_approval(operation_id, actor, reason)
            .map_err(|source| ExecError::ledger(operation_id, source))
    }

    /// Records an operator's request to compensate the confirmed operation
    /// `operation_id` (event `compensation_requested`): a
    /// [`RecoveryWorker`](crate::RecoveryWorker) with the compensation's
    /// handler runs it. A repeat, or a request after the compensation
    /// settled, writes nothing.
    ///
    /// # Errors
    ///
    /// [`ExecError::Ledger`] with kind `InvalidTransition` unless the
    /// operation is confirmed, `InvalidInput` for a blank actor, reason or
    /// evidence reference, `NotFound` for an unknown id. Nothing is written
    /// on an error.
    pub fn request_compensation(
        &self,
        operation_id: &str,
        actor: &str,
        reason: &str,
        evidence_reference: &str,
    ) -> Result<EffectRecord, ExecError> {
        let step = CompensationStep::Request {
            actor: actor.to_owned(),
            reason: reason.to_owned(),
            evidence_reference: evidence_reference.to_owned(),
        };
        Ok(self
            .executor
            .apply(operation_id, Transition::Compensation(step))?
            .record)
    }
}
