//! A mixed fleet during a migration: a Python worker (`production-agent-systems`
//! 1.0.1 from PyPI, run by `tests/python/mixed_worker.py`) and a Rust worker
//! process share one SQLite ledger and one file-backed fake provider.
//!
//! Both run the same operation ids in different orders at the same time, with
//! failures injected before the provider commits and acknowledgements lost
//! after it. Then each side reconciles what the other left uncertain, and
//! replays what the other recorded. Every caller on both sides must end with a
//! result or an in-progress answer, never a conflict, and the provider must
//! hold exactly one committed effect per operation.
//!
//! `EFFECT_TEST_PYTHON` names a Python with the package installed (`cargo xtask ci`
//! creates one). Without it the test says it skipped, unless
//! `EFFECT_REQUIRE_PYTHON=1` (set by CI) makes that a failure.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use production_agent_systems::effect_core::FingerprintForm;
use production_agent_systems::{
    EffectExecutor, EffectLedger, ExecutorOptions, HandlerContext, HandlerError,
    OutcomeProbeResult, SqliteLedger, SqliteOptions,
};
use serde_json::{Value, json};

const PYTHON_ENV: &str = "EFFECT_TEST_PYTHON";
const REQUIRE_ENV: &str = "EFFECT_REQUIRE_PYTHON";
const ROLE_ENV: &str = "PAS_MIXED_RUST_WORKER";

/// Operations both workers run at once.
const SHARED: usize = 300;
/// How long the fake provider takes to commit (both sides).
const PROVIDER_LATENCY: Duration = Duration::from_millis(3);
/// Operations one side leaves uncertain and the other reconciles, per side.
const HANDED_OVER: usize = 20;

/// The provider both workers share (the Python worker has the same one):
/// commits are lines `invoice_id<TAB>payment_id` in `effects.log`, written and
/// read under an exclusive lock on `lock`.
struct FileProvider {
    log: PathBuf,
    lock: PathBuf,
}

impl FileProvider {
    fn new(dir: &Path) -> Self {
        FileProvider {
            log: dir.join("effects.log"),
            lock: dir.join("lock"),
        }
    }

    fn locked<T>(&self, f: impl FnOnce() -> T) -> T {
        let lock = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.lock)
            .unwrap();
        lock.lock().unwrap();
        let result = f();
        lock.unlock().unwrap();
        result
    }

    fn commits(&self) -> Vec<(String, String)> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let (invoice, payment) = line.split_once('\t').unwrap();
                (invoice.to_owned(), payment.to_owned())
            })
            .collect()
    }

    fn capture(&self, invoice_id: &str) -> Value {
        let payment = format!("pay-rs-{}-{invoice_id}", std::process::id());
        // A provider call takes a while: the fleets overlap on operations.
        std::thread::sleep(PROVIDER_LATENCY);
        self.locked(|| {
            let mut log = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)
                .unwrap();
            writeln!(log, "{invoice_id}\t{payment}").unwrap();
        });
        json!({"payment_id": payment, "invoice_id": invoice_id, "status": "captured"})
    }

    fn probe(&self, invoice_id: &str) -> OutcomeProbeResult {
        let found = self.locked(|| {
            self.commits()
                .into_iter()
                .find(|(invoice, _)| invoice == invoice_id)
        });
        match found {
            Some((_, payment)) => OutcomeProbeResult::committed(
                json!({"payment_id": payment, "invoice_id": invoice_id, "status": "captured"}),
            )
            .provider_operation_id(payment)
            .evidence("source", "file_provider"),
            None => OutcomeProbeResult::not_committed()
                .evidence("source", "file_provider")
                .evidence("terminal", true),
        }
    }
}

