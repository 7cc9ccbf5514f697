//! PostgreSQL over TLS: [`SslMode`], the `sslmode` and `sslrootcert` URL
//! parameters, the rustls configuration each mode needs, and [`TlsError`].
//!
//! The `postgres` driver parses only `disable`, `prefer` and `require`, and no
//! `sslrootcert`. So both parameters are taken out of the URL here (URL and
//! `key=value` forms), the rest goes to `postgres::Config`, and the mode and
//! trust roots become a rustls [`ClientConfig`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use effect_core::LedgerError;
use postgres::config::{Host, SslMode as DriverSslMode};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{CertificateError, ClientConfig, RootCertStore};
use tokio_postgres_rustls::MakeRustlsConnect;

mod conninfo;
#[cfg(test)]
mod tests;
mod verify;

use conninfo::split_url;
use verify::{ChainOnly, Unchecked};

/// Whether, and how strictly, a connection uses TLS: libpq's `sslmode`.
///
/// | mode | encrypted | certificate checked |
/// | --- | --- | --- |
/// | `disable` | never | no |
/// | `prefer` (default) | when the server offers TLS, else plain | only with a CA file: signed by it |
/// | `require` | always, or the connection fails | only with a CA file: signed by it |
/// | `verify-ca` | always | signed by the CA file or the platform's roots |
/// | `verify-full` | always | as `verify-ca`, and issued for the host connected to |
///
/// As in libpq, `require` alone protects against eavesdropping but not
/// against an impostor; give a CA file (which makes it `verify-ca`) or use
/// `verify-full` when the network is not trusted.
///
/// ```
/// use effect_ledger_postgres::SslMode;
///
/// let mode: SslMode = "verify-full".parse()?;
/// assert_eq!(mode, SslMode::VerifyFull);
/// assert_eq!(mode.to_string(), "verify-full");
/// assert!("allow".parse::<SslMode>().is_err());
/// # Ok::<(), effect_ledger_postgres::TlsError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it, plain otherwise (the driver's default).
    #[default]
    Prefer,
    /// TLS or no connection.
    Require,
    /// TLS, with a certificate signed by a trusted CA.
    VerifyCa,
    /// TLS, with a certificate signed by a trusted CA and issued for the host.
    VerifyFull,
}

