//! docs/postgres.md's roles, run as printed: its `CREATE ROLE` and `GRANT`
//! blocks (names changed to this test's), then the ledger conformance suite
//! as the writer role and a resolution and a prune as the operator role,
//! each opening the ledger without migrating. A privilege the ledger needs
//! and the guide does not grant fails here; so does a grant the operator
//! needs for a prune that the writer was given.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, UNIX_EPOCH};

use effect_core::format_timestamp;
use effect_core::{
    Claim, EffectLedger, EffectLedgerExt, EffectStatus, Evidence, ManualAction, ManualResolution,
    PruneRequest,
};
use effect_ledger_postgres::{PostgresLedger, PostgresOptions};
use postgres::{Client, NoTls};

use crate::support::{TestResult, db_epoch, new_operation, server_url};

const GUIDE: &str = include_str!("../../../../docs/postgres.md");

/// The guide's `sql` blocks: the roles and schema, then the grants.
fn guide_sql() -> (String, String) {
    let blocks: Vec<&str> = GUIDE
        .split("```sql\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap_or_default())
        .collect();
    assert_eq!(blocks.len(), 2, "docs/postgres.md has two sql blocks");
    (blocks[0].to_owned(), blocks[1].to_owned())
}

/// The guide's SQL for roles named `{prefix}_owner`, ..., schema `schema`
/// and the test server's database.
fn rename(sql: &str, prefix: &str, schema: &str, database: &str) -> String {
    sql.replace("payments_", &format!("{prefix}_"))
        .replace("payments", schema)
        .replace("DATABASE agents", &format!("DATABASE {database}"))
}

/// The database of the server URL.
fn database(url: &str) -> String {
    let path = url.rsplit_once('/').map_or("postgres", |(_, db)| db);
    path.split('?').next().unwrap_or("postgres").to_owned()
}

/// `url` with another user (trust authentication on the test server).
fn as_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{user}@{host}")
}

/// The roles of one test, dropped (with their schemas) at the end.
struct Roles {
    url: String,
    prefix: String,
    schemas: Mutex<Vec<String>>,
}

impl Roles {
    fn create(url: &str, test: &str) -> Result<Roles, postgres::Error> {
        let prefix = format!("r_{test}_{}", std::process::id());
        let roles = Roles {
            url: url.to_owned(),
            prefix,
            schemas: Mutex::new(Vec::new()),
        };
        roles.drop_roles()?;
        let (create, _) = guide_sql();
        assert_eq!(create.lines().count(), 4, "{create}");
        admin(url)?.batch_execute(&rename(&create, &roles.prefix, "unused", &database(url)))?;
        Ok(roles)
    }

    fn user(&self, role: &str) -> String {
        as_user(&self.url, &format!("{}_{role}", self.prefix))
    }

    /// A new schema as the guide makes it: the ledger made by the owner, the
    /// grants run by the owner.
    fn schema(&self) -> Result<String, Box<dyn std::error::Error>> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let schema = format!(
            "{}_s{}",
            self.prefix,
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        self.schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(schema.clone());
        let (_, grants) = guide_sql();
        drop(PostgresLedger::connect(
            &self.user("owner"),
            PostgresOptions::default()
                .schema(schema.clone())
                .pool_size(1),
        )?);
        Client::connect(&self.user("owner"), NoTls)?.batch_execute(&rename(
            &grants,
            &self.prefix,
            &schema,
            &database(&self.url),
        ))?;
        Ok(schema)
    }

    /// The ledger in `schema` as `role`, never migrating.
    fn ledger(&self, role: &str, schema: &str) -> Result<PostgresLedger, effect_core::LedgerError> {
        PostgresLedger::connect(
            &self.user(role),
            PostgresOptions::default()
                .schema(schema)
                .migrate(false)
                .pool_size(4),
        )
    }

    fn drop_roles(&self) -> Result<(), postgres::Error> {
        let mut admin = admin(&self.url)?;
        let schemas =
            std::mem::take(&mut *self.schemas.lock().unwrap_or_else(PoisonError::into_inner));
        for schema in schemas {
            admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))?;
        }
        for role in ["owner", "writer", "operator"] {
            let role = format!("{}_{role}", self.prefix);
            let exists = admin
                .query_opt("SELECT 1 FROM pg_roles WHERE rolname = $1", &[&role])?
                .is_some();
            if exists {
                // Its grant on the database, then the role.
                admin.batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))?;
            }
        }
        Ok(())
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        if let Err(err) = self.drop_roles() {
            eprintln!("could not drop the roles {}_*: {err}", self.prefix);
        }
    }
}

/// The two tests take turns: each grants on the one database and drops its
/// roles, and the server refuses two concurrent changes of that database's
/// row ("tuple concurrently updated").
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn admin(url: &str) -> Result<Client, postgres::Error> {
    Client::connect(url, NoTls)
}

