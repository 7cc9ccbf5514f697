//! `prune`, `backup` and `export`: retiring old operations, copying a live
//! ledger, and streaming its history.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use effect_core::format_timestamp;
use effect_core::{
    ArchiveFile, Clock, EffectLedger, PruneArchive, PruneLimits, PruneReport, PruneRequest,
    RetentionPolicy, RulePruned,
};
use production_agent_systems::open::Ledger;

use crate::cli::{Format, Since};
use crate::error::InputError;
use crate::open::Opened;
use crate::printer::Printer;
use crate::progress::Progress;
use crate::table;
use crate::timestamp::parse_unix_micros;
use crate::view::{BackupView, EventView, PruneView, RuleView};

/// What `prune` retires: up to one cutoff, or each status past its age in a
/// retention policy.
#[derive(Debug, Clone)]
pub(crate) enum Selection {
    /// `--before` or `--older-than`, with `--status`.
    Cutoff(PruneRequest),
    /// `--policy`.
    Policy(RetentionPolicy),
}

impl Selection {
    fn validate(&self) -> Result<(), effect_core::LedgerError> {
        match self {
            Selection::Cutoff(request) => request.validate(),
            Selection::Policy(policy) => policy.validate(),
        }
    }

    /// Prunes (or with `dry_run` counts) what this selects at `now`.
    fn run(
        &self,
        ledger: &Ledger,
        now: SystemTime,
        dry_run: bool,
        archive: &mut dyn PruneArchive,
        progress: &mut dyn FnMut(&PruneReport),
    ) -> Result<(PruneReport, Vec<RulePruned>), effect_core::LedgerError> {
        match self {
            Selection::Cutoff(request) => {
                let request = request.clone().dry_run(dry_run);
                Ok((
                    ledger.prune_with_progress(&request, archive, progress)?,
                    Vec::new(),
                ))
            }
            Selection::Policy(policy) => {
                let report = policy.apply(ledger, now, dry_run, archive, progress)?;
                Ok((report.total, report.rules))
            }
        }
    }
}

/// The policy `prune --policy` applies: refused when a rule keeps its status
/// less than the minimum retention (unless `ignore_min_retention`), before
/// anything is opened.
pub(crate) fn checked_policy(
    policy: &RetentionPolicy,
    min_retention: Duration,
    ignore_min_retention: bool,
    limits: PruneLimits,
) -> Result<RetentionPolicy, InputError> {
    let floor = if ignore_min_retention {
        Duration::ZERO
    } else {
        min_retention
    };
    if let Some(rule) = policy.rules.iter().find(|rule| rule.keep < floor) {
        return Err(InputError::ShortRetention {
            status: rule.status.to_string(),
            keep: shown(rule.keep),
            retention: shown(min_retention),
        });
    }
    Ok(policy.clone().min_retention(floor).limits(limits))
}

/// A duration as an operator writes it (30d, 1h 30m).
fn shown(duration: Duration) -> String {
    jiff::SignedDuration::try_from(duration)
        .map(|d| format!("{d:#}"))
        .unwrap_or_else(|_| format!("{}s", duration.as_secs()))
}

/// The cutoff `prune` may use: `--before`, or now minus `--older-than`;
/// refused when it lies in the future or is younger than the minimum
/// retention (unless `ignore_min_retention`), before anything is opened.
pub(crate) fn checked_cutoff(
    before: Option<&str>,
    older_than: Option<Duration>,
    min_retention: Duration,
    ignore_min_retention: bool,
    now: SystemTime,
) -> Result<String, InputError> {
    let cutoff = match (before, older_than) {
        (Some(text), _) => {
            let micros = parse_unix_micros(text).ok_or(InputError::InvalidBefore)?;
            let micros = u64::try_from(micros).map_err(|_| InputError::InvalidBefore)?;
            UNIX_EPOCH + Duration::from_micros(micros)
        }
        (None, Some(age)) => now.checked_sub(age).unwrap_or(UNIX_EPOCH),
        (None, None) => return Err(InputError::InvalidBefore),
    };
    let text = format_timestamp(cutoff);
    if cutoff > now {
        return Err(InputError::FutureCutoff { cutoff: text });
    }
    let youngest = now.checked_sub(min_retention).unwrap_or(UNIX_EPOCH);
    if cutoff > youngest && !ignore_min_retention {
        return Err(InputError::RecentCutoff {
            cutoff: text,
            retention: shown(min_retention),
        });
    }
    Ok(text)
}

/// Where `prune` writes its archive: `--archive` (or a new default name),
/// and whether `--resume` goes on with it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ArchiveArg<'a> {
    pub path: Option<&'a Path>,
    pub resume: bool,
}

