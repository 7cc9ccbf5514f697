//! Integration tests of the agent runtime: runs, policy, resilience, effects
//! and restarts, counting what the fake tools actually did.
#![allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failing test with its message.

#[cfg(feature = "effects")]
mod approval;
#[cfg(feature = "tokio")]
mod asynchronous;
#[cfg(feature = "effects")]
mod compensation;
#[cfg(feature = "effects")]
mod effects;
mod parity;
mod registry;
mod resilience;
mod restart;
mod runs;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runtime::resilience::Sleeper;
use agent_runtime::trace::TraceEvent;
use agent_runtime::{
    Action, AgentRuntime, AgentRuntimeBuilder, DeterministicPlanner, EffectKind, PermissionPolicy,
    RunOptions, RunReport, RunStatus, Task, ToolDefinition, ToolError, ToolRegistry,
};
use serde_json::{Value, json};

/// What the fake tools did, in order: `tool:arguments`.
#[derive(Debug, Clone, Default)]
pub struct Calls(Arc<Mutex<Vec<String>>>);

impl Calls {
    pub fn record(&self, tool: &str, arguments: &Value) {
        self.0.lock().unwrap().push(format!("{tool}:{arguments}"));
    }

    pub fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    pub fn count(&self, tool: &str) -> usize {
        let prefix = format!("{tool}:");
        self.all().iter().filter(|c| c.starts_with(&prefix)).count()
    }
}

/// Records the delays it was asked to sleep, without sleeping.
#[derive(Debug, Clone, Default)]
pub struct RecordingSleeper(Arc<Mutex<Vec<Duration>>>);

impl RecordingSleeper {
    pub fn delays(&self) -> Vec<Duration> {
        self.0.lock().unwrap().clone()
    }
}

impl Sleeper for RecordingSleeper {
    fn sleep(&self, duration: Duration) {
        self.0.lock().unwrap().push(duration);
    }
}

pub fn invoice_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"invoice_id": {"type": "string", "minLength": 1}},
        "required": ["invoice_id"]
    })
}

/// The plain tools: a read, a mutation, one that always times out, one that
/// always fails.
pub fn plain_tools(calls: &Calls) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    let c = calls.clone();
    registry
        .register(ToolDefinition::new(
            "lookup_invoice",
            "Reads an invoice",
            invoice_schema(),
            EffectKind::Read,
            move |input| {
                c.record("lookup_invoice", &input.arguments);
                Ok(json!({"invoice_id": input.arguments["invoice_id"], "amount_cents": 1200}))
            },
        ))
        .unwrap();
    let c = calls.clone();
    registry
        .register(ToolDefinition::new(
            "send_receipt",
            "Emails a receipt",
            invoice_schema(),
            EffectKind::Mutation,
            move |input| {
                c.record("send_receipt", &input.arguments);
                Ok(json!({"receipt": format!("rcpt-{}", input.arguments["invoice_id"].as_str().unwrap())}))
            },
        ))
        .unwrap();
    let c = calls.clone();
    registry
        .register(
            ToolDefinition::new(
                "slow_search",
                "Always times out",
                invoice_schema(),
                EffectKind::Read,
                move |input| {
                    c.record("slow_search", &input.arguments);
                    Err(ToolError::timeout("search did not answer in 2s"))
                },
            )
            .dependency("search"),
        )
        .unwrap();
    let c = calls.clone();
    registry
        .register(
            ToolDefinition::new(
                "broken_search",
                "Always fails",
                invoice_schema(),
                EffectKind::Read,
                move |input| {
                    c.record("broken_search", &input.arguments);
                    Err(ToolError::failed("search returned 503"))
                },
            )
            .dependency("search"),
        )
        .unwrap();
    registry
}

pub fn all_plain_tools() -> PermissionPolicy {
    PermissionPolicy::allow([
        "lookup_invoice",
        "send_receipt",
        "slow_search",
        "broken_search",
    ])
}

/// A runtime over the plain tools playing `script`, with a sleeper that does not sleep.
pub fn runtime(calls: &Calls, script: Vec<Action>) -> AgentRuntimeBuilder {
    AgentRuntime::builder(plain_tools(calls), DeterministicPlanner::new(script))
        .policy(all_plain_tools())
        .sleeper(Arc::new(RecordingSleeper::default()))
}

pub fn lookup(invoice: &str) -> Action {
    Action::call("lookup_invoice", json!({"invoice_id": invoice}))
}

pub fn receipt(invoice: &str) -> Action {
    Action::call("send_receipt", json!({"invoice_id": invoice}))
}

/// Runs `id` and checks the status it stops in.
pub fn check(
    runtime: &AgentRuntime,
    id: &str,
    options: RunOptions,
    expected: RunStatus,
) -> RunReport {
    let report = runtime
        .run(Task::new(id, json!("a task")), options)
        .unwrap();
    assert_eq!(report.status, expected, "{report:#?}");
    report
}

pub fn kinds(events: &[TraceEvent]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.name()).collect()
}
