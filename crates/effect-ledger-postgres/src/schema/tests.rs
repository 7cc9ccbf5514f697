//! Upgrading a schema written by an older version in place.

use effect_core::RequestFingerprint;
use effect_core::{EffectLedger, EffectLedgerExt as _, LedgerErrorKind, NewOperation};

use super::{MIGRATIONS, SCHEMA_VERSION, Schema, WRITE_FUNCTION, migrate, migrate_to};
use crate::{PostgresLedger, PostgresOptions, connect_client};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Drops the test's schema, with everything in it, when the test ends.
struct DropSchema {
    url: String,
    name: String,
}

impl Drop for DropSchema {
    fn drop(&mut self) {
        let dropped = match connect_client(&self.url, &PostgresOptions::default()) {
            Ok(mut client) => client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name))
                .map_err(|err| err.to_string()),
            Err(err) => Err(err.to_string()),
        };
        if let Err(err) = dropped {
            eprintln!("could not drop test schema {}: {err}", self.name);
        }
    }
}

/// The write function as `version` of the schema shipped it (none before 2):
/// with it, [`migrate_to`] builds the schema that release left.
fn history(version: i32) -> Option<&'static str> {
    match version {
        1 => None,
        2 => Some(include_str!("history/effect_write_v2.sql")),
        3 => Some(include_str!("history/effect_write_v3.sql")),
        4 | 5 => Some(include_str!("history/effect_write_v4.sql")),
        _ => Some(WRITE_FUNCTION),
    }
}

