//! Finishing work whose caller never comes back, under kill -9: callers and
//! recovery workers in child processes share one ledger (SQLite, and
//! PostgreSQL when a server is configured) and the file-backed provider of
//! `provider.rs`. Callers run a stored-intent capture and die at seeded
//! moments (after the claim before the provider call, after the provider
//! commit before the acknowledgement, or killed with SIGKILL anywhere);
//! recovery workers run `RecoveryWorker::run_once` in a loop and die the
//! same ways, and are restarted. A caller never comes back for an operation
//! it started: the workers finish it. Whatever happens, every operation ends
//! confirmed, the provider received exactly one request per operation and
//! committed exactly one effect.
//!
//! Also: an operator's authorized retry of a capture whose caller died after
//! its claim is carried out by a recovery worker, once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use production_agent_systems::effect_core::{LedgerErrorKind, ListQuery, intent};
#[cfg(feature = "postgres")]
use production_agent_systems::open::{LedgerUrl, open_fresh};
use production_agent_systems::open::{OpenOptions, open};
use production_agent_systems::recovery::{Audit, RecoveryReport, RecoveryWorker, WaitingFor};
use production_agent_systems::{
    EffectContract, EffectExecutor, EffectLedger, EffectStatus, ExecutorOptions, HandlerContext,
    HandlerError, SqliteOptions,
};
use serde_json::{Value, json};

use crate::provider::{FileProvider, append_line};

const ROLE_ENV: &str = "PAS_RK_ROLE";
const LEDGER_ENV: &str = "PAS_RK_LEDGER";
const SCHEMA_ENV: &str = "PAS_RK_SCHEMA";
const DIR_ENV: &str = "PAS_RK_DIR";
const SLOT_ENV: &str = "PAS_RK_SLOT";
const SPAWN_ENV: &str = "PAS_RK_SPAWN";
const FATE_ENV: &str = "PAS_RK_FATE";
const SEED_ENV: &str = "PAS_RK_SEED";
const OPERATIONS_ENV: &str = "PAS_RK_OPERATIONS";
const GUARANTEED_ENV: &str = "PAS_RK_GUARANTEED";

const LEASE: Duration = Duration::from_millis(600);
/// A prepared operation older than this is the workers' (its caller died
/// between recording it and claiming it).
const MIN_AGE: Duration = Duration::from_millis(300);
const OPERATIONS: usize = 48;
const CALLER_SLOTS: usize = 3;
const WORKER_SLOTS: usize = 2;
/// Spawns that may die (by their fate or by SIGKILL); later ones are calm.
const CALLER_SPAWNS: usize = 15;
const WORKER_SPAWNS: usize = 10;
/// The provider's latency, before it commits and before its answer
/// arrives: a SIGKILL often lands inside a dispatch.
const LATENCY_MS: std::ops::Range<u64> = 0..15;
/// How often a process tries again when the ledger is busy (SQLite's lock
/// wait is at most a third of the lease).
const RETRIES: usize = 20;
/// How long the fleet may take to confirm everything.
const BUDGET: Duration = Duration::from_secs(40);

/// How a child process dies: at its first provider call, before sending or
/// after the provider committed, or not by itself.
const FATES: [&str; 3] = ["before_send", "after_commit", "none"];

fn invoice(i: usize) -> Value {
    json!({"invoice_id": format!("INV-{i:03}"), "amount_cents": 100 + i})
}

fn operation_id(i: usize) -> String {
    format!("invoice:INV-{i:03}:capture")
}

fn provider_key(i: usize) -> String {
    format!("capture:INV-{i:03}")
}

/// The capture with stored intent, and a probe that looks the payment up at
/// the provider by key: `committed`, or an authoritative `not_committed`.
/// `guaranteed`: the provider documents its idempotency keys, so a retry
/// after a dead caller is safe on the key alone.
fn contract(provider: &FileProvider, guaranteed: bool) -> EffectContract {
    let provider = provider.clone();
    effect_test_support::contracts::capture_payment()
        .provider_idempotency_guaranteed(guaranteed)
        .outcome_probe(move |_args, key| Ok(provider.lookup(key.ok_or("missing key")?)))
        .store_intent(true)
        .build()
        .unwrap()
}

fn files(dir: &Path) -> (FileProvider, PathBuf) {
    (
        FileProvider::new(&dir.join("provider.log")),
        dir.join("fates.log"),
    )
}

