//! Who is asking: hashed bearer tokens, browser sessions made from them, a
//! trusted proxy header, and the CSRF token of each.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Mutex;

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, COOKIE};
use sha2::{Digest as _, Sha256};

use crate::console::config::{AuthConfig, Role};
use crate::error::ConsoleError;

/// The session cookie's name.
pub(crate) const SESSION_COOKIE: &str = "effect_console_session";

/// How a request proved who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Via {
    /// No authentication is configured: a read-only console on loopback.
    Nobody,
    /// `Authorization: Bearer`: not sent by a browser on its own, so no CSRF
    /// token is needed.
    Bearer,
    /// The session cookie a login made.
    Session(String),
    /// The trusted header, from the proxy's address.
    Header,
}

/// An authenticated operator (or, without authentication, nobody).
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    /// Recorded as the actor of every action.
    pub(crate) name: String,
    pub(crate) role: Role,
    pub(crate) via: Via,
}

impl Identity {
    /// Whether this identity may take `action`.
    pub(crate) fn may(&self, action: &str) -> bool {
        match (&self.via, self.role) {
            (Via::Nobody, _) => false,
            (_, Role::Operator) => true,
            (_, Role::Approver) => matches!(action, "approve" | "deny"),
        }
    }
}

/// The configured ways in, and the sessions made since start.
#[derive(Debug)]
pub(crate) struct Auth {
    /// SHA-256 of each token, hex → (identity, role).
    tokens: HashMap<String, (String, Role)>,
    header: Option<(axum::http::HeaderName, IpAddr, Role)>,
    /// Random per process: keys the CSRF tokens.
    secret: String,
    sessions: Mutex<HashMap<String, (String, Role)>>,
    configured: bool,
}

impl Auth {
    /// Reads the tokens file, when one is configured.
    pub(crate) fn new(config: &AuthConfig) -> Result<Auth, ConsoleError> {
        let tokens = match &config.tokens_file {
            Some(path) => read_tokens(path)?,
            None => HashMap::new(),
        };
        let header = match &config.trusted_header {
            Some(header) => Some((
                axum::http::HeaderName::from_bytes(header.name.as_bytes()).map_err(|_| {
                    ConsoleError::Invalid {
                        why: format!("{:?} is not an HTTP header name", header.name),
                    }
                })?,
                header.proxy,
                header
                    .role
                    .as_deref()
                    .and_then(Role::parse)
                    .unwrap_or(Role::Operator),
            )),
            None => None,
        };
        Ok(Auth {
            tokens,
            header,
            secret: format!("{}{}", uuid::Uuid::new_v4(), uuid::Uuid::new_v4()),
            sessions: Mutex::new(HashMap::new()),
            configured: config.tokens_file.is_some() || config.trusted_header.is_some(),
        })
    }

    /// Whether tokens are configured (and so the login page is offered).
    pub(crate) fn has_tokens(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Who sent a request with `headers` from `peer`; `None` when it proved
    /// nothing and authentication is configured.
    pub(crate) fn identify(&self, headers: &HeaderMap, peer: Option<IpAddr>) -> Option<Identity> {
        if !self.configured {
            return Some(Identity {
                name: "anonymous".to_owned(),
                role: Role::Operator,
                via: Via::Nobody,
            });
        }
        if let Some(token) = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        {
            // A wrong bearer token is refused, whatever else the request holds.
            return self.token(token.trim()).map(|(name, role)| Identity {
                name,
                role,
                via: Via::Bearer,
            });
        }
        if let Some(session) = cookie(headers, SESSION_COOKIE) {
            let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((name, role)) = sessions.get(session) {
                return Some(Identity {
                    name: name.clone(),
                    role: *role,
                    via: Via::Session(session.to_owned()),
                });
            }
        }
        if let Some((name, proxy, role)) = &self.header
            && peer == Some(*proxy)
            && let Some(user) = headers.get(name).and_then(|v| v.to_str().ok())
            && !user.trim().is_empty()
        {
            return Some(Identity {
                name: user.trim().to_owned(),
                role: *role,
                via: Via::Header,
            });
        }
        None
    }

    /// The identity a token names.
    pub(crate) fn token(&self, token: &str) -> Option<(String, Role)> {
        self.tokens.get(&sha256_hex(token.as_bytes())).cloned()
    }

    /// A new session for a valid token: its id, for the cookie.
    pub(crate) fn login(&self, token: &str) -> Option<String> {
        let (name, role) = self.token(token)?;
        let id = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), (name, role));
        Some(id)
    }

    /// Ends a session.
    pub(crate) fn logout(&self, session: &str) {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session);
    }

    /// The CSRF token forms of `identity` carry: derived from this process's
    /// secret and the session (or the proxy's identity), so another site
    /// cannot know it.
    pub(crate) fn csrf(&self, identity: &Identity) -> String {
        let bound = match &identity.via {
            Via::Session(id) => format!("session:{id}"),
            Via::Header => format!("user:{}", identity.name),
            Via::Bearer | Via::Nobody => String::new(),
        };
        sha256_hex(format!("{}\n{bound}", self.secret).as_bytes())
    }

    /// Whether a form of `identity` carries the right CSRF token. A bearer
    /// request needs none: a browser never sends one on its own.
    pub(crate) fn csrf_ok(&self, identity: &Identity, given: Option<&str>) -> bool {
        match identity.via {
            Via::Bearer => true,
            Via::Nobody => false,
            Via::Session(_) | Via::Header => given.is_some_and(|g| g == self.csrf(identity)),
        }
    }
}

/// The lowercase hex SHA-256 of `bytes`, as the tokens file holds it.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for byte in digest.iter() {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// The value of cookie `name`.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name).then_some(value)
        })
}

/// Reads `sha256:<hex> <identity> [role]` lines; `#` starts a comment.
fn read_tokens(path: &Path) -> Result<HashMap<String, (String, Role)>, ConsoleError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConsoleError::ReadTokens {
        path: path.to_owned(),
        source,
    })?;
    let mut tokens = HashMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let invalid = |why: &str| ConsoleError::Tokens {
            path: path.to_owned(),
            line: number + 1,
            why: why.to_owned(),
        };
        let mut fields = line.split_whitespace();
        let hash = fields
            .next()
            .and_then(|h| h.strip_prefix("sha256:"))
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| invalid("expected sha256:<64 hex digits> first"))?;
        let name = fields
            .next()
            .ok_or_else(|| invalid("expected an identity after the hash"))?;
        let role = match fields.next() {
            None => Role::Operator,
            Some(role) => {
                Role::parse(role).ok_or_else(|| invalid("the role is operator or approver"))?
            }
        };
        if fields.next().is_some() {
            return Err(invalid(
                "expected: sha256:<hex> <identity> [operator|approver]",
            ));
        }
        tokens.insert(hash.to_ascii_lowercase(), (name.to_owned(), role));
    }
    if tokens.is_empty() {
        return Err(ConsoleError::Tokens {
            path: path.to_owned(),
            line: 0,
            why: "it holds no token".to_owned(),
        });
    }
    Ok(tokens)
}
