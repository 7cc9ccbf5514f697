//! The commands: each reads or resolves through the ledger and writes its
//! report to an injected writer, so tests snapshot output without a process.

use std::io::Write;
use std::sync::Arc;

use effect_core::EffectLedgerExt as _;
use effect_core::evidence::HANDLER_MAY_STILL_BE_RUNNING;
use effect_core::{
    Clock, EffectLedger, EffectRecord, EffectStatus, Evidence, Guard, LedgerError, ListQuery,
    ManualAction, ManualResolution, PruneLimits, PruneRequest, Transition,
};
use effect_exec::{EffectExecutor, ExecutorOptions, WaitingFor};
use serde_json::Value;

use crate::approval::{self, Decision};
use crate::cancel;
use crate::cli::{AuditArgs, Cli, Command, DecisionArgs, Format};
use crate::compensation;
use crate::error::{ChangedSinceSeen, HandlerMayStillRun, InputError};
use crate::maintenance;
use crate::open::{Opened, open};
use crate::printer::Printer;
use crate::table;
use crate::timestamp::age_seconds;
use crate::view::{
    CompensationLinks, EventView, LateObservation, OperationDetail, OperationSummary, Resolution,
    Stats, StatusCounts,
};

/// Runs one command against the ledger named by `cli.db`, printing to `out`.
///
/// `clock` stamps manual resolutions and measures the age in `stats`; the
/// binary passes [`SystemClock`](effect_core::SystemClock).
///
/// # Errors
///
/// Any failure, classified for the exit code by [`Exit::of`](crate::Exit::of).
pub fn run(cli: &Cli, clock: Arc<dyn Clock>, out: &mut dyn Write) -> anyhow::Result<()> {
    let db = cli.db.as_ref();
    if let Command::Serve(args) = &cli.command {
        let db = db.ok_or(InputError::MissingDb)?;
        return crate::console::serve(db, cli.migrate, args, clock, out);
    }
    // Check input before the ledger is opened: a refused command touches nothing.
    let checked = Checked::of(&cli.command, clock.as_ref())?;
    let db = db.ok_or(InputError::MissingDb)?;
    let opened = open(db, cli.migrate, cli.create, Arc::clone(&clock))?;
    execute(&opened, &cli.command, cli.format, &checked, clock, out)
}

/// Runs `command` on a ledger already open, printing JSON to `out`: the
/// console's actions, through the same checks, executor calls and refusals
/// as the command line.
pub(crate) fn run_on(
    opened: &Opened,
    command: &Command,
    clock: Arc<dyn Clock>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let checked = Checked::of(command, clock.as_ref())?;
    execute(opened, command, Format::Json, &checked, clock, out)
}

/// What a command's input holds once checked, before anything is opened.
struct Checked<'a> {
    resolution: Option<ManualResolution>,
    decision: Option<(&'a str, Decision<'a>, &'a DecisionArgs)>,
    prune_selection: Option<maintenance::Selection>,
}

impl<'a> Checked<'a> {
    fn of(command: &'a Command, clock: &dyn Clock) -> anyhow::Result<Self> {
        let resolution = manual_resolution(command)?;
        if let Command::Show { id, .. } | Command::Events { id } = command {
            check_id(id)?;
        }
        if let Command::Expire { id, audit } = command {
            check_id(id)?;
            check_audit(audit)?;
        }
        if let Command::Compensate { id, request } = command {
            compensation::check(id, request)?;
        }
        if let Command::Cancel { id, audit } = command {
            check_id(id)?;
            check_audit(audit)?;
        }
        let decision = decision(command);
        if let Some((id, decision, args)) = &decision {
            approval::check(id, decision, args)?;
        }
        let prune_selection = match command {
            Command::Prune {
                before,
                older_than,
                policy,
                min_retention,
                ignore_min_retention,
                status,
                max_duration,
                batch_size,
                ..
            } => {
                let limits = PruneLimits::default()
                    .batch_rows(usize::from(*batch_size))
                    .max_duration(*max_duration);
                Some(match policy {
                    Some(policy) => maintenance::Selection::Policy(maintenance::checked_policy(
                        policy,
                        *min_retention,
                        *ignore_min_retention,
                        limits,
                    )?),
                    None => {
                        let cutoff = maintenance::checked_cutoff(
                            before.as_deref(),
                            *older_than,
                            *min_retention,
                            *ignore_min_retention,
                            clock.now(),
                        )?;
                        maintenance::Selection::Cutoff(
                            PruneRequest::before(cutoff)
                                .statuses(status.clone())
                                .limits(limits),
                        )
                    }
                })
            }
            _ => None,
        };
        Ok(Checked {
            resolution,
            decision,
            prune_selection,
        })
    }
}

