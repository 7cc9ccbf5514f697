//! [`CommitCutProxy`]: a loopback TCP proxy in front of a PostgreSQL server
//! that cuts a connection at a commit, so the client never learns whether
//! its write committed.
//!
//! A ledger commits in one of two ways on the PostgreSQL wire protocol: an
//! explicit `COMMIT` sent as a simple query, or a statement that commits on
//! its own (the extended protocol's `Parse`/`Bind`/`Execute`, committed at the
//! `Sync` that follows; `effect-ledger-postgres` writes with one call of its
//! schema's `effect_write` function this way, or with the `EXECUTE` of its
//! statement prepared to call it). The proxy reads the client's
//! messages just far enough to see these, forwards everything else as it is,
//! and, once armed with [`CommitCutProxy::cut_next_commit`], cuts the next
//! commit of any connection:
//!
//! - [`Cut::BeforeCommit`]: the commit is never forwarded; the server rolls
//!   the transaction back when the connection closes.
//! - [`Cut::AfterCommit`]: the commit is forwarded, the server commits and
//!   answers, and the answer is dropped: the write is durable, but the client
//!   sees only a closed connection.
//!
//! The proxy parses plain text only: connect through it with
//! `sslmode=disable` ([`proxied_url`] rewrites a URL so). A client that
//! starts TLS anyway is forwarded as opaque bytes and never cut. It is test
//! support: it listens on loopback and trusts both ends.
//!
//! A statement that commits on its own is told from one inside a transaction
//! block by the client's own simple queries (`BEGIN`/`START TRANSACTION` and
//! `COMMIT`/`ROLLBACK`), which is how the `postgres` driver opens and ends
//! its transactions. `crates/effect-ledger-postgres/tests/it/lost_commit.rs`
//! runs the ledger and the executor through it.
//!
//! ```
//! use effect_test_support::pg_proxy::{CommitCutProxy, Cut};
//!
//! // The server is reached only once a client connects.
//! let (proxy, url) = CommitCutProxy::for_url("postgres://postgres@127.0.0.1:5432/postgres")?;
//! assert!(url.ends_with("?sslmode=disable"));
//! // Connect the ledger to `url`; then the next write commits on the server
//! // and the ledger sees only a closed connection:
//! proxy.cut_next_commit(Cut::AfterCommit);
//! assert!(proxy.disarm(), "nothing was cut yet");
//! assert_eq!(proxy.cuts(), 0);
//! # Ok::<(), effect_test_support::pg_proxy::ProxyError>(())
//! ```

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;

/// Where a cut commit is cut; see the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cut {
    /// The commit never reaches the server.
    BeforeCommit,
    /// The server commits and answers; the answer never reaches the client.
    AfterCommit,
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The server URL is not one the proxy can rewrite.
    #[error("cannot proxy the postgres url {url:?}: {reason}")]
    InvalidUrl {
        /// The URL, with any password removed.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Binding the listener or resolving the server failed.
    #[error("cannot start the postgres proxy")]
    Io {
        /// The socket error.
        #[source]
        source: io::Error,
    },
}

/// A loopback proxy that can cut a commit; see the [module docs](self).
/// Dropping it closes its listener and every connection through it.
#[derive(Debug)]
pub struct CommitCutProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    armed: Mutex<Option<Cut>>,
    commits: AtomicUsize,
    executions: AtomicUsize,
    cuts: AtomicUsize,
    shutdown: AtomicBool,
    /// Both sockets of every connection, to close them on drop.
    sockets: Mutex<Vec<TcpStream>>,
}

impl CommitCutProxy {
    /// Listens on `127.0.0.1` (a free port) and forwards each connection to
    /// `upstream`.
    ///
    /// # Errors
    ///
    /// The listener cannot be bound or `upstream` does not resolve.
    pub fn start(upstream: impl ToSocketAddrs) -> Result<CommitCutProxy, ProxyError> {
        let io = |source| ProxyError::Io { source };
        let upstream = upstream
            .to_socket_addrs()
            .map_err(io)?
            .next()
            .ok_or_else(|| {
                io(io::Error::new(
                    io::ErrorKind::NotFound,
                    "the server address resolves to nothing",
                ))
            })?;
        let listener = TcpListener::bind("127.0.0.1:0").map_err(io)?;
        let addr = listener.local_addr().map_err(io)?;
        let shared = Arc::new(Shared {
            upstream,
            armed: Mutex::new(None),
            commits: AtomicUsize::new(0),
            executions: AtomicUsize::new(0),
            cuts: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            sockets: Mutex::new(Vec::new()),
        });
        let accepting = Arc::clone(&shared);
        thread::spawn(move || accept(&listener, &accepting));
        Ok(CommitCutProxy { addr, shared })
    }

