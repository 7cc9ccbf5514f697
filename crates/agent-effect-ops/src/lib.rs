//! `agent-effect-ops`: the operator CLI of production-agent-systems (docs/spec.md §9).
//!
//! An on-call operator uses it during an incident to find operations whose
//! outcome is uncertain, inspect them, and resolve them with an audit trail:
//!
//! ```text
//! agent-effect-ops --db effects.sqlite3 list --status quarantined
//! agent-effect-ops --db effects.sqlite3 show invoice:INV-1042:capture
//! agent-effect-ops --db effects.sqlite3 confirm invoice:INV-1042:capture \
//!     --output-json '{"payment_id":"pay-000001","status":"captured"}' \
//!     --provider-operation-id pay-000001 \
//!     --actor alice@example.com \
//!     --reason "capture pay-000001 visible in the provider dashboard" \
//!     --evidence-reference INC-2042
//! ```
//!
//! Manual resolutions go through [`effect_exec::EffectExecutor`]'s audited
//! resolution, so the same rules apply as in code: only from `outcome_unknown`
//! or `quarantined`, with a non-empty actor, reason and evidence reference. The
//! store is chosen from `--db` through the facade's `open`
//! (`production_agent_systems::open`), which this crate names no store
//! type besides: a SQLite file, or a `postgres://` URL (feature `postgres`).
//! Only a place that holds the ledger's tables is opened; `--create` makes a
//! new ledger of a missing or empty file or schema. The runbook and the JSON
//! field names are in `docs/operations.md`; the exit codes are [`Exit`].
//!
//! The library target exists so the commands can be tested in-process
//! ([`run`] writes to any [`std::io::Write`]); it is not a stable API.
//!
//! # Feature flags
//!
//! - `postgres` (default): `--db postgres://...`, a PostgreSQL ledger.

mod approval;
mod cancel;
mod cli;
mod commands;
mod compensation;
mod console;
mod error;
mod execute;
mod inspect;
mod maintenance;
mod open;
mod printer;
mod progress;
mod resolve;
mod table;
mod timestamp;
pub mod view;

pub use cli::{AuditArgs, Cli, Command, DecisionArgs, Format, RequestArgs, ServeArgs, Since};
pub use commands::run;
pub use console::{Console, ConsoleConfig};
pub use error::{ChangedSinceSeen, ConsoleError, Exit, InputError, is_broken_pipe};
