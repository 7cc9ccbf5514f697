//! The facade's `open`: the throwaway forms and what a binary needs besides
//! the trait (a writable re-open, backup, prune), without naming a store.

use std::path::Path;

use effect_core::{EffectLedgerExt as _, NewOperation, PruneRequest, RequestFingerprint};
use production_agent_systems::open::{Ledger, LedgerUrl, OpenOptions, open, open_fresh};

fn op(n: u64) -> NewOperation {
    NewOperation::new(
        "capture_payment",
        "1",
        RequestFingerprint::of_value(&serde_json::json!({"n": n})),
    )
}

#[test]
fn memory_is_the_throwaway_form_of_a_ledger_url() {
    let url = LedgerUrl::parse("memory:").unwrap();
    assert_eq!(url, LedgerUrl::Memory);
    assert_eq!(url.to_string(), "memory:");
    let ledger = open("memory:", OpenOptions::default()).unwrap();
    assert!(matches!(ledger, Ledger::Memory(_)));
    ledger.as_dyn().prepare("op-1", &op(1)).unwrap();
    assert_eq!(
        ledger
            .as_dyn()
            .stats()
            .unwrap()
            .counts
            .iter()
            .map(|c| c.1)
            .sum::<u64>(),
        1
    );
    // Not a file: `memory` without the colon still names one.
    assert!(matches!(
        LedgerUrl::parse("memory").unwrap(),
        LedgerUrl::Sqlite(_)
    ));
}

#[test]
fn a_fresh_sqlite_ledger_is_removed_when_dropped() {
    let parent = tempfile::tempdir().unwrap();
    let base = LedgerUrl::Sqlite(parent.path().to_owned());
    let fresh = open_fresh(&base, "trial", OpenOptions::default()).unwrap();
    fresh.ledger().as_dyn().prepare("op-1", &op(1)).unwrap();
    let LedgerUrl::Sqlite(file) = fresh.location().clone() else {
        panic!("a SQLite file: {:?}", fresh.location());
    };
    assert!(file.starts_with(parent.path()) && file.exists());
    // Another handle opened from the location sees the same ledger.
    let other = open(file.to_str().unwrap(), OpenOptions::default()).unwrap();
    assert!(other.as_dyn().get("op-1").unwrap().is_some());
    drop(other);
    drop(fresh);
    assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
}

#[test]
fn a_read_only_ledger_reopens_writable_and_backs_up_and_prunes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite3");
    let path_text = path.to_str().unwrap();
    open(path_text, OpenOptions::default())
        .unwrap()
        .as_dyn()
        .prepare("op-1", &op(1))
        .unwrap();
    let read_only = open(path_text, OpenOptions::default().read_only(true)).unwrap();
    assert_eq!(read_only.sqlite_path(), Some(path.as_path()));
    assert!(
        read_only.as_dyn().prepare("op-2", &op(2)).is_err(),
        "read-only refuses writes"
    );

    let writable = read_only.reopen(OpenOptions::default()).unwrap();
    writable.as_dyn().prepare("op-2", &op(2)).unwrap();

    let copy = dir.path().join("copy.sqlite3");
    read_only.backup(&copy).unwrap();
    let copied = open(copy.to_str().unwrap(), OpenOptions::default()).unwrap();
    assert!(copied.as_dyn().get("op-2").unwrap().is_some());

    // A confirmed operation is pruned, into the archive; a prepared one stays.
    let claim = effect_core::Claim::new("owner", std::time::Duration::from_secs(60));
    assert!(writable.as_dyn().claim_dispatch("op-1", &claim).unwrap());
    let confirmation = effect_core::Confirmation {
        output: serde_json::json!({"ok": true}),
        provider_operation_id: None,
        evidence: effect_core::Evidence::new(),
    };
    assert!(
        writable
            .as_dyn()
            .mark_confirmed("op-1", Some("owner"), &confirmation)
            .unwrap()
    );
    let mut archive = Vec::new();
    let report = writable
        .prune(
            &PruneRequest::before("2999-01-01T00:00:00+00:00"),
            &mut archive,
        )
        .unwrap();
    assert_eq!(report.operations, 1);
    assert!(String::from_utf8_lossy(&archive).contains("op-1"));
    assert!(writable.as_dyn().get("op-1").unwrap().is_none());
    assert!(writable.as_dyn().get("op-2").unwrap().is_some());

    let memory = open("memory:", OpenOptions::default()).unwrap();
    assert!(memory.backup(&dir.path().join("never")).is_err());
    assert!(!dir.path().join("never").exists());
}

#[cfg(feature = "postgres")]
#[test]
fn a_fresh_postgres_schema_is_dropped_when_removed() {
    let Some(url) = effect_test_support::servers::postgres_url(
        "a_fresh_postgres_schema_is_dropped_when_removed",
    ) else {
        return;
    };
    let base = LedgerUrl::parse(&url).unwrap();
    let fresh = open_fresh(&base, "facade_fresh", OpenOptions::default()).unwrap();
    fresh.ledger().as_dyn().prepare("op-1", &op(1)).unwrap();
    let schema = fresh.schema().unwrap().to_owned();
    let exists = |schema: &str| {
        let mut client = effect_ledger_postgres::connect_client(&url, &Default::default()).unwrap();
        client
            .query_one(
                "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
                &[&schema],
            )
            .unwrap()
            .get::<_, i64>(0)
    };
    assert_eq!(exists(&schema), 1);
    fresh.remove().unwrap();
    assert_eq!(exists(&schema), 0);
}

