//! The scenario CLI of production-agent-systems (docs/spec.md §10).
//!
//! `agent-effect --scenario NAME` runs a deterministic fake payment provider
//! through the recovery executor, with a stable-key contract and an outcome
//! probe, on a SQLite ledger in a fresh temporary directory, and prints a JSON
//! report. `agent-effect --matrix` runs every fault point against every
//! contract variant with the naive retry-on-error baseline beside it.
//! `agent-effect --list` names the scenarios. `agent-effect certify` runs the
//! faults of `effect_testkit::certify` against your contract for an HTTP
//! endpoint (`--url`) or an MCP server over stdio (`--mcp-command`), counted
//! at the provider (docs/testkit.md, "Certifying your own contract").
//!
//! The scenarios, the provider and the matrix live in `effect-testkit`; this
//! crate parses the command line, chooses the store with `--db` (a SQLite
//! ledger file, `memory:`, or a PostgreSQL database as `postgres://...`,
//! feature `postgres`, on by default: fresh schemas per run, dropped at the
//! end; opened through the facade's `open`, as every binary does) and runs
//! the crash-after-commit scenario across a real process
//! boundary: it re-executes itself as a hidden worker that aborts right after
//! the provider committed. `--matrix` runs on SQLite or memory only: its
//! in-process crash cell moves the ledger's clock, which a database clock
//! cannot follow.
//!
//! # Exit codes
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | the scenario passed (confirmed, exactly one committed effect, not in progress); the matrix kept the guarantee everywhere it is claimed; `--list`; `certify` failed no cell |
//! | 1 | the scenario ran and did not pass; the matrix found a broken guarantee; `certify` failed a cell |
//! | 2 | usage: an unknown scenario name, invalid arguments; for `certify`, templates or arguments it cannot use, an MCP server that does not start or lacks a tool |
//! | 3 | the run or the output failed: an unwritable `--output`, a ledger error |
//!
//! Commands write to an injected writer, so tests snapshot their output
//! without spawning a process:
//!
//! ```
//! use clap::Parser;
//!
//! let cli = agent_effect::Cli::try_parse_from(["agent-effect", "--list"])?;
//! let mut out = Vec::new();
//! let outcome = agent_effect::run(&cli, &mut out).map_err(|e| e.error)?;
//! assert_eq!(outcome, agent_effect::Outcome::Passed);
//! assert!(String::from_utf8(out)?.contains("after-commit-before-ack"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod certify;
mod cli;
mod commands;
mod output;
mod store;

pub use cli::{CertifyArgs, Cli, Command, ContractArg, DbArg, Format};
pub use commands::run;
pub use output::{CliError, Outcome};
