//! The console's configuration file (TOML, docs/console.md#configuration).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::ConsoleError;

/// What `serve --config PATH` reads. Every section is optional: without a
/// file the console is read-only and unauthenticated (loopback only).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ConsoleConfig {
    /// Whether operators may act (approve, confirm, ...) from the console.
    #[serde(default)]
    pub actions: Actions,
    /// Who may use the console.
    #[serde(default)]
    pub auth: AuthConfig,
    /// Per contract name: a URL template of the provider's own dashboard for
    /// an operation, with `{provider_operation_id}`, `{operation_id}` and
    /// `{provider_idempotency_key}` placeholders (percent-encoded). The
    /// console only links to it; nothing is fetched.
    #[serde(default)]
    pub dashboards: BTreeMap<String, String>,
}

/// `[actions]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Actions {
    /// Off by default: a console without it never writes to the ledger.
    #[serde(default)]
    pub enabled: bool,
}

/// `[auth]`: hashed bearer tokens, a trusted proxy header, or both.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AuthConfig {
    /// A file of `sha256:<hex> <identity> <role>` lines (docs/console.md).
    pub tokens_file: Option<PathBuf>,
    /// The identity an authenticating reverse proxy sets.
    pub trusted_header: Option<TrustedHeader>,
}

/// `[auth.trusted_header]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TrustedHeader {
    /// The header holding the operator's identity (`X-Forwarded-User`).
    pub name: String,
    /// The proxy's address: the header is believed only on connections
    /// from it.
    pub proxy: IpAddr,
    /// The role of every identity the header names: `operator` (default)
    /// or `approver`.
    #[serde(default)]
    pub role: Option<String>,
}

impl ConsoleConfig {
    /// Reads and checks the file at `path`.
    ///
    /// # Errors
    ///
    /// [`ConsoleError::Config`] when it cannot be read or parsed.
    pub fn load(path: &Path) -> Result<Self, ConsoleError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConsoleError::ReadConfig {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|why| ConsoleError::Config {
            path: path.to_owned(),
            why,
        })
    }

    /// Parses a configuration from its TOML text.
    ///
    /// # Errors
    ///
    /// The parser's message when the text is not a configuration.
    pub fn parse(text: &str) -> Result<Self, String> {
        let config: ConsoleConfig = toml::from_str(text).map_err(|err| err.message().to_owned())?;
        if let Some(header) = &config.auth.trusted_header {
            if axum::http::HeaderName::from_bytes(header.name.as_bytes()).is_err() {
                return Err(format!("{:?} is not an HTTP header name", header.name));
            }
            if let Some(role) = &header.role {
                Role::parse(role)
                    .ok_or_else(|| format!("unknown role {role:?}: operator or approver"))?;
            }
        }
        Ok(config)
    }

    /// Whether any authentication is configured.
    pub fn authenticates(&self) -> bool {
        self.auth.tokens_file.is_some() || self.auth.trusted_header.is_some()
    }
}

/// What an identity may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Every action.
    Operator,
    /// Approve and deny only.
    Approver,
}

impl Role {
    pub(crate) fn parse(text: &str) -> Option<Role> {
        match text {
            "operator" => Some(Role::Operator),
            "approver" => Some(Role::Approver),
            _ => None,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Operator => "operator",
            Role::Approver => "approver",
        }
    }
}
