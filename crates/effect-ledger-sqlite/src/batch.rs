//! Writing a batch of transitions in one transaction.
//!
//! Each transition runs inside its own savepoint, so one that fails (a plan
//! error such as a conflict, or a failed statement) is rolled back alone and
//! only its caller is told; the others commit together. Should SQLite abort
//! the whole transaction instead (a full disk, an I/O error), the failing
//! transition gets its error and the rest are written again in a new one.
//! Nothing is answered before `COMMIT` has returned: with
//! [`Synchronous::Full`](crate::Synchronous::Full) the batch is then on stable
//! storage.
//!
//! The transaction starts as a read (`BEGIN DEFERRED`) and takes the write
//! lock only before its first write, so transitions whose plan writes nothing
//! (a replay, an operation in progress elsewhere) never wait for another
//! process's write lock. Should another process have committed since the read
//! began, or hold the lock, the round starts again with `BEGIN IMMEDIATE`,
//! planning every transition afresh on the latest state.
//!
//! A transition whose caller knew the row (see `known`) is planned on that
//! under the write lock, without a read, and written only if the row is
//! still that; a round that starts with one begins `IMMEDIATE`, since its
//! plan writes.

use effect_core::transition::{self, Plan, WriteKind};
use effect_core::{Clock, LedgerError, Transition, TransitionOutcome};
use std::time::Duration;

use rusqlite::Connection;

use crate::busy::begin_immediate;
use crate::error::ledger_error;
use crate::file::{FileChange, LedgerFile};
use crate::known::Known;
use crate::row::{Expect, RecordWrite, insert_events, load, next_event_sequence, write_record};

/// What a transition ended with.
pub(crate) type Answer = Result<TransitionOutcome, LedgerError>;

/// One transition of a batch: the operation, the transition, and what its
/// caller knew of the row (see `known`).
pub(crate) type Item<'a> = (&'a str, &'a Transition, &'a Known);

/// Applies every `(operation id, transition, known)` in as few transactions
/// as possible (one, unless SQLite aborts one) and answers each, in order,
/// once its transaction has committed.
pub(crate) fn write_batch(
    conn: &Connection,
    clock: &dyn Clock,
    file: &LedgerFile,
    busy_timeout: Duration,
    batch: &[Item<'_>],
) -> Vec<Answer> {
    let mut answers: Vec<Option<Answer>> = batch.iter().map(|_| None).collect();
    let mut pending: Vec<usize> = (0..batch.len()).collect();
    let mut begin = Begin::Deferred;
    while !pending.is_empty() {
        // A first transition planned on what its caller knew writes (most
        // likely): its transaction takes the write lock at once, rather
        // than with a write of its own after a read.
        let first_known = batch[pending[0]].2.is_known();
        let round_begin = if first_known { Begin::Immediate } else { begin };
        match write_once(
            conn,
            clock,
            file,
            busy_timeout,
            batch,
            &pending,
            round_begin,
        ) {
            Round::Contended => begin = Begin::Immediate,
            Round::Committed(outcomes) => {
                for (&i, answer) in pending.iter().zip(outcomes) {
                    answers[i] = Some(answer);
                }
                pending.clear();
            }
            Round::Failed(error) => {
                // BEGIN or COMMIT failed: nothing of this round was written.
                for &i in &pending {
                    answers[i] = Some(Err(ledger_error(doing(batch[i]), replicate(&error))));
                }
                pending.clear();
            }
            Round::Aborted { at, error } => {
                answers[pending[at]] = Some(Err(error));
                pending.remove(at);
            }
            Round::FileChanged(change) => {
                for &i in &pending {
                    answers[i] = Some(Err(file.refusal(change)));
                }
                pending.clear();
            }
        }
    }
    answers
        .into_iter()
        .map(|answer| {
            answer.unwrap_or_else(|| {
                Err(LedgerError::backend(
                    "a transition of a batch was left without an answer",
                    None,
                ))
            })
        })
        .collect()
}

/// How one transaction over the pending transitions ended.
enum Round {
    /// Committed: one answer per pending transition (some may be errors that
    /// were rolled back to their savepoint).
    Committed(Vec<Answer>),
    /// `BEGIN` or `COMMIT` failed: every pending transition failed with it.
    Failed(rusqlite::Error),
    /// The transition at this position of the pending list failed and took the
    /// transaction with it: it gets `error`, the others are written again.
    Aborted { at: usize, error: LedgerError },
    /// A deferred transaction could not take the write lock (another
    /// connection holds it, or committed since this one's read began):
    /// nothing was written; plan again under `BEGIN IMMEDIATE`.
    Contended,
    /// The ledger file was deleted or replaced: the round was rolled back.
    FileChanged(FileChange),
}

/// How a round's transaction starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Begin {
    /// As a read; the write lock is taken before the first write.
    Deferred,
    /// With the write lock, waiting for it up to the busy timeout
    /// ([`begin_immediate`]).
    Immediate,
}

