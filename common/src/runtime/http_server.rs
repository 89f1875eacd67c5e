//! The HTTP/1.1 server both operators' servers run (the webhooks over TLS, `/metrics` and the probes in plain text),
//! bounded in what one connection and one client can hold:
//!
//! - every connection is admitted by its server's [`Limiter`] (caps overall and per client address, below the
//!   descriptor limit; a connection that proves the API server's client certificate is never the one refused);
//! - the handshake ([`Handshake`]: TLS for the webhooks), the head of each request, and its body each get a bounded
//!   time ([`Timeouts`]); the head's timer also runs while a keep-alive connection waits for its next request (hyper
//!   starts it when the previous answer is written), so it is the idle timeout as well;
//! - a stop closes the listener, lets requests in flight finish (each bounded as above) and closes idle connections.
//!
//! `axum::serve` gives none of these: it builds hyper without a timer, so hyper's header-read timeout is off, and it
//! accepts every connection the kernel hands it.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt;

use super::connections::{Limiter, Slot};

/// How long a client may take for each step of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From the accepted connection to a completed handshake (TLS).
    pub handshake: Duration,
    /// For the head of a request (request line and headers), counted from the connection's handshake or from the
    /// previous answer: also how long an idle keep-alive connection stays open.
    pub request_head: Duration,
    /// For a request's whole body, counted from its head.
    pub body: Duration,
}

impl Timeouts {
    /// 3 s each: an API server (or Prometheus, or a probe) sends a request in milliseconds, and a webhook request
    /// whose head or body takes longer than this could not be answered within the API server's `timeoutSeconds`
    /// (the chart's default is 5 s) anyway.
    pub const DEFAULT: Timeouts = Timeouts {
        handshake: Duration::from_secs(3),
        request_head: Duration::from_secs(3),
        body: Duration::from_secs(3),
    };
}

/// The largest request body read (axum's default body limit, which the JSON extractor applies too).
pub const MAX_BODY: usize = 2 * 1024 * 1024;

/// How long a stop waits for the connections still open (each is bounded by [`Timeouts`] and its handler's own
/// budget) before it drops them.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// What a connection is once its handshake is done.
pub struct Handshaken<Io, Peer> {
    /// The stream HTTP is read from (the TLS session, or the TCP stream itself).
    pub io: Io,
    /// What the handlers learn about the client (`ConnectInfo<Peer>`).
    pub peer: Peer,
    /// It proved the API server's client certificate: never counted among, or evicted for, unverified connections.
    pub verified: bool,
}

/// The step between accepting a TCP connection and reading HTTP from it.
pub trait Handshake: Clone + Send + Sync + 'static {
    /// The stream after the handshake.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// What the handlers learn about the client (its address; with TLS, its certificate too).
    type Peer: Clone + Send + Sync + 'static;

    /// Turns an accepted TCP connection into a stream to read HTTP from; an error closes the connection. Bounded
    /// by the server's handshake timeout, so a client that never finishes cannot hold a slot.
    fn handshake(
        &self,
        tcp: TcpStream,
        address: SocketAddr,
    ) -> impl Future<Output = std::io::Result<Handshaken<Self::Io, Self::Peer>>> + Send;
}

/// Plain HTTP: no handshake; handlers see the client's address; nobody is verified.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainTcp;

impl Handshake for PlainTcp {
    type Io = TcpStream;
    type Peer = SocketAddr;

    async fn handshake(
        &self,
        tcp: TcpStream,
        address: SocketAddr,
    ) -> std::io::Result<Handshaken<TcpStream, SocketAddr>> {
        Ok(Handshaken { io: tcp, peer: address, verified: false })
    }
}

/// Serves `router` on `listener` until `stop` resolves, each connection admitted by `limiter` and bounded by
/// `timeouts`; handlers may extract `ConnectInfo<H::Peer>`.
pub async fn serve<H: Handshake>(
    listener: TcpListener,
    handshake: H,
    router: Router,
    limiter: Arc<Limiter>,
    timeouts: Timeouts,
    stop: impl Future<Output = ()> + Send,
) {
    let (stopping, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut warned: Option<Instant> = None;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((tcp, address)) => {
                    let Some(slot) = limiter.admit(address.ip()) else {
                        tracing::debug!(%address, "connection refused: the client holds its share");
                        continue;
                    };
                    let connection = Connection {
                        slot,
                        limiter: limiter.clone(),
                        handshake: handshake.clone(),
                        router: router.clone(),
                        timeouts,
                        stopped: stopped.clone(),
                    };
                    connections.spawn(connection.run(tcp, address));
                }
                Err(e) => accept_failed(&limiter, &e, &mut warned).await,
            }
        }
    }
    drop(listener);
    let _ = stopping.send(true);
    let drained = tokio::time::timeout(STOP_GRACE, async { while connections.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(open = connections.len(), "connections still open after the stop's grace period; closing them");
    }
}

