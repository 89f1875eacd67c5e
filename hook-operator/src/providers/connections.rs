//! Keep-alive connections for plain-HTTP requests to IP addresses — the per-pod hook endpoints
//! (`http://{{args.PodIP}}:8080/...`) that make up nearly every measurement at scale — driven by the measuring task
//! itself.
//!
//! Why not reqwest here: its client runs every connection as a task of its own (the request crosses to it through
//! a channel, the response comes back through another), copies and converts the URL per request, and keeps a pool
//! keyed by URL scheme and authority behind several service layers. For a 100-byte JSON answer that bookkeeping cost
//! more CPU than the exchange. Here a connection is hyper's `client::conn::http1` pair — the sender and the
//! connection future — kept idle in a per-address pool and polled by the measurement that checked it out, so one
//! measurement is one task. reqwest still serves HTTPS, host names (resolved and checked by the egress policy) and
//! everything this path does not take.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt;
use http_body_util::Full;
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

type Conn = Connection<TokioIo<TcpStream>, Full<Bytes>>;

/// How long connecting may take (as reqwest's `connect_timeout` on the other path).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection checked out by one exchange. Dropped: the connection closes; [`Connections::give_back`]: kept.
pub struct Lease {
    addr: SocketAddr,
    sender: SendRequest<Full<Bytes>>,
    conn: Conn,
    /// The connection future has ended (closed by either side, or `Connection: close` honoured).
    ended: bool,
    /// Taken from the pool (not opened for this request): a failure before any answer may just mean the server
    /// closed it while it was idle, so the request is worth one more try on a new connection.
    pub reused: bool,
}

impl Lease {
    /// Waits for `future` while driving the connection (writing the request, reading the answer into it).
    pub async fn drive<F: Future + Unpin>(&mut self, mut future: F) -> F::Output {
        std::future::poll_fn(|cx| {
            // The future first (it may queue the request), then the connection (writes it, reads what came), then
            // the future again (it may have been answered by that read) — one poll instead of a wake-up each.
            if let Poll::Ready(output) = future.poll_unpin(cx) {
                return Poll::Ready(output);
            }
            if !self.ended && Pin::new(&mut self.conn).poll(cx).is_ready() {
                self.ended = true;
            }
            future.poll_unpin(cx)
        })
        .await
    }

