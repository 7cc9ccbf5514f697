//! Retention as a policy: how long each terminal status is kept before a
//! prune retires it (docs/operations.md#retention).
//!
//! A [`RetentionPolicy`] names, per terminal status, how long after its last
//! update an operation is kept: `confirmed=30d,rejected=90d`. An operator
//! cancellation is a `rejected` operation (docs/spec.md §2), so it follows
//! the `rejected` rule. A status the policy does not name is kept forever,
//! and unresolved or active operations are never pruned. No rule may keep a
//! status less than the policy's [`min_retention`](RetentionPolicy::min_retention)
//! (default [`DEFAULT_MIN_RETENTION`], the same floor `agent-effect-ops prune`
//! enforces), because recent operations are the ones an agent may still
//! repeat, and a pruned operation is forgotten.
//!
//! [`RetentionPolicy::apply`] runs one [`PruneRequest`] per rule against a
//! [`PruneLedger`], with the policy's [`PruneLimits`]: the same batches,
//! archive and resume rules as any prune. Its
//! [`max_batches`](PruneLimits::max_batches) and
//! [`max_duration`](PruneLimits::max_duration) bound the whole pass, across
//! rules, so a recovery worker's pass never holds the store long.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::clock::format_timestamp;
use crate::error::LedgerError;
use crate::prune::{PruneArchive, PruneLimits, PruneReport, PruneRequest};
use crate::status::EffectStatus;

/// The shortest time a rule may keep a status: 24 hours.
pub const DEFAULT_MIN_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// A store that prunes: archives, then deletes, old terminal operations in
/// batches ([`PruneRequest`]). The SQLite and PostgreSQL ledgers implement
/// it; a recovery worker and `agent-effect-ops prune --policy` run a
/// [`RetentionPolicy`] through it.
pub trait PruneLedger: Send + Sync {
    /// Prunes what `request` selects into `archive`, calling `progress` with
    /// the report so far after each batch.
    ///
    /// # Errors
    ///
    /// [`LedgerError::InvalidInput`] for a request [`PruneRequest::validate`]
    /// refuses; [`LedgerError::Backend`] when the archive cannot be written
    /// (nothing of that batch is deleted); store failures.
    fn prune_with_progress(
        &self,
        request: &PruneRequest,
        archive: &mut dyn PruneArchive,
        progress: &mut dyn FnMut(&PruneReport),
    ) -> Result<PruneReport, LedgerError>;
}

/// How long one terminal status is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RetentionRule {
    /// `confirmed` or `rejected`.
    pub status: EffectStatus,
    /// Kept at least this long after its last update.
    pub keep: Duration,
}

/// How long each terminal status is kept, and in what steps it is pruned.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use effect_core::{EffectStatus, RetentionPolicy};
///
/// let policy: RetentionPolicy = "confirmed=30d,rejected=90d".parse()?;
/// assert_eq!(policy.to_string(), "confirmed=30d,rejected=90d");
/// let now = UNIX_EPOCH + Duration::from_secs(100 * 86_400);
/// let requests = policy.requests(now)?;
/// assert_eq!(requests[0].statuses, [EffectStatus::Confirmed]);
/// assert_eq!(requests[0].before, "1970-03-12T00:00:00.000000+00:00");
/// // Keeping confirmed operations an hour is below the 24 h floor.
/// let hasty: RetentionPolicy = "confirmed=1h".parse()?;
/// assert!(hasty.validate().is_err());
/// // A status that is not terminal is never pruned.
/// assert!("quarantined=30d".parse::<RetentionPolicy>().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetentionPolicy {
    /// One rule per status; a status without one is kept forever.
    pub rules: Vec<RetentionRule>,
    /// No rule may keep its status less than this.
    pub min_retention: Duration,
    /// The batches of each prune, and the bounds of one whole application.
    pub limits: PruneLimits,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy {
            rules: Vec::new(),
            min_retention: DEFAULT_MIN_RETENTION,
            limits: PruneLimits::default(),
        }
    }
}

/// A policy text [`RetentionPolicy::from_str`] cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid retention policy {value:?}: {reason} (expected STATUS=AGE,..., such as confirmed=30d,rejected=90d)"
)]
#[non_exhaustive]
pub struct ParseRetentionError {
    /// The text that was read.
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
}

