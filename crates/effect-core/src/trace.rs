//! The trace context stored with an operation: the W3C `traceparent` of the
//! traced execution that created it, so that the trace of a later process
//! finishing it (a recovery worker) links back to the run that started it.
//!
//! The executor records it in the operation's `prepared` event, beside the
//! stored intent, only when an observer traces the execution (effect-otel).
//! It is a trace id and a span id, never arguments. The Python package
//! ignores the extra event field, as it ignores the intent.
//!
//! ```
//! use effect_core::trace;
//! use effect_core::{EffectLedger, EffectLedgerExt, MemoryLedger, NewOperation, RequestFingerprint};
//! use serde_json::json;
//!
//! let ledger = MemoryLedger::new();
//! let args = json!({"invoice_id": "INV-1"});
//! let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
//! let op = NewOperation::new("capture_payment", "1", RequestFingerprint::of_value(&args))
//!     .with_trace_context(Some(parent.into()));
//! ledger.prepare("invoice:INV-1:capture", &op)?;
//! let events = ledger.events("invoice:INV-1:capture")?;
//! assert_eq!(trace::stored(&events), Some(parent));
//! # Ok::<(), effect_core::LedgerError>(())
//! ```

use serde_json::Value;

use crate::event;
use crate::record::LedgerEvent;

/// The field of the `prepared` event's data that holds the trace context.
pub const EVENT_KEY: &str = "trace_context";

/// The trace context stored with an operation, from its events: `None` when
/// its creating execution was not traced (or another writer created it).
pub fn stored(events: &[LedgerEvent]) -> Option<&str> {
    events
        .iter()
        .find(|event| event.event_type == event::PREPARED)
        .and_then(|event| event.data.get(EVENT_KEY))
        .and_then(Value::as_str)
}