/// Where the ledger is, for every process: a SQLite file or a PostgreSQL
/// URL with its schema.
#[derive(Clone)]
struct Location {
    ledger: String,
    schema: Option<String>,
}

impl Location {
    fn open(&self) -> Arc<dyn EffectLedger> {
        let mut options = OpenOptions::default();
        options.sqlite = SqliteOptions::default().busy_timeout(LEASE / 3);
        #[cfg(feature = "postgres")]
        {
            options.postgres = options.postgres.pool_size(2);
        }
        if let Some(schema) = &self.schema {
            options = options.schema(schema.clone());
        }
        // Many processes write at once: opening may find SQLite busy for
        // longer than the busy timeout. A process starting up tries again.
        let mut tries = 0;
        loop {
            match open(&self.ledger, options.clone()) {
                Ok(ledger) => return ledger.into_dyn(),
                Err(err) if tries < RETRIES => eprintln!("opening the ledger: {err}"),
                Err(err) => panic!("opening the ledger: {err}"),
            }
            tries += 1;
            std::thread::sleep(LEASE / 4);
        }
    }

    fn executor(&self) -> EffectExecutor {
        EffectExecutor::with_options(
            self.open(),
            ExecutorOptions::default().dispatch_lease(LEASE),
        )
    }
}

/// The handler of a caller or worker: on its first call in this process it
/// meets the process's fate (logged before the process aborts), then it
/// sends to the provider as `role`, which answers after a while.
fn handler(
    provider: &FileProvider,
    fates: &Path,
    role: &'static str,
    fate: String,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Clone + Send + Sync + 'static {
    let (provider, fates) = (provider.clone(), fates.to_owned());
    move |_args, ctx| {
        let key = ctx.provider_key().unwrap_or_default().to_owned();
        let log_fate = |fate: &str| {
            append_line(
                &fates,
                &format!("{key}\t{fate}\t{role}\t{}", std::process::id()),
            );
        };
        let latency = || std::thread::sleep(Duration::from_millis(fastrand::u64(LATENCY_MS)));
        latency();
        match fate.as_str() {
            "before_send" => {
                log_fate("before_send");
                std::process::abort()
            }
            "after_commit" => {
                provider.receive(&key, role);
                log_fate("after_commit");
                std::process::abort()
            }
            _ => {
                let output = provider.receive(&key, role);
                latency();
                Ok(output)
            }
        }
    }
}

/// The caller and worker roles, run in child processes by the tests below.
/// Run directly (without the environment variables) it has nothing to do.
#[test]
fn recovery_kill_role() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    let env = |name: &str| std::env::var(name).unwrap();
    let location = Location {
        ledger: env(LEDGER_ENV),
        schema: std::env::var(SCHEMA_ENV).ok(),
    };
    let dir = PathBuf::from(env(DIR_ENV));
    let (provider, fates) = files(&dir);
    let fate = env(FATE_ENV);
    fastrand::seed(env(SEED_ENV).parse().unwrap());
    let contract = contract(&provider, env(GUARANTEED_ENV) == "1");
    let executor = location.executor();
    match role.as_str() {
        "caller" => {
            let slot: usize = env(SLOT_ENV).parse().unwrap();
            let operations: usize = env(OPERATIONS_ENV).parse().unwrap();
            let answers = dir.join(format!("answers-{}.jsonl", env(SPAWN_ENV)));
            let handler = handler(&provider, &fates, "caller", fate);
            for i in (slot..operations).step_by(CALLER_SLOTS) {
                // A caller never comes back for what a dead one started.
                let started = (0..=RETRIES).find_map(|_| {
                    let found = executor.ledger().get(&operation_id(i));
                    if found.is_err() {
                        std::thread::sleep(LEASE / 4);
                    }
                    found.ok().map(|record| record.is_some())
                });
                if started.expect("the ledger stays busy") {
                    continue;
                }
                // A busy ledger is an answer too; this live caller asks
                // again, as an agent would.
                for tries in 0.. {
                    let answer = match executor.execute(&contract, &invoice(i), handler.clone()) {
                        Ok(result) => json!({
                            "operation_id": result.operation_id,
                            "status": result.status.as_str(),
                            "in_progress": result.in_progress,
                        }),
                        Err(err)
                            if tries < RETRIES
                                && err.ledger_kind() == Some(LedgerErrorKind::Unavailable) =>
                        {
                            eprintln!("{}: {err}", operation_id(i));
                            std::thread::sleep(LEASE / 4);
                            continue;
                        }
                        Err(err) => {
                            json!({"operation_id": operation_id(i), "error": err.to_string()})
                        }
                    };
                    append_line(&answers, &answer.to_string());
                    break;
                }
            }
        }
        "worker" => {
            let reports = dir.join(format!("reports-{}.jsonl", env(SPAWN_ENV)));
            let worker = RecoveryWorker::new(executor)
                .register(contract, handler(&provider, &fates, "worker", fate))
                .unwrap()
                .min_age(MIN_AGE);
            // Until killed: the parent stops the fleet.
            loop {
                match worker.run_once() {
                    Ok(report) => append_line(&reports, &serde_json::to_string(&report).unwrap()),
                    // A listing that found the ledger busy: the next pass.
                    Err(err) => eprintln!("recovery pass failed: {err}"),
                }
                std::thread::sleep(LEASE / 4);
            }
        }
        other => panic!("unknown role {other}"),
    }
}

