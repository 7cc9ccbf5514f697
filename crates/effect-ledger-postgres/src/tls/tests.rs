use super::conninfo::{SplitUrl, split_url};

/// Splits `url` and compares the rest, `sslmode` and `sslrootcert`.
fn check(url: &str, rest: &str, sslmode: Option<&str>, sslrootcert: Option<&str>) {
    let expected = SplitUrl {
        rest: rest.to_owned(),
        sslmode: sslmode.map(str::to_owned),
        sslrootcert: sslrootcert.map(str::to_owned),
    };
    assert_eq!(split_url(url), Ok(expected), "{url}");
}

#[test]
fn urls_lose_only_the_tls_parameters() {
    check("postgres://u@h/db", "postgres://u@h/db", None, None);
    check(
        "postgres://u@h:5/db?sslmode=verify-full&sslrootcert=/etc/ca.crt",
        "postgres://u@h:5/db",
        Some("verify-full"),
        Some("/etc/ca.crt"),
    );
    check(
        "postgresql://u@h/db?application_name=a&sslrootcert=%2Ftmp%2Fmy%20ca.pem&connect_timeout=3",
        "postgresql://u@h/db?application_name=a&connect_timeout=3",
        None,
        Some("/tmp/my ca.pem"),
    );
    check(
        "postgres://h/db?sslmode=require&sslmode=disable",
        "postgres://h/db",
        Some("disable"),
        None,
    );
}

#[test]
fn key_value_strings_lose_only_the_tls_parameters() {
    check(
        "host=h port=5 sslmode=verify-ca user=u",
        "host=h port=5 user=u",
        Some("verify-ca"),
        None,
    );
    check(
        "host=h  sslrootcert = '/tmp/my ca\\'s.pem' password='a b'",
        "host=h password='a b'",
        None,
        Some("/tmp/my ca's.pem"),
    );
    check(
        "sslrootcert=/x\\ y sslmode=require",
        "",
        Some("require"),
        Some("/x y"),
    );
}

#[test]
fn malformed_key_value_strings_are_refused() {
    for url in ["host", "host=h sslrootcert='/x", "sslmode=require\\"] {
        assert!(split_url(url).is_err(), "{url}");
    }
}