impl SslMode {
    /// The mode as spelled in a URL (`verify-full`).
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn driver(self) -> DriverSslMode {
        match self {
            SslMode::Disable => DriverSslMode::Disable,
            SslMode::Prefer => DriverSslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => DriverSslMode::Require,
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SslMode {
    type Err = TlsError;

    fn from_str(s: &str) -> Result<Self, TlsError> {
        match s {
            "disable" => Ok(SslMode::Disable),
            "prefer" => Ok(SslMode::Prefer),
            "require" => Ok(SslMode::Require),
            "verify-ca" => Ok(SslMode::VerifyCa),
            "verify-full" => Ok(SslMode::VerifyFull),
            other => Err(TlsError::InvalidSslMode {
                value: other.to_owned(),
            }),
        }
    }
}

/// Why a TLS connection could not be set up. It is the source of the
/// [`LedgerError`] that [`PostgresLedger::connect`](crate::PostgresLedger::connect)
/// returns, so a caller can downcast to it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// `sslmode` is not one of the five modes.
    #[error("invalid sslmode {value:?}: use disable, prefer, require, verify-ca or verify-full")]
    InvalidSslMode {
        /// The value given.
        value: String,
    },
    /// The CA file cannot be read.
    #[error("cannot read the TLS CA file {}: check the path given as sslrootcert (or as the TLS CA file option) and its permissions", path.display())]
    CaFileUnreadable {
        /// The file.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The CA file holds no usable certificate.
    #[error("the TLS CA file {} holds no PEM certificate: give the CA's certificate (-----BEGIN CERTIFICATE-----)", path.display())]
    NoCertificateInCaFile {
        /// The file.
        path: PathBuf,
        /// Why a certificate in it was refused, if one was.
        #[source]
        source: Option<rustls::Error>,
    },
    /// `verify-ca` or `verify-full` without a CA file, on a platform with no
    /// trust roots.
    #[error(
        "sslmode={mode} needs trusted CA certificates and the platform has none: give sslrootcert=PATH"
    )]
    NoTrustRoots {
        /// The mode.
        mode: SslMode,
    },
    /// The server answered that it does not speak TLS.
    #[error(
        "the postgres server {host} does not support TLS, but sslmode={mode} requires it: enable ssl on the server, or use sslmode=prefer on a trusted network"
    )]
    ServerRefusedTls {
        /// The host connected to.
        host: String,
        /// The mode.
        mode: SslMode,
    },
    /// The server's certificate was not signed by a trusted CA.
    #[error(
        "the TLS certificate of the postgres server {host} is not signed by {roots}: give sslrootcert the CA that signed the server's certificate"
    )]
    CertificateNotTrusted {
        /// The host connected to.
        host: String,
        /// The trust roots used: the CA file, or the platform's roots.
        roots: String,
        /// The rustls error.
        #[source]
        source: rustls::Error,
    },
    /// The server's certificate is not issued for the host name connected to.
    #[error(
        "the TLS certificate of the postgres server {host} is not valid for that name: connect by a name the certificate lists, or use sslmode=verify-ca"
    )]
    CertificateNameMismatch {
        /// The host connected to.
        host: String,
        /// The rustls error.
        #[source]
        source: rustls::Error,
    },
    /// The server's certificate was refused for another reason (expired,
    /// not yet valid, wrong usage, ...).
    #[error("the TLS certificate of the postgres server {host} was refused")]
    CertificateRejected {
        /// The host connected to.
        host: String,
        /// The rustls error.
        #[source]
        source: rustls::Error,
    },
    /// The TLS handshake failed.
    #[error("the TLS handshake with the postgres server {host} failed")]
    Handshake {
        /// The host connected to.
        host: String,
        /// The rustls error.
        #[source]
        source: rustls::Error,
    },
    /// The TLS configuration could not be built.
    #[error("cannot set up TLS")]
    Setup {
        /// The rustls error.
        #[source]
        source: rustls::Error,
    },
}

/// Where a ledger connects, and how: the driver's config and the TLS
/// connector its mode needs.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) config: postgres::Config,
    connector: Connector,
    mode: SslMode,
    roots: String,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The config holds the password: show only the mode.
        f.debug_struct("Target")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

#[derive(Clone)]
enum Connector {
    Plain,
    Rustls(MakeRustlsConnect),
}

/// Which CA certificates a connection trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    /// No CA: the certificate is not checked.
    Unchecked,
    File(PathBuf),
    Platform,
}

impl Target {
    /// Parses `url`, taking `sslmode` and `sslrootcert` out of it (they win
    /// over `ssl_mode` and `tls_ca_file`, the options'), and builds the TLS
    /// configuration. Reads the CA file, and contacts nothing.
    pub(crate) fn new(
        url: &str,
        ssl_mode: SslMode,
        tls_ca_file: Option<&Path>,
    ) -> Result<Target, LedgerError> {
        let invalid = |err: TlsError| LedgerError::invalid_input(effect_core::error_chain(&err));
        let split = split_url(url).map_err(|message| {
            LedgerError::invalid_input(format!("invalid postgres connection url: {message}"))
        })?;
        let mode = match &split.sslmode {
            Some(value) => value.parse().map_err(invalid)?,
            None => ssl_mode,
        };
        let ca = match split.sslrootcert {
            Some(path) => Some(PathBuf::from(path)),
            None => tls_ca_file.map(Path::to_path_buf),
        };
        let mut config: postgres::Config = split.rest.parse().map_err(|err| {
            LedgerError::invalid_input(format!("invalid postgres connection url: {err}"))
        })?;
        config.ssl_mode(mode.driver());
        let roots = match (mode, ca) {
            (SslMode::Disable, _) => Roots::Unchecked,
            // libpq's `sslrootcert=system`: the platform's trust roots.
            (_, Some(path)) if path.as_os_str() == "system" => Roots::Platform,
            (_, Some(path)) => Roots::File(path),
            (SslMode::VerifyCa | SslMode::VerifyFull, None) => Roots::Platform,
            (SslMode::Prefer | SslMode::Require, None) => Roots::Unchecked,
        };
        let connector = match mode {
            SslMode::Disable => Connector::Plain,
            _ => Connector::Rustls(MakeRustlsConnect::new(
                client_config(mode, &roots).map_err(invalid)?,
            )),
        };
        let roots = match roots {
            Roots::Unchecked => "no CA (the certificate is not checked)".to_owned(),
            Roots::File(path) => format!("the CA in {}", path.display()),
            Roots::Platform => "a CA the platform trusts".to_owned(),
        };
        Ok(Target {
            config,
            connector,
            mode,
            roots,
        })
    }

