//! The database's stable address: a userspace TCP proxy in a namespace of its
//! own, in front of whichever server is the primary. This kernel has no
//! `netem` qdisc, so the link faults are made here: delay (every chunk held
//! before it is forwarded), loss (a chunk held for a retransmission timeout,
//! which is what a lost segment costs a TCP stream), and resets (every
//! connection closed at once, mid-transaction or not). A failover moves
//! the address: the proxy closes every connection and forwards new ones
//! to the promoted server.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use anyhow::Context;

use crate::topology::in_namespace;

/// The proxy; see the module docs.
#[derive(Debug, Clone)]
pub(crate) struct FaultProxy {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    upstream: Mutex<SocketAddr>,
    delay_ms: AtomicU64,
    /// Per thousand chunks, how many are held as if lost.
    loss_permille: AtomicU64,
    rng: Mutex<fastrand::Rng>,
    next_id: AtomicU64,
    /// Both sockets of every open connection, to close them on a reset.
    open: Mutex<Vec<(u64, TcpStream, TcpStream)>>,
    connections: AtomicU64,
}

impl FaultProxy {
    /// Listens on `listen` inside namespace `ns` and forwards to `upstream`.
    pub(crate) fn start(
        ns: &str,
        listen: SocketAddr,
        upstream: SocketAddr,
        seed: u64,
    ) -> anyhow::Result<FaultProxy> {
        let shared = Arc::new(Shared {
            upstream: Mutex::new(upstream),
            delay_ms: AtomicU64::new(0),
            loss_permille: AtomicU64::new(0),
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            next_id: AtomicU64::new(0),
            open: Mutex::new(Vec::new()),
            connections: AtomicU64::new(0),
        });
        let accepting = Arc::clone(&shared);
        in_namespace(ns, move || {
            let listener = TcpListener::bind(listen)
                .with_context(|| format!("binding the proxy to {listen}"))?;
            // Spawned from inside the namespace, so it and the threads it
            // starts stay there.
            thread::spawn(move || accept(&listener, &accepting));
            Ok(())
        })?;
        Ok(FaultProxy { shared })
    }

    /// Holds every chunk `ms` before forwarding it (0: none).
    pub(crate) fn set_delay(&self, ms: u64) {
        self.shared.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Holds `permille` chunks in a thousand for 200 to 600 ms (0: none).
    pub(crate) fn set_loss(&self, permille: u64) {
        self.shared.loss_permille.store(permille, Ordering::SeqCst);
    }

    /// Closes every open connection; how many there were.
    pub(crate) fn reset_all(&self) -> usize {
        let open = std::mem::take(&mut *self.shared.lock_open());
        for (_, client, server) in &open {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
        open.len()
    }

    /// Moves the stable address to `upstream`: new connections go there, and
    /// every open one (to the old server) is closed.
    pub(crate) fn switch(&self, upstream: SocketAddr) {
        *self
            .shared
            .upstream
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = upstream;
        self.reset_all();
    }

    /// How many connections the proxy accepted so far.
    pub(crate) fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }
}

impl Shared {
    fn lock_open(&self) -> std::sync::MutexGuard<'_, Vec<(u64, TcpStream, TcpStream)>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long to hold the next chunk.
    fn hold(&self) -> Duration {
        let mut ms = self.delay_ms.load(Ordering::SeqCst);
        let loss = self.loss_permille.load(Ordering::SeqCst);
        if loss > 0 {
            let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
            if rng.u64(0..1000) < loss {
                ms += rng.u64(200..600);
            }
        }
        Duration::from_millis(ms)
    }
}

fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let upstream = *shared
            .upstream
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(2)) else {
            // The server is down or cut off: the client sees a closed connection.
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        shared.connections.fetch_add(1, Ordering::SeqCst);
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
        let (Ok(c1), Ok(c2), Ok(s1), Ok(s2)) = (
            client.try_clone(),
            client.try_clone(),
            server.try_clone(),
            server.try_clone(),
        ) else {
            continue;
        };
        shared.lock_open().push((id, c1, s1));
        let (up, down) = (Arc::clone(shared), Arc::clone(shared));
        thread::spawn(move || pump(client, server, id, &up));
        thread::spawn(move || pump(s2, c2, id, &down));
    }
}

/// Forwards `from` to `to` until either end closes, then closes both.
fn pump(mut from: TcpStream, mut to: TcpStream, id: u64, shared: &Shared) {
    let mut buf = vec![0_u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let hold = shared.hold();
        if !hold.is_zero() {
            thread::sleep(hold);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
    shared.lock_open().retain(|(open, _, _)| *open != id);
}
