//! Group commit: the transitions of many callers of one process share one
//! durable `COMMIT` (one fsync), without weakening what each caller is told.
//!
//! Callers queue their transition and wait. Whoever finds no write in
//! progress becomes the writer (the "leader"): it takes a pooled connection,
//! drains the queue into one batch and hands it to the store, which applies
//! every transition in one transaction, each inside its own savepoint, then
//! commits. Only once the commit has returned (so the batch is durable) are
//! the results published and the callers woken: the next writer first, since
//! everyone waits on the next commit, and outside the queue's lock, so nobody
//! wakes into it held. A caller whose result is not ready and who finds the
//! writer gone becomes the next leader, so the queue never waits for a thread
//! that is not there, and a caller alone in the process writes on its own
//! thread without any hand-off.
//!
//! A batch holds either deferrable transitions only or durable ones only
//! (deferrable ones first, see `take_batch`), so a caller answered before
//! the fsync never waits for one.
//!
//! Nothing here knows SQLite: the store supplies how to get a connection and
//! how to write a batch (see `batch::write_batch`).

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::{self, Thread};

use effect_core::Transition;
use effect_core::{LedgerError, WriteDurability};

use crate::batch::Answer;
use crate::known::Known;

/// The most transitions one commit carries by default; later arrivals wait
/// for the next.
pub(crate) const MAX_BATCH: usize = 256;

/// One queued transition.
#[derive(Debug)]
pub(crate) struct Request {
    ticket: u64,
    /// The caller, woken when its answer is ready or the writer's place is free.
    caller: Thread,
    pub(crate) operation_id: String,
    pub(crate) transition: Transition,
    /// What the caller knew of the operation's row (see `known`).
    pub(crate) known: Known,
    /// Whether the caller may be answered before the batch is synced.
    pub(crate) durability: WriteDurability,
}

/// The queue of one ledger (shared by its clones). Every write of the store
/// goes through it: a lone caller is a batch of one, written on its own
/// thread; with a batch size of one, writers take turns, one commit each.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    state: Mutex<State>,
    max_batch: usize,
}

#[derive(Debug, Default)]
struct State {
    queue: Vec<Request>,
    /// True while a leader is writing a batch.
    writing: bool,
    /// Results of committed (or failed) batches, until their caller takes them.
    done: HashMap<u64, Answer>,
    next_ticket: u64,
}

impl GroupCommit {
    /// A queue whose commits carry at most `max_batch` transitions (at least one).
    pub(crate) fn new(max_batch: usize) -> Self {
        GroupCommit {
            state: Mutex::default(),
            max_batch: max_batch.max(1),
        }
    }