/// Counts a failed accept, warns at most every 10 s, and, when the process is out of descriptors, gives connections
/// that are closing a moment instead of spinning.
async fn accept_failed(limiter: &Limiter, error: &std::io::Error, warned: &mut Option<Instant>) {
    limiter.accept_failed();
    if warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
        *warned = Some(Instant::now());
        tracing::warn!(%error, "accepting a connection failed (logged at most every 10 s)");
    }
    if !matches!(error.kind(), std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One admitted connection.
struct Connection<H> {
    slot: Slot,
    limiter: Arc<Limiter>,
    handshake: H,
    router: Router,
    timeouts: Timeouts,
    stopped: watch::Receiver<bool>,
}

impl<H: Handshake> Connection<H> {
    async fn run(mut self, tcp: TcpStream, address: SocketAddr) {
        let eviction = self.slot.eviction();
        tokio::select! {
            biased;
            () = eviction.notified() => tracing::debug!(%address, "connection closed to make room for a newcomer"),
            () = self.serve(tcp, address) => {}
        }
    }

    async fn serve(&mut self, tcp: TcpStream, address: SocketAddr) {
        let handshaken =
            match tokio::time::timeout(self.timeouts.handshake, self.handshake.handshake(tcp, address)).await {
                Ok(Ok(handshaken)) => handshaken,
                Ok(Err(e)) => {
                    tracing::debug!(%address, error = %e, "handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%address, "handshake timed out");
                    self.limiter.timed_out("handshake");
                    return;
                }
            };
        if handshaken.verified && !self.slot.verify() {
            return;
        }
        let service = RequestService {
            router: self.router.clone(),
            peer: handshaken.peer,
            body_timeout: self.timeouts.body,
            limiter: self.limiter.clone(),
        };
        let service = hyper::service::service_fn(move |request| service.clone().call(request));
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new()).header_read_timeout(self.timeouts.request_head);
        let connection = http.serve_connection(TokioIo::new(handshaken.io), service);
        tokio::pin!(connection);
        let mut stopped = self.stopped.clone();
        let stop = async move {
            // A closed channel (the server is gone) stops the connection too.
            let _ = stopped.wait_for(|stopped| *stopped).await;
        };
        let result = tokio::select! {
            result = connection.as_mut() => result,
            () = stop => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        match result {
            Ok(()) => {}
            Err(e) if e.is_timeout() => {
                tracing::debug!(%address, "no request head within the timeout (slow or idle client)");
                self.limiter.timed_out("request_head");
            }
            Err(e) => tracing::debug!(%address, error = %e, "connection ended"),
        }
    }
}

/// Reads a request's body within its timeout, then hands the request to the router with the client's
/// `ConnectInfo`.
#[derive(Clone)]
struct RequestService<Peer> {
    router: Router,
    peer: Peer,
    body_timeout: Duration,
    limiter: Arc<Limiter>,
}

impl<Peer: Clone + Send + Sync + 'static> RequestService<Peer> {
    async fn call(self, request: Request<Incoming>) -> Result<Response, std::convert::Infallible> {
        let (mut parts, body) = request.into_parts();
        parts.extensions.insert(ConnectInfo(self.peer));
        let body = match tokio::time::timeout(self.body_timeout, axum::body::to_bytes(Body::new(body), MAX_BODY)).await
        {
            Ok(Ok(body)) => body,
            Ok(Err(e)) => return Ok(closing(StatusCode::PAYLOAD_TOO_LARGE, format!("reading the request body: {e}"))),
            Err(_) => {
                self.limiter.timed_out("body");
                return Ok(closing(StatusCode::REQUEST_TIMEOUT, "the request body did not arrive in time".into()));
            }
        };
        self.router.oneshot(Request::from_parts(parts, Body::from(body))).await
    }
}

/// An error answer after which the connection closes (its request was not read to the end).
fn closing(status: StatusCode, message: String) -> Response {
    (status, [(header::CONNECTION, "close")], message).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::connections::{ConnectionLimits, ConnectionMetrics};
    use axum::routing::{get, post};
    use prometheus_client::registry::Registry;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const SHORT: Timeouts = Timeouts {
        handshake: Duration::from_millis(300),
        request_head: Duration::from_millis(300),
        body: Duration::from_millis(300),
    };

    /// A server with `limits` and `timeouts`; its address, its metrics, and the trigger of its stop.
    async fn server(
        limits: ConnectionLimits,
        timeouts: Timeouts,
    ) -> (SocketAddr, Registry, tokio::sync::oneshot::Sender<()>) {
        let mut registry = Registry::default();
        let limiter = Limiter::new("metrics", limits, ConnectionMetrics::register(&mut registry, "test"));
        let router = Router::new()
            .route(
                "/ok",
                get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { format!("hello {}", peer.ip()) }),
            )
            .route("/echo", post(|body: String| async move { body }));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, PlainTcp, router, limiter, timeouts, async move {
            let _ = stopped.await;
        }));
        (address, registry, stop)
    }

    /// Reads until the server closes the connection (what it sent), failing after a generous deadline.
    async fn until_closed(stream: &mut TcpStream) -> String {
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut out))
            .await
            .expect("the server closes the connection")
            .ok();
        String::from_utf8_lossy(&out).into_owned()
    }

    fn metric(registry: &Registry, line: &str) -> bool {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text.contains(line)
    }

    async fn get_ok(address: SocketAddr) -> String {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(b"GET /ok HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").await.unwrap();
        until_closed(&mut stream).await
    }

    #[tokio::test]
    async fn a_request_head_that_trickles_or_never_comes_is_cut_at_its_timeout() {
        let (address, registry, _stop) = server(ConnectionLimits { unverified: 8, per_address: 4 }, SHORT).await;
        let mut idle = TcpStream::connect(address).await.unwrap();
        let mut slow = TcpStream::connect(address).await.unwrap();
        slow.write_all(b"GET /ok HTTP/1.1\r\nHost: t\r\n").await.unwrap();
        assert_eq!(until_closed(&mut idle).await, "", "closed without an answer");
        assert_eq!(until_closed(&mut slow).await, "");
        assert!(metric(
            &registry,
            r#"test_server_connections_timed_out_total{server="metrics",phase="request_head"} 2"#
        ));
        // A keep-alive connection is closed as soon after its answer as an idle one.
        let mut kept = TcpStream::connect(address).await.unwrap();
        kept.write_all(b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
        let answer = until_closed(&mut kept).await;
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("hello 127.0.0.1"), "{answer}");
    }

    #[tokio::test]
    async fn a_body_that_trickles_is_answered_408_and_closed() {
        let (address, registry, _stop) = server(ConnectionLimits { unverified: 8, per_address: 4 }, SHORT).await;
        let mut slow = TcpStream::connect(address).await.unwrap();
        slow.write_all(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nabc").await.unwrap();
        let answer = until_closed(&mut slow).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
        assert!(metric(&registry, r#"test_server_connections_timed_out_total{server="metrics",phase="body"} 1"#));
        // A whole body is read and handed on.
        let mut whole = TcpStream::connect(address).await.unwrap();
        whole
            .write_all(b"POST /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc")
            .await
            .unwrap();
        let answer = until_closed(&mut whole).await;
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("abc"), "{answer}");
    }

    #[tokio::test]
    async fn connections_beyond_an_address_s_share_are_closed_at_once_and_others_are_served() {
        // Timeouts far longer than the test: only the cap can close a connection.
        let (address, registry, stop) = server(
            ConnectionLimits { unverified: 8, per_address: 2 },
            Timeouts {
                handshake: Duration::from_secs(120),
                request_head: Duration::from_secs(120),
                body: Duration::from_secs(120),
            },
        )
        .await;
        let source = |last: u8| SocketAddr::from(([127, 0, 0, last], 0));
        let connect_from = |last: u8| async move {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(source(last)).unwrap();
            socket.connect(address).await.unwrap()
        };
        let _held = [connect_from(7).await, connect_from(7).await];
        let mut third = connect_from(7).await;
        assert_eq!(until_closed(&mut third).await, "", "closed at once, unanswered");
        assert!(metric(&registry, r#"test_server_connections_refused_total{server="metrics",reason="per_address"} 1"#));
        assert!(get_ok(address).await.starts_with("HTTP/1.1 200"), "another address is served");
        let _ = stop.send(());
    }
}
