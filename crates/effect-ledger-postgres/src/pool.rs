//! The connection pool: r2d2 over `postgres` clients that carry the ledger's
//! statements (as text: they run unnamed, see [`Statements`]).

use std::fmt;
use std::sync::Arc;

use postgres::Client;

use crate::schema::Statements;
use crate::tls::Target;

/// A pooled connection and the ledger's statements.
pub(crate) struct Connection {
    pub(crate) client: Client,
    pub(crate) sql: Arc<Statements>,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("closed", &self.client.is_closed())
            .finish_non_exhaustive()
    }
}

/// Opens connections for r2d2.
pub(crate) struct Manager {
    target: Target,
    sql: Arc<Statements>,
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
    pub(crate) fn new(target: Target, sql: Arc<Statements>) -> Manager {
        Manager { target, sql }
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Connection;
    type Error = postgres::Error;

    fn connect(&self) -> Result<Connection, postgres::Error> {
        let mut client = self.target.connect()?;
        // Every commit of the ledger's own is durable before it is answered,
        // whatever the server's or the role's default: a server running with
        // `synchronous_commit = off` would otherwise lose acknowledged claims
        // and confirmations in a crash, and a lost claim is a duplicate.
        // (Each write also sets it for its own transaction, so a pooler that
        // hands transactions to other server sessions changes nothing.)
        client.batch_execute(DURABLE_SESSION)?;
        Ok(Connection {
            client,
            sql: Arc::clone(&self.sql),
        })
    }

    fn is_valid(&self, conn: &mut Connection) -> Result<(), postgres::Error> {
        conn.client.simple_query("").map(|_| ())
    }

    fn has_broken(&self, conn: &mut Connection) -> bool {
        conn.client.is_closed()
    }
}
