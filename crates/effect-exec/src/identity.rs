//! A call's identity (docs/spec.md §5 step 1): the operation id, request
//! fingerprint, provider key, budget charges and stored intent that its
//! arguments derive under a contract, derived once before anything is
//! written, with every contract callback guarded against a panic.

use std::sync::Arc;

use effect_core::BudgetCharge;
use effect_core::canonical::to_json_value;
use effect_core::terms::ContractTerms;
use effect_core::{
    EffectContract, EffectRecord, FingerprintForm, NewOperation, RequestFingerprint,
};
use serde::Serialize;
use serde_json::Value;

use crate::dispatch::call_guarded;
use crate::error::ExecError;
use crate::secrets::{FingerprintKey, Keyring, Redactor};

/// The keys that protect secrets: sealing of stored intent, and the keyed
/// digest of secret arguments in the request fingerprint.
#[derive(Debug, Clone, Default)]
pub(crate) struct Keys {
    pub(crate) keyring: Option<Arc<Keyring>>,
    pub(crate) fingerprint: Option<Arc<FingerprintKey>>,
}

/// Who one call is: what every round of it needs.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub(crate) operation_id: String,
    /// The canonical arguments, secrets revealed; every callback gets its
    /// own clone.
    pub(crate) arguments: Value,
    /// Scrubs the call's secrets from what is written, when it has any.
    pub(crate) redactor: Option<Arc<Redactor>>,
    /// The arguments as the ledger may store them (secrets and redacted
    /// fields replaced by the marker), when they differ from `arguments`.
    pub(crate) redacted: Option<Value>,
    /// What each claim of the call is charged (docs/approval.md#budgets).
    pub(crate) budgets: Vec<BudgetCharge>,
}

/// A call's identity and the operation its first round prepares, derived
/// from its arguments before anything is written.
#[derive(Debug, Clone)]
pub(crate) struct Identified {
    pub(crate) identity: Identity,
    pub(crate) operation: NewOperation,
}

impl Identity {
    /// What an approver is shown of the call: its arguments as the ledger
    /// may store them.
    pub(crate) fn shown(&self) -> Value {
        self.redacted
            .clone()
            .unwrap_or_else(|| self.arguments.clone())
    }
}

impl Identified {
    /// Marks the operation as waiting for a human's approval when it is
    /// created, with what the approver is shown of it.
    pub(crate) fn require_approval(&mut self) {
        self.operation.requires_approval = true;
        if self.operation.redacted_arguments.is_none() {
            self.operation.redacted_arguments = Some(self.identity.shown());
        }
    }

    /// True when these arguments derive the stored `record`: its operation
    /// id and its request fingerprint.
    pub(crate) fn describes(&self, record: &EffectRecord) -> bool {
        self.identity.operation_id == record.operation_id
            && self
                .operation
                .fingerprint
                .matches(&record.request_fingerprint)
    }
}

/// Derives the identity of a call (docs/spec.md §5 step 1). Nothing is written.
///
/// The arguments are serialized twice: once revealing every
/// [`Secret`](effect_core::secret::Secret) (what the handler, the probe and the
/// contract's callbacks see, and what sealed intent holds) and once as the
/// ledger may store them, secrets and the contract's redacted fields
/// replaced by a marker. When the two differ the request fingerprint is
/// taken over the redacted form with a digest of each secret.
pub(crate) fn identify<A: Serialize + ?Sized>(
    contract: &EffectContract,
    arguments: &A,
    form: FingerprintForm,
    keys: &Keys,
) -> Result<Identified, ExecError> {
    derive(contract, arguments, form, keys, Stored::New)
}

/// What [`derive`] knows of the operation it derives.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stored<'a> {
    /// Maybe not recorded yet: everything is derived, and the intent sealed
    /// for the operation the first round may create.
    New,
    /// Recorded with its intent (a recovery worker's dispatch): everything
    /// is derived, and the intent, stored already, is not sealed again.
    Recorded,
    /// Recorded under this id by an earlier version of the contract: the
    /// id is not derived again, and the intent is not sealed.
    RecordedAs(&'a str),
}