/// `prune`: batch by batch, each appended to the archive (a new file,
/// owner-only, or the resumed one) and synced before it is deleted.
pub(crate) fn prune(
    opened: &Opened,
    selection: &Selection,
    dry_run: bool,
    archive: ArchiveArg<'_>,
    clock: Arc<dyn Clock>,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    selection.validate()?;
    let now = clock.now();
    let path = match archive.path {
        Some(path) => path.to_owned(),
        None => default_archive(clock.as_ref()),
    };
    let ((report, rules), written) = if dry_run {
        // A dry run only reads: it never opens a file for writing.
        let ledger = opened.reopen(Arc::clone(&clock), true)?;
        let counted = selection.run(&ledger, now, true, &mut std::io::sink(), &mut |_| {})?;
        (counted, None)
    } else {
        let ledger = opened.reopen(Arc::clone(&clock), false)?;
        let mut progress = Progress::start(|| {
            selection
                .run(&ledger, now, true, &mut std::io::sink(), &mut |_| {})
                .map(|(r, _)| r.operations)
                .unwrap_or(0)
        });
        let mut file = if archive.resume {
            ArchiveFile::resume(&path)?
        } else {
            ArchiveFile::create(&path)?
        };
        let result = selection.run(&ledger, now, false, &mut file, &mut |r| progress.update(r));
        progress.finish();
        let report = match result {
            Ok(report) => report,
            Err(err) if file.lines() == 0 && !archive.resume => {
                // Nothing was archived, so nothing deleted: an empty archive
                // of a prune that did not happen would mislead.
                drop(file);
                let _ = std::fs::remove_file(&path);
                return Err(err.into());
            }
            Err(err) => {
                return Err(anyhow::Error::new(err).context(format!(
                    "the prune stopped; {} holds every operation it deleted (continue with --resume --archive {})",
                    path.display(),
                    path.display()
                )));
            }
        };
        drop(file);
        if report.0.operations == 0 && !archive.resume {
            std::fs::remove_file(&path).context("cannot remove the empty prune archive")?;
            (report, None)
        } else {
            (report, Some(path.display().to_string()))
        }
    };
    let (before, statuses, policy) = match selection {
        Selection::Cutoff(request) => {
            (Some(request.before.clone()), request.statuses.clone(), None)
        }
        Selection::Policy(policy) => (
            None,
            policy.rules.iter().map(|rule| rule.status).collect(),
            Some(policy.to_string()),
        ),
    };
    let view = PruneView {
        dry_run,
        before,
        statuses,
        policy,
        rules: rules.into_iter().map(RuleView::from).collect(),
        operations: report.operations,
        events: report.events,
        resumed: report.resumed,
        batches: report.batches,
        complete: report.complete,
        archive: written,
    };
    printer.report(&view, table::prune)
}

/// How many events `export` reads per ledger query: what it holds at once.
pub(crate) const EXPORT_PAGE: usize = 1000;

/// `export`: every event after the cursor, in sequence order, a page at a
/// time: each page is written out before the next is read, so memory
/// follows the page, not the ledger. As a table each page is a block of
/// aligned columns, the header printed once.
pub(crate) fn export(
    ledger: &dyn EffectLedger,
    since: Since,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    // The sequence cursor misses nothing (`EffectLedger::events_after`);
    // timestamps come from each writer's clock and need not be monotonic, so a
    // time filter reads every event.
    let (mut after, from_time) = match since {
        Since::Sequence(sequence) => (sequence, None),
        Since::Time(micros) => (0, Some(micros)),
    };
    let mut header = true;
    loop {
        let page = ledger.events_after(after, EXPORT_PAGE)?;
        let Some(last) = page.last() else { break };
        after = last.sequence;
        let views: Vec<EventView> = page
            .iter()
            // An unreadable timestamp is exported rather than silently dropped.
            .filter(|event| {
                from_time.is_none_or(|from| {
                    parse_unix_micros(&event.timestamp).is_none_or(|at| at >= from)
                })
            })
            .map(EventView::from)
            .collect();
        if !views.is_empty() {
            let text = match printer.format {
                Format::Json => {
                    let mut text = String::new();
                    for view in &views {
                        text.push_str(
                            &serde_json::to_string(view).context("cannot encode an event")?,
                        );
                        text.push('\n');
                    }
                    text
                }
                Format::Table => {
                    let block = table::events(&views, true);
                    if header {
                        block
                    } else {
                        block
                            .split_once('\n')
                            .map(|(_, rows)| rows.to_owned())
                            .unwrap_or_default()
                    }
                }
            };
            printer.write(&text)?;
            header = false;
        }
        if page.len() < EXPORT_PAGE {
            break;
        }
    }
    if header && printer.format == Format::Table {
        printer.write(&table::events(&[], true))?;
    }
    Ok(())
}

/// `backup DEST`: SQLite's online backup of the ledger file.
pub(crate) fn backup(
    opened: &Opened,
    dest: &Path,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    let Some(source) = opened.sqlite_path() else {
        return Err(InputError::BackupNotSqlite.into());
    };
    // The read-only ledger is enough: a backup only reads.
    opened.store().backup(dest)?;
    let view = BackupView {
        source: source.display().to_string(),
        destination: dest.display().to_string(),
    };
    printer.report(&view, table::backup)
}

fn default_archive(clock: &dyn Clock) -> PathBuf {
    let stamp: String = format_timestamp(clock.now())
        .chars()
        .take(19)
        .filter(char::is_ascii_digit)
        .collect();
    PathBuf::from(format!("effect-archive-{stamp}.jsonl"))
}

#[cfg(test)]
mod tests;