fn write_once(
    conn: &Connection,
    clock: &dyn Clock,
    file: &LedgerFile,
    busy_timeout: Duration,
    batch: &[Item<'_>],
    pending: &[usize],
    begin: Begin,
) -> Round {
    let mut tx = match WriteTx::begin(conn, begin, busy_timeout) {
        Ok(tx) => tx,
        Err(error) => return Round::Failed(error),
    };
    // A lone transition needs no savepoint: if it fails, the transaction is
    // rolled back whole.
    let savepoints = pending.len() > 1;
    let mut outcomes = Vec::with_capacity(pending.len());
    // The sequence the next event of this transaction gets, once known.
    let mut next_sequence = None;
    for (at, &i) in pending.iter().enumerate() {
        let (operation_id, transition, known) = batch[i];
        if known.is_known() {
            match tx.take_write_lock() {
                Ok(()) => {}
                Err(error) if is_contention(&error) => return Round::Contended,
                Err(error) => return Round::Failed(error),
            }
            match apply_known(
                conn,
                operation_id,
                transition,
                known,
                clock,
                savepoints,
                &mut next_sequence,
            ) {
                OnKnown::Written(outcome) => {
                    outcomes.push(Ok(outcome));
                    continue;
                }
                OnKnown::Failed(error) => {
                    outcomes.push(Err(error));
                    continue;
                }
                OnKnown::Aborted(error) => return Round::Aborted { at, error },
                OnKnown::SavepointFailed(error) => return Round::Failed(error),
                // The row is not as known: plan on a fresh read, below.
                OnKnown::Changed => {}
            }
        }
        // The clock is read after the record, so after the snapshot; a plan
        // made before the write lock is kept only if no other writer has
        // committed since (else the round starts again). So a lease is judged
        // against a time no other writer's commit can follow.
        let plan = match plan_in(conn, operation_id, transition, clock) {
            Ok(plan) => plan,
            // A refused transition (a conflict, a missing operation) wrote
            // nothing: it fails alone, unless SQLite ended the transaction.
            Err(error) if !conn.is_autocommit() => {
                outcomes.push(Err(error));
                continue;
            }
            Err(error) => return Round::Aborted { at, error },
        };
        if plan.write.is_none() {
            outcomes.push(Ok(plan.outcome));
            continue;
        }
        match tx.take_write_lock() {
            Ok(()) => {}
            Err(error) if is_contention(&error) => return Round::Contended,
            Err(error) => return Round::Failed(error),
        }
        if savepoints && let Err(error) = run(conn, "SAVEPOINT effect_transition") {
            return Round::Failed(error);
        }
        match write_plan(conn, operation_id, &plan, Expect::Read, &mut next_sequence) {
            Ok(_) => {
                if savepoints && let Err(error) = run(conn, "RELEASE effect_transition") {
                    return Round::Failed(error);
                }
                outcomes.push(Ok(plan.outcome));
            }
            Err(error) if savepoints && roll_back_to_savepoint(conn) => outcomes.push(Err(error)),
            Err(error) => return Round::Aborted { at, error },
        }
    }
    // Nothing is acknowledged from a file that is no longer the ledger.
    if tx.writing
        && let Err(change) = file.check()
    {
        return Round::FileChanged(change);
    }
    match tx.commit() {
        Ok(()) => Round::Committed(outcomes),
        Err(error) => Round::Failed(error),
    }
}

/// Applies one transition on a connection that is inside a write transaction:
/// loads the record, plans the transition at the clock's time, and writes the
/// plan's record and events. The caller commits (or, on error, rolls back).
///
/// A batching writer repeats its two halves, [`plan_in`] and [`write_plan`].
#[cfg(test)]
pub(crate) fn apply_in(
    conn: &Connection,
    operation_id: &str,
    transition: &Transition,
    clock: &dyn Clock,
) -> Result<TransitionOutcome, LedgerError> {
    let plan = plan_in(conn, operation_id, transition, clock)?;
    write_plan(conn, operation_id, &plan, Expect::Read, &mut None)?;
    Ok(plan.outcome)
}

/// How a transition planned on what its caller knew ended.
#[allow(clippy::large_enum_variant)] // Returned once and consumed at once; boxing would allocate.
enum OnKnown {
    /// The row was as known: the plan is written (and released from its
    /// savepoint).
    Written(TransitionOutcome),
    /// The row is not as known, or the plan on it writes nothing: nothing
    /// was written; plan on a fresh read.
    Changed,
    /// Writing failed and was rolled back to the savepoint: the transition
    /// fails alone.
    Failed(LedgerError),
    /// Writing failed and took the transaction with it.
    Aborted(LedgerError),
    /// A savepoint statement failed.
    SavepointFailed(rusqlite::Error),
}

/// Plans `transition` on the row its caller knew, at the clock's time (read
/// under the write lock, which the caller holds), and writes the plan only
/// if the row is still that (see `known`). A plan that fails, writes
/// nothing or is not applied is left to the plan on a fresh read, which
/// decides it exactly as without the knowledge.
fn apply_known(
    conn: &Connection,
    operation_id: &str,
    transition: &Transition,
    known: &Known,
    clock: &dyn Clock,
    savepoints: bool,
    next_sequence: &mut Option<i64>,
) -> OnKnown {
    let (current, expect) = match known {
        Known::Nothing => return OnKnown::Changed,
        Known::Absent => (None, Expect::Absent),
        Known::Row(record) => (Some(record.clone()), Expect::Row(record)),
    };
    let now = clock.now();
    let Ok(usage) = crate::budget::usage_in(conn, operation_id, transition, now) else {
        return OnKnown::Changed;
    };
    let plan = match transition::plan_with_budgets(operation_id, current, transition, now, &usage) {
        Ok(plan) if plan.write.is_some() && plan.outcome.applied => plan,
        _ => return OnKnown::Changed,
    };
    if savepoints && let Err(error) = run(conn, "SAVEPOINT effect_transition") {
        return OnKnown::SavepointFailed(error);
    }
    let release = |conn| {
        if savepoints {
            run(conn, "RELEASE effect_transition")
        } else {
            Ok(())
        }
    };
    match write_plan(conn, operation_id, &plan, expect, next_sequence) {
        Ok(written) => match release(conn) {
            Err(error) => OnKnown::SavepointFailed(error),
            Ok(()) if written => OnKnown::Written(plan.outcome),
            Ok(()) => OnKnown::Changed,
        },
        Err(error) if savepoints && roll_back_to_savepoint(conn) => OnKnown::Failed(error),
        Err(error) => OnKnown::Aborted(error),
    }
}

/// Loads the record, then reads the clock and plans the transition at that
/// time; writes nothing. The clock is read after the load, so after the
/// transaction's snapshot: every commit the plan sees happened before its time.
pub(crate) fn plan_in(
    conn: &Connection,
    operation_id: &str,
    transition: &Transition,
    clock: &dyn Clock,
) -> Result<Plan, LedgerError> {
    let current = load(conn, operation_id)?;
    let now = clock.now();
    let usage = crate::budget::usage_in(conn, operation_id, transition, now)?;
    transition::plan_with_budgets(operation_id, current, transition, now, &usage)
}

/// Writes a plan's record and events, if it has any, if the row is as
/// `expect` says; returns whether it wrote (with [`Expect::Read`] it
/// always writes or fails). When the row is not as expected nothing is
/// written.
///
/// `next_sequence` is the sequence the transaction's next event gets, when
/// an earlier write of the same transaction left it known; the largest is
/// read otherwise. It is left known only after a write that succeeded, so
/// a transition rolled back to its savepoint leaves no gap.
pub(crate) fn write_plan(
    conn: &Connection,
    operation_id: &str,
    plan: &Plan,
    expect: Expect<'_>,
    next_sequence: &mut Option<i64>,
) -> Result<bool, LedgerError> {
    let Some(write) = &plan.write else {
        return Ok(true);
    };
    // The sequences of this write's events, first..=last.
    let sequences = match write.events.len() {
        0 => None,
        count => {
            let first = match next_sequence.take() {
                Some(next) => next,
                None => next_event_sequence(conn)?,
            };
            let last = i64::try_from(count - 1)
                .ok()
                .and_then(|more| first.checked_add(more))
                .ok_or_else(|| {
                    LedgerError::backend("the event sequence has reached its largest value", None)
                })?;
            Some((first, last))
        }
    };
    let how = match (write.kind, sequences) {
        (WriteKind::Insert, sequences) => RecordWrite::Insert {
            last_event: sequences.map(|(_, last)| last),
        },
        (WriteKind::Transition, Some((_, last_event))) => RecordWrite::Transition { last_event },
        (WriteKind::InPlace, None) => RecordWrite::InPlace,
        (kind, _) => {
            return Err(LedgerError::backend(
                format!("a {kind:?} write with {} events", write.events.len()),
                None,
            ));
        }
    };
    // The record first: its events reference it.
    if !write_record(conn, &plan.outcome.record, how, expect)? {
        return Ok(false);
    }
    if let Some((first, _)) = sequences {
        insert_events(conn, operation_id, first, &write.events)?;
    }
    crate::budget::write_budgets(conn, operation_id, &write.budgets)?;
    // A write without events leaves the next sequence as it was.
    if let Some((_, last)) = sequences {
        *next_sequence = last.checked_add(1);
    }
    Ok(true)
}

/// Undoes the current transition only; false when the transaction itself is gone.
fn roll_back_to_savepoint(conn: &Connection) -> bool {
    !conn.is_autocommit()
        && run(conn, "ROLLBACK TO effect_transition").is_ok()
        && run(conn, "RELEASE effect_transition").is_ok()
}

/// Runs a cached statement that returns no rows.
fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// A transaction on prepared statements, rolled back when dropped
/// uncommitted (an error, or a panic while writing).
struct WriteTx<'c> {
    conn: &'c Connection,
    /// Whether it holds the write lock.
    writing: bool,
}

