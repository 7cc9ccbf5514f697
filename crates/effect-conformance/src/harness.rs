//! The small vocabulary every check is written in: a [`Check`] owns one fresh
//! ledger and turns every surprise into a panic naming the check. Suites
//! built on this one (effect-testkit's executor suite) are written in it too.

use effect_core::EffectLedgerExt as _;
use effect_core::{Clock as _, SystemClock};
use std::fmt::{Debug, Display};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use effect_core::{
    Claim, Confirmation, EffectContract, EffectContractBuilder, EffectLedger, EffectRecord,
    EffectStatus, Evidence, LedgerError, LedgerErrorKind, LedgerEvent, ManualAction,
    ManualResolution, NewOperation, RequestFingerprint, Transition,
};
use serde_json::{Value, json};

use super::LedgerFactory;

/// A lease nobody will outlive during a check.
pub const LIVE: Duration = Duration::from_secs(60);
/// A lease that has ended as soon as it was granted, on any clock.
pub const EXPIRED: Duration = Duration::ZERO;
/// Enough to page through every event a check writes.
const ALL_EVENTS: usize = 100_000;

/// One running check: its name (for failure messages) and its ledger.
pub struct Check {
    name: &'static str,
    /// The check's own ledger, fresh from the factory.
    pub ledger: Arc<dyn EffectLedger>,
}

/// What an operation looked like, to prove a refused transition wrote nothing.
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    record: Option<EffectRecord>,
    events: Vec<LedgerEvent>,
    /// `None` when the store does not offer `events_after`.
    ledger_events: Option<usize>,
}

impl Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Check {
    /// Starts the check `name` on a fresh ledger from `factory`.
    pub fn new(name: &'static str, factory: LedgerFactory<'_>) -> Self {
        Check {
            name,
            ledger: factory(),
        }
    }

    /// Fails the check with `message`.
    ///
    /// # Panics
    ///
    /// Always, naming the check.
    pub fn fail(&self, message: impl Display) -> ! {
        panic!("ledger conformance check `{}` failed: {message}", self.name)
    }

    /// Fails the check with `message` unless `condition` holds.
    pub fn ensure(&self, condition: bool, message: impl Display) {
        if !condition {
            self.fail(message);
        }
    }

    /// Fails the check unless `actual` equals `expected`.
    pub fn same<T: PartialEq + Debug>(&self, actual: T, expected: T, what: impl Display) {
        if actual != expected {
            self.fail(format_args!(
                "{what}: expected {expected:?}, got {actual:?}"
            ));
        }
    }

    /// The value of `result`; fails the check on any error.
    pub fn ok<T>(&self, result: Result<T, LedgerError>, what: impl Display) -> T {
        match result {
            Ok(value) => value,
            Err(err) => self.fail(format_args!(
                "{what}: unexpected {:?} error: {err}",
                err.kind()
            )),
        }
    }

    /// Fails unless `result` is `Ok(true)`.
    pub fn applied(&self, result: Result<bool, LedgerError>, what: impl Display) {
        if !self.ok(result, &what) {
            self.fail(format_args!(
                "{what} must return true (applied), returned false"
            ));
        }
    }

    /// Fails the check unless `result` is an error of `kind`.
    pub fn err<T: Debug>(
        &self,
        result: Result<T, LedgerError>,
        kind: LedgerErrorKind,
        what: impl Display,
    ) {
        match result {
            Err(err) if err.kind() == kind => {}
            Err(err) => self.fail(format_args!(
                "{what}: expected an error of kind {kind:?}, got {:?}: {err}",
                err.kind()
            )),
            Ok(value) => self.fail(format_args!(
                "{what}: expected an error of kind {kind:?}, got Ok({value:?})"
            )),
        }
    }

    /// The record of `id`, if any.
    pub fn get(&self, id: &str) -> Option<EffectRecord> {
        self.ok(self.ledger.get(id), format_args!("get({id:?})"))
    }

    /// The record of `id`; fails the check when there is none.
    pub fn record(&self, id: &str) -> EffectRecord {
        match self.get(id) {
            Some(record) => record,
            None => self.fail(format_args!(
                "get({id:?}) returned None for an existing operation"
            )),
        }
    }

    /// The status of `id`.
    pub fn status(&self, id: &str) -> EffectStatus {
        self.record(id).status
    }

