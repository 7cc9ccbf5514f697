//! The connection pool: r2d2 over `postgres` clients that carry the ledger's
//! statements, prepared once per connection.

use std::fmt;
use std::sync::Arc;

use postgres::{Client, Statement};

use crate::schema::Statements;
use crate::tls::Target;

/// A pooled connection and its prepared statements.
pub(crate) struct Connection {
    pub(crate) client: Client,
    pub(crate) sql: Statements<Statement>,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("closed", &self.client.is_closed())
            .finish_non_exhaustive()
    }
}

/// Opens connections for r2d2 and prepares the ledger's statements on each.
pub(crate) struct Manager {
    target: Target,
    sql: Arc<Statements<String>>,
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
    pub(crate) fn new(target: Target, sql: Arc<Statements<String>>) -> Manager {
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
        client.batch_execute(DURABLE_SESSION)?;
        let sql = self.sql.prepare(&mut client)?;
        Ok(Connection { client, sql })
    }

    fn is_valid(&self, conn: &mut Connection) -> Result<(), postgres::Error> {
        conn.client.simple_query("").map(|_| ())
    }

    fn has_broken(&self, conn: &mut Connection) -> bool {
        conn.client.is_closed()
    }
}
