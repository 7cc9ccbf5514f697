use super::*;

#[test]
fn urls_are_pointed_at_the_proxy_in_plain_text() {
    let proxy: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let check = |url: &str, expected: &str| {
        assert_eq!(proxied_url(url, proxy).unwrap(), expected, "{url}");
    };
    check(
        "postgres://postgres@127.0.0.1:55439/postgres",
        "postgres://postgres@127.0.0.1:40000/postgres?sslmode=disable",
    );
    check(
        "postgresql://u:p@[::1]/db?sslmode=verify-full&sslrootcert=/ca.pem",
        "postgresql://u:p@127.0.0.1:40000/db?sslrootcert=/ca.pem&sslmode=disable",
    );
    check(
        "postgres://localhost",
        "postgres://127.0.0.1:40000?sslmode=disable",
    );
    for bad in [
        "host=localhost user=postgres",
        "postgres://a,b/db",
        "postgres://%2Frun%2Fpostgresql/db",
        "postgres://u:secret@h:port/db",
    ] {
        let err = proxied_url(bad, proxy).unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
    }
}

#[test]
fn transaction_blocks_are_told_from_their_statements() {
    let q = |text: &str| {
        let mut body = text.as_bytes().to_vec();
        body.push(0);
        block_statement(&body)
    };
    assert_eq!(q("BEGIN"), Some(Block::Begin));
    assert_eq!(
        q("START TRANSACTION ISOLATION LEVEL READ COMMITTED"),
        Some(Block::Begin)
    );
    assert_eq!(q("commit;"), Some(Block::Commit));
    assert_eq!(q("ROLLBACK"), Some(Block::Rollback));
    assert_eq!(q("ROLLBACK TO SAVEPOINT sp"), None);
    assert_eq!(q("SELECT 1"), None);
    let parse = |query: &str| {
        let mut body = b"\0".to_vec();
        body.extend_from_slice(query.as_bytes());
        body.extend_from_slice(b"\0\0\0");
        parses_self_committing_write(&body)
    };
    assert!(parse("SELECT \"s\".effect_write($1, $2)"));
    assert!(parse("EXECUTE effect_0f3a_write('insert', NULL)"));
    assert!(!parse("EXECUTE effect_0f3a_get('effect_write(')"));
    assert!(!parse("SELECT * FROM effect_operations"));
}