    /// The events of `id`, in order.
    pub fn events(&self, id: &str) -> Vec<LedgerEvent> {
        self.ok(self.ledger.events(id), format_args!("events({id:?})"))
    }

    /// The types of the events of `id`, in order.
    pub fn event_types(&self, id: &str) -> Vec<String> {
        self.events(id).into_iter().map(|e| e.event_type).collect()
    }

    /// The last event of `id`; fails the check when there is none.
    pub fn last_event(&self, id: &str) -> LedgerEvent {
        match self.events(id).pop() {
            Some(event) => event,
            None => self.fail(format_args!("events({id:?}) is empty")),
        }
    }

    /// Every event of the ledger, or `None` when the store does not offer
    /// `events_after` (an optional capability).
    pub fn all_events(&self) -> Option<Vec<LedgerEvent>> {
        self.optional(
            self.ledger.events_after(0, ALL_EVENTS),
            "events_after(0, ..)",
        )
    }

    /// The value of an optional capability, or `None` when the store answers
    /// [`LedgerErrorKind::Unsupported`]; any other error fails the check.
    pub fn optional<T>(&self, result: Result<T, LedgerError>, what: impl Display) -> Option<T> {
        match result {
            Err(err) if err.kind() == LedgerErrorKind::Unsupported => None,
            other => Some(self.ok(other, what)),
        }
    }

    /// What `id` looks like now, for [`unchanged`](Self::unchanged).
    pub fn snapshot(&self, id: &str) -> Snapshot {
        Snapshot {
            record: self.get(id),
            events: self.events(id),
            ledger_events: self.all_events().map(|all| all.len()),
        }
    }

    /// Fails unless the operation and the ledger's event count are as before.
    pub fn unchanged(&self, id: &str, before: &Snapshot, what: impl Display) {
        let after = self.snapshot(id);
        if after.record != before.record {
            self.fail(format_args!(
                "{what} must write nothing, but the record of {id:?} changed from {:?} to {:?}",
                before.record, after.record
            ));
        }
        if after.events != before.events || after.ledger_events != before.ledger_events {
            self.fail(format_args!(
                "{what} must append no event, but the events of {id:?} went from {:?} to {:?} \
                 ({:?} -> {:?} events in the ledger)",
                types(&before.events),
                types(&after.events),
                before.ledger_events,
                after.ledger_events
            ));
        }
    }

    /// Records `observation` as a late observation of the stale owner
    /// `stalled` on `id`; fails the check unless it was applied.
    pub fn record_late(&self, id: &str, observation: Value) {
        let late = self.ok(
            self.ledger.apply(
                id,
                &Transition::RecordLateObservation {
                    owner_token: "stalled".into(),
                    observation: evidence(observation),
                },
            ),
            format_args!("a late observation on {id:?}"),
        );
        self.ensure(
            late.applied,
            format_args!("a late observation of a stale owner on {id:?} is applied"),
        );
    }

    /// Prepares `id` with the suite's identity ([`new_operation`]).
    pub fn prepare(&self, id: &str) -> EffectRecord {
        self.ok(
            self.ledger.prepare(id, &new_operation()),
            format_args!("prepare({id:?})"),
        )
    }

    /// Prepares `id` under a contract that requires approval: it must be
    /// created `awaiting_approval`.
    pub fn prepare_awaiting(&self, id: &str) -> EffectRecord {
        let record = self.ok(
            self.ledger.prepare(id, &approval_operation()),
            format_args!("prepare({id:?}) requiring approval"),
        );
        self.same(
            record.status,
            EffectStatus::AwaitingApproval,
            format_args!("status of {id:?} prepared under a contract requiring approval"),
        );
        record
    }

    /// Asks for a claim of `id` for `token`; whether it was granted.
    pub fn claim(&self, id: &str, token: &str, lease: Duration) -> bool {
        let claim = Claim::new(token.to_owned(), lease);
        self.ok(
            self.ledger.claim_dispatch(id, &claim),
            format_args!("claim_dispatch({id:?}, {token:?})"),
        )
    }

    /// Claims a `prepared` operation; fails unless the claim is granted.
    pub fn must_claim(&self, id: &str, token: &str, lease: Duration) {
        if !self.claim(id, token, lease) {
            self.fail(format_args!(
                "claim_dispatch({id:?}, {token:?}) of a prepared operation must return true, \
                 returned false (status {})",
                self.status(id)
            ));
        }
    }

