//! `cancel`: an operator ends an operation that was never dispatched
//! (docs/operations.md), checked on the read-only ledger first so a refused
//! cancel writes nothing, then applied through the executor, whose store
//! decides it in its transaction against any racing claim.

use std::sync::Arc;

use effect_core::{Clock, EffectRecord, EffectStatus, LedgerErrorKind};
use effect_exec::{Audit, EffectExecutor, ExecutorOptions};

use crate::cli::AuditArgs;
use crate::error::{ChangedSinceSeen, NotCancellable};
use crate::open::Opened;
use crate::printer::Printer;
use crate::table;
use crate::view::{EventView, OperationSummary, Resolution};

/// Cancels `id` and prints what was recorded.
pub(crate) fn cancel(
    opened: &Opened,
    id: &str,
    audit: &AuditArgs,
    clock: Arc<dyn Clock>,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    let current = opened
        .ledger()
        .get(id)?
        .ok_or_else(|| effect_core::LedgerError::NotFound {
            operation_id: id.to_owned(),
        })?;
    if !cancellable(current.status) {
        return Err(not_cancellable(&current, clock.as_ref()).into());
    }
    if audit.expect_attempts.is_some_and(|n| n != current.attempts) {
        return Err(ChangedSinceSeen {
            operation_id: id.to_owned(),
            attempts: current.attempts,
            status: current.status,
        }
        .into());
    }
    let writable = opened.writable(Arc::clone(&clock))?;
    let executor =
        EffectExecutor::with_clock(writable, ExecutorOptions::default(), Arc::clone(&clock));
    let audit = Audit::new(
        audit.actor.clone(),
        audit.reason.clone(),
        audit.evidence_reference.clone(),
    );
    let record = match executor.operator().cancel(id, audit) {
        Ok(record) => record,
        // A claim won the race since the read above: say what it is now.
        Err(err) if err.ledger_kind() == Some(LedgerErrorKind::InvalidTransition) => {
            let now = executor.ledger().get(id)?.unwrap_or(current);
            return Err(anyhow::Error::from(err).context(not_cancellable(&now, clock.as_ref())));
        }
        Err(err) => return Err(err.into()),
    };
    // The cancel is committed; the event is read back only to report it.
    let event = EventView::last_of(
        executor.ledger().as_ref(),
        id,
        effect_core::event::CANCELLED,
    )?;
    let report = Resolution {
        approval: None,
        operation_id: record.operation_id.clone(),
        status: record.status,
        resolved: Some(true),
        retry_authorized: None,
        compensation_requested: None,
        provider_operation_id: record.provider_operation_id.clone(),
        action: "cancel".to_owned(),
        operation: OperationSummary::from(&record),
        event,
    };
    printer.report(&report, table::resolution)
}

pub(crate) fn cancellable(status: EffectStatus) -> bool {
    matches!(
        status,
        EffectStatus::Prepared | EffectStatus::AwaitingApproval
    )
}

/// Why `record` cannot be cancelled, and the command to use instead.
fn not_cancellable(record: &EffectRecord, clock: &dyn Clock) -> NotCancellable {
    let id = &record.operation_id;
    let now = effect_core::unix_seconds(clock.now());
    let instead = match record.status {
        EffectStatus::Dispatched if record.is_stale_at(now) => format!(
            "its worker is gone but its request may have been sent: run `agent-effect-ops expire {id}`, \
             check the provider, then `reject` or `confirm` it"
        ),
        EffectStatus::Dispatched => format!(
            "it is being dispatched now and its request may already be sent: wait for its outcome \
             (`agent-effect-ops show {id}`), then `reject` or `confirm` it if it stays uncertain"
        ),
        EffectStatus::OutcomeUnknown | EffectStatus::Quarantined => format!(
            "its request may have been sent: check the provider, then run `agent-effect-ops reject \
             {id}` (it did not happen) or `confirm {id}` (it did)"
        ),
        EffectStatus::Confirmed => format!(
            "it happened: undo it with `agent-effect-ops compensate {id}` if its contract names a \
             compensation"
        ),
        EffectStatus::Rejected => "it is already rejected: nothing will dispatch it".to_owned(),
        // Cancellable: not reached.
        EffectStatus::Prepared | EffectStatus::AwaitingApproval => String::new(),
    };
    NotCancellable {
        operation_id: id.clone(),
        status: record.status,
        instead,
    }
}
