//! `--format table`: aligned columns for people at a terminal.
//!
//! Cells come from the ledger, which stores whatever agents and providers
//! wrote; control characters are escaped so a stored value cannot move the
//! cursor or rewrite the operator's terminal.

use std::fmt::Write as _;

use serde_json::Value;

use crate::view::{
    BackupView, EventView, OperationDetail, OperationSummary, PruneView, Resolution, Stats,
};

/// Left-aligned columns separated by two spaces; the last column is not
/// padded. Widths are display widths (comfy-table), so wide characters such
/// as CJK text keep the columns aligned.
pub fn columns(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::NOTHING)
        .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
        .set_header(headers.iter().copied())
        .add_rows(rows.iter().cloned());
    let last = headers.len().saturating_sub(1);
    for (i, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, if i == last { 0 } else { 2 }));
    }
    let mut out = String::new();
    for line in table.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A cell: control characters escaped, `-` for nothing.
pub fn cell(value: Option<&str>) -> String {
    match value {
        None | Some("") => "-".to_owned(),
        Some(text) => text
            .chars()
            .flat_map(|c| {
                let escaped: Vec<char> = if c.is_control() {
                    c.escape_default().collect()
                } else {
                    vec![c]
                };
                escaped
            })
            .collect(),
    }
}

/// Compact JSON; serde_json already escapes control characters in strings.
fn compact(value: &Value) -> String {
    value.to_string()
}

/// Pretty JSON indented under a heading.
fn indented(value: &Value) -> String {
    let pretty = serde_json::to_string_pretty(value).unwrap_or_else(|_| compact(value));
    pretty.lines().map(|line| format!("  {line}\n")).collect()
}

/// `list`; below a full page, the flag that lists the next one.
pub fn list(operations: &[OperationSummary], limit: usize) -> String {
    if operations.is_empty() {
        return "no operations\n".to_owned();
    }
    // What an approver needs, in columns of their own when any row has it.
    let for_approver = operations
        .iter()
        .any(|op| op.arguments.is_some() || op.compensates_output.is_some());
    let rows: Vec<Vec<String>> = operations
        .iter()
        .map(|op| {
            let mut row = vec![
                cell(Some(&op.operation_id)),
                cell(Some(&op.contract_name)),
                cell(Some(&op.contract_version)),
                op.status.to_string(),
                op.attempts.to_string(),
                cell(op.provider_operation_id.as_deref()),
                cell(Some(&op.updated_at)),
                cell(op.error.as_deref()),
                cell(op.dispatch_error.as_deref()),
            ];
            if for_approver {
                row.push(cell(op.arguments.as_ref().map(compact).as_deref()));
                row.push(cell(op.compensates_output.as_ref().map(compact).as_deref()));
            }
            row
        })
        .collect();
    let mut headers = vec![
        "OPERATION_ID",
        "CONTRACT",
        "VERSION",
        "STATUS",
        "ATTEMPTS",
        "PROVIDER_OPERATION_ID",
        "UPDATED_AT",
        "ERROR",
        "DISPATCH_ERROR",
    ];
    if for_approver {
        headers.extend(["ARGUMENTS", "COMPENSATES_OUTPUT"]);
    }
    let mut out = columns(&headers, &rows);
    if operations.len() == limit
        && let Some(last) = operations.last()
    {
        let _ = writeln!(out, "next page: --after {}", cell(Some(&last.operation_id)));
    }
    out
}

/// Events of one operation (`events`, `show`) or of many (`export`).
pub fn events(events: &[EventView], with_operation: bool) -> String {
    if events.is_empty() {
        return "no events\n".to_owned();
    }
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|event| {
            let mut row = vec![event.sequence.to_string(), cell(Some(&event.timestamp))];
            if with_operation {
                row.push(cell(Some(&event.operation_id)));
            }
            row.push(cell(Some(&event.event_type)));
            row.push(compact(&event.data));
            row
        })
        .collect();
    let headers: &[&str] = if with_operation {
        &[
            "SEQUENCE",
            "TIMESTAMP",
            "OPERATION_ID",
            "EVENT_TYPE",
            "DATA",
        ]
    } else {
        &["SEQUENCE", "TIMESTAMP", "EVENT_TYPE", "DATA"]
    };
    columns(headers, &rows)
}