    /// Drives a fresh operation `id` into `status` through the public
    /// transitions and returns the owner token it was (or would be) dispatched with.
    pub fn in_status(&self, id: &str, status: EffectStatus) -> String {
        let token = owner_of(id);
        if status == EffectStatus::AwaitingApproval {
            self.prepare_awaiting(id);
            return token;
        }
        self.prepare(id);
        let dispatch = |check: &Check| {
            check.ensure(
                check.claim(id, &token, LIVE),
                format_args!("claim_dispatch of freshly prepared {id:?} returned false"),
            );
        };
        let applied = match status {
            // `awaiting_approval` was set up (and returned) above.
            EffectStatus::Prepared | EffectStatus::AwaitingApproval => true,
            EffectStatus::Dispatched => {
                dispatch(self);
                true
            }
            EffectStatus::Confirmed => self.ok(
                self.ledger
                    .mark_confirmed(id, None, &confirmation(json!({"charged": true}))),
                "mark_confirmed without owner from prepared",
            ),
            EffectStatus::OutcomeUnknown | EffectStatus::Quarantined => {
                dispatch(self);
                let unknown = self.ok(
                    self.ledger.mark_outcome_unknown(
                        id,
                        Some(&token),
                        "timed out",
                        &evidence(json!({"timeout": true})),
                    ),
                    "mark_outcome_unknown by owner",
                );
                if status == EffectStatus::Quarantined && unknown {
                    self.ok(
                        self.ledger.quarantine(
                            id,
                            "no probe",
                            &evidence(json!({"quarantined_by": "conformance"})),
                        ),
                        "quarantine from outcome_unknown",
                    )
                } else {
                    unknown
                }
            }
            EffectStatus::Rejected => {
                dispatch(self);
                self.ok(
                    self.ledger.mark_rejected(id, &token, "card declined"),
                    "mark_rejected by owner",
                )
            }
        };
        self.ensure(
            applied,
            format_args!("setting up {id:?} in status {status}: a transition returned false"),
        );
        self.same(
            self.status(id),
            status,
            format_args!("status of {id:?} after setup"),
        );
        token
    }

    /// For each status in `from`, sets up an operation in it, runs `act` and
    /// requires that `act` reports "not applied" and wrote nothing.
    pub fn refused_from(
        &self,
        from: &[EffectStatus],
        what: &str,
        act: impl Fn(&Check, &str, &str) -> Result<bool, LedgerError>,
    ) {
        for &status in from {
            let id = format!("{what} from {status}");
            let token = self.in_status(&id, status);
            let before = self.snapshot(&id);
            let applied = self.ok(act(self, &id, &token), format_args!("{what} from {status}"));
            self.ensure(
                !applied,
                format_args!("{what} from {status} must return false, returned true"),
            );
            self.unchanged(&id, &before, format_args!("{what} from {status}"));
        }
    }

    /// Fails unless `event` has `event_type` and each of `fields` in its data.
    pub fn event_is(&self, event: &LedgerEvent, event_type: &str, fields: &Value) {
        self.same(event.event_type.as_str(), event_type, "event type");
        self.ensure(
            !event.timestamp.trim().is_empty(),
            format_args!("{event_type} event has an empty timestamp"),
        );
        let Some(expected) = fields.as_object() else {
            return;
        };
        for (key, value) in expected {
            self.same(
                event.data.get(key),
                Some(value),
                format_args!(
                    "{event_type} event data field {key:?} (data: {})",
                    event.data
                ),
            );
        }
    }

    /// Fails unless the record's evidence holds each entry of `expected`.
    pub fn evidence_has(&self, actual: &Evidence, expected: &Value, what: impl Display) {
        let Some(expected) = expected.as_object() else {
            return;
        };
        for (key, value) in expected {
            if actual.get(key) != Some(value) {
                self.fail(format_args!(
                    "{what}: evidence[{key:?}] should be {value}, evidence is {}",
                    Value::Object(actual.clone())
                ));
            }
        }
    }
}

fn types(events: &[LedgerEvent]) -> Vec<&str> {
    events.iter().map(|e| e.event_type.as_str()).collect()
}

/// The token `in_status` dispatches `id` with.
pub fn owner_of(id: &str) -> String {
    format!("owner of {id}")
}