fn operation(n: usize) -> NewOperation {
    NewOperation::new(
        "capture_payment",
        "1",
        RequestFingerprint::of_canonical(&format!(r#"{{"invoice_id":"INV-{n}"}}"#)),
    )
}

/// The columns of the schema's events table.
fn event_columns(
    client: &mut postgres::Client,
    schema: &str,
) -> Result<Vec<String>, postgres::Error> {
    Ok(client
        .query(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = $1 AND table_name = 'effect_events' ORDER BY ordinal_position",
            &[&schema],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// A schema of version 2 with events written by its write function is
/// migrated to 3 in place: its events read back through the new cursor, new
/// appends record their pending writers, and a version 2 reader still
/// running fails instead of reading parallel appends as if they were ordered.
#[test]
fn a_version_2_schema_is_upgraded_in_place() -> TestResult {
    let Some(url) =
        effect_test_support::servers::postgres_url("a_version_2_schema_is_upgraded_in_place")
    else {
        return Ok(());
    };
    let name = format!("t_upgrade_v2_{}", std::process::id());
    let _drop = DropSchema {
        url: url.clone(),
        name: name.clone(),
    };
    let options = PostgresOptions::default().schema(name.clone());
    let mut admin = connect_client(&url, &options)?;
    admin.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))?;
    let schema = Schema::new(&name)?;
    migrate_to(&mut admin, &schema, true, 2, history(2))?;
    assert!(event_columns(&mut admin, &name)?.contains(&"drawers".to_owned()));

    // Two transitions written by version 2's function, as a version 2
    // ledger writes them (the exclusive append lock, no drawers).
    let q = &schema.quoted;
    let at = "2026-01-01T00:00:00.000000+00:00";
    for (id, events) in [("old-1", 1), ("old-2", 2)] {
        let types: Vec<&str> = ["prepared", "dispatched"][..events].to_vec();
        let data = vec!["{}"; events];
        let stamps = vec![at; events];
        let written: bool = admin
            .query_one(
                &format!(
                    "SELECT {q}.effect_write('insert', NULL, $1, 'capture_payment', '1', 'fp', \
                     NULL, 'prepared', NULL, NULL, NULL, 0, '{{}}', NULL, NULL, $2, $2, \
                     $3, $4, $5, false)"
                ),
                &[&id, &at, &types, &data, &stamps],
            )?
            .get(0);
        assert!(written, "version 2 wrote {id}");
    }

    // Opening without migrating refuses the old schema and changes nothing.
    let refused = PostgresLedger::connect(&url, options.clone().migrate(false))
        .expect_err("a version 2 schema needs migrating");
    assert_eq!(refused.kind(), LedgerErrorKind::InvalidInput, "{refused:#}");
    assert!(
        refused.to_string().contains(&format!(
            "version 2 and needs migrating to {SCHEMA_VERSION}"
        )),
        "{refused}"
    );

    let ledger = PostgresLedger::connect(&url, options)?;
    let versions: Vec<i32> = admin
        .query(
            &format!("SELECT version FROM {q}.effect_schema_version ORDER BY version"),
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    let columns = event_columns(&mut admin, &name)?;
    assert!(!columns.contains(&"drawers".to_owned()), "{columns:?}");
    assert!(
        !columns.contains(&"pending_writers".to_owned()),
        "dropped by version 6: {columns:?}"
    );

    let old = ledger.events_after(0, 100)?;
    let seen: Vec<(&str, &str)> = old
        .iter()
        .map(|e| (e.operation_id.as_str(), e.event_type.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("old-1", "prepared"),
            ("old-2", "prepared"),
            ("old-2", "dispatched")
        ]
    );
    assert!(old.windows(2).all(|w| w[0].sequence < w[1].sequence));

    ledger.prepare("new-1", &operation(1))?;
    let cursor = old[2].sequence;
    let new = ledger.events_after(cursor, 100)?;
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].operation_id, "new-1");
    // Version 5's cursor statement, as a version 5 process still running
    // would send it: it fails on the dropped column instead of trusting
    // writers that no longer record anything.
    let v5_reader = format!(
        "WITH snap AS MATERIALIZED (SELECT pg_current_snapshot() AS s) \
         SELECT sequence FROM {q}.effect_events AS e WHERE sequence > $1 AND NOT EXISTS \
         (SELECT 1 FROM snap, unnest(e.pending_writers) AS w (x) \
          WHERE NOT pg_visible_in_snapshot(w.x, snap.s)) ORDER BY sequence LIMIT $2"
    );
    let failed = admin
        .query(&v5_reader, &[&0_i64, &100_i64])
        .expect_err("a version 5 reader cannot read a version 6 schema");
    assert!(
        format!("{failed:?}").contains("pending_writers"),
        "{failed:?}"
    );

    // Version 2's cursor statement, as a version 2 process still running
    // would send it: it fails on the dropped column.
    let v2_reader = format!(
        "WITH running AS (SELECT coalesce(array_agg(x::xid), '{{}}') AS xids \
          FROM pg_snapshot_xip(pg_current_snapshot()) AS x) \
         SELECT sequence FROM \
         (SELECT sequence, bool_or(drawers && running.xids) OVER (ORDER BY sequence) AS held \
          FROM {q}.effect_events, running WHERE sequence > $1 ORDER BY sequence LIMIT $2) AS page \
         WHERE held IS NOT TRUE ORDER BY sequence"
    );
    let failed = admin
        .query(&v2_reader, &[&0_i64, &100_i64])
        .expect_err("a version 2 reader cannot read a version 3 schema");
    assert!(
        failed.to_string().contains("drawers") || format!("{failed:?}").contains("drawers"),
        "{failed:?}"
    );
    Ok(())
}

/// Whether the 22-argument write function of version 4 exists in `schema`.
fn has_version_4_write(
    client: &mut postgres::Client,
    schema: &str,
) -> Result<bool, postgres::Error> {
    Ok(client
        .query_one(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = $1 AND p.proname = 'effect_write' AND p.pronargs = 22",
            &[&schema],
        )?
        .get::<_, i64>(0)
        == 1)
}

/// A version 3 schema stays as it is when opened without migrating (refused,
/// nothing written), and is migrated to the current version when asked: its events read back,
/// a version 3 writer still running keeps its write function, and the
/// ledger's own claims and confirmations work on the new one.
#[test]
fn a_version_3_schema_migrates_only_when_asked() -> TestResult {
    let Some(url) =
        effect_test_support::servers::postgres_url("a_version_3_schema_migrates_only_when_asked")
    else {
        return Ok(());
    };
    let name = format!("t_upgrade_v3_{}", std::process::id());
    let _drop = DropSchema {
        url: url.clone(),
        name: name.clone(),
    };
    let options = PostgresOptions::default().schema(name.clone());
    let mut admin = connect_client(&url, &options)?;
    admin.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))?;
    let schema = Schema::new(&name)?;
    migrate_to(&mut admin, &schema, true, 3, history(3))?;
    let q = &schema.quoted;
    // A version 3 writer's call, as a version 3 ledger sends it.
    let v3_write = format!(
        "SELECT {q}.effect_write('insert', NULL, $1, 'capture_payment', '1', 'fp', \
         NULL, 'prepared', NULL, NULL, NULL, 0, '{{}}', NULL, NULL, $2, $2, \
         ARRAY['prepared'], ARRAY['{{}}'], ARRAY[$2], false)"
    );
    let at = "2026-01-01T00:00:00.000000+00:00";
    let written: bool = admin.query_one(&v3_write, &[&"old-1", &at])?.get(0);
    assert!(written);

    let refused = PostgresLedger::connect(&url, options.clone().migrate(false))
        .expect_err("a version 3 schema needs migrating");
    assert_eq!(refused.kind(), LedgerErrorKind::InvalidInput, "{refused:#}");
    assert!(
        refused.to_string().contains(&format!(
            "version 3 and needs migrating to {SCHEMA_VERSION}"
        )),
        "{refused}"
    );
    assert_eq!(
        PostgresLedger::schema_state(&url, &options)?,
        crate::SchemaState::Ledger { version: 3 },
        "nothing was migrated"
    );
    assert!(!has_version_4_write(&mut admin, &name)?);

    let ledger = PostgresLedger::connect(&url, options.clone())?;
    assert_eq!(
        PostgresLedger::schema_state(&url, &options)?,
        crate::SchemaState::Ledger {
            version: SCHEMA_VERSION
        }
    );
    assert!(has_version_4_write(&mut admin, &name)?);
    // The version 3 writer's call still works, on the new function.
    let written: bool = admin.query_one(&v3_write, &[&"old-2", &at])?.get(0);
    assert!(written);
    let old: Vec<String> = ledger
        .events_after(0, 100)?
        .into_iter()
        .map(|e| e.operation_id)
        .collect();
    assert_eq!(old, ["old-1", "old-2"]);

    let claim = effect_core::Claim::new("owner", std::time::Duration::from_secs(60));
    let claimed = ledger.apply(
        "new-1",
        &effect_core::Transition::PrepareAndClaim(operation(1), claim),
    )?;
    assert!(claimed.applied);
    let confirmation = effect_core::Confirmation {
        output: serde_json::json!({"ok": 1}),
        provider_operation_id: None,
        evidence: effect_core::Evidence::new(),
    };
    assert!(ledger.mark_confirmed("new-1", Some("owner"), &confirmation)?);
    let events: Vec<String> = ledger
        .events("new-1")?
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(events, ["prepared", "dispatched", "confirmed"]);
    Ok(())
}

