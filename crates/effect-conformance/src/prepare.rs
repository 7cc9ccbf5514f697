//! Creating operations: `prepare`, its identity guard, and `PrepareAndClaim`.

use effect_core::EffectLedgerExt as _;
use effect_core::{
    Claim, EffectStatus, LedgerErrorKind, NewOperation, RequestFingerprint, Transition,
};
use serde_json::json;

use super::LedgerFactory;
use super::harness::{Check, LIVE, new_operation};

/// `prepare` of a new id creates a `prepared` record and one `prepared` event
/// carrying contract_name, contract_version and request_fingerprint.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn prepare_creates_operation(factory: LedgerFactory<'_>) {
    let c = Check::new("prepare_creates_operation", factory);
    let op = new_operation();
    let id = "invoice:INV-1:capture";
    let returned = c.ok(c.ledger.prepare(id, &op), "prepare of a new id");
    let stored = c.record(id);
    c.same(
        &returned,
        &stored,
        "record returned by prepare vs stored record",
    );
    c.same(stored.operation_id.as_str(), id, "operation_id");
    c.same(stored.status, EffectStatus::Prepared, "status");
    c.same(
        stored.contract_name.as_str(),
        "conformance.capture_payment",
        "contract_name",
    );
    c.same(stored.contract_version.as_str(), "1", "contract_version");
    c.ensure(
        op.fingerprint.matches(&stored.request_fingerprint),
        format_args!(
            "stored request_fingerprint {:?} does not match the prepared fingerprint",
            stored.request_fingerprint
        ),
    );
    c.same(
        stored.provider_idempotency_key.as_deref(),
        Some("capture:INV-1"),
        "provider_idempotency_key",
    );
    c.same(stored.attempts, 0, "attempts");
    c.same(stored.output, None, "output");
    c.same(stored.provider_operation_id, None, "provider_operation_id");
    c.same(stored.error, None, "error");
    c.same(stored.owner_token, None, "owner_token");
    c.same(stored.lease_until, None, "lease_until");
    c.ensure(
        stored.evidence.is_empty(),
        "a new operation has empty evidence",
    );
    c.ensure(
        !stored.created_at.is_empty() && stored.created_at <= stored.updated_at,
        format_args!(
            "created_at {:?} must be present and not after updated_at {:?}",
            stored.created_at, stored.updated_at
        ),
    );
    let events = c.events(id);
    c.same(events.len(), 1, "number of events after prepare");
    c.same(events[0].operation_id.as_str(), id, "event operation_id");
    c.event_is(
        &events[0],
        "prepared",
        &json!({
            "contract_name": "conformance.capture_payment",
            "contract_version": "1",
            "request_fingerprint": stored.request_fingerprint,
        }),
    );
}

/// `prepare` of an existing id with the same identity returns the stored
/// record and writes nothing, whatever the status.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn prepare_is_idempotent(factory: LedgerFactory<'_>) {
    let c = Check::new("prepare_is_idempotent", factory);
    for status in [
        EffectStatus::Prepared,
        EffectStatus::Dispatched,
        EffectStatus::Confirmed,
    ] {
        let id = format!("repeat {status}");
        c.in_status(&id, status);
        let before = c.snapshot(&id);
        let again = c.prepare(&id);
        c.same(
            again,
            c.record(&id),
            "record returned by a repeated prepare",
        );
        c.unchanged(
            &id,
            &before,
            format_args!("a repeated prepare of a {status} operation"),
        );
    }
}

fn conflict(name: &'static str, factory: LedgerFactory<'_>, variants: &[(&str, NewOperation)]) {
    let c = Check::new(name, factory);
    for (i, (what, changed)) in variants.iter().enumerate() {
        let id = format!("conflict {i}");
        c.prepare(&id);
        let before = c.snapshot(&id);
        c.err(
            c.ledger.prepare(&id, changed),
            LedgerErrorKind::Conflict,
            format_args!("prepare of an existing id with {what}"),
        );
        c.unchanged(&id, &before, format_args!("a conflicting prepare ({what})"));
    }
}

/// A different contract name on an existing id is a `Conflict`; nothing written.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn prepare_conflicts_on_contract_name(factory: LedgerFactory<'_>) {
    let mut op = new_operation();
    op.contract_name = "conformance.refund_payment".into();
    conflict(
        "prepare_conflicts_on_contract_name",
        factory,
        &[("a different contract name", op)],
    );
}

/// A different contract version on an existing id is a `Conflict`; nothing written.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn prepare_conflicts_on_contract_version(factory: LedgerFactory<'_>) {
    let mut op = new_operation();
    op.contract_version = "2".into();
    conflict(
        "prepare_conflicts_on_contract_version",
        factory,
        &[("a different contract version", op)],
    );
}

/// Different arguments (fingerprint) on an existing id are a `Conflict`; nothing written.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn prepare_conflicts_on_fingerprint(factory: LedgerFactory<'_>) {
    let mut op = new_operation();
    op.fingerprint = RequestFingerprint::of_value(&json!({"amount": 1300, "invoice_id": "INV-1"}));
    conflict(
        "prepare_conflicts_on_fingerprint",
        factory,
        &[("a different request fingerprint", op)],
    );
}

