//! `prune` and `backup`: retiring old operations and copying a live ledger.

use std::fs::OpenOptions;
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use effect_core::clock::format_timestamp;
use effect_core::{Clock, PruneReport, PruneRequest};

use crate::error::InputError;
use crate::open::Opened;
use crate::printer::Printer;
use crate::table;
use crate::timestamp::parse_unix_micros;
use crate::view::{BackupView, PruneView};

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
            retention: jiff::SignedDuration::try_from(min_retention)
                .map(|d| format!("{d:#}"))
                .unwrap_or_else(|_| format!("{}s", min_retention.as_secs())),
        });
    }
    Ok(text)
}

/// `prune`: writes the archive (a new file, owner-only), then deletes.
pub(crate) fn prune(
    opened: &Opened,
    request: &PruneRequest,
    archive: Option<&Path>,
    clock: Arc<dyn Clock>,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    request.validate()?;
    let path = match archive {
        Some(path) => path.to_owned(),
        None => default_archive(clock.as_ref()),
    };
    let (report, written) = if request.dry_run {
        (
            run_prune(opened, request, &mut std::io::sink(), &clock)?,
            None,
        )
    } else {
        let file = create_archive(&path)?;
        let mut writer = BufWriter::new(file);
        let result = run_prune(opened, request, &mut writer, &clock);
        let report = match result {
            Ok(report) => report,
            Err(err) => {
                // Nothing was deleted; an archive of a prune that did not
                // happen would mislead.
                drop(writer);
                let _ = std::fs::remove_file(&path);
                return Err(err);
            }
        };
        let file = writer
            .into_inner()
            .context("cannot write the prune archive")?;
        file.sync_all().context("cannot sync the prune archive")?;
        if report.operations == 0 {
            std::fs::remove_file(&path).context("cannot remove the empty prune archive")?;
            (report, None)
        } else {
            (report, Some(path.display().to_string()))
        }
    };
    let view = PruneView {
        dry_run: request.dry_run,
        before: request.before.clone(),
        statuses: request.statuses.clone(),
        operations: report.operations,
        events: report.events,
        archive: written,
    };
    printer.report(&view, table::prune)
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

fn run_prune(
    opened: &Opened,
    request: &PruneRequest,
    archive: &mut dyn std::io::Write,
    clock: &Arc<dyn Clock>,
) -> anyhow::Result<PruneReport> {
    // A dry run only reads: it never opens a file for writing.
    Ok(opened
        .reopen(Arc::clone(clock), request.dry_run)?
        .prune(request, archive)?)
}

fn default_archive(clock: &dyn Clock) -> PathBuf {
    let stamp: String = format_timestamp(clock.now())
        .chars()
        .take(19)
        .filter(char::is_ascii_digit)
        .collect();
    PathBuf::from(format!("effect-archive-{stamp}.jsonl"))
}

/// A new archive file, readable by its owner only (it holds outputs and
/// evidence); an existing file is never overwritten.
fn create_archive(path: &Path) -> anyhow::Result<std::fs::File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot create the prune archive {path:?}"))?;
    file.flush().context("cannot write the prune archive")?;
    Ok(file)
}
