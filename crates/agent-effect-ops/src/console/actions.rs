//! The console's actions: each form becomes the command the CLI would run,
//! with the authenticated identity as its actor, and runs through the same
//! code (`execute::run_on`): the same checks, executor calls and refusals.

use std::sync::Arc;

use axum::http::StatusCode;
use effect_core::Clock;
use serde::Deserialize;

use crate::cli::{AuditArgs, Command, DecisionArgs, RequestArgs};
use crate::error::Exit;
use crate::open::Opened;
use crate::view::Resolution;

/// The actions, by the last segment of their path.
pub(crate) const ACTIONS: [&str; 8] = [
    "confirm",
    "reject",
    "authorize-retry",
    "approve",
    "deny",
    "expire",
    "compensate",
    "cancel",
];

/// Every field any action form sends.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ActionForm {
    #[serde(default)]
    pub(crate) csrf: Option<String>,
    #[serde(default)]
    pub(crate) reason: Option<String>,
    #[serde(default)]
    pub(crate) evidence_reference: Option<String>,
    #[serde(default)]
    pub(crate) output_json: Option<String>,
    #[serde(default)]
    pub(crate) provider_operation_id: Option<String>,
    /// A checkbox: present (`on`) when ticked.
    #[serde(default)]
    pub(crate) handler_stopped: Option<String>,
    #[serde(default)]
    pub(crate) expires: Option<String>,
    #[serde(default)]
    pub(crate) fingerprint: Option<String>,
    /// The attempts the page showed: a dispatch since refuses the action.
    #[serde(default)]
    pub(crate) expect_attempts: Option<String>,
}

/// What an action came to.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

/// The command the CLI would run for `action` on `id` by `actor`, or why
/// the form cannot be one (HTTP 400).
pub(crate) fn command(
    action: &str,
    id: &str,
    actor: &str,
    form: &ActionForm,
) -> Result<Command, String> {
    let text = |value: &Option<String>| value.clone().unwrap_or_default();
    let expect_attempts = match form.expect_attempts.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(n) => Some(
            n.parse::<u32>()
                .map_err(|_| format!("expect_attempts must be a number, not {n:?}"))?,
        ),
    };
    let audit = AuditArgs {
        actor: actor.to_owned(),
        reason: text(&form.reason),
        evidence_reference: text(&form.evidence_reference),
        expect_attempts,
    };
    let decision = DecisionArgs {
        actor: actor.to_owned(),
        reason: text(&form.reason),
    };
    let id = id.to_owned();
    Ok(match action {
        "confirm" => Command::Confirm {
            id,
            output_json: text(&form.output_json),
            provider_operation_id: form
                .provider_operation_id
                .clone()
                .filter(|p| !p.trim().is_empty()),
            ignore_output_shape: false,
            audit,
        },
        "reject" => Command::Reject { id, audit },
        "authorize-retry" => Command::AuthorizeRetry {
            id,
            handler_stopped: form.handler_stopped.as_deref() == Some("on"),
            audit,
        },
        "approve" => Command::Approve {
            id,
            decision,
            expires: crate::cli::parse_duration(
                form.expires
                    .as_deref()
                    .filter(|e| !e.trim().is_empty())
                    .unwrap_or("1h"),
            )?,
            fingerprint: form.fingerprint.clone(),
        },
        "deny" => Command::Deny { id, decision },
        "expire" => Command::Expire { id, audit },
        "compensate" => Command::Compensate {
            id,
            request: RequestArgs {
                actor: actor.to_owned(),
                reason: audit.reason,
                evidence_reference: audit.evidence_reference,
            },
        },
        "cancel" => Command::Cancel { id, audit },
        other => return Err(format!("no action {other:?} in this version")),
    })
}

/// Runs `command` on the ledger: what the CLI prints, or its refusal in its
/// own words with the HTTP status of its exit code.
pub(crate) fn run(opened: &Opened, command: &Command, clock: Arc<dyn Clock>) -> Outcome {
    let mut out = Vec::new();
    match crate::execute::run_on(opened, command, clock, &mut out) {
        Ok(()) => {
            let message = match serde_json::from_slice::<Resolution>(&out) {
                Ok(done) => format!(
                    "{}: done; the operation is now {}{}",
                    done.action.replace('_', " "),
                    done.status,
                    match done.compensation_requested {
                        Some(false) =>
                            " (its compensation had already settled: nothing was written)",
                        _ => "",
                    }
                ),
                Err(_) => "done".to_owned(),
            };
            Outcome {
                status: StatusCode::OK,
                message,
            }
        }
        Err(err) => Outcome {
            status: match Exit::of(&err) {
                Exit::Usage => StatusCode::BAD_REQUEST,
                Exit::NotFound => StatusCode::NOT_FOUND,
                Exit::NotAllowed => StatusCode::CONFLICT,
                Exit::Success | Exit::Failure => StatusCode::INTERNAL_SERVER_ERROR,
            },
            message: format!("refused: {err:#}").replace('\n', " "),
        },
    }
}