    /// A proxy in front of the server of `url`, and `url` pointed at the
    /// proxy with `sslmode=disable` (see [`proxied_url`]).
    ///
    /// # Errors
    ///
    /// As [`proxied_url`] and [`start`](Self::start).
    pub fn for_url(url: &str) -> Result<(CommitCutProxy, String), ProxyError> {
        let target = Target::parse(url)?;
        let proxy = CommitCutProxy::start((target.host.as_str(), target.port))?;
        let rewritten = target.pointed_at(proxy.addr);
        Ok((proxy, rewritten))
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts the next commit of any connection, once.
    pub fn cut_next_commit(&self, cut: Cut) {
        *self.armed() = Some(cut);
    }

    /// Takes back an armed cut that has not happened yet; whether one was armed.
    pub fn disarm(&self) -> bool {
        self.armed().take().is_some()
    }

    /// How many commits were cut so far.
    pub fn cuts(&self) -> usize {
        self.shared.cuts.load(Ordering::SeqCst)
    }

    /// How many commits passed through (cut ones included).
    pub fn commits(&self) -> usize {
        self.shared.commits.load(Ordering::SeqCst)
    }

    /// How many statements the clients ran through the extended protocol
    /// (`Execute` messages): the round trips a store's calls cost, without
    /// simple-query text such as a pool's check-out ping or `BEGIN`.
    pub fn executions(&self) -> usize {
        self.shared.executions.load(Ordering::SeqCst)
    }

    fn armed(&self) -> std::sync::MutexGuard<'_, Option<Cut>> {
        self.shared
            .armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for CommitCutProxy {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        // Wake the accepting thread, which then sees the flag and returns.
        let _ = TcpStream::connect(self.addr);
        let sockets = std::mem::take(
            &mut *self
                .shared
                .sockets
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for socket in sockets {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// `url` (`postgres://` or `postgresql://`) pointed at `proxy`, with
/// `sslmode=disable` replacing any `sslmode` it had.
///
/// ```
/// let url = effect_test_support::pg_proxy::proxied_url(
///     "postgres://app:secret@db.internal:5433/ledger?sslmode=require&application_name=w",
///     "127.0.0.1:40000".parse()?,
/// )?;
/// assert_eq!(url, "postgres://app:secret@127.0.0.1:40000/ledger?application_name=w&sslmode=disable");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`ProxyError::InvalidUrl`] for a key-value connection string, a URL with
/// several hosts or a Unix socket directory, or a port that is not a number.
pub fn proxied_url(url: &str, proxy: SocketAddr) -> Result<String, ProxyError> {
    Ok(Target::parse(url)?.pointed_at(proxy))
}

/// A server URL taken apart.
struct Target {
    scheme: &'static str,
    userinfo: Option<String>,
    host: String,
    port: u16,
    path: String,
    params: Vec<String>,
}

impl Target {
    fn parse(url: &str) -> Result<Target, ProxyError> {
        let invalid = |reason| ProxyError::InvalidUrl {
            url: redacted(url),
            reason,
        };
        let (scheme, rest) = if let Some(rest) = url.strip_prefix("postgres://") {
            ("postgres://", rest)
        } else if let Some(rest) = url.strip_prefix("postgresql://") {
            ("postgresql://", rest)
        } else {
            return Err(invalid(
                "only postgres:// and postgresql:// urls are supported",
            ));
        };
        let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = match before_query.find('/') {
            Some(at) => (&before_query[..at], &before_query[at..]),
            None => (before_query, ""),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((user, host)) => (Some(user.to_owned()), host),
            None => (None, authority),
        };
        if hostport.contains(',') {
            return Err(invalid("a url with several hosts cannot be proxied"));
        }
        let (host, port) = if let Some(bracketed) = hostport.strip_prefix('[') {
            let (host, after) = bracketed
                .split_once(']')
                .ok_or_else(|| invalid("an unclosed [ in the host"))?;
            (host, after.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (hostport, None),
            }
        };
        if host.is_empty() || host.starts_with('%') || host.starts_with('/') {
            return Err(invalid(
                "the url names no tcp host (a unix socket cannot be proxied)",
            ));
        }
        let port = match port {
            Some(port) => port
                .parse()
                .map_err(|_| invalid("the port is not a number"))?,
            None => 5432,
        };
        let params = query
            .split('&')
            .filter(|p| !p.is_empty())
            .filter(|p| {
                !p.starts_with("sslmode=") && !p.starts_with("host=") && !p.starts_with("port=")
            })
            .map(str::to_owned)
            .collect();
        Ok(Target {
            scheme,
            userinfo,
            host: host.to_owned(),
            port,
            path: path.to_owned(),
            params,
        })
    }

    fn pointed_at(&self, proxy: SocketAddr) -> String {
        let mut url = String::from(self.scheme);
        if let Some(user) = &self.userinfo {
            url.push_str(user);
            url.push('@');
        }
        url.push_str(&proxy.to_string());
        url.push_str(&self.path);
        let mut params = self.params.clone();
        params.push("sslmode=disable".to_owned());
        url.push('?');
        url.push_str(&params.join("&"));
        url
    }
}

/// `url` with the password of its user info replaced, for error messages.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(start), Some(at)) if at > start => {
            let userinfo = &url[start + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..start + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.shutdown.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        let Ok(server) = TcpStream::connect(shared.upstream) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone()) else {
            continue;
        };
        {
            let mut sockets = shared
                .sockets
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let (Ok(c), Ok(s)) = (client.try_clone(), server.try_clone()) {
                sockets.push(c);
                sockets.push(s);
            }
        }
        let link = Arc::new(Link {
            client,
            server,
            drop_answers: AtomicBool::new(false),
        });
        let upstream_link = Arc::clone(&link);
        let upstream_shared = Arc::clone(shared);
        thread::spawn(move || {
            let _ = client_to_server(client_in, &upstream_link, &upstream_shared);
            // The client is gone, or was cut: so is the server's side.
            if !upstream_link.drop_answers.load(Ordering::SeqCst) {
                upstream_link.close();
            }
        });
        thread::spawn(move || {
            let _ = server_to_client(server_in, &link);
            link.close();
        });
    }
}

/// One client connection and its server connection.
struct Link {
    client: TcpStream,
    server: TcpStream,
    /// Set just before a commit cut after it is forwarded: whatever the
    /// server sends from then on is dropped, and the link closed.
    drop_answers: AtomicBool,
}

impl Link {
    fn close(&self) {
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }
}

/// The PostgreSQL protocol's codes in a length-prefixed first message.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

fn client_to_server(mut client: TcpStream, link: &Link, shared: &Shared) -> io::Result<()> {
    let mut server = &link.server;
    // The startup phase: length-prefixed messages without a type byte. An
    // SSL or GSS encryption request is answered by the server with one byte,
    // and then either encryption starts (opaque from here on) or the client
    // sends its startup message in the clear.
    loop {
        let mut first = [0u8; 1];
        client.read_exact(&mut first)?;
        if first[0] == 0x16 {
            // A TLS handshake record: nothing more can be read.
            server.write_all(&first)?;
            io::copy(&mut client, &mut server)?;
            return Ok(());
        }
        let mut rest = [0u8; 3];
        client.read_exact(&mut rest)?;
        let length = u32::from_be_bytes([first[0], rest[0], rest[1], rest[2]]);
        let body = read_body(&mut client, length)?;
        server.write_all(&length.to_be_bytes())?;
        server.write_all(&body)?;
        let code = body
            .get(..4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        if code != Some(SSL_REQUEST) && code != Some(GSSENC_REQUEST) {
            break;
        }
    }
    // Typed messages from here on.
    let mut writes_commit = false;
    let mut in_block = false;
    loop {
        let mut tag = [0u8; 1];
        client.read_exact(&mut tag)?;
        let mut length = [0u8; 4];
        client.read_exact(&mut length)?;
        let body = read_body(&mut client, u32::from_be_bytes(length))?;
        let commit = match tag[0] {
            b'Q' => match block_statement(&body) {
                Some(Block::Begin) => {
                    in_block = true;
                    false
                }
                Some(Block::Commit) => std::mem::replace(&mut in_block, false),
                Some(Block::Rollback) => {
                    in_block = false;
                    false
                }
                None => false,
            },
            b'P' => {
                writes_commit |= !in_block && parses_self_committing_write(&body);
                false
            }
            b'S' => std::mem::take(&mut writes_commit),
            b'E' => {
                shared.executions.fetch_add(1, Ordering::SeqCst);
                false
            }
            _ => false,
        };
        let cut = if commit {
            shared.commits.fetch_add(1, Ordering::SeqCst);
            shared
                .armed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        } else {
            None
        };
        match cut {
            Some(Cut::BeforeCommit) => {
                shared.cuts.fetch_add(1, Ordering::SeqCst);
                link.close();
                return Ok(());
            }
            Some(Cut::AfterCommit) => {
                shared.cuts.fetch_add(1, Ordering::SeqCst);
                link.drop_answers.store(true, Ordering::SeqCst);
                server.write_all(&tag)?;
                server.write_all(&length)?;
                server.write_all(&body)?;
                // Read nothing more from the client; the other thread closes
                // the link once the server has answered.
                return Ok(());
            }
            None => {
                server.write_all(&tag)?;
                server.write_all(&length)?;
                server.write_all(&body)?;
            }
        }
        if tag[0] == b'X' {
            return Ok(());
        }
    }
}

fn server_to_client(mut server: TcpStream, link: &Link) -> io::Result<()> {
    let mut client = &link.client;
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let read = server.read(&mut buffer)?;
        if read == 0 {
            return Ok(());
        }
        if link.drop_answers.load(Ordering::SeqCst) {
            // The server has answered the commit: it is durable, and the
            // client never hears of it.
            return Ok(());
        }
        client.write_all(&buffer[..read])?;
    }
}

/// A message body of a message whose length field (which counts itself) is
/// `length`.
fn read_body(stream: &mut TcpStream, length: u32) -> io::Result<Vec<u8>> {
    let size = usize::try_from(length.saturating_sub(4))
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "message too large"))?;
    let mut body = vec![0u8; size];
    stream.read_exact(&mut body)?;
    Ok(body)
}

/// A simple query that opens or ends a transaction block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Begin,
    Commit,
    Rollback,
}

