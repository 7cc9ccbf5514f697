//! `--db postgres://…`: the same incident on a PostgreSQL ledger. Needs a
//! server in `EFFECT_TEST_POSTGRES_URL`; without one the test says it skipped
//! (and fails when `EFFECT_REQUIRE_POSTGRES=1`, as in CI).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_effect_ops::view::{OperationDetail, Resolution};
use effect_core::{EffectContract, EffectStatus};
use effect_exec::{EffectExecutor, HandlerError};
use effect_ledger_postgres::{PostgresLedger, PostgresOptions};
use serde_json::{Value, json};

use crate::support::success;

fn server() -> Option<String> {
    effect_test_support::servers::postgres_url("the PostgreSQL tests of agent-effect-ops")
}

fn ops(url: &str, schema: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_agent-effect-ops"))
        .args(["--db", url])
        .args(args)
        .env("EFFECT_LEDGER_SCHEMA", schema)
        .output()
        .unwrap()
}

#[test]
fn operator_resolves_a_quarantined_payment_in_postgres() {
    let Some(url) = server() else { return };
    let schema = format!("ops_cli_{}", std::process::id());
    let ledger =
        PostgresLedger::connect(&url, PostgresOptions::default().schema(schema.clone())).unwrap();
    let executor = EffectExecutor::new(Arc::new(ledger));
    let contract = effect_test_support::contracts::capture_payment_without_key()
        .build()
        .unwrap();
    let committed = Arc::new(AtomicUsize::new(0));
    let provider = Arc::clone(&committed);
    let result = executor
        .execute(
            &contract,
            &json!({"invoice_id": "INV-PG"}),
            move |_: Value, _| {
                provider.fetch_add(1, Ordering::SeqCst);
                Err::<Value, _>(HandlerError::unknown("timeout"))
            },
        )
        .unwrap();
    assert_eq!(result.status, EffectStatus::Quarantined);

    let id = "invoice:INV-PG:capture";
    let shown: OperationDetail =
        serde_json::from_str(&success(&ops(&url, &schema, &["show", id]))).unwrap();
    assert_eq!(shown.summary.status, EffectStatus::Quarantined);
    let confirmed = ops(
        &url,
        &schema,
        &[
            "confirm",
            id,
            "--output-json",
            r#"{"payment_id":"pay-9"}"#,
            "--actor",
            "on-call",
            "--reason",
            "seen in the provider dashboard",
            "--evidence-reference",
            "INC-9",
        ],
    );
    let resolution: Resolution = serde_json::from_str(&success(&confirmed)).unwrap();
    assert_eq!(resolution.operation.status, EffectStatus::Confirmed);

    let replay = executor
        .execute(
            &contract,
            &json!({"invoice_id": "INV-PG"}),
            |_: Value, _| -> Result<Value, HandlerError> {
                panic!("the handler must not run again")
            },
        )
        .unwrap();
    assert!(replay.duplicate_suppressed);
    assert_eq!(replay.output, Some(json!({"payment_id": "pay-9"})));
    assert_eq!(committed.load(Ordering::SeqCst), 1);

    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .unwrap();
}

/// `url` with its user replaced by `user` (the test server trusts loopback).
fn as_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{user}@{host}")
}

#[test]
fn read_commands_neither_create_nor_migrate_and_run_with_select_only() {
    let Some(url) = server() else { return };
    let pid = std::process::id();
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();

    // A misspelled schema is an error (exit 2), and is not created.
    let missing = format!("ops_missing_{pid}");
    for command in [
        &["list"][..],
        &["stats"],
        &["export"],
        &["show", "x"],
        &["events", "x"],
    ] {
        let output = ops(&url, &missing, command);
        let (code, stderr) = crate::support::failure(&output);
        assert_eq!(code, 2, "{command:?}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "schema \"{missing}\" at {url} is not a ledger: the schema does not exist"
            )),
            "{stderr}"
        );
    }
    let exists: bool = admin
        .query_one(
            "SELECT exists(SELECT 1 FROM pg_namespace WHERE nspname = $1)",
            &[&missing],
        )
        .unwrap()
        .get(0);
    assert!(!exists, "a read command created the schema");

    // A role with only SELECT reads everything.
    let schema = format!("ops_readonly_{pid}");
    let role = format!("ops_reader_{pid}");
    let ledger =
        PostgresLedger::connect(&url, PostgresOptions::default().schema(schema.clone())).unwrap();
    let executor = EffectExecutor::new(Arc::new(ledger));
    let contract = EffectContract::builder("notify", |args| {
        Ok(format!("notify:{}", args["to"].as_str().ok_or("missing")?))
    })
    .build()
    .unwrap();
    executor
        .execute(&contract, &json!({"to": "ada"}), |_: Value, _| {
            Ok::<_, HandlerError>(json!({"sent": true}))
        })
        .unwrap();
    admin
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role};
             CREATE ROLE {role} LOGIN;
             GRANT USAGE ON SCHEMA {schema} TO {role};
             GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role};"
        ))
        .unwrap();
    let reader = as_user(&url, &role);
    for command in [
        &["list"][..],
        &["stats"],
        &["export"],
        &["show", "notify:ada"],
        &["events", "notify:ada"],
    ] {
        success(&ops(&reader, &schema, command));
    }
    let list: Value = serde_json::from_str(&success(&ops(&reader, &schema, &["list"]))).unwrap();
    assert_eq!(list[0]["operation_id"], "notify:ada");
    // A write is refused by the server, not silently attempted elsewhere.
    let refused = ops(
        &reader,
        &schema,
        &["prune", "--before", "9999-01-01T00:00:00+00:00"],
    );
    assert!(!refused.status.success());

    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; DROP ROLE IF EXISTS {role};"
        ))
        .unwrap();
}

