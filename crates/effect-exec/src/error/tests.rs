use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use effect_core::{EffectContract, EffectStatus, MemoryLedger};
use serde_json::{Value, json};

use super::*;
use crate::EffectExecutor;

/// What `?` makes of `err` inside a function returning `HandlerError`.
fn check<E>(err: E, expected: &str)
where
    HandlerError: From<E>,
{
    let converted: Result<(), HandlerError> = (|| Err(err)?)();
    assert_eq!(converted, Err(HandlerError::unknown(expected)));
}

#[derive(Debug)]
struct Outer(std::io::Error);

impl std::fmt::Display for Outer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("capture request failed")
    }
}

impl Error for Outer {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.0)
    }
}

fn reset() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset")
}

#[test]
fn question_mark_keeps_the_chain_of_causes() {
    check(reset(), "connection reset");
    let boxed: Box<dyn Error + Send + Sync> = Box::new(Outer(reset()));
    check(boxed, "capture request failed: connection reset");
    let boxed: Box<dyn Error> = Box::new(Outer(reset()));
    check(boxed, "capture request failed: connection reset");
    check("no id in the answer", "no id in the answer");
    check(String::from("no id"), "no id");
    let json = serde_json::from_str::<Value>("{").unwrap_err();
    check(json, "EOF while parsing an object at line 1 column 1");
    assert_eq!(
        HandlerError::from_error(Outer(reset())),
        HandlerError::unknown("capture request failed: connection reset")
    );
}

#[cfg(feature = "anyhow")]
#[test]
fn question_mark_on_anyhow_keeps_its_context() {
    use anyhow::Context;
    let err = Err::<(), _>(reset())
        .context("capturing INV-1")
        .unwrap_err();
    check(err, "capturing INV-1: connection reset");
}

#[test]
fn a_handler_error_is_a_std_error() {
    let err: Box<dyn Error + Send + Sync> = Box::new(HandlerError::rejected("card declined"));
    assert_eq!(err.to_string(), "rejected: card declined");
    assert!(err.source().is_none());
}

#[test]
fn an_error_raised_with_question_mark_is_an_uncertain_outcome_never_a_rejection() {
    let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    let contract = EffectContract::builder("capture", |_| Ok("op-1".to_owned()))
        .build()
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let result = executor
        .execute(&contract, &json!({}), move |_args: Value, _key| {
            counted.fetch_add(1, Ordering::SeqCst);
            let body: Value = serde_json::from_str("<html>502 Bad Gateway")?;
            Ok::<_, HandlerError>(body)
        })
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // No probe, no guaranteed key: quarantined, not rejected and not retried.
    assert_eq!(result.status, EffectStatus::Quarantined);
}
