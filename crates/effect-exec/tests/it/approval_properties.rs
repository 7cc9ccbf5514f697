//! Properties of approval (docs/approval.md), over random sequences of
//! approve, deny, expire (the clock moves), changed-argument calls, approvals
//! of a changed request, second uses and concurrent claims, on the in-memory
//! store and on SQLite: nothing is dispatched without a valid approval, an
//! approval is used once, and none applies to a changed request. Every step
//! checks the caller's answer and the fake provider's committed count
//! against a model of what the ledger must allow.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use proptest::prelude::*;

use effect_core::{
    Approval, Clock, EffectContract, EffectLedger, EffectStatus, RequestFingerprint, Sleeper,
};
use effect_exec::{EffectExecutor, ExecutorOptions};
use serde_json::{Value, json};

use crate::provider::handler;
use crate::world::{self, World};

const ID: &str = "invoice:INV-1:capture";

/// One thing that can happen to the waiting operation.
#[derive(Debug, Clone)]
enum Step {
    /// The caller calls again with the approved arguments.
    Call,
    /// A caller calls with other arguments under the same operation id.
    CallChanged,
    /// `callers` callers call at once.
    Race { callers: usize },
    /// A person approves the stored request, valid for `tens` × 10 s + 5 s.
    Approve { tens: u64 },
    /// A person approves the fingerprint of other arguments.
    ApproveChanged,
    /// A person denies the operation.
    Deny,
    /// Time passes: `tens` × 10 s. Approvals last 10 k + 5 s, so none ends
    /// exactly on a step.
    Advance { tens: u64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::Call),
        1 => Just(Step::CallChanged),
        2 => (2usize..5).prop_map(|callers| Step::Race { callers }),
        4 => (0u64..4).prop_map(|tens| Step::Approve { tens }),
        1 => Just(Step::ApproveChanged),
        1 => Just(Step::Deny),
        3 => (1u64..5).prop_map(|tens| Step::Advance { tens }),
    ]
}

/// What the ledger must hold, by the rules of docs/approval.md.
#[derive(Debug, Default)]
struct Model {
    /// The unused approval's expiry, if one was recorded.
    approval: Option<SystemTime>,
    denied: bool,
    confirmed: bool,
    /// Approvals the ledger accepted.
    approvals: usize,
}

impl Model {
    fn waiting(&self) -> bool {
        !self.denied && !self.confirmed
    }

    fn valid_approval(&self, now: SystemTime) -> bool {
        self.approval.is_some_and(|until| until > now)
    }
}

/// Waits by yielding: the manual clock moves only by the test's steps.
#[derive(Debug)]
struct Yield;

impl Sleeper for Yield {
    fn sleep(&self, _: Duration) {
        std::thread::yield_now();
    }
}

/// The shared world and the contract every step calls.
struct Case {
    world: World,
    contract: EffectContract,
}

impl Case {
    fn new(sqlite: bool) -> Self {
        let world = if sqlite {
            world::sqlite()
        } else {
            world::memory()
        };
        let contract = effect_test_support::contracts::capture_payment()
            .requires_approval(true)
            .build()
            .unwrap();
        Case { world, contract }
    }

    /// An executor on the world's clock that yields instead of sleeping.
    fn executor(&self) -> EffectExecutor {
        EffectExecutor::with_clock(
            Arc::clone(&self.world.ledger),
            ExecutorOptions::default(),
            self.world.clock.clone(),
        )
        .with_sleeper(Arc::new(Yield))
    }

    fn args(changed: bool) -> Value {
        if changed {
            json!({"invoice_id": "INV-1", "amount_cents": 999_999})
        } else {
            json!({"invoice_id": "INV-1", "amount_cents": 1250})
        }
    }

    fn call(&self, changed: bool) -> Result<effect_core::EffectResult, effect_exec::ExecError> {
        self.executor().execute(
            &self.contract,
            &Case::args(changed),
            handler(&self.world.provider),
        )
    }

    fn approval(&self, fingerprint: String, valid: Duration) -> Approval {
        Approval {
            request_fingerprint: fingerprint,
            actor: "lead@example.com".into(),
            reason: "matches ticket T-9".into(),
            expires_at: self.world.clock.now() + valid,
        }
    }

    fn stored_fingerprint(&self) -> String {
        self.world
            .ledger
            .get(ID)
            .unwrap()
            .unwrap()
            .request_fingerprint
    }
}

/// The status a call's caller must see.
fn expected_status(model: &Model) -> EffectStatus {
    if model.confirmed {
        EffectStatus::Confirmed
    } else if model.denied {
        EffectStatus::Rejected
    } else {
        EffectStatus::AwaitingApproval
    }
}

