//! Errors of the HTTP effect layer.

/// Why an [`HttpEffect`](crate::HttpEffect) could not be built.
///
/// A request's failure is never one of these: it is a
/// [`HandlerError`](effect_exec::HandlerError) that says what the executor
/// may conclude from it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The TLS configuration (the ring provider, the protocol versions) could not be built.
    #[error("the TLS configuration of the HTTP client cannot be built")]
    Tls {
        /// The rustls error.
        #[source]
        source: rustls::Error,
    },
    /// reqwest refused the client's configuration.
    #[error("the HTTP client cannot be built")]
    Client {
        /// The reqwest error.
        #[source]
        source: reqwest::Error,
    },
    /// A header name is not a valid HTTP header name.
    #[error("{name:?} is not a valid HTTP header name")]
    HeaderName {
        /// The name given.
        name: String,
    },
}
