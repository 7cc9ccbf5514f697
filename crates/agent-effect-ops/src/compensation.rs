//! `compensate`: an operator's request to undo a confirmed operation
//! (docs/compensation.md). The CLI holds no handler, so it only records the
//! request on the original, through the executor's rules; a recovery worker
//! with the compensation's handler registered
//! (`RecoveryWorker::register_compensation`) runs the compensation, once,
//! as an effect of its own. Checked on the read-only ledger first, so a
//! refused request writes nothing.

use std::sync::Arc;

use effect_core::{Clock, EffectStatus, LedgerError};
use effect_exec::{EffectExecutor, ExecutorOptions};

use crate::cli::RequestArgs;
use crate::error::{CompensationRejected, InputError};
use crate::open::Opened;
use crate::printer::Printer;
use crate::table;
use crate::view::{EventView, OperationSummary, Resolution};

/// Refuses a blank id or request field before anything is opened.
pub(crate) fn check(id: &str, args: &RequestArgs) -> Result<(), InputError> {
    for (flag, value) in [
        ("the operation id", id),
        ("--actor", args.actor.as_str()),
        ("--reason", args.reason.as_str()),
        ("--evidence-reference", args.evidence_reference.as_str()),
    ] {
        if value.trim().is_empty() {
            return Err(InputError::Blank { flag });
        }
    }
    Ok(())
}

/// Records the request on `id` and prints it.
pub(crate) fn request(
    opened: &Opened,
    id: &str,
    args: &RequestArgs,
    clock: Arc<dyn Clock>,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    let current = opened
        .ledger()
        .get(id)?
        .ok_or_else(|| LedgerError::NotFound {
            operation_id: id.to_owned(),
        })?;
    if current.status != EffectStatus::Confirmed {
        return Err(LedgerError::InvalidTransition {
            operation_id: id.to_owned(),
            transition: "request the compensation of",
            status: current.status,
        }
        .into());
    }
    // A rejected compensation is final: a request would be recorded and
    // never run, so it is refused with what to do instead.
    // Read from the compensation itself: a denial settles it before the
    // original's link says so (the next `compensate` or worker pass does).
    if let Some(link) = current.compensation() {
        let compensation = opened.ledger().get(&link.operation_id)?;
        if let Some(rejected) =
            compensation.filter(|compensation| compensation.status == EffectStatus::Rejected)
        {
            return Err(CompensationRejected {
                operation_id: id.to_owned(),
                compensation: link.operation_id,
                why: rejected
                    .error
                    .unwrap_or_else(|| "no reason recorded".to_owned()),
            }
            .into());
        }
    }
    let writable = opened.writable(Arc::clone(&clock))?;
    let executor = EffectExecutor::with_clock(writable, ExecutorOptions::default(), clock);
    let record = executor.operator().request_compensation(
        id,
        &args.actor,
        &args.reason,
        &args.evidence_reference,
    )?;
    let event = EventView::last_of(
        executor.ledger().as_ref(),
        id,
        effect_core::event::COMPENSATION_REQUESTED,
    )?;
    let report = Resolution {
        operation_id: record.operation_id.clone(),
        status: record.status,
        resolved: None,
        retry_authorized: None,
        compensation_requested: Some(record.compensation_request().is_some()),
        approval: None,
        provider_operation_id: record.provider_operation_id.clone(),
        action: "compensate".to_owned(),
        operation: OperationSummary::from(&record),
        event,
    };
    printer.report(&report, table::resolution)
}
