//! A payment tool over the test kit's fake provider, with a lost-acknowledgement fault.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_core::MemoryLedger;
use effect_exec::{EffectExecutor, TypedContract, TypedProbe};
use effect_rig::{EffectCall, EffectTool};
use effect_testkit::provider::{Capture, FakePaymentProvider};
use rig_core::tool::{Tool, ToolContext};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureArgs {
    pub invoice_id: String,
    pub amount_cents: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ToolFailure(String);

/// Captures through the fake provider; the first `lose` responses are lost
/// *after* the provider committed (the lost-acknowledgement fault).
#[derive(Clone)]
pub struct CapturePayment {
    pub provider: Arc<FakePaymentProvider>,
    lose: Arc<AtomicUsize>,
    pub calls: Arc<AtomicUsize>,
}

impl CapturePayment {
    pub fn losing_acks(provider: Arc<FakePaymentProvider>, lose: usize) -> Self {
        CapturePayment {
            provider,
            lose: Arc::new(AtomicUsize::new(lose)),
            calls: Arc::default(),
        }
    }
}

impl Tool for CapturePayment {
    const NAME: &'static str = "capture_payment";
    type Args = CaptureArgs;
    type Output = Capture;
    type Error = ToolFailure;

    fn description(&self) -> String {
        "Capture a payment for an invoice".into()
    }

    fn parameters(&self) -> serde_json::Value {
        effect_rig::parameters::<CaptureArgs>()
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        args: CaptureArgs,
    ) -> Result<Capture, ToolFailure> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let call = context
            .require::<EffectCall>()
            .map_err(|err| ToolFailure(err.to_string()))?;
        let capture = self
            .provider
            .capture(
                &args.invoice_id,
                args.amount_cents,
                call.provider_idempotency_key.as_deref(),
            )
            .map_err(|err| ToolFailure(err.to_string()))?;
        let lost = self
            .lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if lost {
            return Err(ToolFailure("timed out waiting for the provider".into()));
        }
        Ok(capture)
    }
}

/// Which contract the tool runs under.
#[derive(Clone, Copy, Debug)]
pub enum Reconcile {
    /// An outcome probe that looks the capture up by key.
    Probe,
    /// No probe and no guaranteed key: an uncertain outcome stays uncertain.
    Nothing,
}

pub fn contract(
    provider: &Arc<FakePaymentProvider>,
    reconcile: Reconcile,
) -> TypedContract<CaptureArgs, Capture> {
    let builder = TypedContract::<CaptureArgs, Capture>::builder("capture_payment", |args| {
        Ok(format!("invoice:{}:capture", args.invoice_id))
    })
    .provider_idempotency_key(|args| Ok(Some(format!("capture:{}", args.invoice_id))));
    let builder = match reconcile {
        Reconcile::Probe => {
            let provider = Arc::clone(provider);
            builder.outcome_probe(move |_args, key| {
                let key = key.ok_or("no provider key")?;
                Ok(
                    match provider.lookup_by_key(key).map_err(|err| err.to_string())? {
                        Some(capture) => {
                            let id = capture.payment_id.clone();
                            TypedProbe::committed(capture).provider_operation_id(id)
                        }
                        None => TypedProbe::not_committed(),
                    },
                )
            })
        }
        Reconcile::Nothing => builder,
    };
    builder.build().expect("the contract is well formed")
}

pub struct Setup {
    pub tool: EffectTool<CapturePayment>,
    pub provider: Arc<FakePaymentProvider>,
    pub calls: Arc<AtomicUsize>,
    pub executor: EffectExecutor,
}

/// A fresh ledger and provider; the first `lose` acknowledgements are lost.
pub fn setup(reconcile: Reconcile, lose: usize) -> Setup {
    let provider = Arc::new(FakePaymentProvider::new());
    let inner = CapturePayment::losing_acks(Arc::clone(&provider), lose);
    let calls = Arc::clone(&inner.calls);
    let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    let tool = EffectTool::new(inner, contract(&provider, reconcile), executor.clone());
    Setup {
        tool,
        provider,
        calls,
        executor,
    }
}

pub fn committed(provider: &FakePaymentProvider) -> usize {
    provider
        .committed_count()
        .expect("an in-memory provider reads")
}
