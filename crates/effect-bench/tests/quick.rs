//! Runs the benchmark binary in `--quick` mode: every workload must meet its
//! correctness condition (`ok`) and print a line of the documented shape.
//! Speed is not checked here; the targets are read from `--check` output.

use std::process::Command;

use serde_json::Value;

const WORKLOADS: [&str; 15] = [
    "W0", "W0n", "W0r", "W1", "W1d", "W1i", "W2", "W3", "W4", "W4d", "W5", "W6", "W7", "W8", "W9",
];

#[test]
fn every_workload_is_ok_in_quick_mode() -> Result<(), Box<dyn std::error::Error>> {
    let output = Command::new(env!("CARGO_BIN_EXE_effect-bench"))
        .args(["--quick", "--check"])
        .output()?;
    let stdout = String::from_utf8(output.stdout)?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {}\n{stdout}\n{stderr}",
        output.status
    );

    let lines: Vec<Value> = stdout
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let (check, workloads) = lines.split_last().ok_or("no output")?;
    let ids: Vec<&str> = workloads
        .iter()
        .map(|l| l["workload"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(ids, WORKLOADS);
    for (line, text) in workloads.iter().zip(stdout.lines()) {
        check_line(line);
        check_key_order(text);
    }
    assert_eq!(check["workload"], "check");
    assert_eq!(check["ok"], true);
    assert!(check["targets"].as_array().is_some_and(|t| !t.is_empty()));
    Ok(())
}

#[test]
fn one_workload_can_be_selected() -> Result<(), Box<dyn std::error::Error>> {
    let output = Command::new(env!("CARGO_BIN_EXE_effect-bench"))
        .args(["--quick", "--workload", "w3", "--runs", "2"])
        .output()?;
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout)?;
    let lines: Vec<Value> = stdout
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(lines.len(), 1);
    check_line(&lines[0]);
    assert_eq!(lines[0]["workload"], "W3");
    assert_eq!(lines[0]["handler_calls"], 0);
    assert_eq!(lines[0]["runs"], 2);
    Ok(())
}

/// W8's reads-only mode fills the ledger it is asked for, checks `stats`
/// against a full count and stops before the writer and the prunes.
#[test]
fn w8_can_time_the_reads_alone() -> Result<(), Box<dyn std::error::Error>> {
    let output = Command::new(env!("CARGO_BIN_EXE_effect-bench"))
        .args([
            "--workload",
            "W8",
            "--maintenance-reads-only",
            "--maintenance-size",
            "2500",
        ])
        .output()?;
    let stdout = String::from_utf8(output.stdout)?;
    assert!(output.status.success(), "{stdout}");
    let line: Value = serde_json::from_str(stdout.trim())?;
    check_line(&line);
    assert_eq!(line["ok"], true);
    assert_eq!(line["ledger_operations"], 2500);
    assert_eq!(line["n"], 2500);
    assert!(line["stats_ms"].as_f64().is_some_and(|ms| ms > 0.0));
    assert!(line.get("prune_alone_operations").is_none(), "{line}");
    assert!(line.get("writer_p99_ms").is_none(), "{line}");
    Ok(())
}

/// `--maintenance-prune N` prunes the oldest N confirmed operations alone
/// and the next N beside the writer, and leaves the rest (W8's own check:
/// the confirmed operations left are the fill's not pruned and the
/// writer's); more than half the ledger is refused with what to pass.
#[test]
fn w8_can_prune_part_of_the_ledger() -> Result<(), Box<dyn std::error::Error>> {
    let line = ok_line(&["--quick", "--workload", "W8", "--maintenance-prune", "500"])?;
    assert_eq!(line["ledger_operations"], 3000);
    // Of the first 1,000 operations, 2 % are unresolved and stay.
    let alone = line["prune_alone_operations"].as_u64().unwrap_or(0);
    let beside = line["n"].as_u64().unwrap_or(0);
    assert!((480..=500).contains(&alone), "{line}");
    assert!((480..=500).contains(&beside), "{line}");

    let output = Command::new(env!("CARGO_BIN_EXE_effect-bench"))
        .args(["--quick", "--workload", "W8", "--maintenance-prune", "1501"])
        .output()?;
    let stderr = String::from_utf8(output.stderr)?;
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    assert!(
        stderr.contains("--maintenance-prune 1501 is more than half of the ledger's 3000")
            && stderr.contains("pass at most 1500"),
        "{stderr}"
    );
    Ok(())
}

