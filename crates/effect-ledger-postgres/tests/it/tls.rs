//! PostgreSQL over TLS: each `sslmode`, a CA file from the URL or the
//! options, and the errors a wrong setup gets. The server's tests need a
//! server with TLS and the CA that signed its certificate; the setup errors
//! need no server (a loopback listener stands in where one is contacted).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use effect_core::{EffectLedger, EffectLedgerExt as _, LedgerError, LedgerErrorKind};
use effect_ledger_postgres::{PostgresLedger, PostgresOptions, SslMode, TlsError};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

use crate::support::{TestResult, TestSchema, new_operation};

/// The server, its CA, and a fresh schema; `None` after saying the test skipped.
fn server(test: &str) -> Result<Option<(TestSchema, PathBuf)>, Box<dyn std::error::Error>> {
    let Some((url, ca)) = effect_test_support::servers::postgres_tls(test) else {
        return Ok(None);
    };
    Ok(Some((TestSchema::new(&url, test)?, ca)))
}

/// `url` with URL parameters added (`k=v&k=v`), in either connection-string form.
fn with_params(url: &str, params: &[(&str, &str)]) -> String {
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let mut out = url.to_owned();
    for (i, (key, value)) in params.iter().enumerate() {
        if is_url {
            let sep = if i == 0 && !url.contains('?') {
                '?'
            } else {
                '&'
            };
            let value = utf8_percent_encode(value, NON_ALPHANUMERIC);
            out.push_str(&format!("{sep}{key}={value}"));
        } else {
            out.push_str(&format!(
                " {key}='{}'",
                value.replace('\\', "\\\\").replace('\'', "\\'")
            ));
        }
    }
    out
}

/// The server's address in the `key=value` form, connecting to `host`
/// (a name the certificate may or may not list) at the server's address.
fn key_value(url: &str, host: &str) -> Result<String, Box<dyn std::error::Error>> {
    let config: postgres::Config = url.parse()?;
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let mut s = format!("host={host} hostaddr=127.0.0.1 port={port}");
    if let Some(user) = config.get_user() {
        s.push_str(&format!(" user='{user}'"));
    }
    if let Some(password) = config.get_password() {
        s.push_str(&format!(
            " password='{}'",
            String::from_utf8_lossy(password)
        ));
    }
    if let Some(dbname) = config.get_dbname() {
        s.push_str(&format!(" dbname='{dbname}'"));
    }
    Ok(s)
}

/// Opens the ledger through `url`, checks that the session is encrypted as
/// `encrypted` says, and that an operation round-trips.
fn check_connects(
    schema: &TestSchema,
    url: &str,
    options: PostgresOptions,
    encrypted: bool,
) -> TestResult {
    let ledger = PostgresLedger::connect(url, options)?;
    assert_eq!(ledger.encrypted()?, encrypted, "{url}");
    let prepared = ledger.prepare("op-1", &new_operation(1))?;
    let read = ledger.get("op-1")?.ok_or("op-1 was not stored")?;
    assert_eq!(read.status, prepared.status);
    assert_eq!(read.request_fingerprint, prepared.request_fingerprint);
    drop(ledger);
    // The next check starts from an empty schema.
    schema
        .admin()?
        .batch_execute(&format!("DROP SCHEMA {} CASCADE", schema.q()))?;
    Ok(())
}

/// The error of a connect that must fail, with its kind checked.
fn refused(
    result: Result<PostgresLedger, LedgerError>,
) -> Result<LedgerError, Box<dyn std::error::Error>> {
    let err = match result {
        Ok(ledger) => return Err(format!("connected, but should not have: {ledger:?}").into()),
        Err(err) => err,
    };
    assert_eq!(err.kind(), LedgerErrorKind::Backend, "{err}");
    Ok(err)
}

/// The TLS error behind a ledger error (its source).
fn tls_error(err: &LedgerError) -> Result<&TlsError, Box<dyn std::error::Error>> {
    std::error::Error::source(err)
        .and_then(|source| source.downcast_ref::<TlsError>())
        .ok_or_else(|| format!("the source is not a TlsError: {err:?}").into())
}

/// A CA certificate (PEM, in `dir`) that signed nothing the server holds.
fn foreign_ca(dir: &Path) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "impostor CA");
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    let path = dir.join("impostor-ca.crt");
    std::fs::write(&path, cert.pem())?;
    Ok(path)
}

fn options(schema: &TestSchema) -> PostgresOptions {
    schema.options().connect_timeout(Duration::from_secs(5))
}