    /// Sends `request` and waits for the answer's head. An error says whether the request was never handed to the
    /// connection (it was already closed), so sending it again elsewhere is safe for any method.
    pub async fn send(
        &mut self,
        request: hyper::Request<Full<Bytes>>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, (hyper::Error, bool)> {
        let response = self.sender.try_send_request(request);
        self.drive(std::pin::pin!(response)).await.map_err(|mut e| {
            let unsent = e.take_message().is_some();
            (e.into_error(), unsent)
        })
    }

    /// Whether the connection can carry another request (the answer was read to its end and nobody closed it).
    fn reusable(&mut self) -> bool {
        if !self.ended && (&mut self.conn).now_or_never().is_some() {
            self.ended = true;
        }
        !self.ended && self.sender.is_ready()
    }
}

struct Idle {
    sender: SendRequest<Full<Bytes>>,
    conn: Conn,
    since: Instant,
}

#[derive(Default)]
struct Pool {
    by_addr: HashMap<SocketAddr, Vec<Idle>>,
    idle: usize,
    last_sweep: Option<Instant>,
}

/// The idle connections, per address.
pub struct Connections {
    pool: Mutex<Pool>,
    max_idle_per_host: usize,
    idle_timeout: Duration,
}

impl Connections {
    pub fn new(max_idle_per_host: usize, idle_timeout: Duration) -> Self {
        Self { pool: Mutex::new(Pool::default()), max_idle_per_host, idle_timeout }
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Idle connections kept right now (tests, diagnostics).
    pub fn idle(&self) -> usize {
        self.pool().idle
    }

    /// An idle connection to `addr` that is still open, else a new one (`fresh`: always a new one).
    pub async fn lease(&self, addr: SocketAddr, fresh: bool) -> std::io::Result<Lease> {
        // Idle connections are tried newest first; those that idled too long or were closed meanwhile are dropped.
        while let Some(idle) = (!fresh).then(|| self.take(addr)).flatten() {
            if idle.since.elapsed() >= self.idle_timeout {
                continue;
            }
            let mut lease = Lease { addr, sender: idle.sender, conn: idle.conn, ended: false, reused: true };
            // Polled once without waiting: a connection the server closed while idle ends here, not mid-request.
            if lease.reusable() {
                return Ok(lease);
            }
        }
        let stream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(connected) => connected?,
            Err(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {}", crate::text::seconds(CONNECT_TIMEOUT)),
                ));
            }
        };
        stream.set_nodelay(true)?;
        let (sender, conn) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Lease { addr, sender, conn, ended: false, reused: false })
    }

    fn take(&self, addr: SocketAddr) -> Option<Idle> {
        let mut pool = self.pool();
        let list = pool.by_addr.get_mut(&addr)?;
        let idle = list.pop();
        if list.is_empty() {
            pool.by_addr.remove(&addr);
        }
        if idle.is_some() {
            pool.idle -= 1;
        }
        idle
    }

    /// Keeps the connection for the next request to its address, if it can carry one and there is room.
    pub fn give_back(&self, mut lease: Lease) {
        if !lease.reusable() {
            return;
        }
        let now = Instant::now();
        let mut pool = self.pool();
        self.sweep(&mut pool, now);
        let Pool { by_addr, idle, .. } = &mut *pool;
        let list = by_addr.entry(lease.addr).or_default();
        if list.len() < self.max_idle_per_host {
            list.push(Idle { sender: lease.sender, conn: lease.conn, since: now });
            *idle += 1;
        }
    }

    /// Sweeps every half idle timeout for as long as the pool exists, so connections left idle after the last
    /// measurement (a finished rollout: thousands of pods nobody measures again) close without new traffic.
    /// Spawned once on the runtime that creates the pool.
    pub fn reap_idle(connections: &std::sync::Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let pool = std::sync::Arc::downgrade(connections);
        let every = (connections.idle_timeout / 2).max(Duration::from_millis(10));
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(connections) = pool.upgrade() else { return };
                let mut idle = connections.pool();
                connections.sweep(&mut idle, Instant::now());
            }
        });
    }

    /// Closes connections idle for longer than the idle timeout (their pods may be gone: nobody would ever take
    /// them again), at most twice per timeout.
    fn sweep(&self, pool: &mut Pool, now: Instant) {
        if pool.last_sweep.is_some_and(|last| now.duration_since(last) < self.idle_timeout / 2) {
            return;
        }
        pool.last_sweep = Some(now);
        let timeout = self.idle_timeout;
        let mut kept = 0;
        pool.by_addr.retain(|_, list| {
            list.retain(|idle| now.duration_since(idle.since) < timeout);
            kept += list.len();
            !list.is_empty()
        });
        pool.idle = kept;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn server(close_after_first: bool) -> SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut accepted = 0;
            while let Ok((mut socket, _)) = listener.accept().await {
                accepted += 1;
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 4096];
                    loop {
                        let Ok(n) = socket.read(&mut buffer).await else { return };
                        if n == 0 {
                            return;
                        }
                        let body = format!("{{\"connection\":{accepted}}}");
                        let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len());
                        if socket.write_all(answer.as_bytes()).await.is_err() || close_after_first {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn get(connections: &Connections, addr: SocketAddr) -> (bool, String) {
        let mut lease = connections.lease(addr, false).await.unwrap();
        let reused = lease.reused;
        let request = hyper::Request::get("/").header("host", addr.to_string()).body(Full::default()).unwrap();
        let response = lease.send(request).await.map_err(|(e, _)| e).unwrap();
        let body = lease.drive(Box::pin(response.into_body().collect())).await.unwrap().to_bytes();
        connections.give_back(lease);
        (reused, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn a_connection_is_reused_until_it_idles_too_long() {
        let addr = server(false).await;
        let connections = Connections::new(4, Duration::from_millis(300));
        assert_eq!(get(&connections, addr).await, (false, r#"{"connection":1}"#.into()));
        assert_eq!(connections.idle(), 1);
        assert_eq!(get(&connections, addr).await, (true, r#"{"connection":1}"#.into()), "same socket again");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(get(&connections, addr).await, (false, r#"{"connection":2}"#.into()), "idle too long: a new one");
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_never_handed_out() {
        let addr = server(true).await;
        let connections = Connections::new(4, Duration::from_secs(30));
        assert_eq!(get(&connections, addr).await.1, r#"{"connection":1}"#);
        // The server closes after answering; the close arrives while the connection is idle in the pool.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(get(&connections, addr).await, (false, r#"{"connection":2}"#.into()));
    }

    #[tokio::test]
    async fn connections_left_idle_close_without_further_traffic() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (closed_tx, closed) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = vec![0u8; 4096];
            let _ = socket.read(&mut buffer).await;
            socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").await.unwrap();
            // The next read returns 0 once the client closed its end.
            let _ = closed_tx.send(socket.read(&mut buffer).await.ok());
        });
        let connections = std::sync::Arc::new(Connections::new(4, Duration::from_millis(200)));
        Connections::reap_idle(&connections);
        get(&connections, addr).await;
        assert_eq!(connections.idle(), 1);
        let read = tokio::time::timeout(Duration::from_secs(30), closed).await.expect("closed by the reaper");
        assert_eq!(read.unwrap(), Some(0), "the server saw the client close");
        assert_eq!(connections.idle(), 0);
    }

    #[tokio::test]
    async fn idle_connections_per_address_are_capped_and_old_ones_are_swept() {
        let addr = server(false).await;
        let connections = Connections::new(2, Duration::from_millis(200));
        let mut leases = Vec::new();
        for _ in 0..3 {
            let mut lease = connections.lease(addr, true).await.unwrap();
            let request = hyper::Request::get("/").header("host", "x").body(Full::default()).unwrap();
            let response = lease.send(request).await.map_err(|(e, _)| e).unwrap();
            lease.drive(Box::pin(response.into_body().collect())).await.unwrap();
            leases.push(lease);
        }
        for lease in leases {
            connections.give_back(lease);
        }
        assert_eq!(connections.idle(), 2, "at most max_idle_per_host kept");
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Any give-back sweeps what idled past the timeout.
        let other = server(false).await;
        get(&connections, other).await;
        assert_eq!(connections.idle(), 1, "only the connection just given back");
    }
}
