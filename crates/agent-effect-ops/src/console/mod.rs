//! `agent-effect-ops serve`: the operator console (docs/console.md).
//!
//! An HTTP server (axum on hyper and tokio) that renders the ledger as HTML
//! (maud templates, which escape every value they interpolate) and SVG
//! charts (plotters), with htmx and one small script of its own compiled
//! into the binary, under a Content-Security-Policy that allows nothing
//! else. It reads through the same [`open`](crate::open::open) as every
//! command, and acts (when the configuration enables actions) through the
//! same command code, so the console and the CLI refuse the same things in
//! the same words.
//!
//! - `config`: the TOML file; `auth`: tokens, sessions, the proxy header,
//!   CSRF tokens.
//! - `queue`, `pages`, `charts`: what each view reads and how it looks.
//! - `routes`: the router and its handlers; `actions`: the forms' commands.
//! - `metrics`: `/metrics` in the Prometheus text format.
//! - `live`: server-sent events from the ledger's event cursor.

mod actions;
pub(crate) mod auth;
mod charts;
mod config;
mod live;
mod metrics;
mod operation;
mod pages;
mod queue;
mod routes;
mod views;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use effect_core::Clock;
use production_agent_systems::open::LedgerUrl;

pub use config::ConsoleConfig;

use crate::cli::ServeArgs;
use crate::error::ConsoleError;
use crate::open::{Opened, open};

/// A console on one ledger: build its router with [`Console::router`].
#[derive(Clone)]
pub struct Console {
    inner: Arc<Inner>,
}

struct Inner {
    opened: Opened,
    clock: Arc<dyn Clock>,
    config: ConsoleConfig,
    auth: auth::Auth,
    /// The newest event sequence, for `/live` (its poller starts on first use).
    live: std::sync::OnceLock<tokio::sync::watch::Sender<Option<u64>>>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// A console on the ledger `db` names, opened as every command opens it
    /// (read-only where the store allows; migrated only with `migrate`).
    ///
    /// # Errors
    ///
    /// The ledger cannot be opened, or the configuration is inconsistent
    /// (actions without authentication, an unreadable tokens file).
    pub fn new(
        db: &LedgerUrl,
        migrate: bool,
        config: ConsoleConfig,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Console> {
        if config.actions.enabled && !config.authenticates() {
            return Err(ConsoleError::ActionsNeedAuth.into());
        }
        let auth = auth::Auth::new(&config.auth)?;
        let opened = open(db, migrate, false, Arc::clone(&clock))?;
        Ok(Console {
            inner: Arc::new(Inner {
                opened,
                clock,
                config,
                auth,
                live: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Every route of the console. Serve it with connect info
    /// (`into_make_service_with_connect_info::<SocketAddr>`), which the
    /// trusted-header authentication reads.
    pub fn router(&self) -> axum::Router {
        routes::router(self.clone())
    }

    /// Runs `read` on a blocking thread: every ledger call blocks.
    async fn read<T, F>(&self, read: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Console) -> anyhow::Result<T> + Send + 'static,
    {
        let console = self.clone();
        tokio::task::spawn_blocking(move || read(&console))
            .await
            .context("a console task failed")?
    }
}

/// `serve`: checks the configuration, binds, prints the address to `out`,
/// and serves until interrupted.
pub(crate) fn serve(
    db: &LedgerUrl,
    migrate: bool,
    args: &ServeArgs,
    clock: Arc<dyn Clock>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(path) => ConsoleConfig::load(path)?,
        None => ConsoleConfig::default(),
    };
    if !args.listen.ip().is_loopback() && !config.authenticates() {
        return Err(ConsoleError::ExposedWithoutAuth {
            listen: args.listen,
        }
        .into());
    }
    let console = Console::new(db, migrate, config, clock)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the console's runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let address = listener
            .local_addr()
            .context("cannot read the address listened on")?;
        let mode = if console.inner.config.actions.enabled {
            "actions enabled"
        } else {
            "read-only"
        };
        writeln!(out, "console listening on http://{address}/ ({mode})")
            .and_then(|()| out.flush())
            .context("cannot write the output")?;
        axum::serve(
            listener,
            console
                .router()
                .into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("the console's server failed")
    })
}
