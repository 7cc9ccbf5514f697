//! Property: no sequence of calls exceeds a budget (docs/approval.md#budgets).
//!
//! Random calls (costs, provider answers, repeats of earlier calls, and the
//! clock moving on) run against a sliding ten-minute budget of at most four
//! dispatches and 1,000 cents. A model of the budget says, for each call,
//! whether it fits; the executor must dispatch exactly the calls that fit,
//! refuse the others with `BudgetExceeded` before the provider sees them,
//! for good (a repeat of a refused call is refused again, even once the
//! window has room), give a rejected charge back, keep an uncertain one,
//! and the window's charges at every dispatch stay within the limits.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use effect_core::{Budget, EffectContract, EffectLedger, EffectStatus, ManualClock, MemoryLedger};
use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
use proptest::prelude::*;
use serde_json::{Value, json};

const WINDOW: u64 = 600;
const MAX_COUNT: usize = 4;
const MAX_CENTS: u64 = 1_000;
const START: u64 = 1_800_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Commit,
    Reject,
    Lost,
}

fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        Just(Answer::Commit),
        Just(Answer::Reject),
        Just(Answer::Lost)
    ]
}

/// One charge the model holds: when, and how much.
#[derive(Debug, Clone, Copy)]
struct Charge {
    order: usize,
    at: u64,
    cents: u64,
}

fn in_window(charges: &[Charge], now: u64) -> (usize, u64) {
    let start = now.saturating_sub(WINDOW);
    let live: Vec<&Charge> = charges
        .iter()
        .filter(|c| c.at >= start && c.at <= now)
        .collect();
    (live.len(), live.iter().map(|c| c.cents).sum())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn no_sequence_of_calls_exceeds_a_budget(
        steps in prop::collection::vec((0u64..600, answer(), 0u64..300, any::<bool>()), 1..40)
    ) {
        let clock = Arc::new(ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(START)));
        let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::with_clock(clock.clone()));
        let executor = EffectExecutor::new(Arc::clone(&ledger));
        let contract = EffectContract::builder("payout", |args| {
            Ok(format!("payout:{}", args["order"].as_u64().ok_or("missing order")?))
        })
        .budget(
            Budget::sliding("payouts", Duration::from_secs(WINDOW))
                .max_count(MAX_COUNT as u64)
                .max_amount(MAX_CENTS, |args| Ok(args["cents"].as_u64().ok_or("missing cents")?)),
        )
        .build()
        .unwrap();
        // What the provider saw: (order, cents, answer), in order.
        let seen: Arc<Mutex<Vec<(usize, u64, Answer)>>> = Arc::default();
        let mut now = START;
        // The model: charges held, orders made so far with their state.
        let mut charges: Vec<Charge> = Vec::new();
        let mut orders: Vec<(u64, Answer, Option<EffectStatus>)> = Vec::new();
        let mut dispatched_at: Vec<u64> = Vec::new();
        let mut refused: Vec<usize> = Vec::new();
        for (cents, answer, advance, repeat) in steps {
            clock.advance(Duration::from_secs(advance));
            now += advance;
            // A repeat calls the last order again, with its own arguments.
            let order = if repeat && !orders.is_empty() {
                orders.len() - 1
            } else {
                orders.push((cents, answer, None));
                orders.len() - 1
            };
            let (cents, answer, settled) = orders[order];
            let handler = {
                let seen = Arc::clone(&seen);
                move |_args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
                    seen.lock().unwrap().push((order, cents, answer));
                    match answer {
                        Answer::Commit => Ok(json!({"paid": order})),
                        Answer::Reject => Err(HandlerError::rejected("account closed")),
                        Answer::Lost => Err(HandlerError::unknown("connection reset after sending")),
                    }
                }
            };
            let before = seen.lock().unwrap().len();
            let result = executor.execute(&contract, &json!({"order": order, "cents": cents}), handler);
            let dispatched = seen.lock().unwrap().len() > before;
            match settled {
                // Settled (or uncertain, or refused) before: never
                // dispatched again; a refusal is answered again.
                Some(status) => {
                    prop_assert!(!dispatched, "order {} dispatched again", order);
                    if refused.contains(&order) {
                        prop_assert_eq!(status, EffectStatus::Rejected);
                        prop_assert!(result.unwrap_err().is_budget_exceeded());
                    } else {
                        prop_assert!(result.is_ok(), "order {}: {:?}", order, result.err());
                    }
                }
                None => {
                    let (count, sum) = in_window(&charges, now);
                    let fits = count < MAX_COUNT && sum + cents <= MAX_CENTS;
                    prop_assert_eq!(dispatched, fits, "order {} of {} cents with {} dispatches and {} cents in the window", order, cents, count, sum);
                    if fits {
                        let result = result.unwrap();
                        dispatched_at.push(now);
                        match answer {
                            Answer::Commit => prop_assert_eq!(result.status, EffectStatus::Confirmed),
                            Answer::Reject => prop_assert_eq!(result.status, EffectStatus::Rejected),
                            Answer::Lost => prop_assert!(result.status.is_uncertain()),
                        }
                        // A rejection gives its charge back at once.
                        if answer != Answer::Reject {
                            charges.push(Charge { order, at: now, cents });
                        }
                        orders[order].2 = Some(result.status);
                    } else {
                        prop_assert!(result.unwrap_err().is_budget_exceeded());
                        prop_assert_eq!(ledger.get(&format!("payout:{order}")).unwrap().map(|r| r.status), Some(EffectStatus::Rejected));
                        refused.push(order);
                        orders[order].2 = Some(EffectStatus::Rejected);
                    }
                }
            }
        }
        // At every dispatch, what the window held stayed within the limits.
        for at in &dispatched_at {
            let (count, sum) = in_window(&charges, *at);
            prop_assert!(count <= MAX_COUNT && sum <= MAX_CENTS, "at {}: {} dispatches, {} cents", at, count, sum);
        }
        let seen = seen.lock().unwrap();
        prop_assert_eq!(seen.len(), dispatched_at.len(), "calls the provider saw");
        let committed = seen.iter().filter(|(_, _, a)| *a != Answer::Reject).count();
        prop_assert_eq!(committed, charges.len(), "charges held");
        prop_assert!(charges.iter().all(|c| seen.iter().any(|(o, _, _)| *o == c.order)));
        let stats = ledger.stats().unwrap();
        let (count, sum) = in_window(&charges, now);
        let held = stats.budgets.iter().find(|b| b.budget == "payouts").map_or((0, 0), |b| (b.count, b.amount));
        prop_assert_eq!(held, (count as u64, sum), "the budget in stats");
    }
}