impl<'c> WriteTx<'c> {
    fn begin(conn: &'c Connection, begin: Begin, busy_timeout: Duration) -> rusqlite::Result<Self> {
        match begin {
            Begin::Deferred => run(conn, "BEGIN DEFERRED")?,
            Begin::Immediate => begin_immediate(conn, busy_timeout)?,
        }
        Ok(WriteTx {
            conn,
            writing: begin == Begin::Immediate,
        })
    }

    /// Takes the write lock, if this transaction does not hold it yet, with a
    /// write that changes nothing. Upgrading a read does not wait in the busy
    /// handler: it fails at once when another connection holds the lock or
    /// has committed since this transaction's snapshot. The write names a
    /// column no index holds: one naming the primary key made SQLite open a
    /// temporary table for the statement, a twentieth of a transition's
    /// instructions, although no row matches.
    fn take_write_lock(&mut self) -> rusqlite::Result<()> {
        if !self.writing {
            run(
                self.conn,
                "UPDATE effect_operations SET attempts = attempts WHERE 0",
            )?;
            self.writing = true;
        }
        Ok(())
    }

    fn commit(self) -> rusqlite::Result<()> {
        run(self.conn, "COMMIT")
    }
}

impl Drop for WriteTx<'_> {
    fn drop(&mut self) {
        if !self.conn.is_autocommit() {
            // Nothing more can be done if even this fails; the connection's
            // next BEGIN will report the problem.
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

/// The write lock is held elsewhere, or this read's snapshot is stale
/// (`SQLITE_BUSY` and its extended codes, such as `SQLITE_BUSY_SNAPSHOT`).
fn is_contention(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy)
    )
}

fn doing((operation_id, transition, _): Item<'_>) -> String {
    format!(
        "applying {} to operation {operation_id:?}",
        transition.name()
    )
}

/// A copy of a SQLite failure for each caller of a failed batch (rusqlite's
/// error is not `Clone`); the code, and so the error kind, is kept.
pub(crate) fn replicate(error: &rusqlite::Error) -> rusqlite::Error {
    match error {
        rusqlite::Error::SqliteFailure(code, message) => {
            rusqlite::Error::SqliteFailure(*code, message.clone())
        }
        other => rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(other.to_string()),
        ),
    }
}

#[cfg(test)]
mod tests;