/// `show`.
pub fn detail(detail: &OperationDetail) -> String {
    let op = &detail.summary;
    let lease = detail
        .lease_until
        .map(crate::timestamp::format_unix_seconds);
    let fields: Vec<Vec<String>> = [
        ("operation_id", Some(op.operation_id.as_str())),
        ("contract", Some(op.contract_name.as_str())),
        ("version", Some(op.contract_version.as_str())),
        ("status", Some(op.status.as_str())),
        ("attempts", Some(&*op.attempts.to_string())),
        ("provider_operation_id", op.provider_operation_id.as_deref()),
        (
            "provider_idempotency_key",
            detail.provider_idempotency_key.as_deref(),
        ),
        ("request_fingerprint", Some(&detail.request_fingerprint)),
        ("error", op.error.as_deref()),
        ("owner_token", detail.owner_token.as_deref()),
        ("lease_until", lease.as_deref()),
        ("created_at", Some(&op.created_at)),
        ("updated_at", Some(&op.updated_at)),
    ]
    .into_iter()
    .map(|(name, value)| vec![format!("{name}:"), cell(value)])
    .collect();
    let mut out = columns(&["FIELD", "VALUE"], &fields)
        .lines()
        .skip(1)
        .map(|line| format!("{line}\n"))
        .collect::<String>();
    if let Some(links) = &detail.compensation {
        if let Some(by) = &links.compensated_by {
            let _ = writeln!(
                out,
                "compensated_by: {} ({})",
                by["operation_id"].as_str().unwrap_or("?"),
                by["state"].as_str().unwrap_or("?")
            );
        }
        if let Some(original) = &links.compensates {
            let _ = writeln!(out, "compensates: {original}");
        }
        if links.requested.is_some() {
            out.push_str("compensation: requested\n");
        }
    }
    if let Some(arguments) = &op.arguments {
        out.push_str("arguments (as recorded for approval, secrets redacted):\n");
        out.push_str(&indented(arguments));
    }
    if let Some(output) = &op.compensates_output {
        out.push_str("compensates_output (the confirmed output it undoes):\n");
        out.push_str(&indented(output));
    }
    out.push_str("evidence:\n");
    out.push_str(&indented(&Value::Object(detail.evidence.clone())));
    if !detail.late_observations.is_empty() {
        out.push_str(
            "late observations (a handler came back after its attempt lost its claim; untrusted, the status did not change):\n",
        );
        for late in &detail.late_observations {
            let _ = writeln!(out, "  {}:", late.headline());
            for line in indented(&late.returned).lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
    }
    match (&detail.output, detail.has_output) {
        (Some(output), _) => {
            out.push_str("output:\n");
            out.push_str(&indented(output.as_ref().unwrap_or(&Value::Null)));
        }
        (None, true) => out.push_str("output: stored, not shown (pass --include-output)\n"),
        (None, false) => out.push_str("output: none stored\n"),
    }
    out.push_str("events:\n");
    for line in events(&detail.events, false).lines() {
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// `stats`.
pub fn stats(stats: &Stats) -> String {
    let mut rows: Vec<Vec<String>> = stats
        .counts
        .entries()
        .iter()
        .map(|(status, count)| vec![status.to_string(), count.to_string()])
        .collect();
    rows.push(vec!["unresolved".to_owned(), stats.unresolved.to_string()]);
    rows.push(vec!["total".to_owned(), stats.total.to_string()]);
    let mut out = columns(&["STATUS", "COUNT"], &rows);
    match (
        &stats.oldest_unresolved_updated_at,
        stats.oldest_unresolved_age_seconds,
    ) {
        (Some(at), Some(age)) => {
            let _ = writeln!(
                out,
                "oldest unresolved: updated {} ({} ago)",
                cell(Some(at)),
                age_words(age)
            );
        }
        (Some(at), None) => {
            let _ = writeln!(out, "oldest unresolved: updated {}", cell(Some(at)));
        }
        (None, _) => out.push_str("oldest unresolved: none\n"),
    }
    let _ = writeln!(out, "stale dispatches: {}", stats.stale);
    let _ = writeln!(
        out,
        "prepared, waiting for their caller: {}; for a recovery worker: {}; deferred by a budget: {}",
        stats.waiting_for_caller, stats.waiting_for_recovery_worker, stats.waiting_for_budget
    );
    if stats.recovery_blocked > 0 {
        let _ = writeln!(
            out,
            "blocked for a recovery worker (intent no version reads, or weakened terms): {}",
            stats.recovery_blocked
        );
    }
    let mut oldest = |what: &str, since: &Option<String>, age: Option<u64>| match (since, age) {
        (Some(at), Some(age)) => {
            let _ = writeln!(
                out,
                "{what}: since {} ({} ago)",
                cell(Some(at)),
                age_words(age)
            );
        }
        (Some(at), None) => {
            let _ = writeln!(out, "{what}: since {}", cell(Some(at)));
        }
        (None, _) => {}
    };
    oldest(
        "oldest waiting",
        &stats.oldest_waiting_since,
        stats.oldest_waiting_age_seconds,
    );
    oldest(
        "oldest deferred by a budget",
        &stats.oldest_deferred_since,
        stats.oldest_deferred_age_seconds,
    );
    if !stats.budgets.is_empty() {
        let limit = |max: Option<u64>| max.map_or_else(|| "-".to_owned(), |m| m.to_string());
        let rows: Vec<Vec<String>> = stats
            .budgets
            .iter()
            .map(|b| {
                vec![
                    b.budget.clone(),
                    b.window.clone(),
                    format!("{}/{}", b.count, limit(b.max_count)),
                    format!("{}/{}", b.amount, limit(b.max_amount)),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&columns(
            &["BUDGET", "WINDOW", "DISPATCHES", "AMOUNT"],
            &rows,
        ));
    }
    out
}

/// An age in its largest whole unit: "8 days", "3 hours", "1 minute".
pub fn age_words(seconds: u64) -> String {
    let (n, unit) = match seconds {
        s if s >= 86_400 => (s / 86_400, "day"),
        s if s >= 3_600 => (s / 3_600, "hour"),
        s if s >= 60 => (s / 60, "minute"),
        s => (s, "second"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// `confirm`, `reject`, `authorize-retry`.
pub fn resolution(resolution: &Resolution) -> String {
    let op = &resolution.operation;
    let mut out = format!(
        "operation {} is now {}",
        cell(Some(&op.operation_id)),
        op.status
    );
    if let Some(event) = &resolution.event {
        let _ = write!(
            out,
            " (event {} {})",
            event.sequence,
            cell(Some(&event.event_type))
        );
    }
    out.push('\n');
    out
}

/// `prune`.
pub fn prune(prune: &PruneView) -> String {
    let verb = if prune.dry_run {
        "would prune"
    } else {
        "pruned"
    };
    let mut out = match (&prune.policy, &prune.before) {
        (Some(policy), _) => {
            let mut out = format!(
                "{verb} {} operations and {} events by the retention policy {}\n",
                prune.operations,
                prune.events,
                cell(Some(policy))
            );
            for rule in &prune.rules {
                let _ = writeln!(
                    out,
                    "  {}: {} operations last updated before {}",
                    rule.status,
                    rule.operations,
                    cell(Some(&rule.before))
                );
            }
            out
        }
        (None, before) => format!(
            "{verb} {} operations and {} events last updated before {}\n",
            prune.operations,
            prune.events,
            cell(before.as_deref())
        ),
    };
    if prune.resumed > 0 {
        let _ = writeln!(
            out,
            "{} of them were already in the resumed archive",
            prune.resumed
        );
    }
    if !prune.complete {
        out.push_str("stopped at --max-duration: continue with --resume and the same --archive\n");
    }
    if let Some(archive) = &prune.archive {
        let _ = writeln!(out, "archive: {}", cell(Some(archive)));
    }
    out
}

/// `backup`.
pub fn backup(backup: &BackupView) -> String {
    format!(
        "backed up {} to {}\n",
        cell(Some(&backup.source)),
        cell(Some(&backup.destination))
    )
}

#[cfg(test)]
mod tests;
