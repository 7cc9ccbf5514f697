//! Budgets (docs/approval.md#budgets): a limit per window on how many
//! dispatches, or how much of an amount, a named scope may spend, checked
//! and charged by the store in the transaction of the claim that dispatches.
//!
//! A contract declares a [`Budget`]; for each call the executor derives the
//! [`BudgetCharge`] it carries in its [`Claim`](crate::Claim). The store reads
//! the budget's use in the window ([`BudgetUsage`]) in the claim's
//! transaction, [`plan_with_budgets`](crate::transition::plan_with_budgets)
//! decides, and the store writes the plan's [`BudgetWrite`]s with the record,
//! so concurrent claims can never together exceed the limit.
//!
//! ```
//! use std::time::Duration;
//! use effect_core::{Budget, BudgetWindow};
//! use serde_json::json;
//!
//! let refunds = Budget::per_day("refunds")
//!     .scope(|args| Ok(format!("tenant:{}", args["tenant"].as_str().ok_or("missing tenant")?)))
//!     .max_count(100)
//!     .max_amount(50_000, |args| Ok(args["cents"].as_u64().ok_or("missing cents")?));
//! let charge = refunds.charge(&json!({"tenant": "acme", "cents": 4200}))?;
//! assert_eq!(charge.budget, "refunds/tenant:acme");
//! assert_eq!(charge.amount, 4200);
//! assert_eq!(charge.window, BudgetWindow::Daily);
//! assert_eq!(BudgetWindow::Sliding(Duration::from_secs(600)).storage(), "sliding:600s");
//! # Ok::<(), effect_core::CallbackError>(())
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock::unix_seconds;
use crate::error::CallbackError;

/// Derives a budget's scope (a tenant, a run, an account) from the arguments.
pub type ScopeFn = Arc<dyn Fn(&Value) -> Result<String, CallbackError> + Send + Sync>;
/// Derives what a call costs a budget (cents, tokens, units) from the arguments.
pub type CostFn = Arc<dyn Fn(&Value) -> Result<u64, CallbackError> + Send + Sync>;

/// The largest amount a budget holds: amounts and sums are stored as signed
/// 64-bit integers by the SQL stores.
pub const MAX_BUDGET_AMOUNT: u64 = i64::MAX as u64;

/// The time a budget's use is counted over, on the ledger's clock (the
/// injected [`Clock`](crate::Clock) of the memory and SQLite stores, the
/// database clock of PostgreSQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BudgetWindow {
    /// Every charge ever made.
    Total,
    /// The charges of the current UTC day.
    Daily,
    /// The charges of the last so many (whole) seconds.
    Sliding(Duration),
}

impl BudgetWindow {
    /// When the window that holds `now` starts, in seconds since the Unix
    /// epoch: a charge made at or after it counts.
    pub fn start(&self, now: SystemTime) -> f64 {
        let now = unix_seconds(now);
        match self {
            BudgetWindow::Total => f64::MIN,
            BudgetWindow::Daily => (now / 86_400.0).floor() * 86_400.0,
            BudgetWindow::Sliding(length) => now - length.as_secs() as f64,
        }
    }

    /// The stored form: `total`, `daily` or `sliding:<seconds>s`.
    pub fn storage(&self) -> String {
        match self {
            BudgetWindow::Total => "total".to_owned(),
            BudgetWindow::Daily => "daily".to_owned(),
            BudgetWindow::Sliding(length) => format!("sliding:{}s", length.as_secs()),
        }
    }

    /// Reads [`storage`](Self::storage)'s form; `None` for anything else.
    pub fn from_storage(stored: &str) -> Option<BudgetWindow> {
        match stored {
            "total" => Some(BudgetWindow::Total),
            "daily" => Some(BudgetWindow::Daily),
            other => other
                .strip_prefix("sliding:")
                .and_then(|rest| rest.strip_suffix('s'))
                .and_then(|secs| secs.parse::<u64>().ok())
                .filter(|secs| *secs > 0)
                .map(|secs| BudgetWindow::Sliding(Duration::from_secs(secs))),
        }
    }
}

impl fmt::Display for BudgetWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.storage())
    }
}