#[test]
fn verify_full_with_the_ca_file_encrypts_the_session() -> TestResult {
    let Some((schema, ca)) = server("verify_full_with_the_ca_file_encrypts_the_session")? else {
        return Ok(());
    };
    let ca = ca.to_string_lossy();
    let url = with_params(
        &schema.url,
        &[("sslmode", "verify-full"), ("sslrootcert", &ca)],
    );
    check_connects(&schema, &url, options(&schema), true)?;
    // A plain client for admin SQL takes the same URL, and is encrypted too.
    let mut client = effect_ledger_postgres::connect_client(&url, &options(&schema))?;
    let row = client.query_one(
        "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        &[],
    )?;
    assert!(row.try_get::<_, bool>(0)?);
    // The same in the key=value form, by a name the certificate lists.
    let kv = with_params(
        &key_value(&schema.url, "localhost")?,
        &[("sslmode", "verify-full"), ("sslrootcert", &ca)],
    );
    check_connects(&schema, &kv, options(&schema), true)
}

#[test]
fn the_options_give_the_mode_and_ca_file_and_the_url_wins() -> TestResult {
    let Some((schema, ca)) = server("the_options_give_the_mode_and_ca_file_and_the_url_wins")?
    else {
        return Ok(());
    };
    let by_options = options(&schema)
        .ssl_mode(SslMode::VerifyFull)
        .tls_ca_file(&ca);
    check_connects(&schema, &schema.url, by_options, true)?;

    // The options name an impostor CA; the URL's sslrootcert wins.
    let dir = tempfile::tempdir()?;
    let impostor = foreign_ca(dir.path())?;
    let url = with_params(&schema.url, &[("sslrootcert", &ca.to_string_lossy())]);
    let overridden = options(&schema)
        .ssl_mode(SslMode::VerifyFull)
        .tls_ca_file(&impostor);
    check_connects(&schema, &url, overridden, true)?;
    // And the URL's sslmode wins over the options' mode.
    let url = with_params(&schema.url, &[("sslmode", "disable")]);
    check_connects(
        &schema,
        &url,
        options(&schema).ssl_mode(SslMode::VerifyFull),
        false,
    )
}

#[test]
fn a_ca_that_did_not_sign_the_certificate_is_refused() -> TestResult {
    let Some((schema, _ca)) = server("a_ca_that_did_not_sign_the_certificate_is_refused")? else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let impostor = foreign_ca(dir.path())?;
    let impostor_text = impostor.to_string_lossy();
    // verify-full and verify-ca check the chain; require checks it too once a
    // CA file is given, as in libpq.
    for mode in ["verify-full", "verify-ca", "require", "prefer"] {
        let url = with_params(
            &schema.url,
            &[("sslmode", mode), ("sslrootcert", &impostor_text)],
        );
        let err = refused(PostgresLedger::connect(&url, options(&schema)))?;
        let err = tls_error(&err)?;
        let TlsError::CertificateNotTrusted { host, roots, .. } = err else {
            return Err(format!("{mode}: {err}").into());
        };
        assert_eq!(host, "127.0.0.1", "{mode}");
        assert!(roots.contains(&*impostor_text), "{mode}: {roots}");
        let message = err.to_string();
        assert!(
            message.contains("127.0.0.1") && message.contains(&*impostor_text),
            "{message}"
        );
        assert!(
            message.contains("give sslrootcert the CA that signed"),
            "{message}"
        );
    }
    Ok(())
}

#[test]
fn verify_full_checks_the_host_name_and_verify_ca_does_not() -> TestResult {
    let Some((schema, ca)) = server("verify_full_checks_the_host_name_and_verify_ca_does_not")?
    else {
        return Ok(());
    };
    let ca = ca.to_string_lossy();
    // Reach the server's address under a name its certificate does not list.
    let unlisted = key_value(&schema.url, "ledger.invalid")?;
    let full = with_params(
        &unlisted,
        &[("sslmode", "verify-full"), ("sslrootcert", &ca)],
    );
    let err = refused(PostgresLedger::connect(&full, options(&schema)))?;
    let err = tls_error(&err)?;
    let TlsError::CertificateNameMismatch { host, .. } = err else {
        return Err(format!("{err}").into());
    };
    assert_eq!(host, "ledger.invalid");
    assert!(err.to_string().contains("sslmode=verify-ca"), "{err}");

    let chain_only = with_params(&unlisted, &[("sslmode", "verify-ca"), ("sslrootcert", &ca)]);
    check_connects(&schema, &chain_only, options(&schema), true)
}

