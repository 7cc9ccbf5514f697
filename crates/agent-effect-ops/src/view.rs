//! The JSON documents the commands print. Field names are a stable interface
//! (documented in docs/operations.md): add fields, never rename or remove them.

use effect_core::{EffectRecord, EffectStatus, Evidence, LedgerEvent, LedgerStats};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One operation as `list` prints it: no output, arguments or evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationSummary {
    /// The operation id.
    pub operation_id: String,
    /// The contract's name.
    pub contract_name: String,
    /// The contract's version.
    pub contract_version: String,
    /// `prepared`, `awaiting_approval`, `dispatched`, `confirmed`,
    /// `outcome_unknown`, `quarantined` or `rejected`.
    pub status: EffectStatus,
    /// Dispatches claimed so far.
    pub attempts: u32,
    /// The provider's id for the effect, when known.
    pub provider_operation_id: Option<String>,
    /// The last error, for uncertain and rejected operations.
    pub error: Option<String>,
    /// ISO-8601 UTC creation time.
    pub created_at: String,
    /// ISO-8601 UTC time of the last transition.
    pub updated_at: String,
    /// `list`, for `outcome_unknown` and `quarantined` operations: the error
    /// of the last dispatch that ended without an outcome (a quarantine
    /// replaces `error` with its own reason), to tell a request that never
    /// left from a lost acknowledgement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_error: Option<String>,
    /// `list`, for `outcome_unknown` and `quarantined` operations: the
    /// evidence entries the safety rules read (how the dispatch ended,
    /// whether a handler may still run, the probe's verdict), never the
    /// free-form evidence a probe or provider returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciliation_flags: Option<Evidence>,
    /// `show`, and `list` for `awaiting_approval` operations: the arguments
    /// of an operation created waiting for approval, as recorded for its
    /// approver, with secrets and the contract's redacted fields shown as
    /// `"[redacted]"` (docs/approval.md). Absent when none was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// `show`, and `list` for `awaiting_approval` operations, on a
    /// compensation: the confirmed output of the operation it undoes (what
    /// a refund refunds), as the ledger stores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensates_output: Option<Value>,
    /// `list`, for a `prepared` or `awaiting_approval` operation a budget
    /// deferred (docs/approval.md#budgets): `{budget, until}`, the budget
    /// that refused it and the bound after which a claim rejects it (null
    /// for none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred_by_budget: Option<serde_json::Value>,
}

impl From<&EffectRecord> for OperationSummary {
    fn from(record: &EffectRecord) -> Self {
        OperationSummary {
            operation_id: record.operation_id.clone(),
            contract_name: record.contract_name.clone(),
            contract_version: record.contract_version.clone(),
            status: record.status,
            attempts: record.attempts,
            provider_operation_id: record.provider_operation_id.clone(),
            error: record.error.clone(),
            created_at: record.created_at.clone(),
            updated_at: record.updated_at.clone(),
            dispatch_error: None,
            reconciliation_flags: None,
            arguments: None,
            compensates_output: None,
            deferred_by_budget: None,
        }
    }
}

/// One ledger event (`events`, `show`, and each line of `export`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventView {
    /// Ledger-wide, strictly increasing.
    pub sequence: u64,
    /// The operation it belongs to.
    pub operation_id: String,
    /// `prepared`, `dispatched`, `confirmed`, `manually_confirmed`, ... (docs/spec.md §4).
    pub event_type: String,
    /// ISO-8601 UTC time.
    pub timestamp: String,
    /// The event's data: errors, evidence, actor and reason; never outputs or
    /// arguments. A stored intent shows as `"stored"` or `"sealed (key K)"`,
    /// a sealed value anywhere as `"sealed (key K)"`, a redacted one as the
    /// marker `"[redacted]"`.
    pub data: Value,
}

impl From<&LedgerEvent> for EventView {
    fn from(event: &LedgerEvent) -> Self {
        let mut data = event.data.clone();
        // The approver's copy is printed once, as the operation's `arguments`.
        if let Some(shown) = data.get_mut(effect_core::intent::REDACTED_KEY) {
            *shown = Value::String("recorded (see arguments)".to_owned());
        }
        if let Some(intent) = data.get_mut(effect_core::intent::EVENT_KEY) {
            let arguments = intent.get("arguments");
            *intent = Value::String(
                match arguments.and_then(effect_exec::secrets::sealed_info) {
                    Some(sealed) => sealed.to_string(),
                    None => "stored".to_owned(),
                },
            );
        }
        // A late handler's output is printed only when asked for, as the
        // operation's own (`show --include-output`).
        if event.event_type == effect_core::event::LATE_OBSERVATION
            && let Some(output) = data.get_mut("output")
        {
            *output = Value::String(OUTPUT_NOT_SHOWN.to_owned());
        }
        show_sealed(&mut data);
        EventView {
            sequence: event.sequence,
            operation_id: event.operation_id.clone(),
            event_type: event.event_type.clone(),
            timestamp: event.timestamp.clone(),
            data,
        }
    }
}

