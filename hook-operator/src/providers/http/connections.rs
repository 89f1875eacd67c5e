//! Keep-alive connections for plain-HTTP requests to IP addresses — the per-pod hook endpoints
//! (`http://{{args.PodIP}}:8080/...`) that make up nearly every measurement at scale — driven by the measuring task
//! itself.
//!
//! Why not reqwest here: its client runs every connection as a task of its own (the request crosses to it through
//! a channel, the response comes back through another), copies and converts the URL per request, and keeps a pool
//! keyed by URL scheme and authority behind several service layers. For a small JSON answer that bookkeeping costs
//! more CPU than the exchange. Why not hyper's `client::conn::http1` (this path's first form): its dispatcher, header
//! maps and body channel were still a large share of the engine's CPU per measurement. Here an exchange is
//! one write of the request as rendered and reads into the connection's own buffer, the answer's head parsed by
//! `httparse` (the parser hyper itself uses) and the body framed by [`super::h1`]; the connection is kept idle in a
//! per-address pool with its buffer, so one measurement is one task and, on a kept connection, allocates nothing
//! for the exchange. reqwest still serves HTTPS, host names (resolved and checked by the egress policy) and
//! everything this path does not take.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::h1::{self, Body, BodyError, Head, Parsed};

/// How long connecting may take (as reqwest's `connect_timeout` on the other path).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The read buffer a connection starts with (it grows for a long head, up to [`h1::MAX_HEAD`] and a read more).
const READ_BUFFER: usize = 4096;

/// Read buffers kept for the next exchanges. A connection holds a buffer only while an exchange uses it: idle
/// connections (one per measured pod between two measurements, thousands in a large rollout) hold none, and a
/// buffer given back goes to the next exchange, so an exchange on a kept connection still allocates nothing while
/// at most this many run at once.
const MAX_SPARE_BUFFERS: usize = 64;