/// Runs a checked command on the opened ledger.
fn execute(
    opened: &Opened,
    command: &Command,
    format: Format,
    checked: &Checked<'_>,
    clock: Arc<dyn Clock>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let Checked {
        resolution,
        decision,
        prune_selection,
    } = checked;
    let ledger = opened.ledger();
    let mut printer = Printer::new(out, format);
    match command {
        Command::List {
            status,
            waiting_approval,
            limit,
            stale,
            after,
        } => {
            let mut query = ListQuery::new(usize::from(*limit));
            query.status = if *waiting_approval {
                Some(EffectStatus::AwaitingApproval)
            } else {
                *status
            };
            query.stale = *stale;
            query.after.clone_from(after);
            list(ledger, &query, &mut printer)
        }
        Command::Show { id, include_output } => show(ledger, id, *include_output, &mut printer),
        Command::Events { id } => events(ledger, id, &mut printer),
        Command::Stats => {
            let stats = stats_of(ledger, clock.as_ref())?;
            printer.report(&stats, table::stats)
        }
        Command::Serve(_) => Err(anyhow::anyhow!(
            "internal error: serve runs before a ledger is opened"
        )),
        Command::Export { since } => maintenance::export(ledger, *since, &mut printer),
        Command::Expire { id, audit } => expire(opened, id, audit, clock, &mut printer),
        Command::Prune {
            archive,
            resume,
            dry_run,
            ..
        } => {
            let selection = prune_selection
                .as_ref()
                .ok_or_else(|| anyhow::anyhow!("internal error: no prune selection"))?;
            let archive = maintenance::ArchiveArg {
                path: archive.as_deref(),
                resume: *resume,
            };
            maintenance::prune(opened, selection, *dry_run, archive, clock, &mut printer)
        }
        Command::Backup { dest } => maintenance::backup(opened, dest, &mut printer),
        Command::Approve { decision: args, .. } | Command::Deny { decision: args, .. } => {
            match decision {
                Some((id, decision, _)) => {
                    approval::decide(opened, id, decision, args, clock, &mut printer)
                }
                None => Err(anyhow::anyhow!("internal error: no approval decision")),
            }
        }
        Command::Compensate { id, request } => {
            compensation::request(opened, id, request, clock, &mut printer)
        }
        Command::Cancel { id, audit } => cancel::cancel(opened, id, audit, clock, &mut printer),
        Command::Confirm {
            id,
            audit,
            ignore_output_shape: false,
            ..
        } if resolution.is_some() => {
            let current = ledger.get(id)?.ok_or_else(|| not_found(id))?;
            // A settled operation is refused by `resolve` (exit 4), whatever the output.
            if let Some(ManualResolution {
                action: ManualAction::Confirm { output, .. },
                ..
            }) = &resolution
                && current.status.is_uncertain()
            {
                check_output_shape(ledger, &current, output)?;
            }
            match &resolution {
                Some(resolution) => resolve(
                    opened,
                    id,
                    resolution,
                    audit.expect_attempts,
                    clock,
                    &mut printer,
                ),
                None => Err(anyhow::anyhow!("internal error: no resolution for {id:?}")),
            }
        }
        Command::Confirm { id, audit, .. }
        | Command::Reject { id, audit }
        | Command::AuthorizeRetry { id, audit, .. } => {
            match &resolution {
                Some(resolution) => resolve(
                    opened,
                    id,
                    resolution,
                    audit.expect_attempts,
                    clock,
                    &mut printer,
                ),
                // `manual_resolution` returns one for every resolving command.
                None => Err(anyhow::anyhow!("internal error: no resolution for {id:?}")),
            }
        }
    }
}

