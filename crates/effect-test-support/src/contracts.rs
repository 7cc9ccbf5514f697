//! The capture-payment contract the tests of every crate start from, so a
//! change to how it names its operation touches one function.
//!
//! Its arguments carry an `invoice_id`; the operation id is
//! `invoice:{invoice_id}:capture` and the provider idempotency key
//! `capture:{invoice_id}`. A test adds what it exercises (a probe, a
//! guaranteed key, stored intent, a postcondition) to the builder.
//!
//! ```
//! use effect_core::OutcomeProbeResult;
//! use serde_json::json;
//!
//! let contract = effect_test_support::contracts::capture_payment()
//!     .outcome_probe(|_args, _key| Ok(OutcomeProbeResult::not_committed()))
//!     .build()?;
//! let args = json!({"invoice_id": "INV-1"});
//! assert_eq!(contract.name(), effect_test_support::contracts::CAPTURE_PAYMENT);
//! assert_eq!(contract.operation_id(&args)?, "invoice:INV-1:capture");
//! assert_eq!(contract.provider_idempotency_key(&args)?.as_deref(), Some("capture:INV-1"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use effect_core::{EffectContract, EffectContractBuilder};

/// The contract's name.
pub const CAPTURE_PAYMENT: &str = "capture_payment";

/// The contract with its operation id and its provider key (not
/// guaranteed), nothing else.
pub fn capture_payment() -> EffectContractBuilder {
    capture_payment_without_key().provider_idempotency_key(|args| {
        Ok(args["invoice_id"]
            .as_str()
            .map(|invoice| format!("capture:{invoice}")))
    })
}

/// The contract with its operation id only: no provider key, so nothing
/// but a probe or an operator can settle an uncertain capture.
pub fn capture_payment_without_key() -> EffectContractBuilder {
    EffectContract::builder(CAPTURE_PAYMENT, |args| {
        let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
        Ok(format!("invoice:{invoice}:capture"))
    })
}