/// A connection and what was read from it but not consumed yet.
struct Socket {
    stream: TcpStream,
    /// Bytes read; `buffer[start..end]` are not consumed yet.
    buffer: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Socket {
    fn new(stream: TcpStream, buffer: Box<[u8]>) -> Self {
        Self { stream, buffer, start: 0, end: 0 }
    }

    fn unread(&self) -> &[u8] {
        &self.buffer[self.start..self.end]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
    }

    /// Room after the unread bytes: moves them to the front, or grows the buffer when they fill it.
    fn make_room(&mut self) {
        if self.end < self.buffer.len() {
            return;
        }
        if self.start > 0 {
            self.buffer.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        } else {
            let grown = (self.buffer.len() * 2).min(h1::MAX_HEAD + READ_BUFFER).max(self.buffer.len() + 1);
            let mut buffer = vec![0; grown].into_boxed_slice();
            buffer[..self.end].copy_from_slice(&self.buffer[..self.end]);
            self.buffer = buffer;
        }
    }

    /// Reads what the socket has (after making room); 0 when the server closed its end.
    fn poll_fill(&mut self, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<usize>> {
        self.make_room();
        let mut read = ReadBuf::new(&mut self.buffer[self.end..]);
        match std::pin::Pin::new(&mut self.stream).poll_read(cx, &mut read) {
            Poll::Ready(Ok(())) => {
                let n = read.filled().len();
                self.end += n;
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    async fn fill(&mut self) -> std::io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_fill(cx)).await
    }
}

/// Why an exchange failed before its answer's head was read.
#[derive(Debug)]
pub struct SendError {
    /// What went wrong, for the measurement's message.
    pub message: String,
    /// Not a byte of the request was written: sending it elsewhere is safe for any method.
    pub unsent: bool,
    /// The connection was closed or reset before any answer came: on a kept connection, most likely closed by the
    /// server while it was idle.
    pub stale: bool,
}

/// Why an answer's body could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The body is larger than the limit (`--max-body-bytes`).
    TooLarge,
    /// The connection failed or the framing was broken, with what happened.
    Failed(String),
}

/// A connection checked out by one exchange. Dropped: the connection closes; [`Connections::give_back`]: kept.
pub struct Lease {
    addr: SocketAddr,
    socket: Socket,
    /// The last answer was read to its end, the whole request was written, and nobody asked to close: the
    /// connection can carry another request.
    reusable: bool,
    /// The request was written completely (an answer may come before: then the connection is not reused).
    written: bool,
    /// Taken from the pool (not opened for this request): a failure before any answer may just mean the server
    /// closed it while it was idle, so the request is worth one more try on a new connection.
    pub reused: bool,
}

impl Lease {
    /// Writes `request` (head and body, one write when the socket takes it) and reads until the head of the final
    /// answer (1xx answers are skipped), also while the request is still being written: a server may answer (and
    /// close) before it read a long request. `head_request`: the request was a HEAD, whose answer has no body.
    pub async fn send(&mut self, request: &[u8], head_request: bool) -> Result<Head, SendError> {
        self.reusable = false;
        self.written = false;
        let mut sent = 0;
        let mut answered = false;
        // A write that failed after part of the request went out: the server may still have answered (and reset the
        // connection because it did not read the rest), so the answer is read before this error is reported.
        let mut write_failed: Option<std::io::Error> = None;
        let mut parsed_upto: Option<usize> = None;
        let socket = &mut self.socket;
        let outcome = std::future::poll_fn(|cx| {
            while sent < request.len() && write_failed.is_none() {
                let error = match std::pin::Pin::new(&mut socket.stream).poll_write(cx, &request[sent..]) {
                    Poll::Ready(Ok(0)) => std::io::Error::from(std::io::ErrorKind::WriteZero),
                    Poll::Ready(Ok(n)) => {
                        sent += n;
                        continue;
                    }
                    Poll::Ready(Err(e)) => e,
                    Poll::Pending => break,
                };
                if sent == 0 {
                    return Poll::Ready(Err(failure(&error, true, !answered)));
                }
                write_failed = Some(error);
            }
            loop {
                // A head that was incomplete is parsed again only when an empty line may have come since.
                let unread = socket.unread();
                let parsed = match parsed_upto {
                    Some(upto) if unread.len() < h1::MAX_HEAD && !h1::may_end_head(unread, upto) => Ok(Parsed::Partial),
                    _ => h1::parse_head(unread, head_request),
                };
                match parsed {
                    Ok(Parsed::Complete(head, length)) => {
                        socket.consume(length);
                        return Poll::Ready(Ok(head));
                    }
                    Ok(Parsed::Interim(length)) => {
                        socket.consume(length);
                        parsed_upto = None;
                        continue;
                    }
                    Ok(Parsed::Partial) => parsed_upto = Some(unread.len()),
                    Err(why) => return Poll::Ready(Err(SendError { message: why, unsent: false, stale: false })),
                }
                let read = socket.poll_fill(cx);
                if let (Some(error), Poll::Ready(Ok(0) | Err(_))) = (&write_failed, &read) {
                    return Poll::Ready(Err(failure(error, false, !answered)));
                }
                match read {
                    Poll::Ready(Ok(0)) => {
                        let message = if socket.unread().is_empty() {
                            "the connection closed before an answer"
                        } else {
                            "the connection closed in the middle of the answer's head"
                        };
                        let stale = !answered && socket.unread().is_empty();
                        return Poll::Ready(Err(SendError { message: message.into(), unsent: false, stale }));
                    }
                    Poll::Ready(Ok(_)) => answered = true,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(failure(&e, false, !answered))),
                    Poll::Pending => return Poll::Pending,
                }
            }
        })
        .await;
        self.written = sent == request.len();
        outcome
    }

    /// Reads the body announced by `head` into `out` (at most `limit` bytes).
    pub async fn read_body(&mut self, head: &Head, out: &mut Vec<u8>, limit: usize) -> Result<(), ReadError> {
        let failed = |e: BodyError| match e {
            BodyError::TooLarge => ReadError::TooLarge,
            BodyError::Invalid(why) => ReadError::Failed(why),
        };
        let mut body = Body::new(head.framing);
        loop {
            let used = body.decode(self.socket.unread(), out, limit).map_err(failed)?;
            self.socket.consume(used);
            if body.is_done() {
                // Bytes nobody asked for after the answer: the connection's framing cannot be trusted.
                self.reusable = head.keep_alive && self.written && self.socket.unread().is_empty();
                return Ok(());
            }
            match self.socket.fill().await {
                Ok(0) => {
                    body.end().map_err(failed)?;
                    return Ok(());
                }
                Ok(_) => {}
                Err(e) => return Err(ReadError::Failed(e.to_string())),
            }
        }
    }

    /// Whether the connection can carry another request (the answer was read to its end and nobody closed it).
    fn still_open(&mut self) -> bool {
        // A kept connection has nothing to read: an end (0), bytes nobody asked for or an error all mean it is
        // done. Only the readiness the runtime already knows is consulted (no system call when idle and quiet).
        let mut probe = [0u8; 1];
        matches!(self.socket.stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

fn failure(error: &std::io::Error, unsent: bool, no_answer: bool) -> SendError {
    use std::io::ErrorKind::*;
    let closed = matches!(error.kind(), ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof | WriteZero);
    SendError { message: error.to_string(), unsent, stale: closed && no_answer }
}

#[derive(Default)]
struct Pool {
    parked: Parked<Socket>,
    /// Read buffers of [`READ_BUFFER`] bytes no exchange uses (at most [`MAX_SPARE_BUFFERS`]).
    spare: Vec<Box<[u8]>>,
}

/// The idle connections, per address.
pub struct Connections {
    pool: Mutex<Pool>,
    max_idle_per_host: usize,
    idle_timeout: Duration,
}

impl Connections {
    /// An empty pool keeping at most `max_idle_per_host` idle connections per address, each for `idle_timeout`.
    pub fn new(max_idle_per_host: usize, idle_timeout: Duration) -> Self {
        Self { pool: Mutex::new(Pool::default()), max_idle_per_host, idle_timeout }
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Idle connections kept right now (tests, diagnostics).
    pub fn idle(&self) -> usize {
        self.pool().parked.len()
    }

    /// Bytes of read buffers held by idle connections.
    #[cfg(test)]
    fn idle_buffer_bytes(&self) -> usize {
        self.pool().parked.by_addr.values().flatten().map(|idle| idle.connection.buffer.len()).sum()
    }

    #[cfg(test)]
    fn spare_buffers(&self) -> usize {
        self.pool().spare.len()
    }

    /// A read buffer for an exchange: a spare one, else a new one.
    fn buffer(&self) -> Box<[u8]> {
        self.pool().spare.pop().unwrap_or_else(|| vec![0; READ_BUFFER].into_boxed_slice())
    }

    /// An idle connection to `addr` that is still open, else a new one (`fresh`: always a new one).
    pub async fn lease(&self, addr: SocketAddr, fresh: bool) -> std::io::Result<Lease> {
        // Idle connections are tried newest first; those that idled too long or were closed meanwhile are dropped.
        while let Some(idle) = (!fresh).then(|| self.pool().parked.take(addr)).flatten() {
            if idle.since.elapsed() >= self.idle_timeout {
                continue;
            }
            let mut lease = Lease { addr, socket: idle.connection, reusable: false, written: true, reused: true };
            // A connection the server closed while idle ends here, not mid-request.
            if lease.still_open() {
                lease.socket.buffer = self.buffer();
                return Ok(lease);
            }
        }
        let stream = connect(addr).await?;
        Ok(Lease { addr, socket: Socket::new(stream, self.buffer()), reusable: false, written: false, reused: false })
    }

    /// Keeps the connection for the next request to its address, if it can carry one and there is room.
    /// Its read buffer goes to the spares whether or not the connection is kept (a reusable one has nothing unread).
    pub fn give_back(&self, mut lease: Lease) {
        if !lease.reusable {
            return;
        }
        let buffer = std::mem::take(&mut lease.socket.buffer);
        (lease.socket.start, lease.socket.end) = (0, 0);
        let now = Instant::now();
        let mut pool = self.pool();
        pool.parked.sweep(now, self.idle_timeout);
        if buffer.len() == READ_BUFFER && pool.spare.len() < MAX_SPARE_BUFFERS {
            pool.spare.push(buffer);
        }
        pool.parked.park(lease.addr, lease.socket, now, self.max_idle_per_host);
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
                connections.pool().parked.sweep(Instant::now(), connections.idle_timeout);
            }
        });
    }
}

/// A TCP connection to `addr` within [`CONNECT_TIMEOUT`], with Nagle off (requests are written whole). Shared by
/// both plain-HTTP clients.
pub(crate) async fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
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
    Ok(stream)
}

/// Connections parked idle for their next request, per address: the bookkeeping both plain-HTTP clients' pools
/// share (this module's and [`super::hyper_baseline`]'s), so that `hook-bench --plain-http own,hyper` compares the
/// two clients and not two ways of keeping connections.
pub(crate) struct Parked<C> {
    by_addr: HashMap<SocketAddr, Vec<Idle<C>>>,
    /// How many are parked, over all addresses.
    idle: usize,
    last_sweep: Option<Instant>,
}

/// A parked connection and since when it has been idle.
pub(crate) struct Idle<C> {
    pub(crate) connection: C,
    pub(crate) since: Instant,
}

impl<C> Default for Parked<C> {
    fn default() -> Self {
        Self { by_addr: HashMap::new(), idle: 0, last_sweep: None }
    }
}

impl<C> Parked<C> {
    /// Connections parked right now.
    pub(crate) fn len(&self) -> usize {
        self.idle
    }