impl EventView {
    /// The latest event of `event_type` on `operation_id`, as printed: what
    /// a command that just wrote it reports.
    pub(crate) fn last_of(
        ledger: &dyn effect_core::EffectLedger,
        operation_id: &str,
        event_type: &str,
    ) -> Result<Option<EventView>, effect_core::LedgerError> {
        Ok(ledger
            .events(operation_id)?
            .iter()
            .rev()
            .find(|event| event.event_type == event_type)
            .map(EventView::from))
    }
}

/// What a handler returned after its attempt lost its claim (its lease
/// ended and another caller moved the operation on): a `late_observation`
/// event (docs/spec.md §4). Untrusted evidence for whoever decides the
/// operation: it never changed the status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LateObservation {
    /// The event's sequence number.
    pub sequence: u64,
    /// When it was recorded (ISO-8601 UTC).
    pub timestamp: String,
    /// The attempt whose handler returned.
    pub attempt: Option<u64>,
    /// `returned`, `failed`, `rejected`, `timed_out` or `not_sent`.
    pub outcome: String,
    /// The operation's status when it was recorded.
    pub status_when_observed: Option<String>,
    /// The rest of what it returned: its output or error and its evidence,
    /// redacted as written (sealed values shown as sealed).
    pub returned: Value,
}

/// What a late handler's output reads as where outputs are not printed.
const OUTPUT_NOT_SHOWN: &str = "not shown (agent-effect-ops show --include-output)";

impl LateObservation {
    /// The late observations among `events`, in sequence order; their
    /// outputs only with `include_output`.
    pub fn of(events: &[LedgerEvent], include_output: bool) -> Vec<LateObservation> {
        events
            .iter()
            .filter(|e| e.event_type == effect_core::event::LATE_OBSERVATION)
            .map(|e| {
                let mut returned = e.data.as_object().cloned().unwrap_or_default();
                if !include_output && let Some(output) = returned.get_mut("output") {
                    *output = Value::String(OUTPUT_NOT_SHOWN.to_owned());
                }
                returned.values_mut().for_each(show_sealed);
                let attempt = returned.remove("attempt").and_then(|a| a.as_u64());
                let outcome = match returned.remove("outcome") {
                    Some(Value::String(outcome)) => outcome,
                    _ => "unknown".to_owned(),
                };
                let status_when_observed = match returned.remove("status_when_observed") {
                    Some(Value::String(status)) => Some(status),
                    _ => None,
                };
                LateObservation {
                    sequence: e.sequence,
                    timestamp: e.timestamp.clone(),
                    attempt,
                    outcome,
                    status_when_observed,
                    returned: Value::Object(returned),
                }
            })
            .collect()
    }

    /// One line: `attempt 2: returned at T, while quarantined`.
    pub fn headline(&self) -> String {
        let attempt = self
            .attempt
            .map_or_else(|| "an attempt".to_owned(), |a| format!("attempt {a}"));
        let status = self
            .status_when_observed
            .as_deref()
            .map(|s| format!(", while {s}"))
            .unwrap_or_default();
        format!("{attempt}: {} at {}{status}", self.outcome, self.timestamp)
    }
}

/// Replaces every sealed envelope in `value` by what it says of itself
/// (`sealed (key k1)`), never its ciphertext.
pub(crate) fn show_sealed(value: &mut Value) {
    if let Some(sealed) = effect_exec::secrets::sealed_info(value) {
        *value = Value::String(sealed.to_string());
        return;
    }
    match value {
        Value::Array(items) => items.iter_mut().for_each(show_sealed),
        Value::Object(map) => map.values_mut().for_each(show_sealed),
        _ => {}
    }
}

/// `show ID`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationDetail {
    /// The summary `list` prints.
    #[serde(flatten)]
    pub summary: OperationSummary,
    /// The key forwarded to the provider on every attempt, if any.
    pub provider_idempotency_key: Option<String>,
    /// The fingerprint of the arguments (`blake3:<hex>`, or bare SHA-256 hex
    /// from the Python package); the arguments themselves are not stored.
    pub request_fingerprint: String,
    /// The token of the caller holding the dispatch lease.
    pub owner_token: Option<String>,
    /// When the dispatch lease ends, in seconds since the Unix epoch.
    pub lease_until: Option<f64>,
    /// Why the operation is in its status.
    pub evidence: Evidence,
    /// Whether an output is stored.
    pub has_output: bool,
    /// The stored output: present only with `--include-output` (null when none is stored).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub output: Option<Option<Value>>,
    /// The history, in sequence order.
    pub events: Vec<EventView>,
    /// What handlers returned after their attempt lost its claim (the
    /// `late_observation` events, as in `events`), shown beside the status
    /// they bear on; absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late_observations: Vec<LateObservation>,
    /// Its compensation links (docs/compensation.md), when it has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensation: Option<CompensationLinks>,
}

