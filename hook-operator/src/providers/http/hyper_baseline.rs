//! The plain-HTTP path (requests to IP addresses: the per-pod hook endpoints) on hyper's `client::conn::http1`
//! instead of [`super::connections`] and [`super::h1`]: the maintained crate the hand-written client is measured
//! against. The operator always runs [`PlainClient::Own`]; `hook-bench --plain-http own,hyper` runs the engine
//! benchmark both ways in one run (the figures and the command are on the benchmarks page, the reason on the
//! performance design page), and the tests below put both through the same hostile endpoints.
//!
//! The same bounds as the hand-written client, applied while reading: at most [`h1::MAX_HEADERS`] header fields
//! and [`h1::MAX_HEAD`] bytes of head or trailers (hyper's `max_headers`, `max_header_size`), a read buffer of at
//! most that plus a read (`max_buf_size`), the body appended frame by frame up to `--max-body-bytes`, an announced
//! `Content-Length` over it refused before reading, and the one timer of [`super::Http::send`] around it all. The
//! same request head (the template's fields without framing ones, `Host`, `User-Agent`, `Accept`, JSON
//! `Content-Type`), redirect rule and stale-connection retry as `Http::exchange_plain`. The connection is
//! driven by the measuring task itself (no task per connection) and kept idle per address, as ours is.

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
use reqwest::{Method, Url};
use tokio::net::TcpStream;

use super::connections::Parked;
use super::{Http, Plain, Response, Target, USER_AGENT, h1, innermost, origin_form};
use crate::providers::ProviderError;

/// Which client the plain-HTTP path uses. The operator has no flag for it: the product runs [`PlainClient::Own`];
/// the other exists so that `hook-bench` can measure the engine on the maintained crate in the same run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PlainClient {
    /// [`super::connections`]: the request written as rendered, the answer parsed by [`super::h1`].
    #[default]
    Own,
    /// hyper's `client::conn::http1`, with the same bounds (this module).
    Hyper,
}

impl std::str::FromStr for PlainClient {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "own" => Ok(Self::Own),
            "hyper" => Ok(Self::Hyper),
            _ => Err(format!("{s:?} is not a plain-HTTP client (own or hyper)")),
        }
    }
}

impl std::fmt::Display for PlainClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            Self::Own => "own",
            Self::Hyper => "hyper",
        })
    }
}

type Conn = Connection<TokioIo<TcpStream>, Full<Bytes>>;

/// A connection checked out by one exchange. Dropped: the connection closes; [`HyperConnections::give_back`]: kept.
struct Lease {
    addr: SocketAddr,
    sender: SendRequest<Full<Bytes>>,
    conn: Conn,
    /// The connection future has ended (closed by either side, or `Connection: close` honoured).
    ended: bool,
    /// Taken from the pool: a failure before any answer may mean the server closed it while it was idle.
    reused: bool,
}