/// What one application of a [`RetentionPolicy`] removed, rule by rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RetentionReport {
    /// The sum over the rules; `complete` is false when a bound stopped the
    /// application before every rule was done.
    pub total: PruneReport,
    /// What each rule that ran pruned, in the policy's order.
    pub rules: Vec<RulePruned>,
}

/// What one rule of a [`RetentionPolicy`] pruned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RulePruned {
    /// The rule's status.
    pub status: EffectStatus,
    /// Its cutoff: operations last updated before it were pruned.
    pub before: String,
    /// Operations deleted (for a dry run: that would be), each archived first.
    pub operations: u64,
    /// Their events.
    pub events: u64,
}

impl RetentionPolicy {
    /// A policy with no rule yet (it keeps everything, and does not
    /// validate until it has one).
    pub fn new() -> Self {
        RetentionPolicy::default()
    }

    /// Keeps `status` for `keep` after its last update (replacing an
    /// earlier rule for it).
    #[must_use]
    pub fn keep(mut self, status: EffectStatus, keep: Duration) -> Self {
        self.rules.retain(|rule| rule.status != status);
        self.rules.push(RetentionRule { status, keep });
        self
    }

    /// The shortest time a rule may keep a status (default
    /// [`DEFAULT_MIN_RETENTION`]).
    #[must_use]
    pub fn min_retention(mut self, min_retention: Duration) -> Self {
        self.min_retention = min_retention;
        self
    }

    /// The batches, and the bounds of one application.
    #[must_use]
    pub fn limits(mut self, limits: PruneLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Checks the rules: at least one, each for a terminal status named once,
    /// none shorter than the minimum retention; and the limits.
    ///
    /// # Errors
    ///
    /// [`LedgerError::InvalidInput`] naming what is wrong.
    pub fn validate(&self) -> Result<(), LedgerError> {
        if self.rules.is_empty() {
            return Err(LedgerError::invalid_input(
                "a retention policy needs at least one rule",
            ));
        }
        for (i, rule) in self.rules.iter().enumerate() {
            if !rule.status.is_terminal() {
                return Err(LedgerError::invalid_input(format!(
                    "only confirmed and rejected operations can be pruned, not {}",
                    rule.status
                )));
            }
            if self.rules[..i].iter().any(|r| r.status == rule.status) {
                return Err(LedgerError::invalid_input(format!(
                    "the retention policy names {} twice",
                    rule.status
                )));
            }
            if rule.keep < self.min_retention {
                return Err(LedgerError::invalid_input(format!(
                    "keeping {} operations {} is below the minimum retention of {}",
                    rule.status,
                    format_age(rule.keep),
                    format_age(self.min_retention)
                )));
            }
        }
        PruneRequest::before("cutoff")
            .limits(self.limits)
            .validate()
    }

    /// The prune of each rule at `now`: its status, last updated before
    /// `now` minus the rule's age, with the policy's limits.
    ///
    /// # Errors
    ///
    /// As [`validate`](Self::validate).
    pub fn requests(&self, now: SystemTime) -> Result<Vec<PruneRequest>, LedgerError> {
        self.validate()?;
        Ok(self
            .rules
            .iter()
            .map(|rule| {
                let cutoff = now.checked_sub(rule.keep).unwrap_or(UNIX_EPOCH);
                PruneRequest::before(format_timestamp(cutoff))
                    .statuses(vec![rule.status])
                    .limits(self.limits)
            })
            .collect())
    }

    /// Prunes, rule after rule, what the policy retires at `now`, into
    /// `archive` (a dry run with `dry_run`: counts, writes nothing). The
    /// policy's [`max_batches`](PruneLimits::max_batches) and
    /// [`max_duration`](PruneLimits::max_duration) bound the whole
    /// application: once either stops a rule, the later rules wait for the
    /// next application, and the report says it is not complete.
    ///
    /// # Errors
    ///
    /// As [`validate`](Self::validate) and [`PruneLedger::prune_with_progress`];
    /// what the rules before the failing batch pruned stays pruned (and
    /// archived).
    #[allow(clippy::disallowed_methods)] // max_duration is real elapsed time, as in the stores.
    pub fn apply(
        &self,
        ledger: &dyn PruneLedger,
        now: SystemTime,
        dry_run: bool,
        archive: &mut dyn PruneArchive,
        progress: &mut dyn FnMut(&PruneReport),
    ) -> Result<RetentionReport, LedgerError> {
        let started = Instant::now();
        let mut report = RetentionReport {
            total: PruneReport::new(0, 0, dry_run),
            rules: Vec::new(),
        };
        for request in self.requests(now)? {
            let mut limits = request.limits;
            if let Some(max) = limits.max_batches {
                let left = max.saturating_sub(report.total.batches);
                if left == 0 {
                    report.total.complete = false;
                    break;
                }
                limits.max_batches = Some(left);
            }
            if let Some(max) = limits.max_duration {
                let left = max.saturating_sub(started.elapsed());
                if left.is_zero() {
                    report.total.complete = false;
                    break;
                }
                limits.max_duration = Some(left);
            }
            let request = request.limits(limits).dry_run(dry_run);
            let done = report.total.clone();
            let pruned = ledger.prune_with_progress(&request, archive, &mut |so_far| {
                progress(&sum(&done, so_far));
            })?;
            report.total = sum(&report.total, &pruned);
            report.rules.push(RulePruned {
                status: request.statuses[0],
                before: request.before.clone(),
                operations: pruned.operations,
                events: pruned.events,
            });
            if !pruned.complete {
                report.total.complete = false;
                break;
            }
        }
        Ok(report)
    }
}

impl RetentionReport {
    /// Operations the application deleted (or, for a dry run, would).
    pub fn operations(&self) -> u64 {
        self.total.operations
    }
}

impl fmt::Display for RetentionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, rule) in self.rules.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}={}", rule.status, format_age(rule.keep))?;
        }
        Ok(())
    }
}

