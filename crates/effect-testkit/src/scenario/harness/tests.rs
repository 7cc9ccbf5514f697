use effect_core::EffectLedgerExt as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use effect_core::{
    EffectLedger, LedgerErrorKind, ListQuery, MemoryLedger, NewOperation, RequestFingerprint,
};

use super::ProcessLedger;
use crate::executor_suite;

fn process_ledger(crashed: bool) -> ProcessLedger {
    ProcessLedger {
        inner: Arc::new(MemoryLedger::new()),
        crashed: Arc::new(AtomicBool::new(crashed)),
    }
}

#[test]
fn a_live_process_ledger_passes_the_conformance_and_executor_suites() {
    let factory = || -> Arc<dyn EffectLedger> { Arc::new(process_ledger(false)) };
    effect_conformance::run_all(&factory);
    executor_suite::run_all(&factory);
}

#[test]
fn after_the_crash_no_call_reaches_the_store() {
    let ledger = process_ledger(false);
    let op = NewOperation::new(
        "capture_payment",
        "1",
        RequestFingerprint::of_canonical(r#"{"invoice_id":"INV-1"}"#),
    );
    ledger.prepare("op-1", &op).unwrap();
    ledger.crashed.store(true, Ordering::SeqCst);
    let err = ledger.prepare("op-2", &op).unwrap_err();
    assert_eq!(err.kind(), LedgerErrorKind::Unavailable);
    assert!(ledger.get("op-1").is_err());
    assert!(ledger.list(&ListQuery::new(10)).is_err());
    // The store itself is untouched and still answers the next process.
    assert!(ledger.inner.get("op-1").unwrap().is_some());
    assert!(ledger.inner.get("op-2").unwrap().is_none());
}
