//! Arguments, contracts and the transport shared by the tests.

use std::sync::Arc;

use effect_exec::{TypedContract, TypedProbe};
use effect_testkit::provider::{Capture, FakePaymentProvider};
use rmcp::service::{RoleClient, RunningService};
use rmcp::{ServerHandler, ServiceExt};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureArgs {
    pub invoice_id: String,
    pub amount_cents: u64,
}

pub fn args(invoice: &str) -> CaptureArgs {
    CaptureArgs {
        invoice_id: invoice.to_owned(),
        amount_cents: 1250,
    }
}

/// How an uncertain outcome can be settled.
#[derive(Clone, Copy, Debug)]
pub enum Reconcile {
    /// An outcome probe that looks the capture up by key.
    Probe,
    /// The provider key is documented to make a resend safe.
    GuaranteedKey,
    /// Nothing: an uncertain outcome stays uncertain.
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
    match reconcile {
        Reconcile::Probe => {
            let provider = Arc::clone(provider);
            builder.outcome_probe(move |_args, key| {
                let key = key.ok_or("no provider key")?;
                Ok(
                    match provider.lookup_by_key(key).map_err(|e| e.to_string())? {
                        Some(capture) => {
                            let id = capture.payment_id.clone();
                            TypedProbe::committed(capture).provider_operation_id(id)
                        }
                        None => TypedProbe::not_committed(),
                    },
                )
            })
        }
        Reconcile::GuaranteedKey => builder.provider_idempotency_guaranteed(true),
        Reconcile::Nothing => builder,
    }
    .build()
    .expect("the contract is well formed")
}

/// Serves `server` on one end of an in-process pipe and connects a client
/// to the other.
pub async fn connect<S: ServerHandler>(server: S) -> RunningService<RoleClient, ()> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    ().serve(client_io).await.expect("the client connects")
}

pub fn committed(provider: &FakePaymentProvider) -> usize {
    provider
        .committed_count()
        .expect("an in-memory provider reads")
}