/// [`identify`] for an operation `stored` says may be recorded already.
pub(crate) fn derive<A: Serialize + ?Sized>(
    contract: &EffectContract,
    arguments: &A,
    form: FingerprintForm,
    keys: &Keys,
    stored: Stored<'_>,
) -> Result<Identified, ExecError> {
    let invalid = |source| ExecError::InvalidArguments { source };
    let (revealed, any_secret) = effect_core::secret::reveal_counted(|| to_json_value(arguments));
    let revealed = revealed.map_err(invalid)?;
    // Without a Secret field or a redaction path the two forms are one:
    // the common call serializes once.
    let marked = if any_secret || !contract.redaction().is_empty() {
        Some(to_json_value(arguments).map_err(invalid)?)
    } else {
        None
    };
    derive_forms(contract, revealed, marked.as_ref(), form, keys, stored)
}

/// [`derive`] from the arguments' two forms: `revealed`, secrets in clear,
/// and `marked`, each [`Secret`](effect_core::secret::Secret) field as the
/// marker (`None`: the same as `revealed`).
pub(crate) fn derive_forms(
    contract: &EffectContract,
    revealed: Value,
    marked: Option<&Value>,
    form: FingerprintForm,
    keys: &Keys,
    stored: Stored<'_>,
) -> Result<Identified, ExecError> {
    let redacted = marked
        .map(|marked| contract.redaction().apply(marked))
        .filter(|redacted| *redacted != revealed);
    let secrets = redacted.is_some();
    let operation_id = match stored {
        Stored::RecordedAs(id) => id.to_owned(),
        Stored::New | Stored::Recorded => operation_id_of(contract, &revealed)?,
    };
    let key = provider_key_of(contract, &revealed)?;
    let budgets = budget_charges_of(contract, &revealed)?;
    let requires_approval =
        call_guarded(|| contract.approval_required_for(&revealed)).map_err(|source| {
            ExecError::Contract {
                contract: contract.name().to_owned(),
                source,
            }
        })?;
    let fingerprint = match &redacted {
        Some(redacted) => RequestFingerprint::of_value(&crate::secrets::fingerprint_view(
            &revealed,
            redacted,
            keys.fingerprint.as_deref(),
        )),
        None => RequestFingerprint::of_value(&revealed),
    };
    let intent = if contract.stores_intent() && matches!(stored, Stored::New) {
        Some(match &keys.keyring {
            Some(keyring) => {
                keyring
                    .seal(&revealed, &operation_id)
                    .map_err(|source| ExecError::Seal {
                        operation_id: operation_id.clone(),
                        source,
                    })?
            }
            None if secrets => {
                return Err(ExecError::SecretsNeedSealing {
                    contract: contract.name().to_owned(),
                });
            }
            None => revealed.clone(),
        })
    } else {
        None
    };
    let mut identified = Identified {
        identity: Identity {
            operation_id,
            redactor: redacted
                .as_ref()
                .map(|redacted| Arc::new(Redactor::new(&revealed, redacted))),
            redacted,
            arguments: revealed,
            budgets,
        },
        operation: NewOperation::new(
            contract.name().to_owned(),
            contract.version().to_owned(),
            fingerprint.with_form(form),
        )
        .with_provider_idempotency_key(key)
        .with_intent(intent)
        .with_requires_approval(requires_approval)
        .with_contract_terms(Some(ContractTerms::of(contract))),
    };
    if requires_approval {
        identified.require_approval();
    }
    Ok(identified)
}

/// The operation id `contract` derives from the canonical `arguments`: the
/// one derivation, a panicking callback an error like a failing one.
pub(crate) fn operation_id_of(
    contract: &EffectContract,
    arguments: &Value,
) -> Result<String, ExecError> {
    call_guarded(|| contract.operation_id(arguments)).map_err(|source| ExecError::Contract {
        contract: contract.name().to_owned(),
        source,
    })
}

/// What a call with the canonical `arguments` is charged to each budget of
/// `contract`, its scope and cost callbacks guarded like [`operation_id_of`].
pub(crate) fn budget_charges_of(
    contract: &EffectContract,
    arguments: &Value,
) -> Result<Vec<BudgetCharge>, ExecError> {
    contract
        .budgets()
        .iter()
        .map(|budget| {
            call_guarded(|| budget.charge(arguments)).map_err(|source| ExecError::Contract {
                contract: contract.name().to_owned(),
                source,
            })
        })
        .collect()
}

/// The provider idempotency key `contract` derives from the canonical
/// `arguments`, guarded like [`operation_id_of`].
pub(crate) fn provider_key_of(
    contract: &EffectContract,
    arguments: &Value,
) -> Result<Option<String>, ExecError> {
    call_guarded(|| contract.provider_idempotency_key(arguments)).map_err(|source| {
        ExecError::Contract {
            contract: contract.name().to_owned(),
            source,
        }
    })
}