/// The Rust worker, run in a child process by the test below with its
/// configuration (the Python worker's, see `mixed_worker.py`) in the
/// environment. Run directly (without the variable) it has nothing to do.
#[test]
fn mixed_fleet_rust_worker_role() {
    let Ok(config) = std::env::var(ROLE_ENV) else {
        return;
    };
    let config: Value = serde_json::from_str(&config).unwrap();
    let path = |key: &str| PathBuf::from(config[key].as_str().unwrap());
    let ledger = SqliteLedger::open(
        path("ledger"),
        SqliteOptions::default().busy_timeout(Duration::from_secs(30)),
    )
    .unwrap();
    // The setting for a ledger shared with Python workers; the lease is twice
    // the busy timeout, which a renewal may wait while Python writes.
    let options = ExecutorOptions::default()
        .fingerprint_form(FingerprintForm::Sha256)
        .dispatch_lease(Duration::from_secs(60));
    let executor = EffectExecutor::with_options(Arc::new(ledger), options);
    let provider = Arc::new(FileProvider::new(&path("provider")));
    let arguments: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(path("arguments")).unwrap()).unwrap();
    let index_of: HashMap<String, usize> = arguments
        .iter()
        .enumerate()
        .map(|(i, args)| (args["invoice_id"].as_str().unwrap().to_owned(), i))
        .collect();
    let faults = config["faults"].as_str().unwrap().to_owned();
    let pending = config["probe"] == "pending";
    let probing = Arc::clone(&provider);
    let contract = effect_test_support::contracts::capture_payment()
        .outcome_probe(move |args, _key| {
            if pending {
                return Ok(OutcomeProbeResult::pending());
            }
            Ok(probing.probe(args["invoice_id"].as_str().ok_or("missing invoice_id")?))
        })
        // The Rust side stores its intent (beside the columns Python reads).
        .store_intent(true)
        .build()
        .unwrap();
    let faulted = Arc::new(Mutex::new(HashSet::new()));
    let index_of = Arc::new(index_of);
    let mut out = File::create(path("out")).unwrap();
    for index in config["order"].as_array().unwrap() {
        let args = &arguments[usize::try_from(index.as_u64().unwrap()).unwrap()];
        let invoice_id = args["invoice_id"].as_str().unwrap().to_owned();
        let faults = faults.clone();
        let (provider, faulted, index_of) = (
            Arc::clone(&provider),
            Arc::clone(&faulted),
            Arc::clone(&index_of),
        );
        let handler = move |args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            let invoice_id = args["invoice_id"].as_str().unwrap_or_default().to_owned();
            let index = index_of[&invoice_id];
            let first = faulted.lock().unwrap().insert(invoice_id.clone());
            let mixed = faults == "mixed" && first;
            if mixed && index % 6 == 1 {
                return Err(HandlerError::unknown(
                    "injected failure before the provider commits",
                ));
            }
            let result = provider.capture(&invoice_id);
            let lost_ack = faults == "lost_ack" && first;
            if lost_ack || (mixed && index % 6 == 3) {
                return Err(HandlerError::unknown(
                    "injected lost acknowledgement after the commit",
                ));
            }
            Ok(result)
        };
        let answer = match executor.execute(&contract, args, handler) {
            Ok(result) => json!({
                "invoice_id": invoice_id,
                "side": "rust",
                "status": result.status.as_str(),
                "in_progress": result.in_progress,
                "duplicate_suppressed": result.duplicate_suppressed,
                "output": result.output,
            }),
            Err(err) => json!({
                "invoice_id": invoice_id,
                "side": "rust",
                "conflict": err.is_conflict(),
                "error": format!("{err:#}"),
            }),
        };
        writeln!(out, "{answer}").unwrap();
    }
}

/// One run of a worker: which operations, in which order, how.
struct Run<'a> {
    name: &'a str,
    order: Vec<usize>,
    faults: &'a str,
    probe: &'a str,
    /// The Python worker lists the ledger after its run.
    listing: bool,
}

struct Fleet {
    dir: tempfile::TempDir,
    python: PathBuf,
    provider: FileProvider,
}

impl Fleet {
    fn config(&self, run: &Run<'_>) -> Value {
        let dir = self.dir.path();
        json!({
            "ledger": dir.join("ledger.sqlite3"),
            "provider": dir,
            "arguments": dir.join("arguments.json"),
            "order": run.order,
            "faults": run.faults,
            "probe": run.probe,
            "out": dir.join(format!("{}.jsonl", run.name)),
            "listing": run.listing.then(|| dir.join(format!("{}.listing.json", run.name))),
        })
    }