struct Fleet {
    dir: tempfile::TempDir,
    location: Location,
    guaranteed: bool,
    seed: u64,
}

impl Fleet {
    fn spawn(&self, role: &str, slot: usize, spawn: usize, fate: &str, operations: usize) -> Child {
        let logs = self.dir.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let stderr = std::fs::File::create(logs.join(format!("{role}-{spawn}.err"))).unwrap();
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([
                "--exact",
                "recovery_kill::recovery_kill_role",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE_ENV, role)
            .env(LEDGER_ENV, &self.location.ledger)
            .env(DIR_ENV, self.dir.path())
            .env(SLOT_ENV, slot.to_string())
            .env(SPAWN_ENV, format!("{role}-{spawn}"))
            .env(FATE_ENV, fate)
            .env(SEED_ENV, (self.seed * 1000 + spawn as u64).to_string())
            .env(OPERATIONS_ENV, operations.to_string())
            .env(GUARANTEED_ENV, if self.guaranteed { "1" } else { "0" })
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        if let Some(schema) = &self.location.schema {
            command.env(SCHEMA_ENV, schema);
        }
        command.spawn().unwrap()
    }

    /// Every line of the files named `{prefix}*.jsonl`.
    fn lines(&self, prefix: &str) -> Vec<Value> {
        let mut all = Vec::new();
        for entry in std::fs::read_dir(self.dir.path()).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with(prefix) && name.ends_with(".jsonl") {
                let text = std::fs::read_to_string(&path).unwrap();
                // A process killed mid-write may leave a torn last line.
                all.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
            }
        }
        all
    }

    fn stderr_of_all(&self) -> String {
        let mut out = String::new();
        let Ok(entries) = std::fs::read_dir(self.dir.path().join("logs")) else {
            return out;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.contains("panicked") {
                out.push_str(&format!("--- {}\n{text}\n", path.display()));
            }
        }
        out
    }
}

struct Running {
    child: Child,
    role: &'static str,
    slot: usize,
    calm: bool,
}

/// Whether every operation is confirmed; a busy ledger tells nothing yet.
fn all_confirmed(ledger: &dyn EffectLedger, operations: usize) -> bool {
    ledger.list(&ListQuery::new(1000)).is_ok_and(|records| {
        records.len() == operations && records.iter().all(|r| r.status == EffectStatus::Confirmed)
    })
}

