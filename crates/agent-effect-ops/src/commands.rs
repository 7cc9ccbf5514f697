//! The commands: each reads or resolves through the ledger and writes its
//! report to an injected writer, so tests snapshot output without a process.

use std::io::Write;
use std::sync::Arc;

use anyhow::Context as _;
use effect_core::{
    Clock, EffectLedger, EffectStatus, LedgerError, ListQuery, ManualAction, ManualResolution,
    Transition,
};
use effect_exec::{EffectExecutor, ExecutorOptions};
use serde::Serialize;
use serde_json::Value;

use crate::cli::{AuditArgs, Cli, Command, Format, Since};
use crate::error::InputError;
use crate::open::{Opened, open};
use crate::table;
use crate::timestamp::{age_seconds, parse_unix_micros};
use crate::view::{
    EventList, EventView, OperationDetail, OperationList, OperationSummary, Resolution, Stats,
    StatusCounts,
};

/// How many events `export` reads per ledger query.
const EXPORT_PAGE: usize = 1000;

/// Runs one command against the ledger named by `cli.db`, printing to `out`.
///
/// `clock` stamps manual resolutions and measures the age in `stats`; the
/// binary passes [`SystemClock`](effect_core::SystemClock).
///
/// # Errors
///
/// Any failure, classified for the exit code by [`Exit::of`](crate::Exit::of).
pub fn run(cli: &Cli, clock: Arc<dyn Clock>, out: &mut dyn Write) -> anyhow::Result<()> {
    // Check input before the ledger is opened: a refused command touches nothing.
    let resolution = manual_resolution(&cli.command)?;
    if let Command::Show { id, .. } | Command::Events { id } = &cli.command {
        check_id(id)?;
    }
    let opened = open(&cli.db, cli.migrate, Arc::clone(&clock))?;
    let ledger = opened.ledger();
    let mut printer = Printer {
        out,
        format: cli.format,
    };
    match &cli.command {
        Command::List { status, limit } => list(ledger, *status, usize::from(*limit), &mut printer),
        Command::Show { id, include_output } => show(ledger, id, *include_output, &mut printer),
        Command::Events { id } => events(ledger, id, &mut printer),
        Command::Stats => stats(ledger, clock.as_ref(), &mut printer),
        Command::Export { since } => export(ledger, *since, &mut printer),
        Command::Confirm { id, .. }
        | Command::Reject { id, .. }
        | Command::AuthorizeRetry { id, .. } => {
            match &resolution {
                Some(resolution) => resolve(&opened, id, resolution, clock, &mut printer),
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
        Command::AuthorizeRetry { id, audit } => (id, ManualAction::AuthorizeRetry, audit),
        Command::List { .. }
        | Command::Show { .. }
        | Command::Events { .. }
        | Command::Stats
        | Command::Export { .. } => return Ok(None),
    };
    check_id(id)?;
    check_audit(audit)?;
    Ok(Some(ManualResolution {
        action,
        actor: audit.actor.clone(),
        reason: audit.reason.clone(),
        evidence_reference: audit.evidence_reference.clone(),
    }))
}

/// Writes reports in the chosen format.
struct Printer<'a> {
    out: &'a mut dyn Write,
    format: Format,
}

impl Printer<'_> {
    /// One pretty JSON document, or the table `render` makes.
    fn report<T: Serialize>(
        &mut self,
        value: &T,
        render: impl Fn(&T) -> String,
    ) -> anyhow::Result<()> {
        let text = match self.format {
            Format::Json => {
                let mut json =
                    serde_json::to_string_pretty(value).context("cannot encode the report")?;
                json.push('\n');
                json
            }
            Format::Table => render(value),
        };
        self.write(&text)
    }

    fn write(&mut self, text: &str) -> anyhow::Result<()> {
        self.out
            .write_all(text.as_bytes())
            .context("cannot write the output")
    }
}

fn list(
    ledger: &dyn EffectLedger,
    status: Option<EffectStatus>,
    limit: usize,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    let query = match status {
        Some(status) => ListQuery::with_status(status, limit),
        None => ListQuery::new(limit),
    };
    let operations: Vec<OperationSummary> = ledger
        .list(&query)?
        .iter()
        .map(OperationSummary::from)
        .collect();
    let list = OperationList {
        status,
        limit,
        count: operations.len(),
        operations,
    };
    printer.report(&list, table::list)
}

