//! Retiring old operations: what a store's `prune` is asked and answers.
//!
//! Pruning deletes terminal operations (`confirmed`, `rejected`) last updated
//! before a cutoff, with their events, after writing each one to an archive
//! (JSON Lines of [`ArchivedOperation`]). It never touches an unresolved or
//! active operation. A pruned operation is forgotten: executing the same
//! call again later prepares and dispatches it anew, so prune only what is
//! past every retry horizon.

use serde::{Deserialize, Serialize};

use crate::error::LedgerError;
use crate::record::{EffectRecord, LedgerEvent};
use crate::status::EffectStatus;

/// Which operations to prune.
///
/// ```
/// use effect_core::{EffectStatus, PruneRequest};
/// let request = PruneRequest::before("2026-01-01T00:00:00.000000+00:00");
/// assert_eq!(request.statuses, [EffectStatus::Confirmed, EffectStatus::Rejected]);
/// assert!(request.validate().is_ok());
/// let unresolved = request.statuses(vec![EffectStatus::Quarantined]);
/// assert!(unresolved.validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PruneRequest {
    /// Operations last updated strictly before this ISO-8601 UTC time, in the
    /// ledger's own format (`2026-01-01T00:00:00.000000+00:00`); the stores
    /// compare the text.
    pub before: String,
    /// Only operations in these statuses; terminal ones only.
    pub statuses: Vec<EffectStatus>,
    /// Say what would be pruned, and write and delete nothing.
    pub dry_run: bool,
}

impl PruneRequest {
    /// Confirmed and rejected operations last updated before `before`.
    pub fn before(before: impl Into<String>) -> Self {
        PruneRequest {
            before: before.into(),
            statuses: vec![EffectStatus::Confirmed, EffectStatus::Rejected],
            dry_run: false,
        }
    }

    /// Only operations in `statuses`.
    #[must_use]
    pub fn statuses(mut self, statuses: Vec<EffectStatus>) -> Self {
        self.statuses = statuses;
        self
    }

    /// A dry run: nothing is written or deleted.
    #[must_use]
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Checks that only terminal statuses are asked for.
    ///
    /// # Errors
    ///
    /// [`LedgerError::InvalidInput`] for no status, or a status that is not
    /// `confirmed` or `rejected`.
    pub fn validate(&self) -> Result<(), LedgerError> {
        if self.statuses.is_empty() {
            return Err(LedgerError::invalid_input(
                "prune needs at least one status",
            ));
        }
        if let Some(status) = self
            .statuses
            .iter()
            .find(|s| !matches!(s, EffectStatus::Confirmed | EffectStatus::Rejected))
        {
            return Err(LedgerError::invalid_input(format!(
                "only confirmed and rejected operations can be pruned, not {status}"
            )));
        }
        if self.before.trim().is_empty() {
            return Err(LedgerError::invalid_input("prune needs a cutoff time"));
        }
        Ok(())
    }
}

/// One line of a prune archive: an operation and its history, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchivedOperation {
    /// The record (its output and evidence included).
    pub operation: EffectRecord,
    /// Its events, in sequence order.
    pub events: Vec<LedgerEvent>,
}

/// What a prune did (or, for a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PruneReport {
    /// Operations archived and deleted.
    pub operations: u64,
    /// Their events, archived and deleted.
    pub events: u64,
    /// True for a dry run: nothing was written or deleted.
    pub dry_run: bool,
}

impl PruneReport {
    /// A report of `operations` with `events`.
    pub fn new(operations: u64, events: u64, dry_run: bool) -> Self {
        PruneReport {
            operations,
            events,
            dry_run,
        }
    }
}