fn run_sequence(sqlite: bool, steps: &[Step]) -> Result<(), TestCaseError> {
    let store = if sqlite { "sqlite" } else { "memory" };
    let w = Case::new(sqlite);
    let mut model = Model::default();
    // The first call records the operation waiting, and sends nothing.
    let first = w.call(false).unwrap();
    prop_assert_eq!(first.status, EffectStatus::AwaitingApproval);
    prop_assert_eq!(w.world.provider.committed(), 0);
    for (i, step) in steps.iter().enumerate() {
        let before = w.world.provider.committed();
        let now = w.world.clock.now();
        let at = format!("{store}: step {i} {step:?} of {steps:?}");
        match step {
            Step::Call => {
                let dispatch = model.waiting() && model.valid_approval(now);
                let result = w.call(false).unwrap();
                if dispatch {
                    model.confirmed = true;
                }
                if model.waiting() {
                    // A claim drops an approval that expired; an unexpired one
                    // cannot stand here, it would have been used.
                    model.approval = None;
                }
                prop_assert_eq!(result.status, expected_status(&model), "{}", at);
                prop_assert_eq!(
                    w.world.provider.committed(),
                    before + usize::from(dispatch),
                    "{}",
                    at
                );
            }
            Step::CallChanged => {
                let err = w.call(true).unwrap_err();
                prop_assert!(err.is_conflict(), "{}: {:?}", at, err);
                prop_assert_eq!(w.world.provider.committed(), before, "{}", at);
            }
            Step::Race { callers } => {
                let dispatch = model.waiting() && model.valid_approval(now);
                let results: Vec<_> = std::thread::scope(|scope| {
                    let handles: Vec<_> = (0..*callers)
                        .map(|_| scope.spawn(|| w.call(false).unwrap()))
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap()).collect()
                });
                if dispatch {
                    model.confirmed = true;
                }
                if model.waiting() {
                    model.approval = None;
                }
                prop_assert_eq!(
                    w.world.provider.committed(),
                    before + usize::from(dispatch),
                    "{}",
                    at
                );
                let expected = expected_status(&model);
                for result in &results {
                    // A loser of the claim sees the winner's dispatch in progress.
                    let in_flight =
                        dispatch && result.status == EffectStatus::Dispatched && result.in_progress;
                    prop_assert!(
                        result.status == expected || in_flight,
                        "{}: {:?}",
                        at,
                        result
                    );
                }
            }
            Step::Approve { tens } => {
                let valid = Duration::from_secs(tens * 10 + 5);
                let accepted = model.waiting() && !model.valid_approval(now);
                let answer = w
                    .executor()
                    .operator()
                    .approve(ID, w.approval(w.stored_fingerprint(), valid));
                prop_assert_eq!(answer.is_ok(), accepted, "{}: {:?}", at, answer);
                if accepted {
                    model.approval = Some(now + valid);
                    model.approvals += 1;
                }
                prop_assert_eq!(w.world.provider.committed(), before, "{}", at);
            }
            Step::ApproveChanged => {
                let other = RequestFingerprint::of_value(&Case::args(true)).stored();
                let answer = w
                    .executor()
                    .operator()
                    .approve(ID, w.approval(other, Duration::from_secs(3600)));
                prop_assert!(answer.is_err(), "{}: {:?}", at, answer);
                if model.waiting() {
                    prop_assert!(answer.unwrap_err().is_conflict(), "{}", at);
                }
                prop_assert_eq!(w.world.provider.committed(), before, "{}", at);
            }
            Step::Deny => {
                let answer = w
                    .executor()
                    .operator()
                    .deny(ID, "lead@example.com", "not this one");
                prop_assert_eq!(answer.is_ok(), model.waiting(), "{}: {:?}", at, answer);
                if model.waiting() {
                    model.denied = true;
                    model.approval = None;
                }
                prop_assert_eq!(w.world.provider.committed(), before, "{}", at);
            }
            Step::Advance { tens } => w.world.clock.advance(Duration::from_secs(tens * 10)),
        }
        let record = w.world.ledger.get(ID).unwrap().unwrap();
        prop_assert_eq!(record.status, expected_status(&model), "{}", at);
        prop_assert_eq!(record.attempts, u32::from(model.confirmed), "{}", at);
    }
    // Overall: one effect at most, and only after an approval of the request.
    let committed = w.world.provider.committed();
    prop_assert_eq!(committed, usize::from(model.confirmed), "{}", store);
    prop_assert!(
        committed <= model.approvals.min(1),
        "{}: {} effects",
        store,
        committed
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn no_dispatch_without_a_valid_approval_no_reuse_no_changed_request(
        steps in prop::collection::vec(step(), 1..14),
    ) {
        run_sequence(false, &steps)?;
        run_sequence(true, &steps)?;
    }
}
