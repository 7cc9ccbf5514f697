use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use effect_core::Transition;
use effect_core::{EffectRecord, LedgerError, LedgerErrorKind, TransitionOutcome};

use super::*;

/// A fake store: answers each request with its operation id in the record,
/// fails operation `bad`, and reports every batch it writes.
fn write(batches: mpsc::Sender<Vec<String>>) -> impl Fn(&mut (), &[Request]) -> Vec<Answer> {
    move |_conn, batch| {
        let ids: Vec<String> = batch.iter().map(|r| r.operation_id.clone()).collect();
        batches.send(ids).unwrap();
        batch
            .iter()
            .map(|r| {
                if r.operation_id == "bad" {
                    Err(LedgerError::NotFound {
                        operation_id: r.operation_id.clone(),
                    })
                } else {
                    Ok(outcome(&r.operation_id))
                }
            })
            .collect()
    }
}

fn outcome(id: &str) -> TransitionOutcome {
    TransitionOutcome {
        applied: true,
        record: EffectRecord::new(id, "c", "1", "f", "t"),
    }
}

fn queued(group: &GroupCommit) -> usize {
    group.queued()
}

#[test]
fn a_lone_caller_writes_its_own_batch() {
    let group = GroupCommit::new(MAX_BATCH);
    let (tx, rx) = mpsc::channel();
    let answer = group.submit(
        "a",
        &Transition::ExpireLease,
        Known::Nothing,
        WriteDurability::Durable,
        || Ok(()),
        write(tx.clone()),
    );
    assert_eq!(answer.unwrap().record.operation_id, "a");
    assert_eq!(rx.try_recv().unwrap(), ["a"]);
}

#[test]
fn callers_queued_behind_a_write_share_the_next_batch_and_get_their_own_answers() {
    let group = Arc::new(GroupCommit::new(MAX_BATCH));
    let (batches, written) = mpsc::channel();
    let (release, gate) = mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(gate);
    let first_write = write(batches.clone());
    let started = Arc::new(Barrier::new(2));
    // The first caller's write blocks until the others have queued.
    let leader = {
        let group = Arc::clone(&group);
        let started = Arc::clone(&started);
        thread::spawn(move || {
            group.submit(
                "first",
                &Transition::ExpireLease,
                Known::Nothing,
                WriteDurability::Durable,
                || Ok(()),
                |conn, batch| {
                    started.wait();
                    gate.lock().unwrap().recv().unwrap();
                    first_write(conn, batch)
                },
            )
        })
    };
    started.wait();
    let followers: Vec<_> = ["x", "bad", "y"]
        .into_iter()
        .map(|id| {
            let group = Arc::clone(&group);
            let batches = batches.clone();
            thread::spawn(move || {
                group.submit(
                    id,
                    &Transition::ExpireLease,
                    Known::Nothing,
                    WriteDurability::Durable,
                    || Ok(()),
                    write(batches.clone()),
                )
            })
        })
        .collect();
    while queued(&group) < 3 {
        thread::sleep(Duration::from_millis(1));
    }
    release.send(()).unwrap();

    assert_eq!(leader.join().unwrap().unwrap().record.operation_id, "first");
    let answers: Vec<Result<String, LedgerErrorKind>> = followers
        .into_iter()
        .map(|f| {
            f.join()
                .unwrap()
                .map(|o| o.record.operation_id)
                .map_err(|e| e.kind())
        })
        .collect();
    assert_eq!(
        answers,
        [
            Ok("x".to_owned()),
            Err(LedgerErrorKind::NotFound),
            Ok("y".to_owned())
        ]
    );
    assert_eq!(written.recv().unwrap(), ["first"]);
    let mut second = written.recv().unwrap();
    second.sort();
    assert_eq!(second, ["bad", "x", "y"], "one batch for the three waiting");
    assert!(written.try_recv().is_err());
}

#[test]
fn a_leader_without_a_connection_fails_alone() {
    let group = GroupCommit::new(MAX_BATCH);
    let (tx, rx) = mpsc::channel();
    let failed = group.submit(
        "a",
        &Transition::ExpireLease,
        Known::Nothing,
        WriteDurability::Durable,
        || Err(LedgerError::unavailable("no connection", None)),
        write(tx.clone()),
    );
    assert_eq!(failed.unwrap_err().kind(), LedgerErrorKind::Unavailable);
    assert_eq!(queued(&group), 0, "the failed request is withdrawn");
    let next = group.submit(
        "b",
        &Transition::ExpireLease,
        Known::Nothing,
        WriteDurability::Durable,
        || Ok(()),
        write(tx.clone()),
    );
    assert_eq!(next.unwrap().record.operation_id, "b");
    assert_eq!(rx.try_recv().unwrap(), ["b"]);
}

#[test]
fn a_panicking_write_fails_the_batch_and_frees_the_queue() {
    let group = GroupCommit::new(MAX_BATCH);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        group.submit(
            "a",
            &Transition::ExpireLease,
            Known::Nothing,
            WriteDurability::Durable,
            || Ok(()),
            |_: &mut (), _: &[Request]| -> Vec<Answer> { panic!("boom") },
        )
    }));
    assert!(panicked.is_err());
    let (tx, _rx) = mpsc::channel();
    let next = group.submit(
        "b",
        &Transition::ExpireLease,
        Known::Nothing,
        WriteDurability::Durable,
        || Ok(()),
        write(tx.clone()),
    );
    assert_eq!(next.unwrap().record.operation_id, "b");
}

#[test]
fn deferrable_transitions_are_batched_apart_and_first() {
    let request = |ticket: u64, durability: WriteDurability| Request {
        known: Known::Nothing,
        ticket,
        caller: thread::current(),
        operation_id: format!("op-{ticket}"),
        transition: Transition::ExpireLease,
        durability,
    };
    let mut queue = vec![
        request(0, WriteDurability::Durable),
        request(1, WriteDurability::Deferrable),
        request(2, WriteDurability::Durable),
        request(3, WriteDurability::Deferrable),
        request(4, WriteDurability::Deferrable),
    ];
    let tickets = |batch: &[Request]| batch.iter().map(|r| r.ticket).collect::<Vec<_>>();
    // At most two per batch: the deferrable ones first, in queue order.
    assert_eq!(tickets(&take_batch(&mut queue, 2)), [1, 3]);
    assert_eq!(tickets(&take_batch(&mut queue, 2)), [4]);
    assert_eq!(tickets(&take_batch(&mut queue, 2)), [0, 2]);
    assert!(queue.is_empty());
}
