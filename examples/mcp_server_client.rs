//! An MCP client and an effect-backed MCP server (rmcp, in-process
//! transport), each with its own SQLite ledger. The provider's first
//! acknowledgement is lost; one payment is committed, and the client's repeat
//! is replayed from its ledger.
//!
//! Run it with `cargo run -p examples --example mcp_server_client`. It exits
//! non-zero unless exactly one payment was committed.

use std::process::ExitCode;

use anyhow::Context;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    match demo().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("mcp_server_client: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn demo() -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let run = examples::mcp_server_client::run(dir.path()).await?;
    let (idempotent, destructive, read_only) = run.annotations;
    println!(
        "annotations: idempotentHint={idempotent:?} destructiveHint={destructive:?} readOnlyHint={read_only:?}"
    );
    println!("first call:  {}", run.first);
    println!("repeat:      {} (replayed: {})", run.repeat.0, run.repeat.1);
    println!(
        "provider:    {} payment(s) committed from {} capture request(s), payment {:?}",
        run.committed_payments, run.capture_requests, run.payment_id
    );
    run.verdict()?;
    println!("ok: exactly one payment");
    Ok(())
}
