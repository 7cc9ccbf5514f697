//! An agent captures a payment; the provider commits it but the
//! acknowledgement is lost. The run waits instead of paying twice, survives a
//! restart (SQLite effect ledger and SQLite checkpoints), resumes, reconciles
//! the same operation and completes.
//!
//! Run it with `cargo run -p examples --example effect_assurance_demo`. It
//! exits non-zero unless exactly one payment was committed.

use std::process::ExitCode;

use anyhow::Context;

fn main() -> ExitCode {
    match demo() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("effect_assurance_demo: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn demo() -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let report = examples::effect_assurance::run(dir.path())?;
    println!(
        "before restart: {} ({})",
        report.before_restart.status,
        report.before_restart.error.as_deref().unwrap_or("")
    );
    println!(
        "after restart:  {} with output {}",
        report.after_restart.status,
        report.after_restart.output.clone().unwrap_or_default()
    );
    println!("ledger events:  {}", report.ledger_events.join(" -> "));
    println!(
        "provider:       {} payment(s) committed from {} capture request(s)",
        report.committed_payments, report.capture_calls
    );
    report.verdict()?;
    println!("ok: exactly one payment");
    Ok(())
}
