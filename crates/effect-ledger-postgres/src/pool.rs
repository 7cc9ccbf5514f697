//! The connection pool: r2d2 over `postgres` clients that carry the ledger's
//! statements and which of them their server session has prepared (see
//! [`Session`]).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::Client;

use crate::prepared::{Prepared, Session};
use crate::timeline::{self, StaleServer, TIMELINE_QUERY, Timelines};
use crate::tls::Target;

/// A pooled connection and the ledger's statements.
pub(crate) struct Connection {
    pub(crate) client: Client,
    pub(crate) statements: Session,
    /// When the connection was last handed back to the pool unbroken.
    returned: Instant,
}

/// How long after its last use a connection is handed out again without
/// the check-out round trip that proves it is alive. Within it, a
/// connection that broke meanwhile fails its first statement, as it would
/// had it broken just after the check.
pub(crate) const TRUSTED_FOR: Duration = Duration::from_secs(1);

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("closed", &self.client.is_closed())
            .finish_non_exhaustive()
    }
}

/// The monotonic clock, for how long a connection has been idle: r2d2
/// measures its own idle and lifetime limits on it too, and a test has no
/// use for a fake one here.
#[allow(clippy::disallowed_methods)] // The real elapsed time of a socket is the point.
fn now() -> Instant {
    Instant::now()
}

/// Opens connections for r2d2.
pub(crate) struct Manager {
    target: Target,
    prepared: Arc<Prepared>,
    timelines: Arc<Timelines>,
}

/// Why a connection could not be opened or kept.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error(transparent)]
    Postgres(#[from] postgres::Error),
    #[error(transparent)]
    Stale(#[from] StaleServer),
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The config holds the password: show nothing of it.
        f.debug_struct("Manager").finish_non_exhaustive()
    }
}

/// Session settings every pooled connection runs with.
pub(crate) const DURABLE_SESSION: &str = "SET synchronous_commit = on";

impl Manager {
    pub(crate) fn new(
        target: Target,
        prepared: Arc<Prepared>,
        timelines: Arc<Timelines>,
    ) -> Manager {
        Manager {
            target,
            prepared,
            timelines,
        }
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Connection;
    type Error = ConnectError;

    fn connect(&self) -> Result<Connection, ConnectError> {
        let mut client = self.target.connect()?;
        // Every commit of the ledger's own is durable before it is answered,
        // whatever the server's or the role's default: a server running with
        // `synchronous_commit = off` would otherwise lose acknowledged claims
        // and confirmations in a crash, and a lost claim is a duplicate.
        // (Each write also sets it for its own transaction, so a pooler that
        // hands transactions to other server sessions changes nothing.)
        client.batch_execute(DURABLE_SESSION)?;
        // A server on an earlier timeline than this ledger wrote on is a
        // primary that was failed over from: what it commits, the promoted
        // server never has (src/timeline.rs). A role that may not read the
        // WAL position is not checked.
        if let Ok(rows) = client.simple_query(TIMELINE_QUERY) {
            let found = rows.iter().find_map(|message| match message {
                postgres::SimpleQueryMessage::Row(row) => row.get(0).and_then(timeline::parse),
                _ => None,
            });
            if let Some(found) = found {
                self.timelines.admit(found)?;
            }
        }
        Ok(Connection {
            client,
            statements: Session::new(Arc::clone(&self.prepared)),
            returned: now(),
        })
    }

    /// r2d2 calls this on every check-out. An empty query (one round trip)
    /// proves the connection alive, unless it was handed back within
    /// [`TRUSTED_FOR`]: a transition on a busy pool then pays its own round
    /// trips only, and an idle connection (a server restarted meanwhile) is
    /// still checked and replaced.
    fn is_valid(&self, conn: &mut Connection) -> Result<(), ConnectError> {
        if conn.returned.elapsed() < TRUSTED_FOR {
            return Ok(());
        }
        conn.client.simple_query("").map(|_| ())?;
        Ok(())
    }

    /// r2d2 calls this when a connection is handed back; one that is not
    /// closed is trusted for [`TRUSTED_FOR`] from now.
    fn has_broken(&self, conn: &mut Connection) -> bool {
        let broken = conn.client.is_closed();
        if !broken {
            conn.returned = now();
        }
        broken
    }
}