/// A budget a contract declares: a name, an optional scope derived from the
/// arguments, a window and a limit (a count of dispatches, an amount from a
/// cost function, or both).
///
/// Every call of the contract is charged to the budget named
/// `name/scope` (or `name` without a scope) when it is first dispatched;
/// contracts that declare the same name and scope share one budget, and
/// each claim is checked against the limit its own contract declares.
#[derive(Clone)]
pub struct Budget {
    name: String,
    window: BudgetWindow,
    scope: Option<ScopeFn>,
    max_count: Option<u64>,
    max_amount: Option<(u64, CostFn)>,
    defer: Option<BudgetDeferral>,
}

/// What a budget refusal does to an operation that was never dispatched
/// (docs/approval.md#budgets). Without one (the default) the refusal is
/// terminal: the operation is `rejected`, nothing sent or charged. With
/// one it is *deferred*: it stays `prepared` (or `awaiting_approval`), a
/// later claim (its caller's again, or a recovery worker's) dispatches it
/// once the budget has room, and the first claim after the bound rejects
/// it instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BudgetDeferral {
    /// Deferred for this long after the first refusal, on the ledger's
    /// clock.
    For(Duration),
    /// Deferred until this time, on the ledger's clock.
    Until(SystemTime),
}

impl BudgetDeferral {
    /// The bound of a deferral that starts at `now`, in seconds since the
    /// Unix epoch.
    pub fn until_unix(&self, now: SystemTime) -> f64 {
        match self {
            BudgetDeferral::For(length) => unix_seconds(now) + length.as_secs_f64(),
            BudgetDeferral::Until(until) => unix_seconds(*until),
        }
    }
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Budget")
            .field("name", &self.name)
            .field("window", &self.window)
            .field("scoped", &self.scope.is_some())
            .field("max_count", &self.max_count)
            .field("max_amount", &self.max_amount.as_ref().map(|(max, _)| max))
            .field("defer", &self.defer)
            .finish()
    }
}

impl Budget {
    /// A budget over `window`, with no limit yet (see [`max_count`](Self::max_count)
    /// and [`max_amount`](Self::max_amount); a contract refuses a budget without one).
    pub fn new(name: impl Into<String>, window: BudgetWindow) -> Budget {
        Budget {
            name: name.into(),
            window,
            scope: None,
            max_count: None,
            max_amount: None,
            defer: None,
        }
    }

    /// A budget over every charge ever made.
    pub fn total(name: impl Into<String>) -> Budget {
        Budget::new(name, BudgetWindow::Total)
    }

    /// A budget per UTC day.
    pub fn per_day(name: impl Into<String>) -> Budget {
        Budget::new(name, BudgetWindow::Daily)
    }

    /// A budget over the last `length` (whole seconds, at least one).
    pub fn sliding(name: impl Into<String>, length: Duration) -> Budget {
        Budget::new(name, BudgetWindow::Sliding(length))
    }

    /// Charges each call to the scope `scope` derives from its arguments (a
    /// tenant, a run, a customer), so each scope has its own limit.
    #[must_use]
    pub fn scope<F>(mut self, scope: F) -> Budget
    where
        F: Fn(&Value) -> Result<String, CallbackError> + Send + Sync + 'static,
    {
        self.scope = Some(Arc::new(scope));
        self
    }

    /// At most `max` dispatches per window.
    #[must_use]
    pub fn max_count(mut self, max: u64) -> Budget {
        self.max_count = Some(max);
        self
    }

    /// At most `max` of the amount `cost` derives from each call's
    /// arguments (cents, say) per window.
    #[must_use]
    pub fn max_amount<F>(mut self, max: u64, cost: F) -> Budget
    where
        F: Fn(&Value) -> Result<u64, CallbackError> + Send + Sync + 'static,
    {
        self.max_amount = Some((max, Arc::new(cost)));
        self
    }