impl FromStr for RetentionPolicy {
    type Err = ParseRetentionError;

    /// Reads `STATUS=AGE,...`, such as `confirmed=30d,rejected=90d`; an age
    /// is a whole number and a unit: `s`, `m`, `h`, `d` (24 hours) or `w`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |reason: String| ParseRetentionError {
            value: text.to_owned(),
            reason,
        };
        let mut policy = RetentionPolicy::new();
        for part in text.split(',').map(str::trim) {
            let Some((status, age)) = part.split_once('=') else {
                return Err(invalid(format!("{part:?} is not STATUS=AGE")));
            };
            let status: EffectStatus = status
                .trim()
                .parse()
                .map_err(|e: crate::status::ParseStatusError| invalid(e.to_string()))?;
            if !status.is_terminal() {
                return Err(invalid(format!(
                    "only confirmed and rejected operations can be pruned, not {status}"
                )));
            }
            if policy.rules.iter().any(|rule| rule.status == status) {
                return Err(invalid(format!("{status} is named twice")));
            }
            let keep = parse_age(age.trim()).ok_or_else(|| {
                invalid(format!(
                    "{:?} is not an age such as 30d, 12h or 2w",
                    age.trim()
                ))
            })?;
            policy = policy.keep(status, keep);
        }
        Ok(policy)
    }
}

/// The sum of two reports of one application.
fn sum(a: &PruneReport, b: &PruneReport) -> PruneReport {
    PruneReport {
        operations: a.operations + b.operations,
        events: a.events + b.events,
        dry_run: a.dry_run || b.dry_run,
        resumed: a.resumed + b.resumed,
        batches: a.batches + b.batches,
        complete: a.complete && b.complete,
    }
}

const UNITS: [(char, u64); 5] = [
    ('w', 7 * 86_400),
    ('d', 86_400),
    ('h', 3600),
    ('m', 60),
    ('s', 1),
];

/// `30d`, `12h`, `2w`, `90m`, `45s`.
fn parse_age(text: &str) -> Option<Duration> {
    let unit = text.chars().last()?;
    let (_, seconds) = UNITS.iter().find(|(u, _)| *u == unit)?;
    let number: u64 = text[..text.len() - unit.len_utf8()].parse().ok()?;
    number.checked_mul(*seconds).map(Duration::from_secs)
}

/// An age in the largest unit that divides it exactly.
fn format_age(age: Duration) -> String {
    let seconds = age.as_secs();
    if seconds == 0 || age.subsec_nanos() != 0 {
        return format!("{}s", age.as_secs_f64());
    }
    for (unit, size) in UNITS {
        if seconds.is_multiple_of(size) {
            return format!("{}{unit}", seconds / size);
        }
    }
    format!("{seconds}s")
}

#[cfg(test)]
mod tests;
