//! An operator's audited decisions on one operation: the manual
//! resolutions (`confirm`, `reject`, `authorize-retry`), applied through
//! the executor, and `expire` of a stale dispatch.

use std::sync::Arc;

use effect_core::EffectLedgerExt as _;
use effect_core::evidence::HANDLER_MAY_STILL_BE_RUNNING;
use effect_core::{
    Clock, EffectLedger, EffectRecord, Evidence, Guard, LedgerError, ListQuery, ManualAction,
    ManualResolution, Transition,
};
use effect_exec::{EffectExecutor, ExecutorOptions};
use serde_json::Value;

use crate::cli::{AuditArgs, Command};
use crate::error::{ChangedSinceSeen, HandlerMayStillRun, InputError};
use crate::inspect::not_found;
use crate::open::Opened;
use crate::printer::Printer;
use crate::table;
use crate::view::{EventView, OperationSummary, Resolution};

/// The validated resolution a `confirm`, `reject` or `authorize-retry`
/// command asks for; `None` for read commands.
pub(crate) fn manual_resolution(command: &Command) -> Result<Option<ManualResolution>, InputError> {
    let (id, action, audit) = match command {
        Command::Confirm {
            id,
            output_json,
            provider_operation_id,
            audit,
            ..
        } => {
            if provider_operation_id
                .as_deref()
                .is_some_and(|p| p.trim().is_empty())
            {
                return Err(InputError::Blank {
                    flag: "--provider-operation-id",
                });
            }
            let action = ManualAction::Confirm {
                output: parse_output(output_json)?,
                provider_operation_id: provider_operation_id.clone(),
            };
            (id, action, audit)
        }
        Command::Reject { id, audit } => (id, ManualAction::Reject, audit),
        Command::AuthorizeRetry {
            id,
            audit,
            handler_stopped,
        } => (
            id,
            ManualAction::AuthorizeRetry {
                handler_stopped: *handler_stopped,
            },
            audit,
        ),
        Command::List { .. }
        | Command::Show { .. }
        | Command::Events { .. }
        | Command::Stats
        | Command::Export { .. }
        | Command::Expire { .. }
        | Command::Prune { .. }
        | Command::Backup { .. }
        | Command::Approve { .. }
        | Command::Deny { .. }
        | Command::Compensate { .. }
        | Command::Cancel { .. }
        | Command::Serve(_) => return Ok(None),
    };
    check_id(id)?;
    check_audit(audit)?;
    Ok(Some(ManualResolution::new(
        action,
        effect_core::Audit::new(&audit.actor, &audit.reason, &audit.evidence_reference),
    )))
}