    fn spawn_python(&self, run: &Run<'_>) -> Child {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/mixed_worker.py");
        Command::new(&self.python)
            .arg(script)
            .arg(self.config(run).to_string())
            .spawn()
            .unwrap()
    }

    fn spawn_rust(&self, run: &Run<'_>) -> Child {
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "mixed_fleet::mixed_fleet_rust_worker_role",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE_ENV, self.config(run).to_string())
            .spawn()
            .unwrap()
    }

    /// The answers a finished run wrote, one per caller.
    fn answers(&self, run: &Run<'_>, mut child: Child) -> Vec<Value> {
        let status = child.wait().unwrap();
        assert!(status.success(), "worker run {} failed: {status}", run.name);
        let text =
            std::fs::read_to_string(self.dir.path().join(format!("{}.jsonl", run.name))).unwrap();
        let answers: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(answers.len(), run.order.len(), "run {}", run.name);
        answers
    }

    fn run_python(&self, run: &Run<'_>) -> Vec<Value> {
        self.answers(run, self.spawn_python(run))
    }

    fn run_rust(&self, run: &Run<'_>) -> Vec<Value> {
        self.answers(run, self.spawn_rust(run))
    }
}

/// The arguments of every operation: invoices with floats Python and serde_json
/// write differently (`1e-05`), random 17-digit doubles, and non-ASCII text.
fn arguments() -> Vec<Value> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // 53 random bits: a double in [0, 1) with up to 17 significant digits.
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let invoice = |prefix: &str, i: usize, random: &mut dyn FnMut() -> f64| {
        json!({
            "invoice_id": format!("{prefix}-{i:04}"),
            "amount": random() * 1000.0,
            "rate": 1e-5 * (i as f64 + 1.0),
            "fee": random() * 1e-7,
            "cents": i * 125,
            "note": "zürich 😀",
        })
    };
    let mut all = Vec::new();
    for i in 0..SHARED {
        all.push(invoice("MIX", i, &mut random));
    }
    for prefix in ["RS2PY", "PY2RS"] {
        for i in 0..HANDED_OVER {
            all.push(invoice(prefix, i, &mut random));
        }
    }
    all
}

fn python() -> Option<PathBuf> {
    match std::env::var_os(PYTHON_ENV) {
        Some(path) => Some(PathBuf::from(path)),
        None if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") => {
            panic!("{PYTHON_ENV} is not set and {REQUIRE_ENV}=1: CI must run the mixed-fleet test")
        }
        None => {
            eprintln!(
                "skipped: set {PYTHON_ENV} to a Python with production-agent-systems==1.0.1 \
                 to run the mixed-fleet test"
            );
            None
        }
    }
}

/// Every caller's answer is a result or an in-progress answer, never an error.
///
/// The Python package 1.0.1 answers a caller that lost the claim twice in a
/// row (to the other fleet) with the record as it then stands, `prepared` or
/// `dispatched`, without setting `in_progress` (the end of the dispatch loop
/// of its `effect_executor.py`): on the Python side that non-terminal status
/// is its in-progress answer. The Rust side must say `in_progress`.
fn assert_answered(run: &str, answers: &[Value]) {
    for answer in answers {
        assert!(
            answer.get("error").is_none(),
            "{run}: a caller got an error: {answer}"
        );
        let definitive = matches!(
            answer["status"].as_str(),
            Some("confirmed" | "rejected" | "outcome_unknown" | "quarantined")
        );
        let python_in_progress = answer["side"] == "python"
            && matches!(answer["status"].as_str(), Some("prepared" | "dispatched"));
        assert!(
            definitive || answer["in_progress"] == true || python_in_progress,
            "{run}: a caller ended without an answer: {answer}"
        );
    }
}

/// `0..n` in a seeded random order (Fisher-Yates over xorshift).
fn shuffled(n: usize) -> Vec<usize> {
    let mut order = indices(0..n);
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    for i in (1..n).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(i, usize::try_from(state % (i as u64 + 1)).unwrap());
    }
    order
}

fn indices(range: std::ops::Range<usize>) -> Vec<usize> {
    range.collect()
}