/// The validated resolution a `confirm`, `reject` or `authorize-retry`
/// command asks for; `None` for read commands.
fn manual_resolution(command: &Command) -> Result<Option<ManualResolution>, InputError> {
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

/// The decision an `approve` or `deny` command asks for; `None` otherwise.
fn decision(command: &Command) -> Option<(&str, Decision<'_>, &DecisionArgs)> {
    match command {
        Command::Approve {
            id,
            decision,
            expires,
            fingerprint,
        } => Some((
            id,
            Decision::Approve {
                expires: *expires,
                fingerprint: fingerprint.as_deref(),
            },
            decision,
        )),
        Command::Deny { id, decision } => Some((id, Decision::Deny, decision)),
        _ => None,
    }
}

/// `list`: a JSON array of summaries. The cursor of the next page is the
/// `operation_id` of the last element (`--after`); a table says it below
/// a full page.
fn list(
    ledger: &dyn EffectLedger,
    query: &ListQuery,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    let mut operations = Vec::new();
    for record in ledger.list(query)? {
        let mut summary = OperationSummary::from(&record);
        summary.deferred_by_budget = deferral_of(&record);
        if record.status.is_uncertain() {
            summary.reconciliation_flags =
                Some(safety_evidence(&record.evidence)).filter(|e| !e.is_empty());
            summary.dispatch_error = ledger
                .events(&record.operation_id)?
                .iter()
                .rev()
                .find(|event| {
                    event.event_type == effect_core::event::OUTCOME_UNKNOWN
                        && event.data["evidence"]
                            .get(effect_core::evidence::DISPATCH_INTERRUPTION)
                            .is_some()
                })
                .and_then(|event| event.data["error"].as_str().map(str::to_owned));
        }
        if record.status == EffectStatus::AwaitingApproval {
            let events = ledger.events(&record.operation_id)?;
            for_approver(ledger, &record, &events, &mut summary)?;
        }
        operations.push(summary);
    }
    let limit = query.limit;
    printer.report(&operations, |operations| table::list(operations, limit))
}

/// The budget deferral of a `prepared` or `awaiting_approval` operation
/// (docs/approval.md#budgets): the budget and the bound, for `list`.
fn deferral_of(record: &EffectRecord) -> Option<Value> {
    if !matches!(
        record.status,
        EffectStatus::Prepared | EffectStatus::AwaitingApproval
    ) {
        return None;
    }
    let deferral = record
        .evidence
        .get(effect_core::evidence::BUDGET_DEFERRAL)?;
    let budget = record
        .evidence
        .get(effect_core::evidence::BUDGET_EXCEEDED)
        .and_then(|refusal| refusal.get("budget"))
        .cloned()
        .unwrap_or(Value::Null);
    Some(serde_json::json!({
        "budget": budget,
        "until": deferral.get("deferred_until").cloned().unwrap_or(Value::Null),
    }))
}

fn show(
    ledger: &dyn EffectLedger,
    id: &str,
    include_output: bool,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    let record = ledger.get(id)?.ok_or_else(|| not_found(id))?;
    let stored = ledger.events(id)?;
    let mut summary = OperationSummary::from(&record);
    for_approver(ledger, &record, &stored, &mut summary)?;
    let events: Vec<EventView> = stored.iter().map(EventView::from).collect();
    let detail = OperationDetail {
        late_observations: LateObservation::of(&stored, include_output),
        summary,
        provider_idempotency_key: record.provider_idempotency_key.clone(),
        request_fingerprint: record.request_fingerprint.clone(),
        owner_token: record.owner_token.clone(),
        lease_until: record.lease_until,
        evidence: record.evidence.clone(),
        has_output: record.output.is_some(),
        output: include_output.then(|| record.output.clone()),
        events,
        compensation: CompensationLinks::of(&record),
    };
    printer.report(&detail, table::detail)
}

/// Adds to `summary` what an approver needs to see of `record`: the
/// arguments recorded for them (secrets redacted), and for a compensation
/// the confirmed output of the operation it undoes.
fn for_approver(
    ledger: &dyn EffectLedger,
    record: &EffectRecord,
    events: &[effect_core::LedgerEvent],
    summary: &mut OperationSummary,
) -> anyhow::Result<()> {
    summary.arguments = effect_core::intent::redacted(events).cloned();
    summary.compensates_output = compensates_output(ledger, record)?;
    Ok(())
}

/// For a compensation, the confirmed output of the operation it undoes (what
/// an approver of the compensation is shown); `None` otherwise.
pub(crate) fn compensates_output(
    ledger: &dyn EffectLedger,
    record: &EffectRecord,
) -> anyhow::Result<Option<Value>> {
    Ok(match record.compensates() {
        Some(original) => ledger
            .get(original)?
            .filter(|original| original.status == EffectStatus::Confirmed)
            .and_then(|original| original.output),
        None => None,
    })
}

fn events(ledger: &dyn EffectLedger, id: &str, printer: &mut Printer<'_>) -> anyhow::Result<()> {
    // An operation may have no events (ledgers older than the events table),
    // so existence is decided by the record, not by an empty history.
    ledger.get(id)?.ok_or_else(|| not_found(id))?;
    let events: Vec<EventView> = ledger.events(id)?.iter().map(EventView::from).collect();
    printer.report(&events, |events| table::events(events, false))
}

/// `stats`: what `agent-effect-ops stats` prints and the console's `/metrics`
/// exports, computed in one place.
pub(crate) fn stats_of(ledger: &dyn EffectLedger, clock: &dyn Clock) -> anyhow::Result<Stats> {
    // Oldest first: who each prepared operation waits for.
    let waiting = effect_exec::waiting(ledger)?;
    Ok(stats_from(ledger.stats()?, &waiting, clock))
}

/// [`stats_of`] from what it reads: the store's counters and who each
/// prepared operation waits for (oldest first), for a caller that needs the
/// waiting list too (the console's queue) and reads it once.
pub(crate) fn stats_from(
    raw: effect_core::LedgerStats,
    waiting: &[effect_exec::Waiting],
    clock: &dyn Clock,
) -> Stats {
    let counts = StatusCounts::of(&raw);
    let age = raw
        .oldest_unresolved_updated_at
        .as_deref()
        .and_then(|at| age_seconds(at, clock.now()));
    Stats {
        counts,
        total: counts.entries().iter().map(|(_, n)| n).sum(),
        unresolved: counts.outcome_unknown + counts.quarantined,
        oldest_unresolved_updated_at: raw.oldest_unresolved_updated_at,
        oldest_unresolved_age_seconds: age,
        stale: raw.stale_dispatched,
        waiting_for_caller: waiting
            .iter()
            .filter(|w| w.waiting_for == WaitingFor::Caller)
            .count() as u64,
        waiting_for_recovery_worker: waiting
            .iter()
            .filter(|w| w.waiting_for == WaitingFor::RecoveryWorker)
            .count() as u64,
        waiting_for_budget: waiting
            .iter()
            .filter(|w| w.waiting_for == WaitingFor::Budget)
            .count() as u64,
        recovery_blocked: waiting
            .iter()
            .filter(|w| {
                matches!(
                    w.waiting_for,
                    WaitingFor::UnreadableIntent | WaitingFor::ContractWeakened
                )
            })
            .count() as u64,
        oldest_waiting_age_seconds: waiting
            .first()
            .and_then(|w| age_seconds(&w.since, clock.now())),
        oldest_waiting_since: waiting.first().map(|w| w.since.clone()),
        budgets: raw.budgets,
    }
}

/// Applies a manual resolution through the executor, so the same rules apply
/// as in code, and reports the audited event it appended.
fn resolve(
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
    let Some(record) = executor.resolve_if_unchanged(id, resolution, &current)? else {
        let now = executor.ledger().get(id)?.ok_or_else(|| not_found(id))?;
        return Err(changed(&now).into());
    };
    let (action, event_type) = match resolution.action {
        ManualAction::Confirm { .. } => ("confirm", "manually_confirmed"),
        ManualAction::Reject => ("reject", "manually_rejected"),
        ManualAction::AuthorizeRetry { .. } => ("authorize_retry", "manual_retry_authorized"),
    };
    // The resolution is committed; the event is read back only to report it.
    let event = executor
        .ledger()
        .events(id)?
        .iter()
        .rev()
        .find(|event| event.event_type == event_type)
        .map(EventView::from);
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
fn expire(
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
fn check_output_shape(
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

/// The evidence entries the safety rules read; nothing a probe or a
/// provider returned.
fn safety_evidence(evidence: &Evidence) -> Evidence {
    use effect_core::evidence as key;
    [
        key::DISPATCH_INTERRUPTION,
        key::HANDLER_MAY_STILL_BE_RUNNING,
        key::PROBE_STATUS,
        key::POSTCONDITION,
        key::RETRY_BASIS,
    ]
    .into_iter()
    .filter_map(|name| {
        evidence
            .get(name)
            .filter(|value| value.is_string() || value.is_boolean())
            .map(|value| (name.to_owned(), value.clone()))
    })
    .collect()
}

fn check_id(id: &str) -> Result<(), InputError> {
    if id.trim().is_empty() {
        return Err(InputError::Blank {
            flag: "the operation id",
        });
    }
    Ok(())
}

fn check_audit(audit: &AuditArgs) -> Result<(), InputError> {
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

fn not_found(id: &str) -> LedgerError {
    LedgerError::NotFound {
        operation_id: id.to_owned(),
    }
}
