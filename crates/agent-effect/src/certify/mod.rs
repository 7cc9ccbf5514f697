//! `agent-effect certify`: the certification of `effect_testkit::certify`
//! against an HTTP endpoint or an MCP server the command line describes.

mod http;
mod mcp;
mod template;

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use effect_core::{
    CallbackError, EffectContract, FingerprintKey, Keyring, OutcomeProbeResult, SealingKey,
};
use effect_exec::{HandlerContext, HandlerError};
use effect_testkit::certify::{Certification, CertifyFault};
use serde_json::Value;

use crate::cli::{CertifyArgs, Format};
use crate::output::{CliError, Outcome, emit_to};
use template::Template;

/// Runs the certification `args` describe and prints its report.
pub fn run(args: &CertifyArgs, out: &mut dyn Write) -> Result<Outcome, CliError> {
    let spec = Spec::new(args).map_err(CliError::usage)?;
    let report = match (&args.url, &args.mcp_command) {
        (Some(url), _) => http::certification(args, &spec, url)
            .map_err(CliError::usage)?
            .run(),
        (None, Some(command)) => {
            let target = mcp::Target::new(args, command).map_err(CliError::usage)?;
            // A server that does not start, or lacks a tool named, is the
            // command line's mistake.
            target
                .certification(args, &spec)
                .map_err(CliError::usage)?
                .run()
        }
        (None, None) => return Err(CliError::usage(anyhow!("give --url or --mcp-command"))),
    }
    .context("could not run the certification")
    .map_err(CliError::failed)?;
    let text = match args.format {
        Format::Table => report.to_table(),
        Format::Json => {
            let mut json = serde_json::to_string_pretty(&report)
                .context("could not encode the report")
                .map_err(CliError::failed)?;
            json.push('\n');
            json
        }
    };
    emit_to(args.output.as_deref(), &text, out).map_err(CliError::failed)?;
    Ok(if report.failed {
        Outcome::Failed
    } else {
        Outcome::Passed
    })
}

/// The contract and the arguments of every fault, checked before anything runs.
pub(crate) struct Spec {
    name: String,
    arguments: HashMap<CertifyFault, Value>,
    operation_id: Template,
    key: Option<Template>,
    key_guaranteed: bool,
    faults: Vec<CertifyFault>,
    deadline: Duration,
    store_intent: bool,
    redact: Vec<String>,
    keyring: Option<Keyring>,
    fingerprint_key: Option<FingerprintKey>,
}

impl Spec {
    fn new(args: &CertifyArgs) -> anyhow::Result<Self> {
        let faults = if args.faults.is_empty() {
            CertifyFault::ALL.to_vec()
        } else {
            args.faults.clone()
        };
        let run = match &args.run_id {
            Some(run) if run.trim().is_empty() => bail!("--run-id must not be empty"),
            Some(run) => run.clone(),
            None => uuid::Uuid::new_v4().simple().to_string()[..12].to_owned(),
        };
        let mut arguments = HashMap::new();
        for &fault in &faults {
            let text = args
                .arguments
                .replace("{run}", &run)
                .replace("{fault}", fault.name());
            let value: Value = serde_json::from_str(&text)
                .with_context(|| format!("--arguments is not JSON: {text}"))?;
            if !value.is_object() {
                bail!("--arguments must be a JSON object, not {text}");
            }
            arguments.insert(fault, value);
        }
        let identity = |flag: &str, text: &str| -> anyhow::Result<Template> {
            let template = Template::plain(text).map_err(|e| anyhow!("{flag}: {e}"))?;
            if template.names().iter().any(|n| n == "key") {
                bail!("{flag} cannot use {{key}}: it is derived from the arguments alone");
            }
            Ok(template)
        };
        let key_file = |flag: &str, path: &std::path::Path| -> anyhow::Result<String> {
            std::fs::read_to_string(path)
                .with_context(|| format!("{flag}: could not read {}", path.display()))
                .map(|text| text.trim().to_owned())
        };
        let keyring = match &args.sealing_key {
            Some(path) => {
                let key = SealingKey::parse(&key_file("--sealing-key", path)?)
                    .context("--sealing-key")?;
                Some(Keyring::new("certify", key).context("--sealing-key")?)
            }
            None => None,
        };
        let fingerprint_key = match &args.fingerprint_key {
            Some(path) => Some(
                FingerprintKey::parse(&key_file("--fingerprint-key", path)?)
                    .context("--fingerprint-key")?,
            ),
            None => None,
        };
        let spec = Spec {
            name: args.contract_name.clone(),
            store_intent: args.store_intent,
            redact: args.redact.clone(),
            keyring,
            fingerprint_key,
            operation_id: identity("--operation-id", &args.operation_id)?,
            key: args
                .key
                .as_deref()
                .map(|key| identity("--key", key))
                .transpose()?,
            key_guaranteed: args.key_guaranteed,
            deadline: Duration::from_millis(args.deadline_ms),
            arguments,
            faults,
        };
        for arguments in spec.arguments.values() {
            spec.operation_id
                .render(arguments, None)
                .map_err(|e| anyhow!("--operation-id: {e}"))?;
            if let Some(key) = &spec.key {
                key.render(arguments, None)
                    .map_err(|e| anyhow!("--key: {e}"))?;
            }
        }
        Ok(spec)
    }

    /// The contract, with `probe` as its outcome probe.
    fn contract<P>(&self, probe: Option<P>) -> anyhow::Result<EffectContract>
    where
        P: Fn(&Value, Option<&str>) -> Result<OutcomeProbeResult, CallbackError>
            + Send
            + Sync
            + 'static,
    {
        let id = self.operation_id.clone();
        let mut builder = EffectContract::builder(self.name.clone(), move |args| {
            id.render(args, None).map_err(CallbackError::new)
        });
        if let Some(key) = self.key.clone() {
            builder = builder
                .provider_idempotency_key(move |args| {
                    key.render(args, None).map(Some).map_err(CallbackError::new)
                })
                .provider_idempotency_guaranteed(self.key_guaranteed);
        }
        if let Some(probe) = probe {
            builder = builder.outcome_probe(probe);
        }
        builder = builder
            .store_intent(self.store_intent)
            .redact(self.redact.iter().map(String::as_str));
        builder.build().context("the contract is invalid")
    }

    /// The certification of `contract` with `handler`, on these arguments and faults.
    fn certification<H>(&self, contract: EffectContract, handler: H) -> Certification
    where
        H: Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static,
    {
        let arguments = self.arguments.clone();
        let mut certification = Certification::new(contract, handler)
            .arguments(move |fault| arguments.get(&fault).cloned().unwrap_or(Value::Null))
            .faults(self.faults.clone())
            .deadline(self.deadline);
        if let Some(keyring) = &self.keyring {
            certification = certification.keyring(keyring.clone());
        }
        if let Some(key) = &self.fingerprint_key {
            certification = certification.fingerprint_key(key.clone());
        }
        certification
    }
}

/// A count URL or tool that would count by key.
fn refuse_key_in_count(template: &Template, flag: &str) -> anyhow::Result<()> {
    if template.names().iter().any(|n| n == "key") {
        bail!(
            "{flag} cannot use {{key}}: count by the arguments, or a provider that ignores keys hides its duplicates"
        );
    }
    Ok(())
}