/// A different, added or missing provider key on an existing id is a
/// `Conflict`; nothing written.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn prepare_conflicts_on_provider_key(factory: LedgerFactory<'_>) {
    let mut other = new_operation();
    other.provider_idempotency_key = Some("capture:INV-2".into());
    let mut missing = new_operation();
    missing.provider_idempotency_key = None;
    conflict(
        "prepare_conflicts_on_provider_key",
        factory,
        &[
            ("a different provider key", other),
            ("no provider key", missing),
        ],
    );
    // And the other way round: a keyless operation prepared again with a key.
    let c = Check::new("prepare_conflicts_on_provider_key", factory);
    let mut keyless = new_operation();
    keyless.provider_idempotency_key = None;
    c.ok(
        c.ledger.prepare("keyless", &keyless),
        "prepare without a key",
    );
    let before = c.snapshot("keyless");
    c.err(
        c.ledger.prepare("keyless", &new_operation()),
        LedgerErrorKind::Conflict,
        "prepare of a keyless id with a provider key",
    );
    c.unchanged("keyless", &before, "a conflicting prepare (key added)");
}

/// A blank operation id is `InvalidInput`, and nothing is created.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn prepare_rejects_blank_operation_id(factory: LedgerFactory<'_>) {
    let c = Check::new("prepare_rejects_blank_operation_id", factory);
    for id in ["", "   ", "\t\n"] {
        c.err(
            c.ledger.prepare(id, &new_operation()),
            LedgerErrorKind::InvalidInput,
            format_args!("prepare({id:?})"),
        );
        c.same(
            c.get(id),
            None,
            format_args!("get({id:?}) after a refused prepare"),
        );
    }
    if let Some(all) = c.all_events() {
        c.same(all.len(), 0, "events in the ledger after refused prepares");
    }
}

fn prepare_and_claim(c: &Check, id: &str, token: &str) -> (bool, effect_core::EffectRecord) {
    let transition =
        Transition::PrepareAndClaim(new_operation(), Claim::new(token.to_owned(), LIVE));
    let outcome = c.ok(
        c.ledger.apply(id, &transition),
        format_args!("PrepareAndClaim({id:?}, {token:?})"),
    );
    (outcome.applied, outcome.record)
}

/// `PrepareAndClaim` on a fresh id creates and claims in one call: record
/// `dispatched`, events `prepared` then `dispatched`.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn prepare_and_claim_creates_and_claims(factory: LedgerFactory<'_>) {
    let c = Check::new("prepare_and_claim_creates_and_claims", factory);
    let (applied, returned) = prepare_and_claim(&c, "fresh", "worker-1");
    c.ensure(applied, "PrepareAndClaim on a fresh id must report applied");
    let stored = c.record("fresh");
    c.same(
        &returned,
        &stored,
        "record returned by PrepareAndClaim vs stored record",
    );
    c.same(stored.status, EffectStatus::Dispatched, "status");
    c.same(stored.attempts, 1, "attempts");
    c.same(
        stored.owner_token.as_deref(),
        Some("worker-1"),
        "owner_token",
    );
    c.ensure(
        stored.lease_until.is_some(),
        "a claimed operation has lease_until",
    );
    let events = c.events("fresh");
    c.same(
        events
            .iter()
            .map(|e| e.event_type.as_str())
            .collect::<Vec<_>>(),
        vec!["prepared", "dispatched"],
        "event types",
    );
    c.event_is(&events[1], "dispatched", &json!({"attempt": 1}));
}

/// `PrepareAndClaim` on an existing `prepared` id claims it without a second
/// `prepared` event.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn prepare_and_claim_claims_prepared(factory: LedgerFactory<'_>) {
    let c = Check::new("prepare_and_claim_claims_prepared", factory);
    c.prepare("waiting");
    let (applied, _) = prepare_and_claim(&c, "waiting", "worker-1");
    c.ensure(applied, "PrepareAndClaim on a prepared id must claim it");
    let stored = c.record("waiting");
    c.same(stored.status, EffectStatus::Dispatched, "status");
    c.same(stored.attempts, 1, "attempts");
    c.same(
        stored.owner_token.as_deref(),
        Some("worker-1"),
        "owner_token",
    );
    c.same(
        c.event_types("waiting"),
        vec!["prepared".to_owned(), "dispatched".to_owned()],
        "event types",
    );
}

/// `PrepareAndClaim` on a `dispatched` or `confirmed` id reports not applied,
/// returns the stored record and writes nothing.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn prepare_and_claim_leaves_others(factory: LedgerFactory<'_>) {
    let c = Check::new("prepare_and_claim_leaves_others", factory);
    for status in [
        EffectStatus::Dispatched,
        EffectStatus::Confirmed,
        EffectStatus::OutcomeUnknown,
        EffectStatus::Rejected,
    ] {
        let id = format!("taken {status}");
        c.in_status(&id, status);
        let before = c.snapshot(&id);
        let (applied, returned) = prepare_and_claim(&c, &id, "latecomer");
        c.ensure(
            !applied,
            format_args!("PrepareAndClaim on a {status} id must not claim it"),
        );
        c.same(
            returned,
            c.record(&id),
            "record returned by PrepareAndClaim",
        );
        c.unchanged(
            &id,
            &before,
            format_args!("PrepareAndClaim on a {status} id"),
        );
    }
}

/// `PrepareAndClaim` with a different identity is a `Conflict`, and claims nothing.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn prepare_and_claim_conflicts(factory: LedgerFactory<'_>) {
    let c = Check::new("prepare_and_claim_conflicts", factory);
    c.prepare("taken");
    let before = c.snapshot("taken");
    let mut op = new_operation();
    op.contract_version = "2".into();
    let transition = Transition::PrepareAndClaim(op, Claim::new("worker-1", LIVE));
    c.err(
        c.ledger.apply("taken", &transition),
        LedgerErrorKind::Conflict,
        "PrepareAndClaim with a different contract version",
    );
    c.unchanged("taken", &before, "a conflicting PrepareAndClaim");
}