    /// The most recently parked connection to `addr`, taken out. Its address keeps its (now maybe empty) list: a
    /// pod's one connection is taken and parked again every measurement, and that list is not made anew each time;
    /// [`Parked::sweep`] drops the empty ones.
    pub(crate) fn take(&mut self, addr: SocketAddr) -> Option<Idle<C>> {
        let list = self.by_addr.get_mut(&addr)?;
        let taken = list.pop();
        if taken.is_some() {
            self.idle -= 1;
        }
        taken
    }

    /// Parks `connection` for the next request to `addr`, idle from `now`, unless `max_per_host` already are.
    pub(crate) fn park(&mut self, addr: SocketAddr, connection: C, now: Instant, max_per_host: usize) {
        let list = self.by_addr.entry(addr).or_default();
        if list.len() < max_per_host {
            list.push(Idle { connection, since: now });
            self.idle += 1;
        }
    }

    /// Closes the connections parked for `timeout` or longer (their pods may be gone: nobody would ever take them
    /// again), at most twice per `timeout`.
    pub(crate) fn sweep(&mut self, now: Instant, timeout: Duration) {
        if self.last_sweep.is_some_and(|last| now.duration_since(last) < timeout / 2) {
            return;
        }
        self.last_sweep = Some(now);
        let mut kept = 0;
        self.by_addr.retain(|_, list| {
            list.retain(|parked| now.duration_since(parked.since) < timeout);
            kept += list.len();
            !list.is_empty()
        });
        self.idle = kept;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GET of `/` with a `Host`, as the web provider writes it.
    fn request() -> &'static [u8] {
        b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"
    }