#[test]
fn the_writer_role_of_the_guide_passes_the_conformance_suite() -> TestResult {
    let Some(url) = server_url("the_writer_role_of_the_guide_passes_the_conformance_suite") else {
        return Ok(());
    };
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let roles = Roles::create(&url, "writer")?;
    let opened = std::sync::atomic::AtomicUsize::new(0);
    let factory = || -> Arc<dyn EffectLedger> {
        let schema = roles.schema().expect("a schema made as the guide says");
        opened.fetch_add(1, Ordering::Relaxed);
        Arc::new(
            roles
                .ledger("writer", &schema)
                .expect("the writer opens the ledger without migrating"),
        )
    };
    // The checks that touch every table and statement kind (budgets charged
    // and refunded, approvals, events, leases, resolutions, stats): each
    // schema is migrated as the owner, so the whole suite would take minutes.
    let checks: Vec<effect_conformance::NamedCheck> = effect_conformance::CHECKS
        .iter()
        .chain(effect_testkit::executor_suite::CHECKS)
        .filter(|(name, _)| {
            [
                "budget",
                "approval",
                "events",
                "renew",
                "quarantin",
                "resolv",
                "stale",
                "stats",
            ]
            .iter()
            .any(|part| name.contains(part))
        })
        .copied()
        .collect();
    assert!(checks.len() >= 15, "{}", checks.len());
    let failures = effect_conformance::run_checks(&factory, &checks);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        opened.load(Ordering::Relaxed) >= checks.len(),
        "every check opened a ledger as the writer"
    );

    // The writer cannot prune (the operator's DELETE) nor alter the tables.
    let schema = roles.schema()?;
    let writer = roles.ledger("writer", &schema)?;
    writer.prepare("invoice:INV-1:capture", &new_operation(1))?;
    writer.mark_confirmed(
        "invoice:INV-1:capture",
        None,
        &effect_core::Confirmation {
            output: serde_json::json!({"payment_id": "pay-1"}),
            provider_operation_id: None,
            evidence: Evidence::new(),
        },
    )?;
    std::thread::sleep(Duration::from_millis(5));
    let now = db_epoch(&mut admin(&url)?)?;
    let cutoff = format_timestamp(UNIX_EPOCH + Duration::from_secs_f64(now));
    let err = writer
        .prune(&PruneRequest::before(&cutoff), &mut Vec::new())
        .expect_err("the writer has no DELETE on the operations");
    assert!(format!("{err:?}").contains("permission denied"), "{err:?}");
    let mut client = Client::connect(&roles.user("writer"), NoTls)?;
    let denied = client
        .batch_execute(&format!(
            "ALTER TABLE {schema}.effect_operations ADD COLUMN x INT"
        ))
        .expect_err("the writer cannot alter the tables");
    assert!(
        format!("{denied:?}").contains("must be owner"),
        "{denied:?}"
    );
    Ok(())
}

#[test]
fn the_operator_role_of_the_guide_resolves_and_prunes() -> TestResult {
    let Some(url) = server_url("the_operator_role_of_the_guide_resolves_and_prunes") else {
        return Ok(());
    };
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let roles = Roles::create(&url, "operator")?;
    let schema = roles.schema()?;
    let writer = roles.ledger("writer", &schema)?;
    let claim = Claim::new("w", Duration::from_secs(60));
    writer.prepare("invoice:INV-1:capture", &new_operation(1))?;
    assert!(writer.claim_dispatch("invoice:INV-1:capture", &claim)?);
    writer.mark_outcome_unknown(
        "invoice:INV-1:capture",
        Some("w"),
        "timed out",
        &Evidence::new(),
    )?;
    writer.quarantine("invoice:INV-1:capture", "no probe", &Evidence::new())?;

    let operator = roles.ledger("operator", &schema)?;
    let resolved = operator.resolve_manually(
        "invoice:INV-1:capture",
        &ManualResolution::new(
            ManualAction::Confirm {
                output: serde_json::json!({"payment_id": "pay-1"}),
                provider_operation_id: Some("pay-1".into()),
            },
            effect_core::Audit::new("on-call", "seen in the provider dashboard", "INC-1"),
        ),
    )?;
    assert_eq!(resolved.status, EffectStatus::Confirmed);

    std::thread::sleep(Duration::from_millis(5));
    let now = db_epoch(&mut admin(&url)?)?;
    let cutoff = format_timestamp(UNIX_EPOCH + Duration::from_secs_f64(now));
    let mut archive = Vec::new();
    let report = operator.prune(&PruneRequest::before(&cutoff), &mut archive)?;
    assert_eq!(report.operations, 1);
    assert!(report.events >= 4, "{report:?}");
    assert!(operator.get("invoice:INV-1:capture")?.is_none());
    Ok(())
}
