//! The client's TLS: rustls with the ring provider and the platform's roots.

use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};

use crate::error::HttpError;

/// A rustls client configuration on ring (no OpenSSL, no cmake), trusting
/// the platform's roots; a root that fails to parse is skipped, as
/// browsers do.
pub(crate) fn client_config() -> Result<ClientConfig, HttpError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|source| HttpError::Tls { source })?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