#[test]
fn require_and_prefer_encrypt_without_a_ca_file_and_disable_does_not() -> TestResult {
    let Some((schema, _ca)) =
        server("require_and_prefer_encrypt_without_a_ca_file_and_disable_does_not")?
    else {
        return Ok(());
    };
    let require = with_params(&schema.url, &[("sslmode", "require")]);
    check_connects(&schema, &require, options(&schema), true)?;
    // The driver's default, prefer, takes TLS when the server offers it.
    check_connects(&schema, &schema.url, options(&schema), true)?;
    let disable = with_params(&schema.url, &[("sslmode", "disable")]);
    check_connects(&schema, &disable, options(&schema), false)
}

/// A loopback port that accepts connections and records whether any came.
fn listener() -> std::io::Result<(TcpListener, u16)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    listener.set_nonblocking(true)?;
    Ok((listener, port))
}

fn assert_untouched(listener: &TcpListener) {
    match listener.accept() {
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the server was contacted: {other:?}"),
    }
}

/// Connecting with `url` fails before contacting anything, with an
/// invalid-input error whose message contains each of `words`.
fn check_setup_error(url: &str, listener: &TcpListener, words: &[&str]) {
    let err = PostgresLedger::connect(
        url,
        PostgresOptions::default().connect_timeout(Duration::from_secs(2)),
    )
    .expect_err("the setup is wrong");
    assert_eq!(err.kind(), LedgerErrorKind::InvalidInput, "{err}");
    let message = err.to_string();
    for word in words {
        assert!(message.contains(word), "{message:?} lacks {word:?}");
    }
    assert_untouched(listener);
}

#[test]
fn a_missing_ca_file_is_an_error_before_anything_is_contacted() -> TestResult {
    let (listener, port) = listener()?;
    let dir = tempfile::tempdir()?;
    let missing = dir.path().join("no-such-ca.crt");
    let missing_text = missing.to_string_lossy();
    let url = with_params(
        &format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        &[("sslmode", "verify-full"), ("sslrootcert", &missing_text)],
    );
    check_setup_error(
        &url,
        &listener,
        &["cannot read the TLS CA file", &missing_text, "sslrootcert"],
    );
    // The same file named in the options.
    let err = PostgresLedger::connect(
        &format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        PostgresOptions::default().tls_ca_file(&missing),
    )
    .expect_err("the CA file is missing");
    assert_eq!(err.kind(), LedgerErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains(&*missing_text), "{err}");
    assert_untouched(&listener);
    Ok(())
}

#[test]
fn a_ca_file_without_a_certificate_is_an_error() -> TestResult {
    let (listener, port) = listener()?;
    let dir = tempfile::tempdir()?;
    let not_pem = dir.path().join("ca.crt");
    std::fs::write(&not_pem, "this is not a certificate\n")?;
    let not_pem_text = not_pem.to_string_lossy();
    let url = with_params(
        &format!("host=127.0.0.1 port={port} user=postgres"),
        &[("sslrootcert", &not_pem_text)],
    );
    check_setup_error(
        &url,
        &listener,
        &["holds no PEM certificate", &not_pem_text],
    );
    Ok(())
}

#[test]
fn an_unknown_sslmode_is_an_error() -> TestResult {
    let (listener, port) = listener()?;
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=allow");
    check_setup_error(
        &url,
        &listener,
        &["invalid sslmode \"allow\"", "verify-full"],
    );
    Ok(())
}

#[test]
fn a_server_without_tls_is_an_error_when_tls_is_required() -> TestResult {
    // A stand-in server that answers the TLS request with "N", as a server
    // with `ssl = off` does, then waits for the client to hang up.
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut request = [0_u8; 8];
        stream.read_exact(&mut request)?;
        // SSLRequest: length 8, code 80877103.
        assert_eq!(request, [0, 0, 0, 8, 4, 210, 22, 47]);
        stream.write_all(b"N")?;
        let _ = stream.read(&mut [0_u8; 64]);
        Ok(())
    });
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=require");
    let err = refused(PostgresLedger::connect(
        &url,
        PostgresOptions::default().connect_timeout(Duration::from_secs(5)),
    ))?;
    let tls = tls_error(&err)?;
    let TlsError::ServerRefusedTls { host, mode } = tls else {
        return Err(format!("{err}").into());
    };
    assert_eq!((host.as_str(), *mode), ("127.0.0.1", SslMode::Require));
    let message = tls.to_string();
    assert!(
        message.contains("does not support TLS") && message.contains("sslmode=require"),
        "{message}"
    );
    server
        .join()
        .map_err(|_| "the stand-in server panicked")??;
    Ok(())
}