/// The fleet under kill -9 until every operation is confirmed; then the
/// assertions of the module documentation.
#[allow(clippy::disallowed_methods)] // The fleet's real-time budget and pacing.
fn run_fleet(location: Location, dir: tempfile::TempDir, seed: u64) {
    let started = Instant::now();
    let fleet = Fleet {
        dir,
        location,
        guaranteed: true,
        seed,
    };
    let (provider, fates_log) = files(fleet.dir.path());
    let ledger = fleet.location.open();
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut running: Vec<Running> = Vec::new();
    let mut callers_done = [false; CALLER_SLOTS];
    let (mut caller_spawns, mut worker_spawns, mut kills) = (0, 0, 0);
    let mut ticks = 0;
    loop {
        let mut still = Vec::new();
        for mut r in running.drain(..) {
            match r.child.try_wait().unwrap() {
                Some(status) if r.role == "caller" && status.success() => {
                    callers_done[r.slot] = true;
                }
                Some(_) => {}
                None => still.push(r),
            }
        }
        running = still;
        for (slot, done) in callers_done.iter().enumerate() {
            if *done || running.iter().any(|r| r.role == "caller" && r.slot == slot) {
                continue;
            }
            let calm = caller_spawns >= CALLER_SPAWNS;
            let fate = if calm {
                "none"
            } else {
                FATES[caller_spawns % 3]
            };
            let child = fleet.spawn("caller", slot, caller_spawns, fate, OPERATIONS);
            caller_spawns += 1;
            running.push(Running {
                child,
                role: "caller",
                slot,
                calm,
            });
        }
        for slot in 0..WORKER_SLOTS {
            if running.iter().any(|r| r.role == "worker" && r.slot == slot) {
                continue;
            }
            let calm = worker_spawns >= WORKER_SPAWNS;
            let fate = if calm {
                "none"
            } else {
                FATES[worker_spawns % 3]
            };
            let child = fleet.spawn("worker", slot, worker_spawns, fate, OPERATIONS);
            worker_spawns += 1;
            running.push(Running {
                child,
                role: "worker",
                slot,
                calm,
            });
        }
        if callers_done.iter().all(|d| *d) && all_confirmed(ledger.as_ref(), OPERATIONS) {
            break;
        }
        assert!(
            started.elapsed() < BUDGET,
            "seed {seed}: not all confirmed after {ticks} ticks: {:?}\n{}",
            ledger
                .list(&ListQuery::new(1000))
                .unwrap_or_default()
                .iter()
                .map(|r| format!("{} {}", r.operation_id, r.status))
                .collect::<Vec<_>>(),
            fleet.stderr_of_all()
        );
        ticks += 1;
        std::thread::sleep(Duration::from_millis(rng.u64(20..150)));
        // Now and then, kill -9 a caller or worker wherever it is.
        let victims: Vec<usize> = (0..running.len()).filter(|&i| !running[i].calm).collect();
        if !victims.is_empty() && rng.u32(0..3) == 0 {
            let victim = &mut running[victims[rng.usize(0..victims.len())]];
            victim.child.kill().unwrap();
            victim.child.wait().unwrap();
            kills += 1;
        }
    }
    for r in &mut running {
        r.child.kill().unwrap();
        r.child.wait().unwrap();
    }
    let panics = fleet.stderr_of_all();
    assert!(
        panics.is_empty(),
        "seed {seed}: a child panicked:\n{panics}"
    );

    // Every operation asked for, and only those, is confirmed.
    let records = ledger.list(&ListQuery::new(1000)).unwrap();
    let ids: BTreeSet<String> = records.iter().map(|r| r.operation_id.clone()).collect();
    let expected: BTreeSet<String> = (0..OPERATIONS).map(operation_id).collect();
    assert_eq!(ids, expected, "seed {seed}: the operations run");
    for record in &records {
        assert_eq!(
            record.status,
            EffectStatus::Confirmed,
            "seed {seed}: {record:?}"
        );
        let events = ledger.events(&record.operation_id).unwrap();
        assert!(intent::stored(&events).is_some(), "stored intent");
    }

    // One request at the provider and one committed effect per operation.
    let mut commits = provider.commits();
    commits.sort();
    let keys: Vec<String> = (0..OPERATIONS).map(provider_key).collect();
    assert_eq!(
        commits, keys,
        "seed {seed}: exactly one effect per operation"
    );
    let requests = provider.requests();
    let mut by_key: BTreeMap<&str, Vec<(&str, u32)>> = BTreeMap::new();
    for (key, by, pid) in &requests {
        by_key.entry(key).or_default().push((by, *pid));
    }
    let twice: Vec<_> = by_key.iter().filter(|(_, r)| r.len() != 1).collect();
    assert!(twice.is_empty(), "seed {seed}: dispatched twice: {twice:?}");
    assert_eq!(requests.len(), OPERATIONS);

    // Each process that died at its provider call: who sent in the end.
    let fates = std::fs::read_to_string(&fates_log).unwrap_or_default();
    let mut died = BTreeMap::<(&str, &str), usize>::new();
    for line in fates.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        let [key, fate, role, pid] = fields[..] else {
            panic!("torn fate line {line:?}")
        };
        let pid: u32 = pid.parse().unwrap();
        *died.entry((role, fate)).or_default() += 1;
        let (sender, sender_pid) = by_key[key][0];
        match fate {
            // Died before sending: a worker sent, another process than it.
            "before_send" => assert!(
                sender == "worker" && sender_pid != pid,
                "seed {seed}: {key} died before sending in {role} {pid}, sent by {sender} {sender_pid}"
            ),
            // Died after the commit: its request is the only one.
            _ => assert_eq!(sender_pid, pid, "seed {seed}: {key} sent again"),
        }
    }
    assert!(
        died.get(&("caller", "before_send")).is_some_and(|n| *n > 0)
            && died
                .get(&("caller", "after_commit"))
                .is_some_and(|n| *n > 0),
        "seed {seed}: callers died at both moments: {died:?}"
    );

    // Every caller that answered got a result or an in-progress answer.
    let answers = fleet.lines("answers-");
    assert!(!answers.is_empty());
    for answer in &answers {
        assert!(answer.get("error").is_none(), "seed {seed}: {answer}");
        assert!(
            answer["status"] == "confirmed" || answer["in_progress"] == true,
            "seed {seed}: {answer}"
        );
    }
    // No worker pass met an operation it could not finish.
    let reports = fleet.lines("reports-");
    let sum = |field: &str| -> u64 { reports.iter().map(|r| r[field].as_u64().unwrap()).sum() };
    assert_eq!(
        (
            sum("waiting_for_caller"),
            sum("unregistered"),
            sum("unusable_intent")
        ),
        (0, 0, 0)
    );
    let by_workers = requests.iter().filter(|(_, by, _)| by == "worker").count();
    assert!(
        by_workers > 0,
        "seed {seed}: the workers dispatched nothing"
    );

    // A pass after recovery finds nothing left to do.
    let worker = RecoveryWorker::new(fleet.location.executor())
        .register(contract(&provider, true), |_: Value, _: HandlerContext| {
            Err::<Value, _>(HandlerError::not_sent("nothing is left to dispatch"))
        })
        .unwrap()
        .min_age(Duration::ZERO);
    let mut idle = worker.run_once().unwrap();
    assert_eq!(idle.pages, 4, "one empty page of each listing");
    idle.pages = 0;
    assert_eq!(idle, RecoveryReport::default());
    eprintln!(
        "recovery under kill -9, seed {seed}: {OPERATIONS} operations, {caller_spawns} callers, \
         {worker_spawns} workers, {kills} SIGKILLs, deaths {died:?}, {} answers, {} worker passes, \
         {by_workers} sent by workers, in {:?}",
        answers.len(),
        reports.len(),
        started.elapsed()
    );
}

