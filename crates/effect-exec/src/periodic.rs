//! A pass run now and then every `every` on a thread of its own, until
//! stopped: the loop of [`Sweeper::spawn`](crate::Sweeper::spawn) and
//! [`RecoveryWorker::spawn`](crate::RecoveryWorker::spawn). The pause goes
//! through the executor's [`Sleeper`], so a test drives the ticks and a stop
//! does not wait the pause out.

use std::fmt::Display;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use effect_core::{Sleeper, StopSignal};

/// A running loop; [`stop`](Self::stop) ends it.
#[derive(Debug)]
pub(crate) struct Periodic<R> {
    stop: StopSignal,
    thread: JoinHandle<Vec<R>>,
}

impl<R: Send + 'static> Periodic<R> {
    /// Runs `pass` now, then after each pause of `every` through `sleeper`.
    /// A failed pass is logged (as `what failed`) and tried again at the
    /// next tick.
    pub(crate) fn spawn<E, F>(
        sleeper: Arc<dyn Sleeper>,
        every: Duration,
        what: &'static str,
        mut pass: F,
    ) -> Self
    where
        E: Display,
        F: FnMut() -> Result<R, E> + Send + 'static,
    {
        let stop = StopSignal::new();
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut reports = Vec::new();
            loop {
                match pass() {
                    Ok(report) => reports.push(report),
                    Err(err) => tracing::warn!(error = %err, "{what} failed"),
                }
                if sleeper.sleep_unless_stopped(every, &stopped) {
                    return reports;
                }
            }
        });
        Periodic { stop, thread }
    }

    /// Stops the loop after its current pass and returns the report of
    /// every pass it ran.
    ///
    /// # Panics
    ///
    /// When the loop's thread panicked (the panic is resumed here).
    pub(crate) fn stop(self) -> Vec<R> {
        self.stop.stop();
        match self.thread.join() {
            Ok(reports) => reports,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}
