//! `prune`'s progress on stderr: a bar on a terminal, a plain line every few
//! seconds otherwise (a log file, a CI job), nothing for a prune that ends
//! within the first interval.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use effect_core::PruneReport;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a plain progress line is printed.
const LINE_EVERY: Duration = Duration::from_secs(5);

/// The progress of one prune.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    started: Instant,
    last_line: Instant,
}

impl Progress {
    /// Starts showing the progress of a prune of `total()` operations. On a
    /// terminal only the bar's length is asked: a dry run's count (one
    /// read, no lock).
    #[allow(clippy::disallowed_methods)] // Progress is shown in real time.
    pub(crate) fn start(total: impl FnOnce() -> u64) -> Self {
        let now = Instant::now();
        let bar = std::io::stderr().is_terminal().then(|| {
            let total = total();
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "pruning {bar:40} {human_pos}/{human_len} operations, {per_sec}, eta {eta} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar
        });
        Progress {
            bar,
            started: now,
            last_line: now,
        }
    }

    /// Shows `report`, the prune's work so far.
    #[allow(clippy::disallowed_methods)] // Progress is shown in real time.
    pub(crate) fn update(&mut self, report: &PruneReport) {
        if let Some(bar) = &self.bar {
            bar.set_position(report.operations);
            bar.set_message(format!("({} batches)", report.batches));
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.last_line) < LINE_EVERY {
            return;
        }
        self.last_line = now;
        let elapsed = now.duration_since(self.started).as_secs_f64();
        let rate = report.operations as f64 / elapsed.max(f64::EPSILON);
        eprintln!(
            "prune: {} operations and {} events deleted in {} batches, {rate:.0} operations/s",
            report.operations, report.events, report.batches
        );
    }

    /// Clears the bar; the report follows on stdout.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