/// `create(false)` refuses a missing or empty file and writes nothing; once
/// `create` is set, a migrating open never makes a ledger of a database
/// without the ledger's tables; an older schema without `migrate` is typed.
#[test]
fn only_create_makes_a_ledger_and_every_refusal_is_typed() {
    use production_agent_systems::open::{NotALedger, OpenError};

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.sqlite3");
    let missing_text = missing.to_str().unwrap();
    let refused = open(missing_text, OpenOptions::default().create(false)).unwrap_err();
    assert!(
        matches!(
            refused,
            OpenError::NotALedger {
                reason: NotALedger::Missing,
                ..
            }
        ),
        "{refused:?}"
    );
    assert!(!missing.exists());

    let empty = dir.path().join("empty.sqlite3");
    std::fs::write(&empty, b"").unwrap();
    let refused = open(
        empty.to_str().unwrap(),
        OpenOptions::default().create(false),
    )
    .unwrap_err();
    assert!(
        matches!(
            refused,
            OpenError::NotALedger {
                reason: NotALedger::EmptyFile,
                ..
            }
        ),
        "{refused:?}"
    );
    assert_eq!(std::fs::read(&empty).unwrap(), b"");

    // A database with a table of its own is never made a ledger.
    let foreign = dir.path().join("customers.sqlite3");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE customers (id INTEGER)")
        .unwrap();
    let bytes = std::fs::read(&foreign).unwrap();
    for options in [
        OpenOptions::default().create(true),
        OpenOptions::default().create(false),
        OpenOptions::default().read_only(true),
    ] {
        let refused = open(foreign.to_str().unwrap(), options).unwrap_err();
        assert!(
            matches!(
                refused,
                OpenError::NotALedger {
                    reason: NotALedger::NoLedgerTables,
                    ..
                }
            ),
            "{refused:?}"
        );
        assert_eq!(refused.kind(), effect_core::LedgerErrorKind::InvalidInput);
    }
    assert_eq!(std::fs::read(&foreign).unwrap(), bytes, "written");

    // `create(true)` after `read_only(true)` makes the ledger, then reads it.
    let made = open(
        missing_text,
        OpenOptions::default().read_only(true).create(true),
    )
    .unwrap();
    assert!(made.as_dyn().prepare("op-1", &op(1)).is_err(), "read-only");
    assert!(open(missing_text, OpenOptions::default().create(false)).is_ok());

    // The Python package's file has an older schema.
    let python = dir.path().join("python.sqlite3");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/python/python-ledger-v1.sqlite3"),
        &python,
    )
    .unwrap();
    let mut permissions = std::fs::metadata(&python).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)] // Unix: the copy is its owner's to write.
    permissions.set_readonly(false);
    std::fs::set_permissions(&python, permissions).unwrap();
    let refused = open(
        python.to_str().unwrap(),
        OpenOptions::default().migrate(false).create(false),
    )
    .unwrap_err();
    assert!(
        matches!(refused, OpenError::NeedsMigration { found: 0, .. }),
        "{refused:?}"
    );
    assert!(
        open(
            python.to_str().unwrap(),
            OpenOptions::default().create(false)
        )
        .is_ok(),
        "an older ledger is migrated"
    );
}

/// The default options (migrating, `create` unset) never add the ledger's
/// tables to a PostgreSQL schema holding someone else's: refused, typed,
/// and nothing written there; nor does any other combination.
#[cfg(feature = "postgres")]
#[test]
fn a_foreign_postgres_schema_is_refused_with_the_default_options() {
    use production_agent_systems::open::{NotALedger, OpenError};

    let Some(url) = effect_test_support::servers::postgres_url(
        "a_foreign_postgres_schema_is_refused_with_the_default_options",
    ) else {
        return;
    };
    /// Drops the schema however the test ends.
    struct Dropped<'a>(&'a str, &'a str);
    impl Drop for Dropped<'_> {
        fn drop(&mut self) {
            let dropped = effect_ledger_postgres::connect_client(self.0, &Default::default())
                .map_err(|e| e.to_string())
                .and_then(|mut client| {
                    client
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.1))
                        .map_err(|e| e.to_string())
                });
            if let Err(err) = dropped {
                eprintln!("could not drop test schema {}: {err}", self.1);
            }
        }
    }

    let schema = format!("t_facade_foreign_{}", std::process::id());
    let _dropped = Dropped(&url, &schema);
    let mut client = effect_ledger_postgres::connect_client(&url, &Default::default()).unwrap();
    client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE;
             CREATE SCHEMA \"{schema}\";
             CREATE TABLE \"{schema}\".customers (id INTEGER)"
        ))
        .unwrap();
    let mut relations = || -> Vec<String> {
        client
            .query(
                "SELECT c.relname::text FROM pg_class c
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = $1 ORDER BY 1",
                &[&schema],
            )
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect()
    };
    let before = relations();
    assert_eq!(before, ["customers"]);
    let mut refusals = 0;
    for options in [
        OpenOptions::default(),
        OpenOptions::default().create(true),
        OpenOptions::default().create(false),
        OpenOptions::default().migrate(false),
        OpenOptions::default().read_only(true),
    ] {
        let refused = open(&url, options.schema(schema.clone())).unwrap_err();
        assert!(
            matches!(
                refused,
                OpenError::NotALedger {
                    reason: NotALedger::ForeignTables,
                    ..
                }
            ),
            "{refused:?}"
        );
        assert_eq!(refused.kind(), effect_core::LedgerErrorKind::InvalidInput);
        assert_eq!(relations(), before, "nothing added");
        refusals += 1;
    }
    assert_eq!(refusals, 5);
}
