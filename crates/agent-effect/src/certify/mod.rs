//! `agent-effect certify`: the certification of `effect_testkit::certify`
//! against an HTTP endpoint or an MCP server the command line describes.

mod http;
mod mcp;
mod template;

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use effect_core::{CallbackError, EffectContract, OutcomeProbeResult, ProbeStatus};
use effect_exec::secrets::{FingerprintKey, Keyring, SealingKey};
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
    /// `--conflicting-arguments`, for the conflicting-provider fault.
    conflicting: Option<Value>,
    probe_match: Vec<String>,
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
        let render = |flag: &str, template: &str, fault: CertifyFault| -> anyhow::Result<Value> {
            let text = template
                .replace("{run}", &run)
                .replace("{fault}", fault.name());
            let value: Value = serde_json::from_str(&text)
                .with_context(|| format!("{flag} is not JSON: {text}"))?;
            if !value.is_object() {
                bail!("{flag} must be a JSON object, not {text}");
            }
            Ok(value)
        };
        let mut arguments = HashMap::new();
        for &fault in &faults {
            arguments.insert(fault, render("--arguments", &args.arguments, fault)?);
        }
        let conflicting = args
            .conflicting_arguments
            .as_deref()
            .map(|text| {
                render(
                    "--conflicting-arguments",
                    text,
                    CertifyFault::ConflictingProvider,
                )
            })
            .transpose()?;
        if !args.faults.is_empty()
            && args.faults.contains(&CertifyFault::ConflictingProvider)
            && conflicting.is_none()
        {
            bail!(
                "the conflicting-provider fault needs --conflicting-arguments: a request that contradicts --arguments under the same operation (the same invoice, another amount)"
            );
        }
        if !args.probe_match.is_empty() && args.probe_url.is_none() && args.probe_tool.is_none() {
            bail!("--probe-match needs a probe: give --probe-url or --probe-tool");
        }
        for name in &args.probe_match {
            if arguments.values().any(|a| a.get(name).is_none()) {
                bail!("--probe-match {name}: --arguments has no {name:?} to compare");
            }
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
            conflicting,
            probe_match: args.probe_match.clone(),
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
        if let Some(conflicting) = &spec.conflicting {
            let theirs = spec
                .operation_id
                .render(conflicting, None)
                .map_err(|e| anyhow!("--conflicting-arguments: --operation-id: {e}"))?;
            let fault = CertifyFault::ConflictingProvider;
            let ours = render("--arguments", &args.arguments, fault)?;
            let ours = spec
                .operation_id
                .render(&ours, None)
                .map_err(|e| anyhow!("--operation-id: {e}"))?;
            if theirs != ours {
                bail!(
                    "--conflicting-arguments name operation {theirs:?}, not {ours:?}: keep the business identity of --arguments and change what the request says"
                );
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
            let fields = self.probe_match.clone();
            builder = builder.outcome_probe(move |arguments: &Value, key: Option<&str>| {
                Ok(matched(probe(arguments, key)?, arguments, &fields))
            });
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
        let handler = Arc::new(handler);
        let dispatch = Arc::clone(&handler);
        let mut certification = Certification::new(contract, move |arguments, context| {
            dispatch(arguments, context)
        })
        .arguments(move |fault| arguments.get(&fault).cloned().unwrap_or(Value::Null))
        .faults(self.faults.clone())
        .deadline(self.deadline);
        if let Some(conflicting) = self.conflicting.clone() {
            let name = self.name.clone();
            certification = certification.conflicting(move |_arguments| {
                // Another client's request: its own operation, no provider key.
                let context = HandlerContext::new("certify:another-client", &*name, "1", 1, None);
                handler(conflicting.clone(), context)?;
                Ok(())
            });
        }
        if let Some(keyring) = &self.keyring {
            certification = certification.keyring(keyring.clone());
        }
        if let Some(key) = &self.fingerprint_key {
            certification = certification.fingerprint_key(key.clone());
        }
        certification
    }
}

/// `--probe-match`: an effect found whose answer differs from the request
/// in one of `fields` is not the operation's own but a conflict.
fn matched(found: OutcomeProbeResult, arguments: &Value, fields: &[String]) -> OutcomeProbeResult {
    if found.status != ProbeStatus::Committed {
        return found;
    }
    let output = found.output.as_ref().unwrap_or(&Value::Null);
    let Some(field) = fields.iter().find(|f| output.get(f) != arguments.get(f)) else {
        return found;
    };
    let mut conflict = OutcomeProbeResult::conflict()
        .evidence("field", field.as_str())
        .evidence("requested", arguments[field].clone())
        .evidence("found", output.get(field).cloned().unwrap_or(Value::Null));
    for (key, value) in found.evidence {
        conflict.evidence.entry(key).or_insert(value);
    }
    conflict
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