/// How an operation and its compensation name each other (`show`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompensationLinks {
    /// On a confirmed operation whose compensation started: the
    /// compensation's `operation_id`, `contract_name`, `contract_version`
    /// and `state` (`started`, `confirmed` or `rejected`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensated_by: Option<Value>,
    /// On a compensation: the operation id it undoes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensates: Option<String>,
    /// On a confirmed operation: an operator's standing request for its
    /// compensation (`actor`, `reason`, `evidence_reference`,
    /// `requested_at`), until the compensation settles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<Value>,
}

impl CompensationLinks {
    /// The links `record` holds, `None` when it has none.
    pub fn of(record: &EffectRecord) -> Option<Self> {
        use effect_core::evidence::{COMPENSATES, COMPENSATION, COMPENSATION_REQUEST};
        let links = CompensationLinks {
            compensated_by: record.evidence.get(COMPENSATION).cloned(),
            compensates: record
                .evidence
                .get(COMPENSATES)
                .and_then(Value::as_str)
                .map(str::to_owned),
            requested: record.evidence.get(COMPENSATION_REQUEST).cloned(),
        };
        (links.compensated_by.is_some() || links.compensates.is_some() || links.requested.is_some())
            .then_some(links)
    }
}

/// Operations per status, every status present.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusCounts {
    /// `prepared`.
    pub prepared: u64,
    /// `awaiting_approval`.
    pub awaiting_approval: u64,
    /// `dispatched`.
    pub dispatched: u64,
    /// `confirmed`.
    pub confirmed: u64,
    /// `outcome_unknown`.
    pub outcome_unknown: u64,
    /// `quarantined`.
    pub quarantined: u64,
    /// `rejected`.
    pub rejected: u64,
}

impl StatusCounts {
    /// The counts of `stats`.
    pub fn of(stats: &LedgerStats) -> Self {
        let mut counts = StatusCounts::default();
        for &(status, count) in &stats.counts {
            *counts.slot(status) += count;
        }
        counts
    }

    /// `(status, count)` in lifecycle order.
    pub fn entries(&self) -> [(EffectStatus, u64); EffectStatus::ALL.len()] {
        let mut copy = *self;
        EffectStatus::ALL.map(|status| (status, *copy.slot(status)))
    }

    fn slot(&mut self, status: EffectStatus) -> &mut u64 {
        match status {
            EffectStatus::Prepared => &mut self.prepared,
            EffectStatus::AwaitingApproval => &mut self.awaiting_approval,
            EffectStatus::Dispatched => &mut self.dispatched,
            EffectStatus::Confirmed => &mut self.confirmed,
            EffectStatus::OutcomeUnknown => &mut self.outcome_unknown,
            EffectStatus::Quarantined => &mut self.quarantined,
            EffectStatus::Rejected => &mut self.rejected,
        }
    }
}

/// `stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stats {
    /// Operations per status.
    pub counts: StatusCounts,
    /// All operations.
    pub total: u64,
    /// `outcome_unknown` + `quarantined`: operations waiting for reconciliation
    /// or an operator.
    pub unresolved: u64,
    /// `updated_at` of the least recently updated unresolved operation, or null.
    pub oldest_unresolved_updated_at: Option<String>,
    /// Its age in whole seconds when the command ran, or null.
    pub oldest_unresolved_age_seconds: Option<u64>,
    /// Stale dispatches: `dispatched` operations whose lease has expired
    /// (their worker is gone); alert when it stays above zero.
    pub stale: u64,
    /// `prepared` operations without stored intent: only their caller,
    /// calling again, dispatches them. Alert when one stays.
    pub waiting_for_caller: u64,
    /// `prepared` operations with stored intent: a recovery worker with
    /// their contract's handler dispatches them. Alert when one stays.
    pub waiting_for_recovery_worker: u64,
    /// `prepared` operations deferred by a budget (docs/approval.md#budgets):
    /// dispatched by their caller or a recovery worker once the budget has
    /// room, rejected after their bound. Not counted in the two above.
    #[serde(default)]
    pub waiting_for_budget: u64,
    /// Operations a recovery worker cannot dispatch and said why (a
    /// `recovery_blocked` event, docs/spec.md §5c): no registered version
    /// reads their stored intent, or the running contract weakens their
    /// stored terms. Counted in their status too; an operator acts.
    #[serde(default)]
    pub recovery_blocked: u64,
    /// Since when the longest-waiting operation its caller, a recovery
    /// worker or an operator should dispatch has waited (its last status
    /// change), or null. Operations deferred by a budget are not counted
    /// here: they wait by design (`oldest_deferred_since`).
    pub oldest_waiting_since: Option<String>,
    /// Its age in whole seconds when the command ran, or null.
    pub oldest_waiting_age_seconds: Option<u64>,
    /// Since when the longest-waiting operation deferred by a budget has
    /// waited, or null: it is dispatched once the budget has room, or
    /// rejected at its deferral's bound.
    #[serde(default)]
    pub oldest_deferred_since: Option<String>,
    /// Its age in whole seconds when the command ran, or null.
    #[serde(default)]
    pub oldest_deferred_age_seconds: Option<u64>,
    /// Each budget's use in its current window (docs/approval.md#budgets);
    /// absent when no dispatch was ever charged to a budget.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<effect_core::BudgetUse>,
}

