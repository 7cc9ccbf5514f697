//! The effect's own span attributes, under the `effect.` namespace, beside
//! the GenAI conventions' `gen_ai.*` and `error.type`. None carries an
//! argument, an output, a key or evidence.

/// The contract's version (the name is `gen_ai.tool.name`).
pub const CONTRACT_VERSION: &str = effect_exec::metric::VERSION;
/// The status the execution answered with (`confirmed`, `quarantined`, …,
/// or `error` for an executor error).
pub const STATUS: &str = effect_exec::metric::STATUS;
/// The operation's dispatch attempts when the execution answered; on a
/// handler span, the attempt it dispatches.
pub const ATTEMPT: &str = "effect.attempt";
/// The answer is an effect an earlier attempt made: a stored result (a
/// replay), or one a probe found after a lost acknowledgement.
pub const REPLAYED: &str = "effect.replayed";
/// The answer is `in_progress`: another caller holds the dispatch.
pub const IN_PROGRESS: &str = "effect.in_progress";
/// What the last reconciliation acted on: a probe answer (`committed`, …),
/// `guaranteed_key`, `not_sent`, `failed`, `none` (see
/// [`effect_exec::metric::RECONCILIATIONS`]).
pub const RECONCILIATION: &str = effect_exec::metric::ANSWER;
/// Why the execution quarantined its operation (see
/// [`effect_exec::metric::QUARANTINES`]).
pub const QUARANTINE_REASON: &str = effect_exec::metric::REASON;
/// A budget refused the claim.
pub const BUDGET_REFUSED: &str = "effect.budget.refused";
/// A recovery worker ran the execution, for an operation left behind.
pub const RECOVERY: &str = "effect.recovery";
/// The redacted arguments, when opted in, under the 1.36 conventions
/// (`gen_ai.tool.call.arguments` under the latest ones).
pub const ARGUMENTS: &str = "effect.arguments";
/// A ledger write span's transition (`prepare and claim`, …).
pub const TRANSITION: &str = "effect.transition";
/// A step span's failure kind (`failed`, `timed_out`, `error`, …).
pub const OUTCOME: &str = effect_exec::metric::OUTCOME;

/// `gen_ai.operation.name`: `execute_tool` on an execution span.
///
/// The GenAI names are spelled here rather than taken from
/// opentelemetry-semantic-conventions, which deprecates them as of 1.42.0
/// (the GenAI conventions moved to a repository of their own); the strings
/// are those of the conventions' versions [`Semconv`](crate::Semconv) names.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// `gen_ai.tool.name`: the contract's name.
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
/// `gen_ai.tool.type`: `function` (a tool the agent's process executes).
pub const GEN_AI_TOOL_TYPE: &str = "gen_ai.tool.type";
/// `gen_ai.tool.call.id`: the operation id.
pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `gen_ai.tool.call.arguments`: the redacted arguments, when opted in,
/// under the latest conventions.
pub const GEN_AI_TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// `error.type` (stable): the failure's kind.
pub const ERROR_TYPE: &str = opentelemetry_semantic_conventions::attribute::ERROR_TYPE;
