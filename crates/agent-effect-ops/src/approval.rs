//! `approve` and `deny`: a human's decision about an operation awaiting
//! approval (docs/approval.md), checked on the read-only ledger first so a
//! refused decision writes nothing, then applied through the executor,
//! whose store checks it again in its transaction.

use std::sync::Arc;
use std::time::Duration;

use effect_core::{Approval, Clock, EffectStatus, LedgerError};
use effect_exec::{EffectExecutor, ExecutorOptions};
use serde_json::Value;

use crate::cli::DecisionArgs;
use crate::error::{ApprovalMismatch, InputError};
use crate::open::Opened;
use crate::printer::Printer;
use crate::table;
use crate::view::{EventView, OperationSummary, Resolution};

/// What an operator decides.
pub(crate) enum Decision<'a> {
    /// One dispatch, for `expires` from now, of the request with
    /// `fingerprint` when given.
    Approve {
        expires: Duration,
        fingerprint: Option<&'a str>,
    },
    /// Never.
    Deny,
}

/// Refuses blank decision fields and a zero expiry before anything is opened.
pub(crate) fn check(
    id: &str,
    decision: &Decision<'_>,
    args: &DecisionArgs,
) -> Result<(), InputError> {
    for (flag, value) in [
        ("the operation id", id),
        ("--actor", args.actor.as_str()),
        ("--reason", args.reason.as_str()),
    ] {
        if value.trim().is_empty() {
            return Err(InputError::Blank { flag });
        }
    }
    if let Decision::Approve {
        expires,
        fingerprint,
    } = decision
    {
        if expires.is_zero() {
            return Err(InputError::ZeroExpiry);
        }
        if fingerprint.is_some_and(|f| f.trim().is_empty()) {
            return Err(InputError::Blank {
                flag: "--fingerprint",
            });
        }
    }
    Ok(())
}

/// Applies `decision` to `id` and prints what it recorded.
pub(crate) fn decide(
    opened: &Opened,
    id: &str,
    decision: &Decision<'_>,
    args: &DecisionArgs,
    clock: Arc<dyn Clock>,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    let transition_name = match decision {
        Decision::Approve { .. } => "approve",
        Decision::Deny => "deny approval of",
    };
    let current = opened
        .ledger()
        .get(id)?
        .ok_or_else(|| LedgerError::NotFound {
            operation_id: id.to_owned(),
        })?;
    if current.status != EffectStatus::AwaitingApproval {
        return Err(LedgerError::InvalidTransition {
            operation_id: id.to_owned(),
            transition: transition_name,
            status: current.status,
        }
        .into());
    }
    if let Decision::Approve {
        fingerprint: Some(expected),
        ..
    } = decision
        && *expected != current.request_fingerprint
    {
        return Err(ApprovalMismatch {
            operation_id: id.to_owned(),
            fingerprint: current.request_fingerprint,
        }
        .into());
    }
    let writable = opened.writable(Arc::clone(&clock))?;
    let executor =
        EffectExecutor::with_clock(writable, ExecutorOptions::default(), Arc::clone(&clock));
    let (record, action, event_type) = match decision {
        Decision::Approve { expires, .. } => {
            let approval = Approval {
                request_fingerprint: current.request_fingerprint.clone(),
                actor: args.actor.clone(),
                reason: args.reason.clone(),
                expires_at: clock.now() + *expires,
            };
            let record = executor.operator().approve(id, approval)?;
            (record, "approve", effect_core::event::APPROVED)
        }
        Decision::Deny => {
            let record = executor.operator().deny(id, &args.actor, &args.reason)?;
            (record, "deny", effect_core::event::APPROVAL_DENIED)
        }
    };
    // The decision is committed; the event is read back only to report it.
    let event = EventView::last_of(executor.ledger().as_ref(), id, event_type)?;
    let mut approval = record.approval().cloned().map(Value::Object);
    if let Some(Value::Object(map)) = &mut approval {
        map.remove("expires_at_unix");
    }
    let report = Resolution {
        operation_id: record.operation_id.clone(),
        status: record.status,
        resolved: matches!(decision, Decision::Deny).then_some(true),
        retry_authorized: None,
        compensation_requested: None,
        approval,
        provider_operation_id: record.provider_operation_id.clone(),
        action: action.to_owned(),
        operation: OperationSummary::from(&record),
        event,
    };
    printer.report(&report, table::resolution)
}
