//! Compensation: the effect that undoes a confirmed one (docs/compensation.md).
//!
//! A contract names its compensation with
//! [`EffectContractBuilder::compensation`](crate::EffectContractBuilder::compensation):
//! another contract (a refund for a capture, a delete for a create) and how
//! its arguments derive from what the ledger holds of the original, a
//! [`Compensated`] view: the original's operation id, its stored output and
//! provider operation id, and its stored intent when its contract stores it.
//! The derived arguments always carry the original's operation id under
//! [`ARGUMENT`], so the compensation's operation id and provider key derive
//! from it ([`operation_id`] is the usual rule), and a second compensation
//! of the same original is the same operation: it replays.
//!
//! The link is recorded both ways: on the original, the
//! [`COMPENSATION`](crate::evidence::COMPENSATION) evidence and the
//! `compensation_started` and `compensated` events; on the compensation, the
//! [`COMPENSATES`](crate::evidence::COMPENSATES) evidence and the
//! `compensation_of` event ([`CompensationStep`]).
//!
//! ```
//! use effect_core::{EffectContract, compensation};
//! use serde_json::json;
//!
//! let refund = EffectContract::builder("refund_payment", compensation::operation_id)
//!     .provider_idempotency_key(|args| {
//!         Ok(args[compensation::ARGUMENT].as_str().map(|original| format!("refund:{original}")))
//!     })
//!     .build()?;
//! let capture = EffectContract::builder("capture_payment", |args| {
//!     Ok(format!("invoice:{}:capture", args["invoice_id"].as_str().ok_or("missing invoice_id")?))
//! })
//! .compensation(refund, |original| {
//!     Ok(json!({"payment_id": original.output["payment_id"]}))
//! })
//! .build()?;
//! let derived = json!({"compensates": "invoice:INV-1:capture", "payment_id": "pay-1"});
//! let refund = capture.compensation().ok_or("no compensation")?.contract();
//! assert_eq!(refund.operation_id(&derived)?, "invoice:INV-1:capture:compensation");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::contract::EffectContract;
use crate::error::CallbackError;
use crate::record::EffectRecord;
use crate::status::EffectStatus;

/// The argument field that names the original operation: the executor sets
/// it on every compensation's arguments.
pub const ARGUMENT: &str = "compensates";

/// Derives a compensation's arguments from what the ledger holds of the
/// original. It must return a JSON object; the executor adds [`ARGUMENT`].
pub type CompensationArgumentsFn =
    Arc<dyn Fn(&Compensated<'_>) -> Result<Value, CallbackError> + Send + Sync>;

/// What a compensation's arguments derive from: the confirmed original as the
/// ledger records it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Compensated<'a> {
    /// The original's operation id.
    pub operation_id: &'a str,
    /// The original's stored output (what its handler or probe confirmed).
    pub output: &'a Value,
    /// The provider's id for the original effect, when one was recorded.
    pub provider_operation_id: Option<&'a str>,
    /// The original's provider idempotency key, if it had one.
    pub provider_idempotency_key: Option<&'a str>,
    /// The original's arguments, from its stored intent: `None` when its
    /// contract does not store its intent.
    pub arguments: Option<&'a Value>,
}

impl<'a> Compensated<'a> {
    /// The view of a confirmed `record`, with its `arguments` when its
    /// intent is stored (opened, if it was sealed). A record without a stored
    /// output shows `null`.
    pub fn new(record: &'a EffectRecord, arguments: Option<&'a Value>) -> Self {
        const NULL: &Value = &Value::Null;
        Compensated {
            operation_id: &record.operation_id,
            output: record.output.as_ref().unwrap_or(NULL),
            provider_operation_id: record.provider_operation_id.as_deref(),
            provider_idempotency_key: record.provider_idempotency_key.as_deref(),
            arguments,
        }
    }
}

/// A contract's compensation: the contract of the effect that undoes it, and
/// how that effect's arguments derive from the original.
#[derive(Clone)]
pub struct Compensation {
    contract: EffectContract,
    arguments: CompensationArgumentsFn,
}

impl fmt::Debug for Compensation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compensation")
            .field("contract", &self.contract.name())
            .field("version", &self.contract.version())
            .finish_non_exhaustive()
    }
}