/// The numbered files of `migrations/` are the migrations, in order, one per
/// version from 1 to [`SCHEMA_VERSION`]: a file added there and not listed
/// (or listed out of order) fails here.
#[test]
fn the_migrations_are_the_numbered_files_in_order() -> TestResult {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let mut numbered: Vec<String> = std::fs::read_dir(&dir)?
        .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|name| name.as_bytes().first().is_some_and(u8::is_ascii_digit))
        .collect();
    numbered.sort();
    assert_eq!(numbered.len(), MIGRATIONS.len(), "{numbered:?}");
    assert_eq!(MIGRATIONS.len(), usize::try_from(SCHEMA_VERSION)?);
    for ((file, migration), version) in numbered.iter().zip(MIGRATIONS).zip(1..) {
        assert_eq!(migration.version, version, "{file}");
        assert!(file.starts_with(&format!("{version:04}_")), "{file}");
        assert!(file.ends_with(".sql"), "{file}");
        assert_eq!(
            std::fs::read_to_string(dir.join(file))?,
            migration.sql,
            "{file}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("effect_write.sql"))?,
        WRITE_FUNCTION
    );
    Ok(())
}

/// What the catalog says of `schema`: its relations, their columns (dropped
/// ones included, by position), indexes, constraints, sequences, functions
/// (with their source), triggers and recorded versions, one line each, the
/// schema's name written `{schema}`.
fn catalog(client: &mut postgres::Client, schema: &Schema) -> Result<Vec<String>, postgres::Error> {
    let q = &schema.quoted;
    let queries = [
        "SELECT concat_ws(' | ', 'relation', c.relname, c.relkind) \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 ORDER BY c.relname"
            .to_owned(),
        "SELECT concat_ws(' | ', 'column', c.relname, a.attnum, a.attname, a.attisdropped, \
                format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attidentity, \
                pg_get_expr(d.adbin, d.adrelid)) \
         FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
         WHERE n.nspname = $1 AND a.attnum > 0 ORDER BY c.relname, a.attnum"
            .to_owned(),
        "SELECT concat_ws(' | ', 'index', indexname, indexdef) \
         FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname"
            .to_owned(),
        "SELECT concat_ws(' | ', 'constraint', c.relname, k.conname, pg_get_constraintdef(k.oid)) \
         FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 ORDER BY c.relname, k.conname"
            .to_owned(),
        "SELECT concat_ws(' | ', 'sequence', sequencename, data_type, start_value, min_value, \
                max_value, increment_by, cycle, cache_size) \
         FROM pg_sequences WHERE schemaname = $1 ORDER BY sequencename"
            .to_owned(),
        "SELECT concat_ws(' | ', 'function', p.proname, \
                pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid), \
                l.lanname, p.provolatile, p.prosrc) \
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
         JOIN pg_language l ON l.oid = p.prolang \
         WHERE n.nspname = $1 ORDER BY 1"
            .to_owned(),
        "SELECT concat_ws(' | ', 'trigger', c.relname, t.tgname, pg_get_triggerdef(t.oid)) \
         FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND NOT t.tgisinternal ORDER BY c.relname, t.tgname"
            .to_owned(),
        format!(
            "SELECT concat_ws(' | ', 'version', version, description) \
             FROM {q}.effect_schema_version WHERE $1::text IS NOT NULL ORDER BY version"
        ),
    ];
    let mut lines = Vec::new();
    for query in &queries {
        for row in client.query(query.as_str(), &[&schema.name])? {
            let line: String = row.get(0);
            lines.push(line.replace(&schema.name, "{schema}"));
        }
    }
    Ok(lines)
}

