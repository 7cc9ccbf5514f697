//! A failed or cancelled run undoes its confirmed effects, newest first
//! (docs/compensation.md), and says what it could not undo. Every case counts
//! what each fake provider committed: captures, shipments, refunds, cancels.

use std::sync::{Arc, Mutex};

use agent_runtime::{
    Action, AgentRuntime, CompensationOutcome, CompensationPolicy, DeterministicPlanner,
    EffectKind, PermissionPolicy, RunOptions, RunStatus, ToolDefinition, ToolError, ToolRegistry,
};
use effect_core::{EffectContract, EffectLedger, EffectStatus, MemoryLedger, compensation};
use effect_exec::{EffectExecutor, HandlerError};
use serde_json::{Value, json};

use crate::{RecordingSleeper, check, invoice_schema};

/// A provider that counts the keys it committed, and loses the
/// acknowledgement of the keys it is told to.
#[derive(Debug, Default)]
struct Provider {
    commits: Mutex<Vec<String>>,
    lose_ack: Mutex<Vec<String>>,
}

impl Provider {
    fn commit(&self, key: Option<&str>) -> Result<Value, String> {
        let key = key.ok_or("no key")?.to_owned();
        let mut commits = self.commits.lock().unwrap();
        if !commits.contains(&key) {
            commits.push(key.clone());
        }
        if self.lose_ack.lock().unwrap().contains(&key) {
            return Err("timed out waiting for the acknowledgement".into());
        }
        Ok(json!({"id": format!("{key}#{}", commits.len())}))
    }

    fn committed(&self) -> Vec<String> {
        self.commits.lock().unwrap().clone()
    }
}

/// An effect tool `name` whose contract names `undo`, its compensation on
/// the `undone` provider. `with_handler`: the tool has a compensation handler.
fn tool(
    name: &'static str,
    done: &Arc<Provider>,
    undone: &Arc<Provider>,
    with_handler: bool,
) -> ToolDefinition {
    let undo = EffectContract::builder(format!("undo_{name}"), compensation::operation_id)
        .provider_idempotency_key(|args| {
            Ok(args[compensation::ARGUMENT]
                .as_str()
                .map(|original| format!("undo:{original}")))
        })
        .provider_idempotency_guaranteed(true)
        .build()
        .unwrap();
    let contract = EffectContract::builder(name, move |args| {
        Ok(format!(
            "{name}:{}",
            args["invoice_id"].as_str().ok_or("no id")?
        ))
    })
    .provider_idempotency_key(move |args| {
        Ok(args["invoice_id"].as_str().map(|i| format!("{name}:{i}")))
    })
    .compensation(undo, |original| Ok(json!({"undo": original.output["id"]})))
    .build()
    .unwrap();
    let provider = Arc::clone(done);
    let definition = ToolDefinition::new(
        name,
        "An effect",
        invoice_schema(),
        EffectKind::Mutation,
        move |input| {
            provider
                .commit(input.provider_key.as_deref())
                .map_err(ToolError::timeout)
        },
    )
    .effect_contract(contract);
    if !with_handler {
        return definition;
    }
    let undone = Arc::clone(undone);
    definition.compensation_handler(move |_args, ctx| {
        undone
            .commit(ctx.provider_key())
            .map_err(HandlerError::unknown)
    })
}

struct World {
    runtime: AgentRuntime,
    ledger: Arc<dyn EffectLedger>,
    captures: Arc<Provider>,
    refunds: Arc<Provider>,
    shipments: Arc<Provider>,
    cancels: Arc<Provider>,
}

/// A runtime whose script captures, ships, then does `last`.
fn world(last: Action, ship_handler: bool) -> World {
    let [captures, refunds, shipments, cancels]: [Arc<Provider>; 4] = Default::default();
    let mut registry = ToolRegistry::new();
    registry
        .register(tool("capture", &captures, &refunds, true))
        .unwrap();
    registry
        .register(tool("ship", &shipments, &cancels, ship_handler))
        .unwrap();
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let runtime = AgentRuntime::builder(
        registry,
        DeterministicPlanner::new([
            Action::call("capture", json!({"invoice_id": "INV-1"})),
            Action::call("ship", json!({"invoice_id": "INV-1"})),
            last,
        ]),
    )
    .policy(PermissionPolicy::allow(["capture", "ship"]).without_mutation_confirmation())
    .sleeper(Arc::new(RecordingSleeper::default()))
    .effect_executor(EffectExecutor::new(Arc::clone(&ledger)))
    .build()
    .unwrap();
    World {
        runtime,
        ledger,
        captures,
        refunds,
        shipments,
        cancels,
    }
}

fn failing_run() -> RunOptions {
    RunOptions {
        compensation: CompensationPolicy::OnFailure,
        ..RunOptions::start()
    }
}