#[test]
#[allow(clippy::disallowed_methods)] // Reports the real time the fleet took.
fn python_and_rust_workers_share_one_ledger() {
    let Some(python) = python() else {
        return;
    };
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let fleet = Fleet {
        provider: FileProvider::new(dir.path()),
        dir,
        python,
    };
    let arguments = arguments();
    std::fs::write(
        fleet.dir.path().join("arguments.json"),
        serde_json::to_string(&arguments).unwrap(),
    )
    .unwrap();
    let rs2py = indices(SHARED..SHARED + HANDED_OVER);
    let py2rs = indices(SHARED + HANDED_OVER..SHARED + 2 * HANDED_OVER);

    // The Python fleet was there first: it creates the ledger, and leaves some
    // operations uncertain (its probe answers "pending" after lost acks).
    let python_left = fleet.run_python(&Run {
        name: "python-leaves-uncertain",
        order: py2rs.clone(),
        faults: "lost_ack",
        probe: "pending",
        listing: false,
    });
    assert_answered("python-leaves-uncertain", &python_left);

    // Both fleets at once on the same operations, in different orders. The
    // Rust worker opens (and migrates) the ledger while Python writes to it.
    let forward = Run {
        name: "python-shared",
        order: indices(0..SHARED),
        faults: "mixed",
        probe: "provider",
        listing: false,
    };
    let backward = Run {
        name: "rust-shared",
        order: shuffled(SHARED),
        faults: "mixed",
        probe: "provider",
        listing: false,
    };
    let python_child = fleet.spawn_python(&forward);
    let rust_child = fleet.spawn_rust(&backward);
    let python_shared = fleet.answers(&forward, python_child);
    let rust_shared = fleet.answers(&backward, rust_child);
    let conflicts = python_shared
        .iter()
        .chain(&rust_shared)
        .filter(|a| a["conflict"] == true)
        .count();
    assert_eq!(conflicts, 0, "operation conflicts in the shared run");
    assert_answered("python-shared", &python_shared);
    assert_answered("rust-shared", &rust_shared);
    for (side, answers) in [("python", &python_shared), ("rust", &rust_shared)] {
        let count = |key: &str| answers.iter().filter(|a| a[key] == true).count();
        eprintln!(
            "mixed fleet, {side} side: {} callers, {} replayed, {} in progress",
            answers.len(),
            count("duplicate_suppressed"),
            count("in_progress"),
        );
    }

    // Handing over uncertain operations: Rust leaves some, Python reconciles
    // them; Rust reconciles what Python left. No handler runs again: the
    // provider's probe finds each commit.
    let rust_left = fleet.run_rust(&Run {
        name: "rust-leaves-uncertain",
        order: rs2py.clone(),
        faults: "lost_ack",
        probe: "pending",
        listing: false,
    });
    assert_answered("rust-leaves-uncertain", &rust_left);
    let mut handed_over = Vec::new();
    for (name, order, by_python) in [
        ("python-reconciles", rs2py.clone(), true),
        ("rust-reconciles", py2rs.clone(), false),
    ] {
        let run = Run {
            name,
            order,
            faults: "none",
            probe: "provider",
            listing: false,
        };
        let answers = if by_python {
            fleet.run_python(&run)
        } else {
            fleet.run_rust(&run)
        };
        assert_answered(name, &answers);
        handed_over.extend(answers);
    }

    // Replays: each side replays every operation, whoever recorded it.
    let everything = indices(0..arguments.len());
    let mut replays = fleet.run_python(&Run {
        name: "python-replays",
        order: everything.clone(),
        faults: "none",
        probe: "provider",
        listing: true,
    });
    replays.extend(fleet.run_rust(&Run {
        name: "rust-replays",
        order: everything,
        faults: "none",
        probe: "provider",
        listing: false,
    }));

    // Exactly one committed effect per operation, across both fleets.
    let mut effects: BTreeMap<String, usize> = BTreeMap::new();
    for (invoice, _) in fleet.provider.commits() {
        *effects.entry(invoice).or_default() += 1;
    }
    let by_rust = fleet
        .provider
        .commits()
        .iter()
        .filter(|(_, payment)| payment.starts_with("pay-rs-"))
        .count();
    eprintln!("mixed fleet: {by_rust} of the effects committed by the rust worker");
    let duplicated: Vec<_> = effects.iter().filter(|(_, n)| **n != 1).collect();
    assert!(duplicated.is_empty(), "duplicate effects: {duplicated:?}");
    assert_eq!(effects.len(), arguments.len(), "an operation has no effect");

    // What was left uncertain was left uncertain (so the handover was real),
    // and then confirmed by the other side's probe.
    for answer in python_left.iter().chain(&rust_left) {
        assert_eq!(answer["status"], "outcome_unknown", "{answer}");
    }
    for answer in &handed_over {
        assert_eq!(answer["status"], "confirmed", "{answer}");
    }
    // Every replay is the stored result, on both sides.
    for answer in &replays {
        assert_eq!(answer["status"], "confirmed", "{answer}");
        assert_eq!(answer["duplicate_suppressed"], true, "{answer}");
    }
    let python_replays = &replays[..arguments.len()];
    let rust_replays = &replays[arguments.len()..];
    for (py, rs) in python_replays.iter().zip(rust_replays) {
        assert_eq!(
            py["output"], rs["output"],
            "both sides replay the same output"
        );
    }

    // Every record carries the fingerprint Python wrote or can read.
    let ledger = SqliteLedger::open(
        fleet.dir.path().join("ledger.sqlite3"),
        SqliteOptions::default().read_only(true),
    )
    .unwrap();
    let records = ledger
        .list(&production_agent_systems::effect_core::ListQuery::new(1000))
        .unwrap();
    assert_eq!(records.len(), arguments.len());
    // The status counters `stats` reads stayed true under the Python
    // writers (triggers keep them, whoever writes).
    let counted: BTreeMap<String, u64> = ledger
        .stats()
        .unwrap()
        .counts
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(status, n)| (status.as_str().to_owned(), n))
        .collect();
    let mut by_status: BTreeMap<String, u64> = Default::default();
    for record in &records {
        *by_status
            .entry(record.status.as_str().to_owned())
            .or_default() += 1;
    }
    assert_eq!(counted, by_status);
    assert_eq!(counted.get("confirmed"), Some(&(arguments.len() as u64)));
    for record in &records {
        let fingerprint = &record.request_fingerprint;
        assert!(
            fingerprint.len() == 64 && fingerprint.bytes().all(|b| b.is_ascii_hexdigit()),
            "{}: {fingerprint}",
            record.operation_id
        );
    }

    // Stored intent is on for the Rust side: what Rust prepared holds it
    // (the operations it left uncertain for Python, at least), what Python
    // prepared does not.
    let stored = |id: &str| {
        production_agent_systems::effect_core::intent::stored(&ledger.events(id).unwrap()).is_some()
    };
    let id = |i: usize| {
        format!(
            "invoice:{}:capture",
            arguments[i].get("invoice_id").unwrap().as_str().unwrap()
        )
    };
    assert!(
        rs2py.iter().all(|&i| stored(&id(i))),
        "Rust stored its intent"
    );
    assert!(!py2rs.iter().any(|&i| stored(&id(i))), "Python stores none");
    let with_intent = records.iter().filter(|r| stored(&r.operation_id)).count();
    assert!(
        with_intent >= HANDED_OVER,
        "{with_intent} with stored intent"
    );

    // The Python package lists and reads every operation of the file, those
    // with stored intent included: the status Rust reads, and the events.
    let listing: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(fleet.dir.path().join("python-replays.listing.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        listing.len(),
        arguments.len(),
        "Python lists every operation"
    );
    for listed in &listing {
        let id = listed["operation_id"].as_str().unwrap();
        assert_eq!(listed["status"], "confirmed", "{listed}");
        let events = ledger.events(id).unwrap();
        let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(
            listed["events"],
            json!(types),
            "{id}: Python reads the events"
        );
    }
    eprintln!(
        "mixed fleet: {with_intent} operations with stored intent; {} operations in {:?}",
        arguments.len(),
        started.elapsed()
    );
}