/// `confirm`, `reject`, `authorize-retry` and `expire`: the fields the Python
/// CLI prints first, then the whole summary and the audited event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resolution {
    /// The operation id.
    pub operation_id: String,
    /// Its status after the command.
    pub status: EffectStatus,
    /// `confirm` and `reject`: true (the operation is resolved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<bool>,
    /// `authorize-retry`: true (the next execution dispatches it again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_authorized: Option<bool>,
    /// `compensate`: true while the request stands (a recovery worker with
    /// the compensation's handler runs it); false when the compensation had
    /// already settled, and nothing was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensation_requested: Option<bool>,
    /// `approve`: the approval recorded (request_fingerprint, actor,
    /// reason, approved_at, expires_at), unused until the next dispatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Value>,
    /// The provider's id for the effect, when known.
    pub provider_operation_id: Option<String>,
    /// `confirm`, `reject`, `authorize_retry`, `expire`, `approve`, `deny`
    /// or `compensate`.
    pub action: String,
    /// The operation after the command.
    pub operation: OperationSummary,
    /// The audited event the command appended (`manually_confirmed`,
    /// `manually_rejected`, `manual_retry_authorized`, `approved`,
    /// `approval_denied`, `compensation_requested`, or for `expire` the `outcome_unknown` event
    /// carrying the audit fields).
    pub event: Option<EventView>,
}

/// Reads a field that is present (possibly null) as `Some`; an absent one
/// falls back to the `default` of `None`.
fn present<'de, D>(deserializer: D) -> Result<Option<Option<Value>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Option::<Value>::deserialize(deserializer).map(Some)
}

/// `prune`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PruneView {
    /// True for `--dry-run`: nothing was written or deleted.
    pub dry_run: bool,
    /// The cutoff, in the ledger's timestamp format; null for `--policy`,
    /// whose cutoffs are per status ([`rules`](Self::rules)).
    pub before: Option<String>,
    /// The statuses pruned.
    pub statuses: Vec<EffectStatus>,
    /// The retention policy applied (`--policy`), or null.
    pub policy: Option<String>,
    /// For `--policy`: what each rule pruned, in the policy's order (a rule
    /// a bound stopped before is absent); empty otherwise.
    pub rules: Vec<RuleView>,
    /// Operations deleted (or that would be), each with its archive line.
    pub operations: u64,
    /// Their events.
    pub events: u64,
    /// Of those, the operations whose lines the resumed prune had written.
    pub resumed: u64,
    /// Write transactions committed, one per batch.
    pub batches: u64,
    /// False when --max-duration stopped the prune early (continue with
    /// --resume).
    pub complete: bool,
    /// The archive written, or null (a dry run, or nothing to prune).
    pub archive: Option<String>,
}

/// What one rule of `prune --policy` pruned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleView {
    /// The rule's status.
    pub status: EffectStatus,
    /// Its cutoff: now minus the rule's age, in the ledger's format.
    pub before: String,
    /// Operations deleted (or that would be).
    pub operations: u64,
    /// Their events.
    pub events: u64,
}

impl From<effect_core::RulePruned> for RuleView {
    fn from(rule: effect_core::RulePruned) -> Self {
        RuleView {
            status: rule.status,
            before: rule.before,
            operations: rule.operations,
            events: rule.events,
        }
    }
}

/// `backup`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupView {
    /// The ledger copied.
    pub source: String,
    /// The copy written.
    pub destination: String,
}