#[test]
fn the_tool_reads_over_verified_tls_and_a_missing_ca_file_is_exit_2() {
    let Some((url, ca)) =
        effect_test_support::servers::postgres_tls("the PostgreSQL TLS test of agent-effect-ops")
    else {
        return;
    };
    let schema = format!("ops_tls_{}", std::process::id());
    drop(PostgresLedger::connect(&url, PostgresOptions::default().schema(schema.clone())).unwrap());
    // The CI URL has no query, and the CA path needs no escaping.
    let sep = if url.contains('?') { '&' } else { '?' };
    let tls_url = format!("{url}{sep}sslmode=verify-full&sslrootcert={}", ca.display());
    let stats: Value = serde_json::from_str(&success(&ops(&tls_url, &schema, &["stats"]))).unwrap();
    assert!(stats.is_object(), "{stats}");

    let missing = format!("{url}{sep}sslmode=verify-full&sslrootcert=/no/such/ca.pem");
    let (code, stderr) = crate::support::failure(&ops(&missing, &schema, &["stats"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("cannot read the TLS CA file /no/such/ca.pem"),
        "{stderr}"
    );

    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .unwrap();
}

/// Whether `schema` exists, and how many tables, views and sequences it holds.
fn relations(admin: &mut postgres::Client, schema: &str) -> Option<i64> {
    admin
        .query_opt(
            "SELECT (SELECT count(*) FROM pg_class c WHERE c.relnamespace = n.oid)
             FROM pg_namespace n WHERE n.nspname = $1",
            &[&schema],
        )
        .unwrap()
        .map(|row| row.get(0))
}

#[test]
fn a_schema_without_the_ledgers_tables_is_not_a_ledger_and_only_create_makes_one() {
    let Some(url) = server() else { return };
    let pid = std::process::id();
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let audit = [
        "--actor",
        "on-call",
        "--reason",
        "seen at the provider",
        "--evidence-reference",
        "INC-1",
    ];
    let reject: Vec<&str> = ["reject", "invoice:INV-1:capture"]
        .into_iter()
        .chain(audit)
        .collect();
    let commands: [&[&str]; 5] = [
        &["list"],
        &["--migrate", "list"],
        &["stats", "--migrate"],
        &reject,
        &["prune", "--older-than", "30d", "--migrate"],
    ];

    // A missing schema, an empty one and one holding someone else's table:
    // each is "not a ledger" (exit 2, one line), with --migrate or not, and
    // nothing is created in it.
    let missing = format!("ops_nothing_{pid}");
    let empty = format!("ops_empty_{pid}");
    let foreign = format!("ops_foreign_{pid}");
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {missing} CASCADE;
             DROP SCHEMA IF EXISTS {empty} CASCADE; CREATE SCHEMA {empty};
             DROP SCHEMA IF EXISTS {foreign} CASCADE; CREATE SCHEMA {foreign};
             CREATE TABLE {foreign}.invoices (id int);"
        ))
        .unwrap();
    for (schema, why, relations_before) in [
        (&missing, "the schema does not exist", None),
        (
            &empty,
            "the schema holds none of the ledger's tables; pass --create to make a new ledger there",
            Some(0),
        ),
        (
            &foreign,
            "the schema holds the tables of something else",
            Some(1),
        ),
    ] {
        for command in commands {
            let (code, stderr) = crate::support::failure(&ops(&url, schema, command));
            assert_eq!(code, 2, "{schema} {command:?}: {stderr}");
            assert!(
                stderr.starts_with(&format!(
                    "error: schema \"{schema}\" at {url} is not a ledger: {why}"
                )),
                "{schema} {command:?}: {stderr}"
            );
            assert_eq!(
                relations(&mut admin, schema),
                relations_before,
                "{schema} {command:?} wrote to the database"
            );
        }
    }

    // --create makes a new, empty ledger in a missing or an empty schema,
    // but never in someone else's.
    for schema in [&missing, &empty] {
        let created: Value =
            serde_json::from_str(&success(&ops(&url, schema, &["--create", "stats"]))).unwrap();
        assert_eq!(created["total"], 0, "{schema}: {created}");
        assert!(relations(&mut admin, schema).unwrap_or(0) > 0, "{schema}");
        // Then it is a ledger, for every command.
        let listed: Value = serde_json::from_str(&success(&ops(&url, schema, &["list"]))).unwrap();
        assert_eq!(listed, Value::Array(Vec::new()));
    }
    let (code, stderr) = crate::support::failure(&ops(&url, &foreign, &["--create", "stats"]));
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(relations(&mut admin, &foreign), Some(1));

    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {missing} CASCADE; DROP SCHEMA IF EXISTS {empty} CASCADE;
             DROP SCHEMA IF EXISTS {foreign} CASCADE;"
        ))
        .unwrap();
}