#[test]
fn a_failed_run_undoes_its_effects_newest_first_once() {
    // The third step calls a tool the policy denies: the run fails.
    let world = world(Action::call("delete_everything", json!({})), true);
    let report = check(&world.runtime, "run-1", failing_run(), RunStatus::Failed);
    let compensation = report.compensation.unwrap();
    let order: Vec<(&str, CompensationOutcome)> = compensation
        .effects
        .iter()
        .map(|e| (e.tool.as_str(), e.outcome))
        .collect();
    assert_eq!(
        order,
        [
            ("ship", CompensationOutcome::Undone),
            ("capture", CompensationOutcome::Undone)
        ]
    );
    assert_eq!(compensation.undone().count(), 2);
    assert_eq!(compensation.not_undone().count(), 0);
    assert_eq!(world.captures.committed(), ["capture:INV-1"]);
    assert_eq!(world.shipments.committed(), ["ship:INV-1"]);
    assert_eq!(world.refunds.committed(), ["undo:capture:INV-1"]);
    assert_eq!(world.cancels.committed(), ["undo:ship:INV-1"]);
    // The ship's compensation ran first: its trail is the older one.
    let ship = world.ledger.get("ship:INV-1").unwrap().unwrap();
    let capture = world.ledger.get("capture:INV-1").unwrap().unwrap();
    assert_eq!(ship.compensation().unwrap().state, "confirmed");
    assert_eq!(capture.compensation().unwrap().state, "confirmed");
    let undone_at = |id: &str| {
        world
            .ledger
            .events(id)
            .unwrap()
            .into_iter()
            .find(|e| e.event_type == "compensated")
            .unwrap()
            .sequence
    };
    assert!(undone_at("ship:INV-1") < undone_at("capture:INV-1"));

    // Compensating the run again replays: nothing is undone twice.
    let again = world.runtime.compensate_run("run-1").unwrap();
    assert_eq!(again.undone().count(), 2);
    assert_eq!(world.refunds.committed().len(), 1);
    assert_eq!(world.cancels.committed().len(), 1);
}

#[test]
fn a_run_without_the_policy_undoes_nothing() {
    let world = world(Action::call("delete_everything", json!({})), true);
    let report = check(
        &world.runtime,
        "run-2",
        RunOptions::start(),
        RunStatus::Failed,
    );
    assert!(report.compensation.is_none());
    assert_eq!(world.captures.committed().len(), 1);
    assert_eq!(world.shipments.committed().len(), 1);
    assert!(world.refunds.committed().is_empty());
    assert!(world.cancels.committed().is_empty());
}

#[test]
fn a_cancelled_run_reports_what_it_could_not_undo() {
    // The shipment's acknowledgement is lost and nothing can settle it (no
    // probe, no guaranteed key): the run waits. Its caller cancels it.
    let world = world(Action::finish(json!("done")), false);
    world
        .shipments
        .lose_ack
        .lock()
        .unwrap()
        .push("ship:INV-1".into());
    let waiting = check(&world.runtime, "run-3", failing_run(), RunStatus::Waiting);
    assert!(
        waiting.compensation.is_none(),
        "the policy is for failed runs"
    );
    let cancelled = world.runtime.compensate_run("run-3").unwrap();
    let outcomes: Vec<(&str, CompensationOutcome)> = cancelled
        .effects
        .iter()
        .map(|e| (e.tool.as_str(), e.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("ship", CompensationOutcome::Uncertain),
            ("capture", CompensationOutcome::Undone)
        ]
    );
    let ship = &cancelled.effects[0];
    assert!(
        ship.detail.as_deref().unwrap().contains("uncertain"),
        "{ship:?}"
    );
    assert_eq!(cancelled.not_undone().count(), 1);
    assert_eq!(world.captures.committed().len(), 1);
    assert_eq!(world.shipments.committed().len(), 1);
    assert_eq!(world.refunds.committed().len(), 1);
    assert!(
        world.cancels.committed().is_empty(),
        "an uncertain effect is never undone"
    );
    assert_eq!(
        world.ledger.get("ship:INV-1").unwrap().unwrap().status,
        EffectStatus::Quarantined
    );
}

#[test]
fn a_tool_without_a_compensation_handler_is_not_undone() {
    let world = world(Action::call("delete_everything", json!({})), false);
    let report = check(&world.runtime, "run-4", failing_run(), RunStatus::Failed);
    let compensation = report.compensation.unwrap();
    assert_eq!(
        compensation.effects[0].outcome,
        CompensationOutcome::NoCompensation
    );
    assert_eq!(compensation.effects[1].outcome, CompensationOutcome::Undone);
    assert_eq!(world.shipments.committed().len(), 1);
    assert!(world.cancels.committed().is_empty());
    assert_eq!(world.refunds.committed().len(), 1);
}