    /// Defers an operation this budget refuses, within `bound`, instead of
    /// rejecting it ([`BudgetDeferral`]): the opt-in for work that should
    /// go out once the window has room (tomorrow's daily budget, say), but
    /// not after the bound.
    ///
    /// ```
    /// use std::time::Duration;
    /// use effect_core::{Budget, BudgetDeferral};
    /// use serde_json::json;
    ///
    /// let captures = Budget::per_day("captures")
    ///     .max_count(100)
    ///     .defer(BudgetDeferral::For(Duration::from_secs(2 * 86_400)));
    /// let charge = captures.charge(&json!({}))?;
    /// assert_eq!(charge.defer, Some(BudgetDeferral::For(Duration::from_secs(172_800))));
    /// # Ok::<(), effect_core::CallbackError>(())
    /// ```
    #[must_use]
    pub fn defer(mut self, bound: BudgetDeferral) -> Budget {
        self.defer = Some(bound);
        self
    }

    /// The budget's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The budget's window.
    pub fn window(&self) -> BudgetWindow {
        self.window
    }

    /// Why the budget cannot be declared, if it cannot.
    pub(crate) fn invalid(&self) -> Option<&'static str> {
        if self.name.trim().is_empty() {
            Some("a budget needs a non-empty name")
        } else if self.max_count.is_none() && self.max_amount.is_none() {
            Some("a budget needs a limit: max_count or max_amount")
        } else if matches!(self.window, BudgetWindow::Sliding(length) if length.as_secs() == 0) {
            Some("a sliding budget window must be at least one second long")
        } else if matches!(self.defer, Some(BudgetDeferral::For(length)) if length.is_zero()) {
            Some("a budget deferral must last longer than zero")
        } else if self
            .max_amount
            .as_ref()
            .is_some_and(|(max, _)| *max > MAX_BUDGET_AMOUNT)
            || self.max_count.is_some_and(|max| max > MAX_BUDGET_AMOUNT)
        {
            Some("a budget limit must fit in a signed 64-bit integer")
        } else {
            None
        }
    }

    /// What a call with `arguments` is charged: the scoped budget name, its
    /// cost and the limit.
    ///
    /// # Errors
    ///
    /// The scope or cost callback's error; a blank scope; a cost above
    /// [`MAX_BUDGET_AMOUNT`].
    pub fn charge(&self, arguments: &Value) -> Result<BudgetCharge, CallbackError> {
        let budget = match &self.scope {
            Some(scope) => {
                let scope = scope(arguments)?;
                if scope.trim().is_empty() {
                    return Err(format!("budget {:?}: the scope is blank", self.name).into());
                }
                format!("{}/{scope}", self.name)
            }
            None => self.name.clone(),
        };
        let amount = match &self.max_amount {
            Some((_, cost)) => cost(arguments)?,
            None => 0,
        };
        if amount > MAX_BUDGET_AMOUNT {
            return Err(format!("budget {budget:?}: the cost {amount} is too large").into());
        }
        Ok(BudgetCharge {
            budget,
            amount,
            max_count: self.max_count,
            max_amount: self.max_amount.as_ref().map(|(max, _)| *max),
            window: self.window,
            defer: self.defer,
        })
    }
}

/// What one claim is charged to one budget, and the limit it is checked
/// against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetCharge {
    /// The budget's stored name (`name/scope`, or `name`).
    pub budget: String,
    /// The amount charged (0 for a budget that only counts).
    pub amount: u64,
    /// At most this many dispatches per window.
    pub max_count: Option<u64>,
    /// At most this much per window.
    pub max_amount: Option<u64>,
    /// The window.
    pub window: BudgetWindow,
    /// Whether a refusal defers the operation (and until when) instead of
    /// rejecting it; `None` rejects.
    pub defer: Option<BudgetDeferral>,
}

/// A budget's use, as a store read it inside a claim's transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetUsage {
    /// The budget's stored name.
    pub budget: String,
    /// Charges in the claim's window.
    pub count: u64,
    /// Their amounts, summed.
    pub amount: u64,
    /// What this operation was charged already (at any time): a claim of
    /// an operation charged once is not charged again.
    pub charged: Option<u64>,
}

