//! Waiting for a condition on the real clock: the harness drives real
//! processes and servers, whose time is the machine's.

use std::time::{Duration, Instant};

use anyhow::bail;

/// Now, on the machine's monotonic clock.
#[allow(
    clippy::disallowed_methods,
    reason = "the harness times real processes and servers"
)]
pub(crate) fn now() -> Instant {
    Instant::now()
}

/// Polls `ready` every 50 ms until it answers true, for at most `timeout`.
pub(crate) fn until(
    timeout: Duration,
    what: &str,
    mut ready: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let start = now();
    loop {
        if ready()? {
            return Ok(());
        }
        if start.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