fn show(
    ledger: &dyn EffectLedger,
    id: &str,
    include_output: bool,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    let record = ledger.get(id)?.ok_or_else(|| not_found(id))?;
    let events = ledger.events(id)?.iter().map(EventView::from).collect();
    let detail = OperationDetail {
        summary: OperationSummary::from(&record),
        provider_idempotency_key: record.provider_idempotency_key.clone(),
        request_fingerprint: record.request_fingerprint.clone(),
        owner_token: record.owner_token.clone(),
        lease_until: record.lease_until,
        evidence: record.evidence.clone(),
        has_output: record.output.is_some(),
        output: include_output.then(|| record.output.clone()),
        events,
    };
    printer.report(&detail, table::detail)
}

fn events(ledger: &dyn EffectLedger, id: &str, printer: &mut Printer<'_>) -> anyhow::Result<()> {
    // An operation may have no events (ledgers older than the events table),
    // so existence is decided by the record, not by an empty history.
    ledger.get(id)?.ok_or_else(|| not_found(id))?;
    let list = EventList {
        operation_id: id.to_owned(),
        events: ledger.events(id)?.iter().map(EventView::from).collect(),
    };
    printer.report(&list, |list| table::events(&list.events, false))
}

fn stats(
    ledger: &dyn EffectLedger,
    clock: &dyn Clock,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    let raw = ledger.stats()?;
    let counts = StatusCounts::of(&raw);
    let age = raw
        .oldest_unresolved_updated_at
        .as_deref()
        .and_then(|at| age_seconds(at, clock.now()));
    let stats = Stats {
        counts,
        total: counts.entries().iter().map(|(_, n)| n).sum(),
        unresolved: counts.outcome_unknown + counts.quarantined,
        oldest_unresolved_updated_at: raw.oldest_unresolved_updated_at,
        oldest_unresolved_age_seconds: age,
    };
    printer.report(&stats, table::stats)
}

fn export(
    ledger: &dyn EffectLedger,
    since: Since,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    // Sequences give commit order; timestamps come from each writer's clock and
    // need not be monotonic, so a time filter reads every event.
    let (mut after, from_time) = match since {
        Since::Sequence(sequence) => (sequence, None),
        Since::Time(micros) => (0, Some(micros)),
    };
    let mut table_rows = Vec::new();
    loop {
        let page = ledger.events_after(after, EXPORT_PAGE)?;
        let Some(last) = page.last() else { break };
        after = last.sequence;
        for event in &page {
            if let Some(from) = from_time {
                // An unreadable timestamp is exported rather than silently dropped.
                if parse_unix_micros(&event.timestamp).is_some_and(|at| at < from) {
                    continue;
                }
            }
            let view = EventView::from(event);
            match printer.format {
                Format::Json => {
                    let mut line =
                        serde_json::to_string(&view).context("cannot encode an event")?;
                    line.push('\n');
                    printer.write(&line)?;
                }
                Format::Table => table_rows.push(view),
            }
        }
        if page.len() < EXPORT_PAGE {
            break;
        }
    }
    if printer.format == Format::Table {
        printer.write(&table::events(&table_rows, true))?;
    }
    Ok(())
}

/// Applies a manual resolution through the executor, so the same rules apply
/// as in code, and reports the audited event it appended.
fn resolve(
    opened: &Opened,
    id: &str,
    resolution: &ManualResolution,
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
    let writable = opened.writable(Arc::clone(&clock))?;
    let executor = EffectExecutor::with_clock(writable, ExecutorOptions::default(), clock);
    let record = executor.resolve(id, resolution)?;
    let (action, event_type) = match resolution.action {
        ManualAction::Confirm { .. } => ("confirm", "manually_confirmed"),
        ManualAction::Reject => ("reject", "manually_rejected"),
        ManualAction::AuthorizeRetry => ("authorize_retry", "manual_retry_authorized"),
    };
    // The resolution is committed; the event is read back only to report it.
    let event = executor
        .ledger()
        .events(id)?
        .iter()
        .rev()
        .find(|event| event.event_type == event_type)
        .map(EventView::from);
    let report = Resolution {
        action: action.to_owned(),
        operation: OperationSummary::from(&record),
        event,
    };
    printer.report(&report, table::resolution)
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
    serde_json::from_str(text).map_err(|source| InputError::InvalidOutputJson { source })
}

fn not_found(id: &str) -> LedgerError {
    LedgerError::NotFound {
        operation_id: id.to_owned(),
    }
}