/// A change to the budgets a store writes with a plan's record.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum BudgetWrite {
    /// Record a charge of the operation to a budget, at `at_unix` (seconds
    /// since the epoch on the ledger's clock), and keep the budget's window
    /// and limit for stats.
    Charge {
        /// The charge.
        charge: BudgetCharge,
        /// When it was charged.
        at_unix: f64,
    },
    /// Give back every charge of the operation: the provider rejected the
    /// effect, or an operator rejected it.
    Refund,
}

/// Why a budget refused a claim: the data of its `budget_exceeded` event
/// (and of the record's evidence under the same key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetRefusal {
    /// The budget's stored name.
    pub budget: String,
    /// Its window.
    pub window: String,
    /// The count limit.
    pub max_count: Option<u64>,
    /// The amount limit.
    pub max_amount: Option<u64>,
    /// Dispatches charged in the window when the claim was refused.
    pub used_count: u64,
    /// Their amounts, summed.
    pub used_amount: u64,
    /// What the refused dispatch would have cost.
    pub amount: u64,
}

impl BudgetRefusal {
    /// Reads the refusal from a `budget_exceeded` event's data (or the
    /// record's evidence); `None` when it is not one.
    pub fn from_value(value: &Value) -> Option<BudgetRefusal> {
        serde_json::from_value(value.clone()).ok()
    }
}

impl fmt::Display for BudgetRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} ({} window: {} dispatches",
            self.budget, self.window, self.used_count
        )?;
        if let Some(max) = self.max_count {
            write!(f, " of {max}")?;
        }
        write!(f, ", amount {}", self.used_amount)?;
        if let Some(max) = self.max_amount {
            write!(f, " of {max}")?;
        }
        write!(f, " used; this one costs {})", self.amount)
    }
}

/// One budget's use now, as [`LedgerStats::budgets`](crate::LedgerStats) lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetUse {
    /// The budget's stored name.
    pub budget: String,
    /// The window of the last charge (`total`, `daily`, `sliding:<s>s`).
    pub window: String,
    /// The count limit of the last charge.
    pub max_count: Option<u64>,
    /// The amount limit of the last charge.
    pub max_amount: Option<u64>,
    /// Charges in the current window.
    pub count: u64,
    /// Their amounts, summed.
    pub amount: u64,
}

impl BudgetUse {
    /// The current use of a budget from its stored charges (`(amount,
    /// charged_at_unix)` each), for stores that hold them in memory.
    pub fn from_charges(
        budget: &str,
        window: &str,
        max_count: Option<u64>,
        max_amount: Option<u64>,
        charges: impl IntoIterator<Item = (u64, f64)>,
        now: SystemTime,
    ) -> BudgetUse {
        let start = BudgetWindow::from_storage(window).map_or(f64::MIN, |w| w.start(now));
        let (count, amount) = charges
            .into_iter()
            .filter(|(_, at)| *at >= start)
            .fold((0u64, 0u64), |(count, sum), (amount, _)| {
                (count.saturating_add(1), sum.saturating_add(amount))
            });
        BudgetUse {
            budget: budget.to_owned(),
            window: window.to_owned(),
            max_count,
            max_amount,
            count,
            amount,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_start_where_their_charges_count() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(3 * 86_400 + 3_600);
        assert_eq!(BudgetWindow::Daily.start(now), (3 * 86_400) as f64);
        let ten = BudgetWindow::Sliding(Duration::from_secs(600));
        assert_eq!(ten.start(now), (3 * 86_400 + 3_000) as f64);
        assert_eq!(BudgetWindow::Total.start(now), f64::MIN);
        for window in [BudgetWindow::Total, BudgetWindow::Daily, ten] {
            assert_eq!(BudgetWindow::from_storage(&window.storage()), Some(window));
        }
        assert_eq!(BudgetWindow::from_storage("sliding:0s"), None);
        assert_eq!(BudgetWindow::from_storage("weekly"), None);
    }

    #[test]
    fn a_budget_needs_a_name_a_limit_and_a_window() {
        assert!(Budget::per_day("b").invalid().is_some());
        assert!(Budget::per_day(" ").max_count(1).invalid().is_some());
        assert!(
            Budget::sliding("b", Duration::from_millis(10))
                .max_count(1)
                .invalid()
                .is_some()
        );
        assert!(Budget::per_day("b").max_count(1).invalid().is_none());
    }
}
