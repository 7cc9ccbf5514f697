//! `--db postgres://…`: the scenarios on a PostgreSQL ledger. Needs a server in
//! `EFFECT_TEST_POSTGRES_URL`; without one the test says it skipped (and fails
//! when `EFFECT_REQUIRE_POSTGRES=1`, as in CI).

use serde_json::Value;

use crate::{agent_effect, stdout};

fn server() -> Option<String> {
    effect_test_support::servers::postgres_url("the PostgreSQL tests of agent-effect")
}

#[test]
fn scenarios_pass_on_postgres_with_one_effect_and_leave_no_schema_behind() {
    let Some(url) = server() else { return };
    // The lost acknowledgement, live concurrent callers, and a worker process
    // that dies after the provider committed (its lease ends on the database clock).
    for scenario in [
        "after-commit-before-ack",
        "concurrent-callers",
        "crash-after-commit",
    ] {
        let output = agent_effect(&["--scenario", scenario, "--db", &url]);
        assert_eq!(output.status.code(), Some(0), "{scenario}: {output:?}");
        let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
        assert_eq!(report["status"], "confirmed", "{scenario}");
        assert_eq!(report["committed_effect_count"], 1, "{scenario}");
        assert_eq!(report["passed"], true, "{scenario}");
    }
    // Over TLS, verifying the server's certificate: the run and its cleanup
    // both take the URL's sslmode and sslrootcert. (In this test, not one of
    // its own, so that no other run's schema is counted below.)
    if let Some((_, ca)) =
        effect_test_support::servers::postgres_tls("the PostgreSQL TLS test of agent-effect")
    {
        // The CI URL has no query, and the CA path needs no escaping.
        let sep = if url.contains('?') { '&' } else { '?' };
        let tls_url = format!("{url}{sep}sslmode=verify-full&sslrootcert={}", ca.display());
        let output = agent_effect(&["--scenario", "concurrent-callers", "--db", &tls_url]);
        assert_eq!(output.status.code(), Some(0), "over TLS: {output:?}");
        let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
        assert_eq!(report["committed_effect_count"], 1, "over TLS");
        assert_eq!(report["passed"], true, "over TLS");
    }
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let left: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'agent_effect_%'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "the runs dropped their schemas");
}

#[test]
fn the_matrix_refuses_a_postgres_ledger() {
    // The matrix's in-process crash cell moves the ledger clock, which a
    // database clock cannot follow: clap refuses the combination.
    let output = agent_effect(&["--matrix", "--db", "postgres://127.0.0.1:1/none"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
}