/// Applies a manual resolution through the executor, so the same rules apply
/// as in code, and reports the audited event it appended.
pub(crate) fn resolve(
    opened: &Opened,
    id: &str,
    resolution: &ManualResolution,
    expect_attempts: Option<u32>,
    clock: Arc<dyn Clock>,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    let transition = Transition::Resolve(resolution.clone());
    // Check on the read-only ledger first, so a refused resolution does not even
    // open the file for writing. The executor checks again, atomically.
    let current = opened.ledger().get(id)?.ok_or_else(|| not_found(id))?;
    if !current.status.is_uncertain() {
        return Err(LedgerError::InvalidTransition {
            operation_id: id.to_owned(),
            transition: transition.name(),
            status: current.status,
        }
        .into());
    }
    let changed = |record: &effect_core::EffectRecord| ChangedSinceSeen {
        operation_id: id.to_owned(),
        attempts: record.attempts,
        status: record.status,
    };
    if expect_attempts.is_some_and(|n| n != current.attempts) {
        return Err(changed(&current).into());
    }
    if let ManualAction::AuthorizeRetry {
        handler_stopped: false,
    } = resolution.action
    {
        let now = effect_core::unix_seconds(clock.now());
        let why = match current.lease_until {
            _ if current.handler_may_still_be_running() => Some(
                "its evidence says a previous handler may still be running (a missed deadline or an expired lease)"
                    .to_owned(),
            ),
            Some(until) if until > now => Some(format!(
                "its dispatch lease is live until {}",
                crate::timestamp::format_unix_seconds(until)
            )),
            _ => None,
        };
        if let Some(why) = why {
            return Err(HandlerMayStillRun {
                operation_id: id.to_owned(),
                why,
            }
            .into());
        }
    }
    let writable = opened.writable(Arc::clone(&clock))?;
    let executor = EffectExecutor::with_clock(writable, ExecutorOptions::default(), clock);
    // Applied only to the record checked above: a dispatch in between makes
    // the decision stale, and it is refused rather than applied to it.
    let Some(record) = executor
        .operator()
        .resolve_if_unchanged(id, resolution, &current)?
    else {
        let now = executor.ledger().get(id)?.ok_or_else(|| not_found(id))?;
        return Err(changed(&now).into());
    };
    let (action, event_type) = match resolution.action {
        ManualAction::Confirm { .. } => ("confirm", "manually_confirmed"),
        ManualAction::Reject => ("reject", "manually_rejected"),
        ManualAction::AuthorizeRetry { .. } => ("authorize_retry", "manual_retry_authorized"),
    };
    // The resolution is committed; the event is read back only to report it.
    let event = EventView::last_of(executor.ledger().as_ref(), id, event_type)?;
    let is_retry = matches!(resolution.action, ManualAction::AuthorizeRetry { .. });
    let report = Resolution {
        approval: None,
        operation_id: record.operation_id.clone(),
        status: record.status,
        resolved: (!is_retry).then_some(true),
        retry_authorized: is_retry.then_some(true),
        compensation_requested: None,
        provider_operation_id: record.provider_operation_id.clone(),
        action: action.to_owned(),
        operation: OperationSummary::from(&record),
        event,
    };
    printer.report(&report, table::resolution)
}

/// `expire`: a stale dispatch becomes `outcome_unknown`, with the operator's
/// audit fields.
///
/// Two transitions, each conditional on the record the decision was made
/// on: the store's own lease expiry (refused while the lease is live by
/// the store's clock, so a live worker is never overtaken), then the audit
/// fields, merged into the evidence with an `outcome_unknown` event of
/// their own. Should the second not be written, the operation is where any
/// execution finding the expired lease would have left it.
pub(crate) fn expire(
    opened: &Opened,
    id: &str,
    audit: &AuditArgs,
    clock: Arc<dyn Clock>,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    let current = opened.ledger().get(id)?.ok_or_else(|| not_found(id))?;
    let now = effect_core::unix_seconds(clock.now());
    if !current.is_stale_at(now) {
        return Err(not_stale(&current));
    }
    let writable = opened.writable(Arc::clone(&clock))?;
    let expired = writable.apply(
        id,
        &Transition::Guarded(
            Guard::unchanged(&current),
            Box::new(Transition::ExpireLease),
        ),
    )?;
    if !expired.applied {
        return Err(not_stale(&expired.record));
    }
    let mut evidence = Evidence::new();
    evidence.insert(HANDLER_MAY_STILL_BE_RUNNING.into(), true.into());
    evidence.insert(EXPIRED_BY.into(), audit.actor.clone().into());
    evidence.insert(EXPIRE_REASON.into(), audit.reason.clone().into());
    evidence.insert(
        EXPIRE_EVIDENCE_REFERENCE.into(),
        audit.evidence_reference.clone().into(),
    );
    let error = format!(
        "an operator expired the stale dispatch: {}; the previous handler may still be running",
        audit.reason
    );
    let audited = writable.apply(
        id,
        &Transition::Guarded(
            Guard::unchanged(&expired.record),
            Box::new(Transition::MarkOutcomeUnknown {
                owner_token: None,
                error,
                evidence,
            }),
        ),
    )?;
    let record = audited.record;
    let event = audited
        .applied
        .then(|| writable.events(id))
        .transpose()?
        .and_then(|events| events.last().map(EventView::from));
    let report = Resolution {
        approval: None,
        operation_id: record.operation_id.clone(),
        status: record.status,
        resolved: None,
        retry_authorized: None,
        compensation_requested: None,
        provider_operation_id: record.provider_operation_id.clone(),
        action: "expire".to_owned(),
        operation: OperationSummary::from(&record),
        event,
    };
    printer.report(&report, table::resolution)
}