/// W8 on PostgreSQL: the fill, the reads, both prunes and the writer beside
/// the second, with the same correctness check as on SQLite; the writer
/// alone is timed on the effects asked for, and the server's log during
/// the prune beside it is measured.
#[test]
fn w8_runs_on_postgres() -> Result<(), Box<dyn std::error::Error>> {
    let Some(url) = effect_test_support::servers::postgres_url("w8_runs_on_postgres") else {
        return Ok(());
    };
    // The bench's own connections (the fill, the counts) do not use TLS.
    let separator = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{separator}sslmode=disable");
    let line = ok_line(&[
        "--quick",
        "--workload",
        "W8",
        "--maintenance-writer-effects",
        "40",
        "--db",
        &url,
    ])?;
    assert_eq!(line["store"], "postgres");
    assert_eq!(line["ledger_operations"], 3000);
    // Half of the confirmed operations alone, the rest beside the writer.
    let alone = line["prune_alone_operations"].as_u64().unwrap_or(0);
    let beside = line["n"].as_u64().unwrap_or(0);
    assert!(alone > 1000 && beside > 1000, "{line}");
    assert_eq!(line["writer_effects_alone"], 40, "{line}");
    let log_mb = line["log_mb_during_prune"].as_f64().unwrap_or(0.0);
    assert!(log_mb > 0.0, "{line}");
    Ok(())
}

/// The one line of a successful run with `args`, of the documented shape
/// and `ok`.
fn ok_line(args: &[&str]) -> Result<Value, Box<dyn std::error::Error>> {
    let output = Command::new(env!("CARGO_BIN_EXE_effect-bench"))
        .args(args)
        .output()?;
    let stdout = String::from_utf8(output.stdout)?;
    assert!(output.status.success(), "{stdout}");
    let line: Value = serde_json::from_str(stdout.trim())?;
    check_line(&line);
    assert_eq!(line["ok"], true, "{line}");
    Ok(line)
}

/// The keys of docs/benchmarks.md's line, in its order; extras follow them.
const KEYS: [&str; 8] = [
    "workload",
    "name",
    "n",
    "threads",
    "seconds",
    "per_second",
    "handler_calls",
    "ok",
];

/// The documented keys come first and in order (serde_json's map sorts them,
/// so this reads the text).
fn check_key_order(text: &str) {
    let mut rest = text.strip_prefix('{').expect("an object");
    for key in KEYS {
        let quoted = format!("\"{key}\":");
        rest = rest
            .trim_start_matches(',')
            .strip_prefix(quoted.as_str())
            .unwrap_or_else(|| panic!("{key} is not next in {text}"));
        let end = rest.find(',').unwrap_or(rest.len());
        rest = &rest[end..];
    }
}

/// The shape of docs/benchmarks.md, `ok`, and the handler calls each row requires.
fn check_line(line: &Value) {
    let object = line.as_object().expect("a JSON object");
    for key in KEYS {
        assert!(object.contains_key(key), "{key} missing in {line}");
    }
    assert_eq!(line["ok"], true, "{line}");
    assert!(line["seconds"].as_f64().is_some_and(|s| s >= 0.0), "{line}");
    assert!(
        line["per_second"].as_f64().is_some_and(|r| r > 0.0),
        "{line}"
    );
    let n = line["n"].as_u64().expect("n");
    match line["workload"].as_str().expect("workload") {
        "W1" | "W1d" | "W1i" | "W2" | "W4" | "W4d" | "W5" | "W7" => {
            assert_eq!(line["handler_calls"], n, "{line}")
        }
        "W3" => assert_eq!(line["handler_calls"], 0, "{line}"),
        // The console's pages, each rendered and checked on the filled ledger.
        "W9" => {
            assert_eq!(line["quarantined"], n.div_ceil(100), "{line}");
            for page in ["queue_ms", "operation_ms", "metrics_ms"] {
                assert!(
                    line[page].as_f64().is_some_and(|ms| ms > 0.0),
                    "{page}: {line}"
                );
            }
        }
        _ => {}
    }
}

#[test]
fn the_deferred_workloads_read_back_every_outcome() -> Result<(), Box<dyn std::error::Error>> {
    let output = Command::new(env!("CARGO_BIN_EXE_effect-bench"))
        .args(["--quick", "--workload", "W1d,W4d"])
        .output()?;
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout)?;
    let lines: Vec<Value> = stdout
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let names: Vec<&str> = lines.iter().filter_map(|l| l["name"].as_str()).collect();
    assert_eq!(names, ["fresh-deferred", "concurrent-deferred"]);
    lines.iter().for_each(check_line);
    assert!(lines[1]["peak_rss_mb"].as_f64().is_some(), "{}", lines[1]);
    Ok(())
}

#[test]
fn the_sqlite_optimizations_can_be_switched_off() -> Result<(), Box<dyn std::error::Error>> {
    let output = Command::new(env!("CARGO_BIN_EXE_effect-bench"))
        .args(["--quick", "--workload", "W3,W4,W7"])
        .args(["--no-group-commit", "--no-confirmed-cache"])
        .output()?;
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout)?;
    for text in stdout.lines() {
        let line: Value = serde_json::from_str(text)?;
        check_line(&line);
        assert_eq!(line["store"], "sqlite:no-group-commit,no-confirmed-cache");
    }
    assert_eq!(stdout.lines().count(), 3);
    Ok(())
}
