//! Budgets in the schema (docs/approval.md#budgets): a claim charged to a
//! budget locks the budget's row after its operation's, reads the budget's
//! charges in its window, plans, and writes its charge before it commits.
//! Budget rows are locked in name order, so two claims charged to the same
//! budgets never wait for each other in a cycle.

use std::time::SystemTime;

use effect_core::LedgerError;
use effect_core::transition::budget_charges;
use effect_core::{BudgetUsage, BudgetUse, BudgetWrite, Transition};
use postgres::GenericClient;
use postgres::types::Type;

use crate::error::{Step, corrupt};
use crate::prepared::{Session, Stmt};

/// A budget's row: its name, window, limits, and the database clock.
type Head = (String, String, Option<i64>, Option<i64>, SystemTime);

fn stored(value: Option<u64>) -> Option<i64> {
    value.and_then(|v| i64::try_from(v).ok())
}

fn read(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// Locks the rows of the transition's budgets and reads their use at `now`
/// (the database clock of the operation's locked read).
pub(crate) fn lock_and_read(
    client: &mut impl GenericClient,
    statements: &mut Session,
    operation_id: &str,
    transition: &Transition,
    now: SystemTime,
) -> Result<Vec<BudgetUsage>, Step> {
    let pg = |doing: &'static str| move |err| Step::from_pg(doing, err);
    let mut charges: Vec<_> = budget_charges(transition).iter().collect();
    charges.sort_by(|a, b| a.budget.cmp(&b.budget));
    let mut usage = Vec::with_capacity(charges.len());
    for charge in charges {
        let window = charge.window.storage();
        let (max_count, max_amount) = (stored(charge.max_count), stored(charge.max_amount));
        statements
            .execute(
                client,
                Stmt::BudgetCreate,
                &[
                    (&charge.budget, Type::TEXT),
                    (&window, Type::TEXT),
                    (&max_count, Type::INT8),
                    (&max_amount, Type::INT8),
                ],
            )
            .map_err(pg("creating a budget"))?;
        statements
            .query_one(client, Stmt::BudgetLock, &[(&charge.budget, Type::TEXT)])
            .map_err(pg("locking a budget"))?;
        let start = charge.window.start(now);
        let row = statements
            .query_one(
                client,
                Stmt::BudgetUsage,
                &[
                    (&charge.budget, Type::TEXT),
                    (&start, Type::FLOAT8),
                    (&operation_id, Type::TEXT),
                ],
            )
            .map_err(pg("reading a budget"))?;
        let decode = |err| Step::Fail(corrupt("a budget's use cannot be decoded".to_owned(), err));
        let count: i64 = row.try_get(0).map_err(decode)?;
        let amount: i64 = row.try_get(1).map_err(decode)?;
        let charged: Option<i64> = row.try_get(2).map_err(decode)?;
        usage.push(BudgetUsage {
            budget: charge.budget.clone(),
            count: read(count),
            amount: read(amount),
            charged: charged.map(read),
        });
    }
    Ok(usage)
}

/// Writes a plan's budget changes for `operation_id`.
pub(crate) fn write(
    client: &mut impl GenericClient,
    statements: &mut Session,
    operation_id: &str,
    writes: &[BudgetWrite],
) -> Result<(), Step> {
    let pg = |doing: &'static str| move |err| Step::from_pg(doing, err);
    for write in writes {
        match write {
            BudgetWrite::Charge { charge, at_unix } => {
                let amount = i64::try_from(charge.amount).map_err(|_| {
                    LedgerError::invalid_input(format!(
                        "budget {:?}: the amount {} is too large to store",
                        charge.budget, charge.amount
                    ))
                })?;
                let window = charge.window.storage();
                let (max_count, max_amount) = (stored(charge.max_count), stored(charge.max_amount));
                statements
                    .execute(
                        client,
                        Stmt::BudgetCharge,
                        &[
                            (&charge.budget, Type::TEXT),
                            (&window, Type::TEXT),
                            (&max_count, Type::INT8),
                            (&max_amount, Type::INT8),
                            (&operation_id, Type::TEXT),
                            (&amount, Type::INT8),
                            (at_unix, Type::FLOAT8),
                        ],
                    )
                    .map_err(pg("charging a budget"))?;
            }
            BudgetWrite::Refund => {
                statements
                    .execute(client, Stmt::BudgetRefund, &[(&operation_id, Type::TEXT)])
                    .map_err(pg("giving budget charges back"))?;
            }
            _ => {
                return Err(Step::Fail(LedgerError::Unsupported {
                    capability: "a budget write this store does not know",
                }));
            }
        }
    }
    Ok(())
}

/// Each budget's use now from the `list` statement's rows.
pub(crate) fn uses(rows: &[postgres::Row]) -> Result<Vec<BudgetUse>, LedgerError> {
    let decode = |err| corrupt("a budget cannot be decoded".to_owned(), err);
    let mut uses: Vec<BudgetUse> = Vec::new();
    let mut charges: Vec<(u64, f64)> = Vec::new();
    let mut current: Option<Head> = None;
    let flush =
        |current: Option<Head>, charges: &mut Vec<(u64, f64)>, uses: &mut Vec<BudgetUse>| {
            if let Some((budget, window, max_count, max_amount, now)) = current {
                uses.push(BudgetUse::from_charges(
                    &budget,
                    &window,
                    max_count.map(read),
                    max_amount.map(read),
                    charges.drain(..),
                    now,
                ));
            }
        };
    for row in rows {
        let budget: String = row.try_get(0).map_err(decode)?;
        if current.as_ref().is_none_or(|(b, ..)| *b != budget) {
            flush(current.take(), &mut charges, &mut uses);
            current = Some((
                budget,
                row.try_get(1).map_err(decode)?,
                row.try_get(2).map_err(decode)?,
                row.try_get(3).map_err(decode)?,
                row.try_get(6).map_err(decode)?,
            ));
        }
        let amount: Option<i64> = row.try_get(4).map_err(decode)?;
        let at: Option<f64> = row.try_get(5).map_err(decode)?;
        if let (Some(amount), Some(at)) = (amount, at) {
            charges.push((read(amount), at));
        }
    }
    flush(current, &mut charges, &mut uses);
    Ok(uses)
}