/// Evidence keys of an operator's `expire`.
const EXPIRED_BY: &str = "expired_by";

const EXPIRE_REASON: &str = "expire_reason";

const EXPIRE_EVIDENCE_REFERENCE: &str = "expire_evidence_reference";

/// Why `expire` refuses: the operation is not a stale dispatch (exit 4).
fn not_stale(record: &EffectRecord) -> anyhow::Error {
    let refused = anyhow::Error::from(LedgerError::InvalidTransition {
        operation_id: record.operation_id.clone(),
        transition: "expire the dispatch of",
        status: record.status,
    });
    match (record.status, record.lease_until) {
        (effect_core::EffectStatus::Dispatched, Some(until)) => refused.context(format!(
            "the dispatch lease of {:?} is live until {}: its worker may still be running",
            record.operation_id,
            crate::timestamp::format_unix_seconds(until)
        )),
        _ => refused,
    }
}

/// How many confirmed operations `confirm` reads to find the last output of
/// the same contract.
const SHAPE_SCAN: usize = 1000;

/// Refuses an output that cannot be one of this contract's: another JSON
/// type than its last confirmed output, or an object missing its top-level
/// keys. No confirmed output of the contract (among the latest
/// [`SHAPE_SCAN`]): nothing to compare with, accepted.
pub(crate) fn check_output_shape(
    ledger: &dyn EffectLedger,
    current: &EffectRecord,
    output: &Value,
) -> anyhow::Result<()> {
    let mut query = ListQuery::new(SHAPE_SCAN);
    query.status = Some(effect_core::EffectStatus::Confirmed);
    let Some((seen, stored)) = ledger.list(&query)?.into_iter().find_map(|record| {
        (record.contract_name == current.contract_name
            && record.contract_version == current.contract_version)
            .then(|| record.output.map(|output| (record.operation_id, output)))
            .flatten()
    }) else {
        return Ok(());
    };
    let missing: Vec<&str> = match (&stored, output) {
        (Value::Object(stored), Value::Object(given)) => stored
            .keys()
            .filter(|key| !given.contains_key(*key))
            .map(String::as_str)
            .collect(),
        _ => Vec::new(),
    };
    if json_type(&stored) == json_type(output) && missing.is_empty() {
        return Ok(());
    }
    Err(InputError::OutputShape {
        contract: format!("{} v{}", current.contract_name, current.contract_version),
        operation_id: seen,
        expected: describe_shape(&stored),
        given: describe_shape(output),
    }
    .into())
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The type, and an object's top-level keys: never the values (they can hold
/// customer data).
fn describe_shape(value: &Value) -> String {
    match value {
        Value::Object(map) if !map.is_empty() => format!(
            "an object with keys {}",
            map.keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => json_type(other).to_owned(),
    }
}

pub(crate) fn check_id(id: &str) -> Result<(), InputError> {
    if id.trim().is_empty() {
        return Err(InputError::Blank {
            flag: "the operation id",
        });
    }
    Ok(())
}

pub(crate) fn check_audit(audit: &AuditArgs) -> Result<(), InputError> {
    for (flag, value) in [
        ("--actor", &audit.actor),
        ("--reason", &audit.reason),
        ("--evidence-reference", &audit.evidence_reference),
    ] {
        if value.trim().is_empty() {
            return Err(InputError::Blank { flag });
        }
    }
    Ok(())
}

fn parse_output(text: &str) -> Result<Value, InputError> {
    let output =
        serde_json::from_str(text).map_err(|source| InputError::InvalidOutputJson { source })?;
    effect_core::canonical::check_depth(&output)
        .map_err(|source| InputError::UnstorableOutputJson { source })?;
    Ok(output)
}