#[test]
fn callers_and_recovery_workers_killed_at_random_commit_each_operation_once_on_sqlite() {
    if !effect_test_support::slow::enabled(
        "callers_and_recovery_workers_killed_at_random_commit_each_operation_once_on_sqlite",
    ) {
        return;
    }
    for seed in [7, 8, 9] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("effects.sqlite3");
        let location = Location {
            ledger: path.to_str().unwrap().to_owned(),
            schema: None,
        };
        // Created once, so the children do not race to create the schema.
        drop(location.open());
        run_fleet(location, dir, seed);
    }
}

#[cfg(feature = "postgres")]
#[test]
fn callers_and_recovery_workers_killed_at_random_commit_each_operation_once_on_postgres() {
    if !effect_test_support::slow::enabled(
        "callers_and_recovery_workers_killed_at_random_commit_each_operation_once_on_postgres",
    ) {
        return;
    }
    let Some(url) = effect_test_support::servers::postgres_url(
        "callers_and_recovery_workers_killed_at_random_commit_each_operation_once_on_postgres",
    ) else {
        return;
    };
    for seed in [11, 12] {
        // A schema of this run's own, dropped at the end.
        let mut options = OpenOptions::default();
        options.postgres = options.postgres.pool_size(2);
        let base = LedgerUrl::parse(&url).unwrap();
        let fresh = open_fresh(&base, "recovery_kill", options).unwrap();
        let location = Location {
            ledger: url.clone(),
            schema: fresh.schema().map(str::to_owned),
        };
        run_fleet(location, tempfile::tempdir().unwrap(), seed);
        fresh.remove().unwrap();
    }
}