/// A fresh schema, the schema every older release left (built with that
/// release's write function) migrated to the current version, and a schema
/// migrated one version at a time are the same in every line of the
/// catalog: the write function applied after the numbered migrations leaves
/// what applying each version's own function in turn left.
#[test]
fn every_older_schema_migrates_to_the_fresh_one() -> TestResult {
    let Some(url) =
        effect_test_support::servers::postgres_url("every_older_schema_migrates_to_the_fresh_one")
    else {
        return Ok(());
    };
    let options = PostgresOptions::default();
    let mut admin = connect_client(&url, &options)?;
    let schema_named = |suffix: &str| -> Result<(Schema, DropSchema), Box<dyn std::error::Error>> {
        let name = format!("t_catalog_{suffix}_{}", std::process::id());
        let drop = DropSchema {
            url: url.clone(),
            name: name.clone(),
        };
        Ok((Schema::new(&name)?, drop))
    };

    let (fresh, _drop_fresh) = schema_named("fresh")?;
    admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", fresh.quoted))?;
    migrate(&mut admin, &fresh, true)?;
    let expected = catalog(&mut admin, &fresh)?;
    // The comparison is worth something only if the catalog was read.
    let count = |kind: &str| {
        expected
            .iter()
            .filter(|line| line.starts_with(&format!("{kind} |")))
            .count()
    };
    assert_eq!(count("function"), 4, "{expected:#?}");
    assert_eq!(count("trigger"), 3, "{expected:#?}");
    assert_eq!(count("index"), 11, "{expected:#?}");
    assert_eq!(count("sequence"), 1, "{expected:#?}");
    assert_eq!(count("version"), usize::try_from(SCHEMA_VERSION)?);
    assert!(
        expected
            .iter()
            .any(|l| l.contains("effect_events | 7 | ........pg.dropped.7")),
        "the events table keeps the places of its dropped columns: {expected:#?}"
    );

    for old in 1..SCHEMA_VERSION {
        let (schema, _drop) = schema_named(&format!("v{old}"))?;
        admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", schema.quoted))?;
        migrate_to(&mut admin, &schema, true, old, history(old))?;
        let before = catalog(&mut admin, &schema)?;
        assert_ne!(before, expected, "version {old} differs before migrating");
        migrate(&mut admin, &schema, true)?;
        assert_eq!(
            catalog(&mut admin, &schema)?,
            expected,
            "version {old} migrated"
        );
    }

    let (stepped, _drop_stepped) = schema_named("stepped")?;
    admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", stepped.quoted))?;
    for version in 1..=SCHEMA_VERSION {
        migrate_to(&mut admin, &stepped, true, version, Some(WRITE_FUNCTION))?;
    }
    assert_eq!(
        catalog(&mut admin, &stepped)?,
        expected,
        "one version at a time"
    );
    Ok(())
}