impl Lease {
    /// Waits for `future` while driving the connection (writing the request, reading the answer into it).
    async fn drive<F: Future + Unpin>(&mut self, mut future: F) -> F::Output {
        std::future::poll_fn(|cx| {
            // The future first (it may queue the request), then the connection (writes it, reads what came), then
            // the future again (it may have been answered by that read): one poll instead of a wake-up each.
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

    /// Sends `request` and waits for the answer's head. The error says whether the request was never handed to the
    /// connection (it was already closed), so sending it again elsewhere is safe for any method.
    async fn send(
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

/// Idle hyper connections, per address, with the same cap and idle timeout as [`super::connections::Connections`].
pub(super) struct HyperConnections {
    pool: Mutex<Parked<(SendRequest<Full<Bytes>>, Conn)>>,
    builder: http1::Builder,
    max_idle_per_host: usize,
    idle_timeout: Duration,
}

impl HyperConnections {
    pub(super) fn new(max_idle_per_host: usize, idle_timeout: Duration) -> Self {
        let mut builder = http1::Builder::new();
        builder.max_headers(h1::MAX_HEADERS).max_header_size(h1::MAX_HEAD).max_buf_size(h1::MAX_HEAD + 4096);
        Self { pool: Mutex::new(Parked::default()), builder, max_idle_per_host, idle_timeout }
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Parked<(SendRequest<Full<Bytes>>, Conn)>> {
        self.pool.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Idle connections kept right now (tests).
    #[cfg(test)]
    pub(super) fn idle(&self) -> usize {
        self.pool().len()
    }

    /// An idle connection to `addr` that is still open, else a new one (`fresh`: always a new one).
    async fn lease(&self, addr: SocketAddr, fresh: bool) -> std::io::Result<Lease> {
        while let Some(idle) = (!fresh).then(|| self.pool().take(addr)).flatten() {
            if idle.since.elapsed() >= self.idle_timeout {
                continue;
            }
            let (sender, conn) = idle.connection;
            let mut lease = Lease { addr, sender, conn, ended: false, reused: true };
            // Polled once without waiting: a connection the server closed while idle ends here, not mid-request.
            if lease.reusable() {
                return Ok(lease);
            }
        }
        let stream = super::connections::connect(addr).await?;
        let (sender, conn) =
            self.builder.handshake(TokioIo::new(stream)).await.map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Lease { addr, sender, conn, ended: false, reused: false })
    }

    /// Keeps the connection for the next request to its address, if it can carry one and there is room.
    fn give_back(&self, mut lease: Lease) {
        if !lease.reusable() {
            return;
        }
        let now = Instant::now();
        let mut pool = self.pool();
        pool.sweep(now, self.idle_timeout);
        pool.park(lease.addr, (lease.sender, lease.conn), now, self.max_idle_per_host);
    }
}

impl Http {
    /// [`Http::exchange_plain`] on hyper's `client::conn::http1` ([`PlainClient::Hyper`]).
    pub(super) async fn exchange_hyper(
        &self,
        method: &Method,
        target: &Target,
        plain: &Plain,
        headers: &[(String, String)],
        body: Option<&str>,
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<Response, ProviderError> {
        use reqwest::header::{self, HeaderName, HeaderValue};
        let started = Instant::now();
        let failed = |kind: &str, cause: &dyn std::fmt::Display| ProviderError(format!("{}: {kind}: {cause}", what()));
        let mut fields = header::HeaderMap::with_capacity(headers.len() + 4);
        for (key, value) in headers {
            // The body's own length is the only framing sent (as the hand-written path does).
            if key.eq_ignore_ascii_case("content-length") || key.eq_ignore_ascii_case("transfer-encoding") {
                continue;
            }
            let name = HeaderName::from_bytes(key.as_bytes()).map_err(|e| failed("invalid header name", &e))?;
            let value =
                HeaderValue::from_str(value).map_err(|e| failed(&format!("invalid value of header {key}"), &e))?;
            fields.append(name, value);
        }
        let mut body = body.map(|body| Bytes::copy_from_slice(body.as_bytes()));
        if let Some(body) = &body {
            let looks_json = matches!(body.iter().find(|b| !b.is_ascii_whitespace()), Some(b'{' | b'['));
            if looks_json && !fields.contains_key(header::CONTENT_TYPE) {
                fields.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
        }
        if !fields.contains_key(header::HOST) {
            let host = HeaderValue::from_str(&plain.host).map_err(|e| failed("invalid value of header host", &e))?;
            fields.insert(header::HOST, host);
        }
        fields.entry(header::USER_AGENT).or_insert(HeaderValue::from_static(USER_AGENT));
        fields.entry(header::ACCEPT).or_insert(HeaderValue::from_static("*/*"));

        let mut method = method.clone();
        let mut path = hyper::Uri::try_from(plain.path.as_str()).map_err(|e| failed("request failed", &e))?;
        let mut current: Option<Url> = None;
        let mut redirects = 0;
        let (mut lease, response) = loop {
            let (lease, response) = self.send_hyper(plain.addr, &method, &path, &fields, &body, &failed).await?;
            let status = response.status();
            let location = response.headers().get(header::LOCATION).and_then(|l| l.to_str().ok());
            let (true, Some(location)) = (status.is_redirection(), location) else { break (lease, response) };
            let next = super::redirect_target(&target.url, current.as_ref(), location, redirects)
                .map_err(|cause| failed("redirect failed", &cause))?;
            let status = status.as_u16();
            if status == 303 && method != Method::HEAD || matches!(status, 301 | 302) && method == Method::POST {
                method = Method::GET;
                body = None;
                fields.remove(header::CONTENT_TYPE);
            }
            let next_path = origin_form(&next).map_err(|e| failed("redirect failed", &e))?;
            path = hyper::Uri::try_from(next_path).map_err(|e| failed("redirect failed", &e))?;
            current = Some(next);
            redirects += 1;
            drop(lease);
        };

        let status = response.status();
        let announced = hyper::body::Body::size_hint(response.body()).exact();
        super::refuse_announced_body(announced, self.max_body, what)?;
        let reserved = self.reserve(announced).await;
        let mut incoming = response.into_body();
        let mut received = Vec::with_capacity(announced.map_or(0, |l| l as usize));
        loop {
            let frame = lease.drive(std::pin::pin!(http_body_util::BodyExt::frame(&mut incoming))).await;
            let Some(frame) = frame else { break };
            let frame = frame.map_err(|e| failed("reading the response failed", &innermost(&e)))?;
            let Ok(chunk) = frame.into_data() else { continue };
            self.append(&mut received, &chunk, what)?;
        }
        self.hyper_connections.give_back(lease);
        Ok(Response { status, body: received, elapsed: started.elapsed(), _reserved: reserved })
    }

    /// One request on a kept or new connection; a kept connection that turns out closed before it took the request
    /// (or, for a GET, before any answer) is replaced by a new one once.
    async fn send_hyper(
        &self,
        addr: SocketAddr,
        method: &Method,
        path: &hyper::Uri,
        fields: &reqwest::header::HeaderMap,
        body: &Option<Bytes>,
        failed: &(dyn Fn(&str, &dyn std::fmt::Display) -> ProviderError + Sync),
    ) -> Result<(Lease, hyper::Response<hyper::body::Incoming>), ProviderError> {
        let mut fresh = false;
        loop {
            let mut lease =
                self.hyper_connections.lease(addr, fresh).await.map_err(|e| failed("cannot connect", &e))?;
            let mut request = hyper::Request::new(Full::new(body.clone().unwrap_or_default()));
            *request.method_mut() = method.clone();
            *request.uri_mut() = path.clone();
            *request.headers_mut() = fields.clone();
            match lease.send(request).await {
                Ok(response) => return Ok((lease, response)),
                Err((error, unsent)) => {
                    let stale = error.is_canceled() || error.is_closed() || error.is_incomplete_message();
                    if super::send_again(method, lease.reused && !fresh, unsent, stale) {
                        fresh = true;
                        continue;
                    }
                    return Err(failed("request failed", &innermost(&error)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The hostile endpoints of the plain-HTTP path, answered to both clients: each bound holds for both, while
    //! reading (the answer is cut off at the bound, well inside the measurement's timer).
    use super::*;
    use crate::providers::ProviderSettings;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// What an endpoint does after reading a request head.
    #[derive(Clone, Copy)]
    enum Endpoint {
        /// Not HTTP at all.
        Garbage,
        /// One header field of 2 MiB.
        HugeHead,
        /// Header fields without end, 1 KiB per write.
        EndlessHead,
        /// 65 header fields.
        ManyFields,
        /// A head sent a byte every 20 ms, never finished (slowloris).
        SlowHead,
        /// A chunked body without end, 1 KiB chunks.
        EndlessChunks,
        /// One chunk announced far over the limit, then its data without end.
        HugeChunk,
        /// `Content-Length` over the limit.
        LongAnnounced,
        /// Announces 100 bytes, sends 9, keeps the connection open.
        ShortBody,
        /// Trailer fields without end after the last chunk.
        EndlessTrailers,
        /// A small JSON answer (the connection stays usable).
        Fine,
    }

    impl Endpoint {
        fn of(path: &str) -> Self {
            match path {
                "/garbage" => Self::Garbage,
                "/huge-head" => Self::HugeHead,
                "/endless-head" => Self::EndlessHead,
                "/many-fields" => Self::ManyFields,
                "/slow-head" => Self::SlowHead,
                "/endless-chunks" => Self::EndlessChunks,
                "/huge-chunk" => Self::HugeChunk,
                "/long-announced" => Self::LongAnnounced,
                "/short-body" => Self::ShortBody,
                "/endless-trailers" => Self::EndlessTrailers,
                _ => Self::Fine,
            }
        }

        /// Writes the answer; returns when the client stopped reading (or the answer is complete, for `Fine`).
        async fn answer(self, socket: &mut tokio::net::TcpStream, written: &std::sync::atomic::AtomicUsize) {
            let mut send = async |bytes: &[u8]| {
                written.fetch_add(bytes.len(), std::sync::atomic::Ordering::Relaxed);
                socket.write_all(bytes).await.is_ok()
            };
            let kib = "k".repeat(1024);
            match self {
                Self::Garbage => _ = send(b"SSH-2.0-OpenSSH_9.6\r\n\r\n").await,
                Self::HugeHead => {
                    let head =
                        format!("HTTP/1.1 200 OK\r\nx-pad: {}\r\ncontent-length: 2\r\n\r\n{{}}", "a".repeat(2 << 20));
                    _ = send(head.as_bytes()).await;
                }
                Self::EndlessHead => {
                    if send(b"HTTP/1.1 200 OK\r\n").await {
                        for i in 0.. {
                            if !send(format!("x-{i}: {kib}\r\n").as_bytes()).await {
                                return;
                            }
                        }
                    }
                }
                Self::ManyFields => {
                    let fields: String = (0..65).map(|i| format!("x-{i}: 1\r\n")).collect();
                    _ = send(format!("HTTP/1.1 200 OK\r\n{fields}content-length: 2\r\n\r\n{{}}").as_bytes()).await;
                }
                Self::SlowHead => {
                    for byte in b"HTTP/1.1 200 OK\r\nx-slow: ".iter().chain(std::iter::repeat(&b's')) {
                        if !send(&[*byte]).await {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                Self::EndlessChunks => {
                    if send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n").await {
                        while send(format!("400\r\n{kib}\r\n").as_bytes()).await {}
                    }
                }
                Self::HugeChunk => {
                    if send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nfffffffff\r\n").await {
                        while send(kib.as_bytes()).await {}
                    }
                }
                Self::LongAnnounced => {
                    if send(b"HTTP/1.1 200 OK\r\ncontent-length: 1000000000\r\n\r\n").await {
                        while send(kib.as_bytes()).await {}
                    }
                }
                Self::ShortBody => {
                    _ = send(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"age\":45").await;
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
                Self::EndlessTrailers => {
                    if send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n").await {
                        for i in 0.. {
                            if !send(format!("x-{i}: {kib}\r\n").as_bytes()).await {
                                return;
                            }
                        }
                    }
                }
                Self::Fine => _ = send(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{\"age\":45}").await,
            }
        }
    }

    /// A server that answers each request head with the endpoint its path names; counts the bytes it wrote.
    async fn hostile_server() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = written.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buffer = [0u8; 4096];
                    loop {
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                            match socket.read(&mut buffer).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => head.extend_from_slice(&buffer[..n]),
                            }
                        }
                        let text = String::from_utf8_lossy(&head).into_owned();
                        head.clear();
                        let path = text.split(' ').nth(1).unwrap_or("/").to_string();
                        Endpoint::of(&path).answer(&mut socket, &counter).await;
                        if !matches!(Endpoint::of(&path), Endpoint::Fine) {
                            return;
                        }
                    }
                });
            }
        });
        (addr, written)
    }

    fn http(client: PlainClient) -> Http {
        let settings =
            ProviderSettings { max_body_bytes: 64 * 1024, plain_client: client, ..ProviderSettings::default() };
        Http::new(&settings).unwrap()
    }

    /// `GET path`: the error message with the URL taken out, or `"ok"`.
    async fn outcome(http: &Http, addr: SocketAddr, path: &str) -> String {
        let url = format!("http://{addr}{path}");
        match http.send(Method::GET, &url, &[], None, Duration::from_secs(3), false).await {
            Ok(response) => format!("ok {} {}", response.status.as_u16(), String::from_utf8_lossy(&response.body)),
            Err(e) => e.0.replacen(&format!("GET {url}: "), "", 1),
        }
    }

    #[tokio::test]
    async fn both_plain_http_clients_stop_hostile_answers_at_the_same_bounds_while_reading() {
        for client in [PlainClient::Own, PlainClient::Hyper] {
            let (addr, _) = hostile_server().await;
            let http = http(client);
            for path in ["/garbage", "/huge-head", "/endless-head", "/many-fields", "/endless-trailers"] {
                let why = outcome(&http, addr, path).await;
                assert!(
                    why.starts_with("request failed: ") || why.starts_with("reading the response failed: "),
                    "{client} {path}: {why}"
                );
            }
            for path in ["/endless-chunks", "/huge-chunk"] {
                let why = outcome(&http, addr, path).await;
                assert_eq!(why, "the response body exceeds the 65536 byte limit", "{client} {path}");
            }
            let why = outcome(&http, addr, "/long-announced").await;
            assert_eq!(why, "the response body (1000000000 bytes) exceeds the 65536 byte limit", "{client}");
            for path in ["/slow-head", "/short-body"] {
                assert_eq!(outcome(&http, addr, path).await, "no response within 3s", "{client} {path}");
            }
            assert_eq!(outcome(&http, addr, "/fine").await, r#"ok 200 {"age":45}"#, "{client}");
            assert_eq!(http.idle_plain_connections(), 1, "{client}: only the good connection is kept");
            assert_eq!(outcome(&http, addr, "/fine").await, r#"ok 200 {"age":45}"#, "{client}: kept and reused");
        }
    }

    #[test]
    fn the_client_is_chosen_by_name() {
        assert_eq!("own".parse(), Ok(PlainClient::Own));
        assert_eq!("hyper".parse(), Ok(PlainClient::Hyper));
        assert!("reqwest".parse::<PlainClient>().is_err());
        assert_eq!(PlainClient::default(), PlainClient::Own, "the product runs its own");
    }
}
