//! The executor's deferred-outcomes mode on this store: the fault matrix
//! ends exactly as with durable outcomes.

use std::sync::Arc;

use effect_core::EffectLedger;
use effect_exec::ExecutorOptions;
use effect_ledger_sqlite::{SqliteOptions, TempLedger};
use effect_testkit::matrix::{Matrix, MatrixReport};

use crate::support::TestResult;

fn on_sqlite(options: Option<ExecutorOptions>) -> Result<MatrixReport, Box<dyn std::error::Error>> {
    let mut matrix = Matrix::new().ledger(|clock| {
        let ledger = TempLedger::with_options(SqliteOptions::default().clock(clock))
            .map_err(|err| effect_core::LedgerError::backend(err.to_string(), None))?;
        Ok(Arc::new(ledger) as Arc<dyn EffectLedger>)
    });
    if let Some(options) = options {
        matrix = matrix.executor_options(options);
    }
    Ok(matrix.run()?)
}

#[test]
fn the_fault_matrix_ends_alike_with_deferred_outcomes() -> TestResult {
    let durable = on_sqlite(None)?;
    let deferred = on_sqlite(Some(ExecutorOptions::default().deferred_outcomes(true)))?;
    assert!(deferred.guarantee_kept, "{}", deferred.to_table());
    assert_eq!(deferred.cells.len(), durable.cells.len());
    for (a, b) in durable.cells.iter().zip(&deferred.cells) {
        let ending = |c: &effect_testkit::scenario::ScenarioReport| {
            (
                c.status,
                c.committed_effect_count,
                c.handler_calls,
                c.event_types.clone(),
            )
        };
        assert_eq!(ending(b), ending(a), "{} / {:?}", a.scenario, a.contract);
    }
    Ok(())
}