/// What a simple query does to the transaction block, if anything.
fn block_statement(body: &[u8]) -> Option<Block> {
    let text = String::from_utf8_lossy(body.split(|b| *b == 0).next().unwrap_or_default())
        .trim()
        .trim_end_matches(';')
        .trim()
        .to_ascii_uppercase();
    let first = text.split_whitespace().next().unwrap_or_default();
    match first {
        "BEGIN" | "START" => Some(Block::Begin),
        "COMMIT" | "END" => Some(Block::Commit),
        // `ROLLBACK TO SAVEPOINT` stays inside the block.
        "ROLLBACK" | "ABORT" if !text.contains(" TO ") => Some(Block::Rollback),
        _ => None,
    }
}

/// Whether a `Parse` message prepares a statement that commits on its own
/// at the next `Sync`: a call of the ledger's `effect_write` function, or
/// the `EXECUTE` of the ledger's prepared statement that calls it (named
/// `effect_<nonce>_write`).
fn parses_self_committing_write(body: &[u8]) -> bool {
    let mut parts = body.split(|b| *b == 0);
    let _name = parts.next();
    parts.next().is_some_and(|query| {
        let query = String::from_utf8_lossy(query);
        if let Some(rest) = query.strip_prefix("EXECUTE ") {
            let name = rest.split(['(', ' ']).next().unwrap_or_default();
            return name.starts_with("effect_") && name.ends_with("_write");
        }
        query.contains("effect_write(")
    })
}

#[cfg(test)]
mod tests;