/// Issue: an authorized retry stopped at `prepared`, and nothing dispatched
/// it. The agent dies after its claim; the recovery worker finds the expired
/// dispatch, the probe says `not_committed`, and with no guaranteed key it
/// quarantines it (a dead handler cannot be told from a slow one). The
/// operator, who knows the process is dead, authorizes the retry; the next
/// worker pass captures once, and a later pass does nothing.
#[test]
#[allow(clippy::disallowed_methods)] // The dead caller's lease runs out on the real clock.
fn an_authorized_retry_is_carried_out_once_by_a_recovery_worker() {
    let dir = tempfile::tempdir().unwrap();
    let location = Location {
        ledger: dir
            .path()
            .join("effects.sqlite3")
            .to_str()
            .unwrap()
            .to_owned(),
        schema: None,
    };
    let fleet = Fleet {
        dir,
        location,
        guaranteed: false,
        seed: 1,
    };
    let (provider, _) = files(fleet.dir.path());
    // The agent: claims INV-000 and dies by abort before sending.
    let status = fleet
        .spawn("caller", 0, 0, "before_send", 1)
        .wait()
        .unwrap();
    assert!(!status.success(), "the agent dies by abort");
    assert!(
        provider.requests().is_empty(),
        "nothing reached the provider"
    );

    let executor = fleet.location.executor();
    let ledger = executor.ledger();
    let id = operation_id(0);
    assert_eq!(
        ledger.get(&id).unwrap().unwrap().status,
        EffectStatus::Dispatched
    );
    let worker = RecoveryWorker::new(executor.clone())
        .register(
            contract(&provider, false),
            handler(&provider, Path::new("/dev/null"), "worker", "none".into()),
        )
        .unwrap()
        .min_age(Duration::ZERO);

    // Passes until the dead agent's lease ran out and the worker settled it.
    let give_up = Instant::now() + Duration::from_secs(20);
    let mut passes = 0;
    let report = loop {
        let report = worker.run_once().unwrap();
        passes += 1;
        if report.examined > 0 {
            break report;
        }
        assert!(
            Instant::now() < give_up,
            "not expired after {passes} passes"
        );
        std::thread::sleep(LEASE / 4);
    };
    assert_eq!((report.examined, report.quarantined), (1, 1), "{report:?}");
    assert_eq!(
        ledger.get(&id).unwrap().unwrap().status,
        EffectStatus::Quarantined
    );
    assert!(provider.requests().is_empty(), "no blind second dispatch");

    // The record says the handler may still run: a plain authorization is
    // refused; the operator states that the process is dead.
    let audit = || Audit::new("on-call", "the agent's process is dead", "INC-24");
    assert!(executor.operator().authorize_retry(&id, audit()).is_err());
    let authorized = executor
        .operator()
        .authorize_retry_handler_stopped(&id, audit())
        .unwrap();
    assert_eq!(authorized.status, EffectStatus::Prepared);
    // Not silently waiting: the operator sees it is the worker's to do.
    let waiting = production_agent_systems::recovery::waiting(ledger.as_ref()).unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].operation_id, id);
    assert_eq!(waiting[0].waiting_for, WaitingFor::RecoveryWorker);

    let report = worker.run_once().unwrap();
    assert_eq!((report.examined, report.confirmed), (1, 1), "{report:?}");
    let record = ledger.get(&id).unwrap().unwrap();
    assert_eq!(record.status, EffectStatus::Confirmed);
    assert_eq!(record.output.unwrap()["payment_id"], "pay-capture:INV-000");
    assert_eq!(provider.commits(), [provider_key(0)]);
    let requests = provider.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].1, "worker");

    // Carried out once: a second pass finds nothing, sends nothing.
    let mut idle = worker.run_once().unwrap();
    assert_eq!(idle.pages, 4, "one empty page of each listing");
    idle.pages = 0;
    assert_eq!(idle, RecoveryReport::default());
    assert_eq!(provider.requests().len(), 1);
    let events: Vec<String> = ledger
        .events(&id)
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(events.iter().filter(|e| *e == "dispatched").count(), 2);
    assert_eq!(events.last().map(String::as_str), Some("confirmed"));
}
