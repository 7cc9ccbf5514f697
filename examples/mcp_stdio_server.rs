//! An effect-backed MCP server over stdio, for a host to start as a command:
//!
//! ```text
//! mcp_stdio_server --db payments.sqlite3 [--provider FILE] [--lease-secs N]
//! ```
//!
//! In an MCP client's configuration, the command is the built binary
//! (`cargo build -p examples --example mcp_stdio_server`, then
//! `target/debug/examples/mcp_stdio_server`) with those arguments. Nothing but
//! the protocol goes to stdout; errors go to stderr, and it exits non-zero
//! when it cannot start.

use std::process::ExitCode;

use anyhow::Context;
use examples::mcp_stdio_server::{Args, server};
use rmcp::ServiceExt;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    match serve().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("mcp_stdio_server: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve() -> anyhow::Result<()> {
    let args = Args::parse(std::env::args().skip(1))?;
    let server = server(&args)?;
    let running = server
        .serve((tokio::io::stdin(), tokio::io::stdout()))
        .await
        .context("starting the MCP session")?;
    running.waiting().await.context("serving the MCP session")?;
    Ok(())
}