/// The identity every check prepares unless it tests identities.
pub fn new_operation() -> NewOperation {
    NewOperation::new(
        "conformance.capture_payment",
        "1",
        RequestFingerprint::of_value(&json!({"amount": 1200, "invoice_id": "INV-1"})),
    )
    .with_provider_idempotency_key(Some("capture:INV-1".into()))
}

/// [`new_operation`] under a contract that requires approval.
pub fn approval_operation() -> NewOperation {
    new_operation().with_requires_approval(true)
}

/// A JSON object as evidence (anything else is empty evidence).
pub fn evidence(value: Value) -> Evidence {
    match value {
        Value::Object(map) => map,
        _ => Evidence::new(),
    }
}

/// A confirmation of `output` with a provider id and evidence.
pub fn confirmation(output: Value) -> Confirmation {
    Confirmation {
        output,
        provider_operation_id: Some("ch_conformance".into()),
        evidence: evidence(json!({"source": "conformance"})),
    }
}

/// An operator's resolution `action` with a complete audit.
pub fn manual(action: ManualAction) -> ManualResolution {
    ManualResolution::new(
        action,
        effect_core::Audit::new(
            "operator@example.com",
            "checked the provider dashboard",
            "TICKET-42",
        ),
    )
}

/// Statuses other than the ones listed.
pub fn except(allowed: &[EffectStatus]) -> Vec<EffectStatus> {
    EffectStatus::ALL
        .into_iter()
        .filter(|s| !allowed.contains(s))
        .collect()
}

/// Waits, without sleeping, until the clock has moved past the microsecond
/// it reads now, so the next write gets a later timestamp than every write
/// before the call on a store whose clock is the system clock or keeps pace
/// with it (timestamps have microseconds in every store): the writes of a
/// check are then ordered in time as they are in the check.
pub fn tick() {
    wait_past(SystemClock.now());
}

/// Waits, without sleeping, until the system clock has passed `at`: the
/// suite never injects a store's clock, so a check that needs a store to see
/// a time passed (an approval's expiry, a deferral's bound) waits for the
/// clock to pass it.
pub fn wait_past(at: SystemTime) {
    let at = micros(at);
    while micros(SystemClock.now()) <= at {
        thread::yield_now();
    }
}

/// Microseconds since the Unix epoch (0 for earlier times).
fn micros(time: SystemTime) -> u128 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_micros())
}

/// Runs `act(i)` on `n` threads released together; returns the results in order.
///
/// # Panics
///
/// When a racing thread panicked, naming the check.
pub fn race<T: Send>(c: &Check, n: usize, act: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let barrier = Barrier::new(n);
    thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (barrier, act) = (&barrier, &act);
                scope.spawn(move || {
                    barrier.wait();
                    act(i)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| match handle.join() {
                Ok(value) => value,
                Err(_) => c.fail("a racing thread panicked"),
            })
            .collect()
    })
}

/// The capture contract the checks that need one use: operation id
/// `invoice:{invoice_id}:capture`, provider key `capture:{invoice_id}`,
/// guaranteed when `guaranteed`; a check adds what it exercises.
pub fn capture_builder(guaranteed: bool) -> EffectContractBuilder {
    EffectContract::builder("capture_payment", |args| {
        Ok(format!(
            "invoice:{}:capture",
            args["invoice_id"].as_str().ok_or("missing invoice_id")?
        ))
    })
    .provider_idempotency_key(|args| {
        Ok(Some(format!(
            "capture:{}",
            args["invoice_id"].as_str().ok_or("missing invoice_id")?
        )))
    })
    .provider_idempotency_guaranteed(guaranteed)
}

/// [`capture_builder`], built.
///
/// # Panics
///
/// Never for this contract; a build error would be a bug of the suite.
pub fn capture_contract(guaranteed: bool) -> EffectContract {
    match capture_builder(guaranteed).build() {
        Ok(contract) => contract,
        Err(err) => panic!("the capture contract is valid: {err}"),
    }
}

/// An operator's cancel, audited with `actor`, `reason` and `evidence_reference`.
pub fn cancel(actor: &str, reason: &str, evidence_reference: &str) -> Transition {
    Transition::Cancel {
        actor: actor.to_owned(),
        reason: reason.to_owned(),
        evidence_reference: evidence_reference.to_owned(),
    }
}

/// A complete operator's cancel.
pub fn cancel_by_operator() -> Transition {
    cancel("operator@example.com", "the customer withdrew", "TICKET-7")
}