    /// Opens one connection.
    pub(crate) fn connect(&self) -> Result<postgres::Client, postgres::Error> {
        match &self.connector {
            Connector::Plain => self.config.connect(postgres::NoTls),
            Connector::Rustls(tls) => self.config.connect(tls.clone()),
        }
    }

    /// The TLS failure behind a connection error, if it is one.
    pub(crate) fn tls_failure(&self, err: &postgres::Error) -> Option<TlsError> {
        let host = self.host();
        let mut source = std::error::Error::source(err);
        while let Some(cause) = source {
            let rustls_error = cause
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                .or_else(|| cause.downcast_ref::<rustls::Error>());
            if let Some(rustls_error) = rustls_error {
                let source = rustls_error.clone();
                return Some(match rustls_error {
                    rustls::Error::InvalidCertificate(
                        CertificateError::UnknownIssuer | CertificateError::BadSignature,
                    ) => TlsError::CertificateNotTrusted {
                        host,
                        roots: self.roots.clone(),
                        source,
                    },
                    rustls::Error::InvalidCertificate(
                        CertificateError::NotValidForName
                        | CertificateError::NotValidForNameContext { .. },
                    ) => TlsError::CertificateNameMismatch { host, source },
                    rustls::Error::InvalidCertificate(_) => {
                        TlsError::CertificateRejected { host, source }
                    }
                    _ => TlsError::Handshake { host, source },
                });
            }
            // The driver's own words when the server answers "no TLS"; it
            // has no error kind for it.
            if cause.to_string() == "server does not support TLS" {
                return Some(TlsError::ServerRefusedTls {
                    host,
                    mode: self.mode,
                });
            }
            source = cause.source();
        }
        None
    }

    /// The hosts connected to, for messages.
    fn host(&self) -> String {
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .map(|host| match host {
                Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        if hosts.is_empty() {
            "localhost".to_owned()
        } else {
            hosts.join(",")
        }
    }
}

/// The rustls configuration for `mode` with these trust roots.
fn client_config(mode: SslMode, roots: &Roots) -> Result<ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Setup { source })?;
    let store = match roots {
        Roots::Unchecked => {
            let verifier = Arc::new(Unchecked {
                algorithms: provider.signature_verification_algorithms,
            });
            return Ok(builder
                .dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_no_client_auth());
        }
        Roots::File(path) => file_roots(path)?,
        Roots::Platform => platform_roots(mode)?,
    };
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
        .build()
        .map_err(|err| TlsError::Setup {
            source: rustls::Error::General(err.to_string()),
        })?;
    Ok(if mode == SslMode::VerifyFull {
        builder.with_webpki_verifier(webpki).with_no_client_auth()
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly { inner: webpki }))
            .with_no_client_auth()
    })
}

/// The certificates of a PEM file.
fn file_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let pem = std::fs::read(path).map_err(|source| TlsError::CaFileUnreadable {
        path: path.to_owned(),
        source,
    })?;
    let mut store = RootCertStore::empty();
    let mut refused = None;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let Ok(cert) = cert else {
            continue;
        };
        if let Err(err) = store.add(cert) {
            refused = Some(err);
        }
    }
    if store.is_empty() {
        return Err(TlsError::NoCertificateInCaFile {
            path: path.to_owned(),
            source: refused,
        });
    }
    Ok(store)
}

/// The platform's trust roots; unreadable ones are left out.
fn platform_roots(mode: SslMode) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    let (added, _ignored) =
        store.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if added == 0 {
        return Err(TlsError::NoTrustRoots { mode });
    }
    Ok(store)
}
