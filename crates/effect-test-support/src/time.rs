//! Time for a test that opens a ledger after other processes died.

use std::sync::Arc;
use std::time::Duration;

use effect_core::{Clock, ManualClock, SystemClock};

/// A manual clock standing just past the end of every lease of `lease`
/// granted (or renewed) until now on the operating system's clock.
///
/// A process that opens a ledger with it once the others have died sees each
/// of their leases expired at once, instead of waiting for them to run out
/// on a loaded machine; the test moves it on as it needs.
///
/// ```
/// use std::time::Duration;
/// use effect_core::{Clock, SystemClock};
///
/// let lease = Duration::from_millis(400);
/// // A lease granted now ends at `granted + lease`, before the clock.
/// let granted = SystemClock.now();
/// let clock = effect_test_support::time::past_every_lease(lease);
/// assert!(clock.now() > granted + lease);
/// ```
pub fn past_every_lease(lease: Duration) -> Arc<ManualClock> {
    Arc::new(ManualClock::new(
        SystemClock.now() + lease + Duration::from_millis(1),
    ))
}