    async fn exchange(lease: &mut Lease) -> Vec<u8> {
        let head = lease.send(request(), false).await.unwrap();
        let mut body = Vec::new();
        lease.read_body(&head, &mut body, 1 << 20).await.map_err(|e| format!("{e:?}")).unwrap();
        body
    }

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
        let body = exchange(&mut lease).await;
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
            exchange(&mut lease).await;
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

    #[tokio::test]
    async fn idle_connections_hold_no_read_buffer_and_exchanges_reuse_spare_ones() {
        // Thousands of pods measured once a second each keep a connection idle between measurements: the buffers
        // follow the exchanges in flight, not the idle connections.
        let connections = Connections::new(4, Duration::from_secs(30));
        let addrs = [server(false).await, server(false).await, server(false).await];
        for addr in addrs {
            assert_eq!(get(&connections, addr).await.1, r#"{"connection":1}"#);
        }
        assert_eq!(connections.idle(), 3);
        assert_eq!(connections.idle_buffer_bytes(), 0, "idle connections keep no buffer");
        assert_eq!(connections.spare_buffers(), 1, "one exchange at a time: one buffer went round");
        for addr in addrs {
            assert_eq!(get(&connections, addr).await, (true, r#"{"connection":1}"#.into()), "kept, and reading");
        }
        assert_eq!(connections.spare_buffers(), 1);
        // Spares are bounded: many exchanges at once return at most MAX_SPARE_BUFFERS.
        let many = server(false).await;
        let mut leases = Vec::new();
        for _ in 0..MAX_SPARE_BUFFERS + 3 {
            let mut lease = connections.lease(many, true).await.unwrap();
            exchange(&mut lease).await;
            leases.push(lease);
        }
        for lease in leases {
            connections.give_back(lease);
        }
        assert_eq!(connections.spare_buffers(), MAX_SPARE_BUFFERS);
        assert_eq!(connections.idle_buffer_bytes(), 0);
    }
}
