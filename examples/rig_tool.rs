//! A rig agent's payment tool, run through the executor: the provider commits,
//! the acknowledgement is lost, the model calls again. With an outcome probe
//! the model gets the payment; without one it is told the outcome is not known
//! and not to retry. Either way, one payment.
//!
//! Run it with `cargo run -p examples --example rig_tool`. It exits non-zero
//! unless each run committed exactly one payment.

use std::process::ExitCode;

use anyhow::Context;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    match demo().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("rig_tool: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn demo() -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    for with_probe in [true, false] {
        let run = examples::rig_tool::run(dir.path(), with_probe).await?;
        println!("with outcome probe: {with_probe}");
        for (i, answer) in run.answers.iter().enumerate() {
            println!("  tool result {}: {answer}", i + 1);
        }
        println!(
            "  provider: {} payment(s) committed, tool ran {} time(s); agent said {:?}",
            run.committed_payments, run.tool_calls, run.final_answer
        );
        run.verdict()?;
    }
    println!("ok: exactly one payment per run");
    Ok(())
}
