//! Stored intent: the arguments an operation is dispatched with, kept with it
//! so that a later process can finish it without the original caller.
//!
//! A contract opts in with
//! [`store_intent`](crate::EffectContractBuilder::store_intent). The executor
//! then records the canonical arguments (or, when they hold secrets, their
//! sealed envelope) in the operation's `prepared` event, in the same commit
//! that creates the operation: an operation with stored intent never exists
//! without it, and no store needs another table. The Python package reads
//! and writes such a ledger as before; it ignores the extra event field.
//!
//! ```
//! use effect_core::intent;
//! use effect_core::{EffectLedger, EffectLedgerExt, MemoryLedger, NewOperation, RequestFingerprint};
//! use serde_json::json;
//!
//! let ledger = MemoryLedger::new();
//! let args = json!({"invoice_id": "INV-1"});
//! let op = NewOperation::new("capture_payment", "1", RequestFingerprint::of_value(&args))
//!     .with_intent(Some(args.clone()));
//! ledger.prepare("invoice:INV-1:capture", &op)?;
//! let events = ledger.events("invoice:INV-1:capture")?;
//! assert_eq!(intent::stored(&events), Some(&args));
//! # Ok::<(), effect_core::LedgerError>(())
//! ```

use serde_json::{Value, json};

use crate::event;
use crate::record::LedgerEvent;

/// The field of the `prepared` event's data that holds the stored intent.
pub const EVENT_KEY: &str = "intent";

/// The field of the `prepared` event's data that holds what an approver is
/// shown of an operation created `awaiting_approval`: its arguments with
/// secrets and redacted fields replaced by the marker
/// ([`NewOperation::redacted_arguments`](crate::NewOperation::redacted_arguments)).
pub const REDACTED_KEY: &str = "redacted_arguments";

/// The version of the stored form.
const VERSION: u64 = 1;

/// The stored form of `arguments`: `{"v": 1, "arguments": …}`.
pub(crate) fn envelope(arguments: &Value) -> Value {
    json!({ "v": VERSION, "arguments": arguments })
}

/// The stored intent of an operation, from its events: the arguments (or
/// their sealed envelope) of its `prepared` event, `None` when the operation
/// was recorded without intent (its contract does not store it, or another
/// writer, such as the Python package, created it).
pub fn stored(events: &[LedgerEvent]) -> Option<&Value> {
    events
        .iter()
        .find(|event| event.event_type == event::PREPARED)
        .and_then(|event| event.data.get(EVENT_KEY))
        .filter(|intent| intent.get("v").and_then(Value::as_u64) == Some(VERSION))
        .and_then(|intent| intent.get("arguments"))
}

/// What an approver is shown of the operation's arguments, from its
/// `prepared` event: secrets and redacted fields replaced by the marker.
/// `None` when it was not created waiting for approval, or by a writer that
/// records no such copy (an older version, the Python package).
pub fn redacted(events: &[LedgerEvent]) -> Option<&Value> {
    events
        .iter()
        .find(|event| event.event_type == event::PREPARED)
        .and_then(|event| event.data.get(REDACTED_KEY))
}

/// True when the operation's events hold a stored intent.
pub fn is_stored(events: &[LedgerEvent]) -> bool {
    stored(events).is_some()
}
