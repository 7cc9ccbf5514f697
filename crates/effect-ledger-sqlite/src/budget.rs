//! Budgets in the file (docs/approval.md#budgets): the charges of each
//! budget, read and written in the claim's transaction.
//!
//! Two tables, added by one migration: `effect_budgets` (each budget's
//! window and limits, as its last charge declared them, for stats) and
//! `effect_budget_charges` (one row per operation charged to a budget). A
//! claim's transaction reads the budget's charges in its window, plans, and
//! writes the new charge before it commits; SQLite's single writer (the
//! plan's read snapshot is upgraded to the write lock, or the round starts
//! again) makes the check and the charge one step for every process.
//! The Python package 1.x ignores both tables.

use std::time::SystemTime;

use effect_core::LedgerError;
use effect_core::transition::budget_charges;
use effect_core::{BudgetUsage, BudgetUse, BudgetWrite, Transition};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::ledger_error;

/// The migration that adds the budget tables.
pub(crate) fn add_budget_tables(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS effect_budgets (
            budget TEXT PRIMARY KEY,
            budget_window TEXT NOT NULL,
            max_count INTEGER,
            max_amount INTEGER
        );
        CREATE TABLE IF NOT EXISTS effect_budget_charges (
            budget TEXT NOT NULL,
            operation_id TEXT NOT NULL,
            amount INTEGER NOT NULL,
            charged_at REAL NOT NULL,
            PRIMARY KEY (budget, operation_id)
        );
        CREATE INDEX IF NOT EXISTS idx_effect_budget_charges_time
            ON effect_budget_charges(budget, charged_at);
        CREATE INDEX IF NOT EXISTS idx_effect_budget_charges_operation
            ON effect_budget_charges(operation_id);",
    )
}

/// What the transition's claim needs to know of its budgets, read in the
/// caller's transaction at the plan's time `now`.
pub(crate) fn usage_in(
    conn: &Connection,
    operation_id: &str,
    transition: &Transition,
    now: SystemTime,
) -> Result<Vec<BudgetUsage>, LedgerError> {
    let doing = || format!("reading the budgets of operation {operation_id:?}");
    budget_charges(transition)
        .iter()
        .map(|charge| {
            let (count, amount): (i64, i64) = conn
                .prepare_cached(
                    "SELECT COUNT(*), COALESCE(SUM(amount), 0) FROM effect_budget_charges \
                     WHERE budget = ?1 AND charged_at >= ?2",
                )
                .and_then(|mut stmt| {
                    stmt.query_row(params![charge.budget, charge.window.start(now)], |row| {
                        Ok((row.get(0)?, row.get(1)?))
                    })
                })
                .map_err(|e| ledger_error(doing(), e))?;
            let charged: Option<i64> = conn
                .prepare_cached(
                    "SELECT amount FROM effect_budget_charges \
                     WHERE budget = ?1 AND operation_id = ?2",
                )
                .and_then(|mut stmt| {
                    stmt.query_row(params![charge.budget, operation_id], |row| row.get(0))
                        .optional()
                })
                .map_err(|e| ledger_error(doing(), e))?;
            Ok(BudgetUsage {
                budget: charge.budget.clone(),
                count: u64::try_from(count).unwrap_or(0),
                amount: u64::try_from(amount).unwrap_or(0),
                charged: charged.map(|a| u64::try_from(a).unwrap_or(0)),
            })
        })
        .collect()
}

/// Writes a plan's budget changes for `operation_id`.
pub(crate) fn write_budgets(
    conn: &Connection,
    operation_id: &str,
    writes: &[BudgetWrite],
) -> Result<(), LedgerError> {
    let doing = || format!("charging the budgets of operation {operation_id:?}");
    for write in writes {
        match write {
            BudgetWrite::Charge { charge, at_unix } => {
                let amount = i64::try_from(charge.amount).map_err(|_| {
                    LedgerError::invalid_input(format!(
                        "budget {:?}: the amount {} is too large to store",
                        charge.budget, charge.amount
                    ))
                })?;
                let limit = |max: Option<u64>| max.and_then(|m| i64::try_from(m).ok());
                conn.prepare_cached(
                    "INSERT INTO effect_budgets (budget, budget_window, max_count, max_amount) \
                     VALUES (?1, ?2, ?3, ?4) ON CONFLICT (budget) DO UPDATE SET \
                     budget_window = excluded.budget_window, max_count = excluded.max_count, \
                     max_amount = excluded.max_amount",
                )
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        charge.budget,
                        charge.window.storage(),
                        limit(charge.max_count),
                        limit(charge.max_amount)
                    ])
                })
                .map_err(|e| ledger_error(doing(), e))?;
                conn.prepare_cached(
                    "INSERT INTO effect_budget_charges (budget, operation_id, amount, charged_at) \
                     VALUES (?1, ?2, ?3, ?4)",
                )
                .and_then(|mut stmt| {
                    stmt.execute(params![charge.budget, operation_id, amount, at_unix])
                })
                .map_err(|e| ledger_error(doing(), e))?;
            }
            BudgetWrite::Refund => {
                conn.prepare_cached("DELETE FROM effect_budget_charges WHERE operation_id = ?1")
                    .and_then(|mut stmt| stmt.execute(params![operation_id]))
                    .map_err(|e| ledger_error(doing(), e))?;
            }
            _ => {
                return Err(LedgerError::Unsupported {
                    capability: "a budget write this store does not know",
                });
            }
        }
    }
    Ok(())
}

/// Each budget's use at `now`, for stats; empty for a file without the
/// budget tables (an older file opened read-only).
pub(crate) fn budget_uses(
    conn: &Connection,
    now: SystemTime,
) -> Result<Vec<BudgetUse>, LedgerError> {
    let doing = "reading the budgets";
    let exists: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' \
             AND name = 'effect_budget_charges')",
            [],
            |row| row.get(0),
        )
        .map_err(|e| ledger_error(doing, e))?;
    if !exists {
        return Ok(Vec::new());
    }
    let mut stmt = conn
        .prepare_cached(
            "SELECT budget, budget_window, max_count, max_amount FROM effect_budgets ORDER BY budget",
        )
        .map_err(|e| ledger_error(doing, e))?;
    let budgets = stmt
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, Option<i64>>(2)?,
                row.get::<_, Option<i64>>(3)?,
            ))
        })
        .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
        .map_err(|e| ledger_error(doing, e))?;
    let mut charges = conn
        .prepare_cached("SELECT amount, charged_at FROM effect_budget_charges WHERE budget = ?1")
        .map_err(|e| ledger_error(doing, e))?;
    let limit = |max: Option<i64>| max.and_then(|m| u64::try_from(m).ok());
    budgets
        .into_iter()
        .map(|(budget, window, max_count, max_amount)| {
            let rows = charges
                .query_map([&budget], |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, f64>(1)?))
                })
                .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
                .map_err(|e| ledger_error(doing, e))?;
            Ok(BudgetUse::from_charges(
                &budget,
                &window,
                limit(max_count),
                limit(max_amount),
                rows.into_iter()
                    .map(|(amount, at)| (u64::try_from(amount).unwrap_or(0), at)),
                now,
            ))
        })
        .collect()
}
