//! One command on an opened ledger: its input checked before anything is
//! opened, then run by the module of its kind. The console's actions run
//! through here too ([`run_on`]), so they get the command line's checks,
//! executor calls and refusals.

use std::io::Write;
use std::sync::Arc;

use effect_core::{
    Clock, EffectStatus, ListQuery, ManualAction, ManualResolution, PruneLimits, PruneRequest,
};

use crate::approval::{self, Decision};
use crate::cancel;
use crate::cli::{Command, DecisionArgs, Format};
use crate::compensation;
use crate::inspect::{events, list, not_found, show, stats_of};
use crate::maintenance;
use crate::open::Opened;
use crate::printer::Printer;
use crate::resolve::{
    check_audit, check_id, check_output_shape, expire, manual_resolution, resolve,
};
use crate::table;

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
pub(crate) struct Checked<'a> {
    resolution: Option<ManualResolution>,
    decision: Option<(&'a str, Decision<'a>, &'a DecisionArgs)>,
    prune_selection: Option<maintenance::Selection>,
}

impl<'a> Checked<'a> {
    pub(crate) fn of(command: &'a Command, clock: &dyn Clock) -> anyhow::Result<Self> {
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
pub(crate) fn execute(
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
        Command::Confirm { id, audit, .. }
        | Command::Reject { id, audit }
        | Command::AuthorizeRetry { id, audit, .. } => {
            // `manual_resolution` returns one for every resolving command.
            let Some(resolution) = &resolution else {
                return Err(anyhow::anyhow!("internal error: no resolution for {id:?}"));
            };
            if let Command::Confirm {
                ignore_output_shape: false,
                ..
            } = command
                && let ManualAction::Confirm { output, .. } = &resolution.action
            {
                let current = ledger.get(id)?.ok_or_else(|| not_found(id))?;
                // A settled operation is refused by `resolve` (exit 4), whatever the output.
                if current.status.is_uncertain() {
                    check_output_shape(ledger, &current, output)?;
                }
            }
            resolve(
                opened,
                id,
                resolution,
                audit.expect_attempts,
                clock,
                &mut printer,
            )
        }
    }
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
