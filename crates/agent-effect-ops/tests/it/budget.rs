//! `stats` lists each budget's use (docs/approval.md#budgets), in JSON and
//! in the table, read from the ledger without writing.

use std::sync::{Arc, Mutex};

use effect_core::{Budget, EffectContract, EffectLedger};
use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use serde_json::{Value, json};

use crate::support::{bin_on, success};

#[test]
fn stats_show_each_budgets_use() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let ledger: Arc<dyn EffectLedger> =
        Arc::new(SqliteLedger::open(&db, SqliteOptions::default()).unwrap());
    let contract = EffectContract::builder("refund", |args| {
        Ok(format!(
            "order:{}:refund",
            args["order"].as_str().ok_or("missing order")?
        ))
    })
    .budget(
        Budget::per_day("refunds")
            .max_count(10)
            .max_amount(5_000, |args| {
                Ok(args["cents"].as_u64().ok_or("missing cents")?)
            }),
    )
    .build()
    .unwrap();
    let committed = Arc::new(Mutex::new(0));
    let handler = {
        let committed = Arc::clone(&committed);
        move |_args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            *committed.lock().unwrap() += 1;
            Ok(json!({}))
        }
    };
    let executor = EffectExecutor::new(ledger);
    for (order, cents) in [("A-1", 4_200), ("A-2", 700)] {
        assert!(
            executor
                .execute(
                    &contract,
                    &json!({"order": order, "cents": cents}),
                    handler.clone()
                )
                .unwrap()
                .is_confirmed()
        );
    }
    let over = executor.execute(&contract, &json!({"order": "A-3", "cents": 200}), handler);
    assert!(over.unwrap_err().is_budget_exceeded());
    assert_eq!(
        *committed.lock().unwrap(),
        2,
        "refunds the provider committed"
    );
    drop(executor);

    let stats: Value = serde_json::from_str(&success(&bin_on(&db, &["stats"]))).unwrap();
    assert_eq!(
        stats["budgets"],
        json!([{"budget": "refunds", "window": "daily", "max_count": 10, "max_amount": 5000,
                "count": 2, "amount": 4900}])
    );
    let table = success(&bin_on(&db, &["stats", "--format", "table"]));
    let line = table.lines().find(|l| l.starts_with("refunds")).unwrap();
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cells, ["refunds", "daily", "2/10", "4900/5000"], "{table}");
    assert!(table.contains("BUDGET"), "{table}");
}