    /// Applies `transition` in the next batch and returns its result once that
    /// batch is durable (or has failed), or, for a deferrable transition,
    /// once it is committed (the store decides what the batch's commit syncs).
    ///
    /// `connect` gets the writer's connection; its failure is this caller's
    /// alone. `write` applies a batch and returns one answer per request, in
    /// order; it must answer every request only after its batch has committed.
    pub(crate) fn submit<C>(
        &self,
        operation_id: &str,
        transition: &Transition,
        known: Known,
        durability: WriteDurability,
        connect: impl Fn() -> Result<C, LedgerError>,
        write: impl Fn(&mut C, &[Request]) -> Vec<Answer>,
    ) -> Answer {
        let mut state = self.lock();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.queue.push(Request {
            ticket,
            caller: thread::current(),
            operation_id: operation_id.to_owned(),
            transition: transition.clone(),
            known,
            durability,
        });
        loop {
            if let Some(answer) = state.done.remove(&ticket) {
                return answer;
            }
            if state.writing {
                // Woken by the writer of our batch, or to write the next one.
                // A wake-up that comes before we park is kept, not lost.
                drop(state);
                thread::park();
                state = self.lock();
                continue;
            }
            // No writer: this caller leads the next batch.
            state.writing = true;
            drop(state);
            let conn = connect();
            state = self.lock();
            let mut conn = match conn {
                Ok(conn) => conn,
                Err(error) => {
                    // Not taken by an earlier leader (we would have an
                    // answer), so our request is still queued: withdraw it.
                    state.queue.retain(|r| r.ticket != ticket);
                    state.writing = false;
                    wake_next_writer(&state);
                    return Err(error);
                }
            };
            let batch = take_batch(&mut state.queue, self.max_batch);
            drop(state);
            let written = catch_unwind(AssertUnwindSafe(|| write(&mut conn, &batch)));
            drop(conn);
            state = self.lock();
            state.writing = false;
            match written {
                Ok(answers) => {
                    let mut answers = answers.into_iter();
                    for request in &batch {
                        let answer = answers.next().unwrap_or_else(|| {
                            Err(LedgerError::backend(
                                "the sqlite ledger's batch writer returned too few results",
                                None,
                            ))
                        });
                        state.done.insert(request.ticket, answer);
                    }
                    let own = state.done.remove(&ticket);
                    let woken = to_wake(&batch, &state, ticket);
                    drop(state);
                    woken.iter().for_each(Thread::unpark);
                    if let Some(answer) = own {
                        return answer;
                    }
                    state = self.lock();
                }
                Err(panic) => {
                    // The batch's transaction rolled back with its connection.
                    // Tell the other callers, then let the panic go on here.
                    for request in batch.iter().filter(|r| r.ticket != ticket) {
                        state.done.insert(
                            request.ticket,
                            Err(LedgerError::backend(
                                "the thread writing this transition's batch panicked; \
                                 nothing of the batch was committed",
                                None,
                            )),
                        );
                    }
                    // Our own request may not have been in the batch.
                    state.queue.retain(|r| r.ticket != ticket);
                    let woken = to_wake(&batch, &state, ticket);
                    drop(state);
                    woken.iter().for_each(Thread::unpark);
                    resume_unwind(panic);
                }
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.lock().queue.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent whenever the lock is released: a panic in
        // `write` is caught outside it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Who to wake once a batch is written: first the first queued caller, who
/// writes the next batch (the next commit is what everyone waits for), then
/// the callers of the written batch but the writer (`own`). They are woken
/// after the state's lock is released, so they do not wake into it held.
fn to_wake(batch: &[Request], state: &State, own: u64) -> Vec<Thread> {
    let next_writer = state.queue.first().map(|r| r.caller.clone());
    next_writer
        .into_iter()
        .chain(
            batch
                .iter()
                .filter(|r| r.ticket != own)
                .map(|r| r.caller.clone()),
        )
        .collect()
}

/// The next batch: the queued deferrable transitions if there are any, else
/// the durable ones, at most `max` of them, in queue order.
///
/// A deferrable transition's caller waits only for its commit, a durable
/// one's for the commit's fsync; in one batch both would wait for the
/// fsync. So deferrable ones go first, in a batch of their own (all the
/// queued ones at once, so durable ones wait at most one such batch).
/// Callers in the queue are concurrent, so any order of theirs is one they
/// could have arrived in.
fn take_batch(queue: &mut Vec<Request>, max: usize) -> Vec<Request> {
    if !queue
        .iter()
        .any(|r| r.durability == WriteDurability::Deferrable)
    {
        let take = queue.len().min(max);
        return queue.drain(..take).collect();
    }
    let mut batch = Vec::new();
    let mut rest = Vec::with_capacity(queue.len());
    for request in queue.drain(..) {
        if request.durability == WriteDurability::Deferrable && batch.len() < max {
            batch.push(request);
        } else {
            rest.push(request);
        }
    }
    *queue = rest;
    batch
}

fn wake_next_writer(state: &State) {
    if let Some(next) = state.queue.first() {
        next.caller.unpark();
    }
}

#[cfg(test)]
mod tests;