impl Compensation {
    /// The compensation `contract`, its arguments derived by `arguments`.
    pub fn new<F>(contract: EffectContract, arguments: F) -> Self
    where
        F: Fn(&Compensated<'_>) -> Result<Value, CallbackError> + Send + Sync + 'static,
    {
        Compensation {
            contract,
            arguments: Arc::new(arguments),
        }
    }

    /// The compensation's contract.
    pub fn contract(&self) -> &EffectContract {
        &self.contract
    }

    /// The compensation's arguments for `original`: the derived object with
    /// [`ARGUMENT`] set to the original's operation id.
    ///
    /// # Errors
    ///
    /// The callback's error; a result that is not a JSON object, or that
    /// sets [`ARGUMENT`] to anything but the original's id.
    pub fn arguments(&self, original: &Compensated<'_>) -> Result<Value, CallbackError> {
        let mut derived = (self.arguments)(original)?;
        let Value::Object(map) = &mut derived else {
            return Err(CallbackError::new(format!(
                "the compensation {:?} must derive a JSON object of arguments",
                self.contract.name()
            )));
        };
        match map.get(ARGUMENT) {
            Some(Value::String(id)) if id == original.operation_id => {}
            None => {
                map.insert(ARGUMENT.to_owned(), original.operation_id.into());
            }
            Some(_) => {
                return Err(CallbackError::new(format!(
                    "the compensation {:?} sets {ARGUMENT:?}, which names the original",
                    self.contract.name()
                )));
            }
        }
        Ok(derived)
    }
}

/// The usual operation id of a compensation: the original's id (from
/// [`ARGUMENT`]) followed by `:compensation`.
///
/// # Errors
///
/// When the arguments do not name the original.
pub fn operation_id(arguments: &Value) -> Result<String, CallbackError> {
    let original = arguments
        .get(ARGUMENT)
        .and_then(Value::as_str)
        .ok_or_else(|| CallbackError::new(format!("missing {ARGUMENT:?}")))?;
    Ok(format!("{original}:compensation"))
}

/// A step of a compensation's trail ([`Transition::Compensation`](crate::Transition::Compensation)).
/// Each one is idempotent: repeating it writes nothing.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CompensationStep {
    /// On a confirmed original: an operator asks for its compensation, which
    /// a recovery worker holding the compensation's handler then runs.
    /// Event `compensation_requested`; evidence
    /// [`COMPENSATION_REQUEST`](crate::evidence::COMPENSATION_REQUEST).
    Request {
        /// Who asked. The library does not authenticate it.
        actor: String,
        /// Why.
        reason: String,
        /// Where the evidence is (ticket, provider dashboard link, ...).
        evidence_reference: String,
    },
    /// On a confirmed original: its compensation is the operation
    /// `operation_id`. Event `compensation_started`; evidence
    /// [`COMPENSATION`](crate::evidence::COMPENSATION) with state `started`.
    Start {
        /// The compensation's operation id.
        operation_id: String,
        /// The compensation's contract name.
        contract_name: String,
        /// The compensation's contract version.
        contract_version: String,
    },
    /// On a confirmed original: its compensation settled, `confirmed` (event
    /// `compensated`) or `rejected` (event `compensation_rejected`).
    Finish {
        /// The compensation's operation id, as started.
        operation_id: String,
        /// `confirmed` or `rejected`.
        status: EffectStatus,
    },
    /// On the compensation itself, in any status: it undoes `original`.
    /// Event `compensation_of`; evidence
    /// [`COMPENSATES`](crate::evidence::COMPENSATES), kept through its
    /// confirmation and any manual resolution.
    Of {
        /// The original's operation id.
        original: String,
    },
}

impl CompensationStep {
    /// A short name for messages and logs.
    pub fn name(&self) -> &'static str {
        match self {
            CompensationStep::Request { .. } => "request the compensation of",
            CompensationStep::Start { .. } => "start the compensation of",
            CompensationStep::Finish { .. } => "finish the compensation of",
            CompensationStep::Of { .. } => "link the compensation",
        }
    }
}

/// Where an original's compensation stands, as its
/// [`COMPENSATION`](crate::evidence::COMPENSATION) evidence says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompensationLink {
    /// The compensation's operation id.
    pub operation_id: String,
    /// The compensation's contract name.
    pub contract_name: String,
    /// The compensation's contract version.
    pub contract_version: String,
    /// `started`, `confirmed` or `rejected`.
    pub state: String,
}

impl CompensationLink {
    /// The state of a link whose compensation has not settled yet.
    pub const STARTED: &'static str = "started";

    /// True once the compensation settled (confirmed or rejected).
    pub fn is_finished(&self) -> bool {
        self.state != Self::STARTED
    }

    pub(crate) fn from_value(value: &Value) -> Option<Self> {
        let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
        Some(CompensationLink {
            operation_id: text("operation_id")?,
            contract_name: text("contract_name")?,
            contract_version: text("contract_version")?,
            state: text("state")?,
        })
    }
}
