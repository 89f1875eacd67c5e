//! The HTTP client shared by the web and Prometheus providers: one connection pool for the process (BCS
//! built a client per measurement and leaked every response body), a bounded body read, and the
//! `--web-resolve` rewrites. The plain-HTTP path for IP addresses is [`connections`] (answers read by [`h1`]);
//! [`egress`] decides which addresses may be reached at all.

pub mod connections;
pub mod egress;
pub mod h1;
pub mod hyper_baseline;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use std::sync::Arc;

use reqwest::{Method, Url};

use self::connections::{Connections, Lease, ReadError};
use self::egress::{Policy, Resolver};
use self::hyper_baseline::PlainClient;
use super::{ProviderError, ProviderSettings};

/// `host:port=addr:port`: requests to `host:port` go to `addr:port` instead, with the original `Host`
/// header. A test and sandbox aid (the BCS walkthrough's templates call `http://1.1.1.1:9091`); off unless
/// given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolve {
    /// The URL's host, as written.
    pub host: String,
    /// The URL's port.
    pub port: u16,
    /// Where requests for `host:port` go instead.
    pub to: SocketAddr,
}

impl std::str::FromStr for Resolve {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let usage = || format!("{s:?} is not host:port=addr:port (e.g. 1.1.1.1:9091=127.0.0.1:18080)");
        let (from, to) = s.split_once('=').ok_or_else(usage)?;
        let (host, port) = from.rsplit_once(':').ok_or_else(usage)?;
        let port = port.parse().map_err(|_| usage())?;
        let to = to.parse().map_err(|_| usage())?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        if host.is_empty() {
            return Err(usage());
        }
        Ok(Self { host, port, to })
    }
}

/// A response that was read completely (within the size cap). It holds its share of the buffered-bytes budget
/// until dropped.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: reqwest::StatusCode,
    /// The whole body (at most the size cap).
    pub body: Vec<u8>,
    /// From sending the request to the last byte of the body.
    pub elapsed: Duration,
    _reserved: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// What a request sends, as rendered: its method, its template's header fields and its body.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    /// The HTTP method.
    pub method: &'a Method,
    /// The header fields, as rendered.
    pub headers: &'a [(String, String)],
    /// The body, as rendered.
    pub body: Option<&'a str>,
}

/// The buffers of an exchange, kept by its caller from one exchange to the next (a run keeps them between its
/// measurements): the request as written on the wire, and the answer's body. Both start empty, and an exchange
/// that finds them large enough allocates nothing for them; the caller decides how large a buffer it keeps.
#[derive(Debug, Default)]
pub struct Buffers {
    /// The request's head and body as sent (the plain-HTTP path), rewritten by every exchange.
    pub wire: Vec<u8>,
    /// Where the answer's body is read: taken by the exchange (cleared), and handed out as [`Response::body`].
    pub answer: Vec<u8>,
}

/// Where a URL as written (after rendering) is sent: parsed, checked against the egress policy (IP literals) and
/// rewritten by `--web-resolve` once, then reused by every request to the same URL.
#[derive(Debug)]
struct Target {
    url: Url,
    /// The `Host` header when `--web-resolve` rewrote the URL.
    host_header: Option<String>,
    /// `host:port` the request really goes to, when rewritten (for messages).
    sent_to: Option<String>,
    /// Plain `http` to an IP address: sent on [`Connections`] (the per-pod endpoints), not through reqwest.
    plain: Option<Plain>,
}

/// What a plain-HTTP request to an IP address needs, computed once per URL.
#[derive(Debug)]
struct Plain {
    addr: SocketAddr,
    /// The `Host` header: the original authority after a `--web-resolve` rewrite, else the URL's.
    host: String,
    /// Path and query (origin form).
    path: String,
}

impl Plain {
    fn of(url: &Url, host_header: Option<&str>) -> Option<Self> {
        if url.scheme() != "http" {
            return None;
        }
        let ip = match url.host()? {
            url::Host::Ipv4(ip) => std::net::IpAddr::V4(ip),
            url::Host::Ipv6(ip) => std::net::IpAddr::V6(ip),
            url::Host::Domain(_) => return None,
        };
        let addr = SocketAddr::new(ip, url.port_or_known_default()?);
        let authority = match url.port() {
            Some(port) => format!("{}:{port}", url.host_str()?),
            None => url.host_str()?.to_string(),
        };
        let host = host_header.unwrap_or(&authority);
        // The head is written as rendered: only a `Host` and a path that are valid in one are taken this way.
        reqwest::header::HeaderValue::from_str(host).ok()?;
        let path = origin_form(url).ok()?;
        Some(Self { addr, host: host.to_string(), path })
    }
}

/// Distinct URLs remembered; the cache is emptied when it is full (a template with a per-pod URL has as many
/// entries as live pods).
const TARGET_CACHE_LIMIT: usize = 16 * 1024;

/// The HTTP client of the web and prometheus providers: egress policy, size caps and the buffered-bytes budget
/// applied to every request.
pub struct Http {
    client: reqwest::Client,
    insecure: reqwest::Client,
    resolve: Vec<Resolve>,
    max_body: usize,
    egress: Arc<Policy>,
    /// Response bytes that may be buffered at once across all measurements (`--max-buffered-body-bytes`).
    buffered: Arc<tokio::sync::Semaphore>,
    buffered_limit: usize,
    /// Most bytes ever reserved at once (for tests and diagnostics).
    buffered_peak: std::sync::atomic::AtomicUsize,
    /// Keep-alive connections for plain-HTTP targets (see [`Target::plain`]).
    connections: Arc<Connections>,
    /// Which client plain-HTTP targets go through: always [`PlainClient::Own`] in the operator (see
    /// [`hyper_baseline`], the comparison `hook-bench` runs).
    plain_client: PlainClient,
    hyper_connections: hyper_baseline::HyperConnections,
    /// Rendered URL → where it goes (see [`Target`]). Only URLs the policy admits are kept; the policy and the
    /// rewrites are fixed for the life of the client, so an entry never goes stale.
    targets: std::sync::Mutex<std::collections::HashMap<String, Arc<Target>>>,
}

fn builder(settings: &ProviderSettings, egress: &Arc<Policy>) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        // Proxies from the environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY) are ignored: a proxy would resolve host
        // names and connect in the operator's stead, past the egress policy and the look-up bounds.
        .no_proxy()
        .dns_resolver(Arc::new(Resolver { policy: egress.clone() }))
        .redirect(egress::redirects())
        // reqwest's default retry policy copies every request (headers, URI, extensions) before sending it, in case
        // an HTTP/2 or HTTP/3 connection refuses it; this client speaks HTTP/1.1 only, where that policy never
        // retries, so the copy was pure cost.
        .retry(reqwest::retry::never())
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5))
        .pool_idle_timeout(settings.idle_timeout)
        .pool_max_idle_per_host(settings.max_idle_per_host)
        .user_agent(USER_AGENT)
}

impl Http {
    /// The client the settings describe (egress policy, `--web-resolve`, pools, caps).
    pub fn new(settings: &ProviderSettings) -> Result<Self, ProviderError> {
        let build = |b: reqwest::ClientBuilder| {
            b.build().map_err(|e| ProviderError(format!("building the HTTP client: {}", chain(&e))))
        };
        let egress = Arc::new(settings.egress.clone());
        let buffered_limit = settings.max_buffered_body_bytes.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        let connections = Arc::new(Connections::new(settings.max_idle_per_host, settings.idle_timeout));
        Connections::reap_idle(&connections);
        Ok(Self {
            client: build(builder(settings, &egress))?,
            insecure: build(builder(settings, &egress).danger_accept_invalid_certs(true))?,
            resolve: settings.resolve.clone(),
            max_body: settings.max_body_bytes,
            egress,
            buffered: Arc::new(tokio::sync::Semaphore::new(buffered_limit)),
            buffered_limit,
            buffered_peak: std::sync::atomic::AtomicUsize::new(0),
            targets: std::sync::Mutex::new(std::collections::HashMap::new()),
            connections,
            plain_client: settings.plain_client,
            hyper_connections: hyper_baseline::HyperConnections::new(settings.max_idle_per_host, settings.idle_timeout),
        })
    }

    /// Idle plain-HTTP connections of the client in use (tests).
    #[cfg(test)]
    fn idle_plain_connections(&self) -> usize {
        match self.plain_client {
            PlainClient::Own => self.connections.idle(),
            PlainClient::Hyper => self.hyper_connections.idle(),
        }
    }

    /// The most response bytes that were reserved at once so far.
    pub fn peak_buffered_bytes(&self) -> usize {
        self.buffered_peak.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Applies `--web-resolve`; returns the URL to connect to and the `Host` header to send, if rewritten.
    pub fn rewrite(&self, url: &mut Url) -> Option<String> {
        let host = url.host_str()?.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        let port = url.port_or_known_default()?;
        let rule = self.resolve.iter().find(|r| r.host == host && r.port == port)?;
        let original = match url.port() {
            Some(p) => format!("{}:{p}", url.host_str().unwrap_or_default()),
            None => url.host_str().unwrap_or_default().to_string(),
        };
        url.set_ip_host(rule.to.ip()).ok()?;
        url.set_port(Some(rule.to.port())).ok()?;
        Some(original)
    }

    /// The parsed, policy-checked and rewritten target of `url`, from the cache when it was seen before.
    fn target(&self, method: &Method, url: &str) -> Result<Arc<Target>, ProviderError> {
        if let Some(target) = self.targets.lock().ok().and_then(|cache| cache.get(url).cloned()) {
            return Ok(target);
        }
        let what = || format!("{method} {}", crate::providers::redact::url(url));
        let mut parsed = Url::parse(url).map_err(|e| ProviderError(format!("{}: invalid URL: {e}", what())))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ProviderError(format!("{}: only http and https URLs are supported", what())));
        }
        // The egress policy, before any connection: an IP literal as written, and the address `--web-resolve`
        // sends it to (host names are checked after DNS resolution by the resolver).
        let literal = |url: &Url| {
            url.host_str()
                .and_then(|h| h.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().ok())
        };
        if let Some(ip) = literal(&parsed) {
            self.egress.check(ip).map_err(|e| ProviderError(format!("{}: {e}", what())))?;
        }
        let host_header = self.rewrite(&mut parsed);
        // Once `--web-resolve` rewrote the target, every message names where the request really went.
        let sent_to = host_header.is_some().then(|| {
            format!("{}:{}", parsed.host_str().unwrap_or_default(), parsed.port_or_known_default().unwrap_or_default())
        });
        if let (Some(to), Some(ip)) = (&sent_to, literal(&parsed).filter(|_| host_header.is_some())) {
            self.egress
                .check(ip)
                .map_err(|e| ProviderError(format!("{} (sent to {to} by --web-resolve): {e}", what())))?;
        }
        let plain = Plain::of(&parsed, host_header.as_deref());
        let target = Arc::new(Target { url: parsed, host_header, sent_to, plain });
        if let Ok(mut cache) = self.targets.lock() {
            if cache.len() >= TARGET_CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(url.to_string(), target.clone());
        }
        Ok(target)
    }

    /// Distinct URLs whose parsed target is remembered (tests).
    pub fn cached_targets(&self) -> usize {
        self.targets.lock().map(|c| c.len()).unwrap_or_default()
    }

    /// Sends one request and reads the body, failing with a message that names the method and URL. `timeout`
    /// bounds the whole exchange (connecting, sending, the answer and its body) with one timer.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(String, String)],
        body: Option<String>,
        timeout: Duration,
        insecure: bool,
    ) -> Result<Response, ProviderError> {
        let request = Outgoing { method: &method, headers, body: body.as_deref() };
        self.send_with(request, url, timeout, insecure, &mut Buffers::default()).await
    }

    /// [`Http::send`] with the caller's [`Buffers`]: the request is written into `buffers.wire` and the body read into
    /// `buffers.answer` (handed out as the response's body), so a caller that keeps them allocates nothing for them.
    pub async fn send_with(
        &self,
        request: Outgoing<'_>,
        url: &str,
        timeout: Duration,
        insecure: bool,
        buffers: &mut Buffers,
    ) -> Result<Response, ProviderError> {
        let method = request.method;
        let target = self.target(method, url)?;
        let what = || {
            let what = format!("{method} {}", crate::providers::redact::url(url));
            match &target.sent_to {
                Some(to) => format!("{what} (sent to {to} by --web-resolve)"),
                None => what,
            }
        };
        let exchange = self.exchange(request, &target, insecure, buffers, &what);
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(ProviderError(format!("{}: no response within {}", what(), crate::text::seconds(timeout)))),
        }
    }

    async fn exchange(
        &self,
        request: Outgoing<'_>,
        target: &Target,
        insecure: bool,
        buffers: &mut Buffers,
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<Response, ProviderError> {
        let Outgoing { method, headers, body } = request;
        if let Some(plain) = &target.plain {
            return match self.plain_client {
                PlainClient::Own => self.exchange_plain(method, target, plain, headers, body, buffers, what).await,
                PlainClient::Hyper => self.exchange_hyper(method, target, plain, headers, body, what).await,
            };
        }
        let client = if insecure { &self.insecure } else { &self.client };
        let mut request = client.request(method.clone(), target.url.clone());
        if let Some(host) = &target.host_header {
            request = request.header(reqwest::header::HOST, host.as_str());
        }
        let mut has_content_type = false;
        for (key, value) in headers {
            has_content_type |= key.eq_ignore_ascii_case("content-type");
            request = request.header(key.as_str(), value.as_str());
        }
        if let Some(body) = body {
            let looks_json = matches!(body.trim_start().chars().next(), Some('{' | '['));
            if looks_json && !has_content_type {
                request = request.header(reqwest::header::CONTENT_TYPE, "application/json");
            }
            request = request.body(body.to_string());
        }
        let started = Instant::now();
        let failed = |e: reqwest::Error| ProviderError(format!("{}: {}", what(), describe(&e)));
        let mut response = request.send().await.map_err(failed)?;
        let status = response.status();
        if let Some(length) = response.content_length()
            && length > self.max_body as u64
        {
            return Err(ProviderError(format!(
                "{}: the response body ({length} bytes) exceeds the {} byte limit",
                what(),
                self.max_body
            )));
        }
        let reserved = self.reserve(response.content_length()).await;
        let mut body = std::mem::take(&mut buffers.answer);
        body.clear();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            self.append(&mut body, &chunk, what)?;
        }
        Ok(Response { status, body, elapsed: started.elapsed(), _reserved: reserved })
    }
}

impl Http {
    /// [`Http::exchange`] for a plain-HTTP target, on [`Connections`]: the same headers, redirect rule (same origin,
    /// at most 5), size limits and messages as the reqwest path.
    #[allow(clippy::too_many_arguments)]
    async fn exchange_plain(
        &self,
        method: &Method,
        target: &Target,
        plain: &Plain,
        headers: &[(String, String)],
        mut body: Option<&str>,
        buffers: &mut Buffers,
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<Response, ProviderError> {
        let started = Instant::now();
        let failed = |kind: &str, cause: &dyn std::fmt::Display| ProviderError(format!("{}: {kind}: {cause}", what()));
        for (key, value) in headers {
            check_field(key, value).map_err(|(kind, cause)| failed(&kind, &cause))?;
        }
        let mut method = method.clone();
        let mut path = std::borrow::Cow::Borrowed(plain.path.as_str());
        let mut current: Option<Url> = None;
        let mut redirects = 0;
        let mut with_content_type = true;
        let request = &mut buffers.wire;
        let (mut lease, head) = loop {
            request.clear();
            write_request(request, &method, &path, &plain.host, headers, with_content_type, body);
            let (lease, head) = self.send_plain(plain.addr, &method, request, &failed).await?;
            let (true, Some(location)) = ((300..400).contains(&head.status), &head.location) else {
                break (lease, head);
            };
            let next = redirect_target(&target.url, current.as_ref(), location, redirects)
                .map_err(|cause| failed("redirect failed", &cause))?;
            // As browsers and reqwest: 303 (and 301/302 after a POST) continue with a GET without the body.
            let status = head.status;
            if status == 303 && method != Method::HEAD || matches!(status, 301 | 302) && method == Method::POST {
                method = Method::GET;
                body = None;
                with_content_type = false;
            }
            path = std::borrow::Cow::Owned(origin_form(&next).map_err(|e| failed("redirect failed", &e))?);
            current = Some(next);
            redirects += 1;
            drop(lease);
        };

        let status = reqwest::StatusCode::from_u16(head.status)
            .map_err(|e| failed("request failed", &format!("status {}: {e}", head.status)))?;
        let announced = match head.framing {
            h1::Framing::Empty => Some(0),
            h1::Framing::Length(length) => Some(length),
            h1::Framing::Chunked | h1::Framing::UntilClose => None,
        };
        refuse_announced_body(announced, self.max_body, what)?;
        let reserved = self.reserve(announced).await;
        let mut received = std::mem::take(&mut buffers.answer);
        received.clear();
        // As large as the announced body (the limit was checked above), as a new buffer of that length was.
        received.reserve_exact(announced.map_or(0, |l| l as usize));
        lease.read_body(&head, &mut received, self.max_body).await.map_err(|e| match e {
            ReadError::TooLarge => {
                ProviderError(format!("{}: the response body exceeds the {} byte limit", what(), self.max_body))
            }
            ReadError::Failed(why) => failed("reading the response failed", &why),
        })?;
        self.connections.give_back(lease);
        Ok(Response { status, body: received, elapsed: started.elapsed(), _reserved: reserved })
    }

    /// One request on a kept or new connection; a kept connection that turns out closed before it took the request
    /// (or, for a GET, before any answer) is replaced by a new one once.
    async fn send_plain(
        &self,
        addr: SocketAddr,
        method: &Method,
        request: &[u8],
        failed: &(dyn Fn(&str, &dyn std::fmt::Display) -> ProviderError + Sync),
    ) -> Result<(Lease, h1::Head), ProviderError> {
        let mut fresh = false;
        loop {
            let mut lease = self.connections.lease(addr, fresh).await.map_err(|e| failed("cannot connect", &e))?;
            match lease.send(request, *method == Method::HEAD).await {
                Ok(head) => return Ok((lease, head)),
                Err(error) => {
                    if send_again(method, lease.reused && !fresh, error.unsent, error.stale) {
                        fresh = true;
                        continue;
                    }
                    return Err(failed("request failed", &error.message));
                }
            }
        }
    }

    /// Adds a chunk of the response body, failing once the body would exceed `--max-body-bytes`.
    fn append(
        &self,
        body: &mut Vec<u8>,
        chunk: &[u8],
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<(), ProviderError> {
        if body.len() + chunk.len() > self.max_body {
            return Err(ProviderError(format!(
                "{}: the response body exceeds the {} byte limit",
                what(),
                self.max_body
            )));
        }
        body.extend_from_slice(chunk);
        Ok(())
    }

    /// A share of the process-wide buffer budget, all at once (never piecemeal, so readers cannot deadlock holding
    /// halves): the announced length, else the per-response limit.
    async fn reserve(&self, announced: Option<u64>) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let want = announced.map_or(self.max_body, |l| l as usize).min(self.max_body).max(1);
        let want = u32::try_from(want.min(self.buffered_limit)).unwrap_or(u32::MAX);
        let reserved = self.buffered.clone().acquire_many_owned(want).await.ok();
        let in_use = self.buffered_limit - self.buffered.available_permits();
        self.buffered_peak.fetch_max(in_use, std::sync::atomic::Ordering::Relaxed);
        reserved
    }
}

/// A header field from a template, checked as the reqwest path checks it (a name of token characters; a value
/// without control characters but tab), so that it can be written as it is. The error: what is wrong, and why.
fn check_field(key: &str, value: &str) -> Result<(), (String, String)> {
    use reqwest::header::{HeaderName, HeaderValue};
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    if key.is_empty() || !key.bytes().all(|b| token(&b)) {
        let why =
            HeaderName::from_bytes(key.as_bytes()).err().map_or("invalid HTTP header name".into(), |e| e.to_string());
        return Err(("invalid header name".to_string(), why));
    }
    if !value.bytes().all(|b| b == b'\t' || (b >= 32 && b != 127)) {
        let why = HeaderValue::from_str(value).err().map_or("failed to parse header value".into(), |e| e.to_string());
        return Err((format!("invalid value of header {key}"), why));
    }
    Ok(())
}

/// The request as it goes on the wire: the template's headers (a `Content-Length` or `Transfer-Encoding` among them
/// is replaced by the body's own length, which is the only framing this path sends), `Content-Type:
/// application/json` for a JSON body that names none, `Host`, `User-Agent` and `Accept` unless the template sets
/// them, the length of the body when there is one (or the method normally has one), then the body.
/// `with_content_type`: false after a redirect turned the request into a GET without its body.
fn write_request(
    out: &mut Vec<u8>,
    method: &Method,
    path: &str,
    host: &str,
    headers: &[(String, String)],
    with_content_type: bool,
    body: Option<&str>,
) {
    let named = |name: &str| headers.iter().any(|(key, _)| key.eq_ignore_ascii_case(name));
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut field = |name: &str, value: &str| {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    };
    for (key, value) in headers {
        let framing = key.eq_ignore_ascii_case("content-length") || key.eq_ignore_ascii_case("transfer-encoding");
        if framing || !with_content_type && key.eq_ignore_ascii_case("content-type") {
            continue;
        }
        field(key, value);
    }
    if let Some(body) = body
        && with_content_type
        && matches!(body.trim_start().as_bytes().first(), Some(b'{' | b'['))
        && !named("content-type")
    {
        field("content-type", "application/json");
    }
    if !named("host") {
        field("host", host);
    }
    if !named("user-agent") {
        field("user-agent", USER_AGENT);
    }
    if !named("accept") {
        field("accept", "*/*");
    }
    let length = body.map(str::len);
    if length.is_some() || matches!(*method, Method::POST | Method::PUT | Method::PATCH) {
        let mut digits = [0u8; 20];
        field("content-length", decimal(&mut digits, length.unwrap_or(0)));
    }
    out.extend_from_slice(b"\r\n");
    if let Some(body) = body {
        out.extend_from_slice(body.as_bytes());
    }
}

/// `n` in decimal, written into `digits` (no allocation).
fn decimal(digits: &mut [u8; 20], mut n: usize) -> &str {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&digits[at..]).unwrap_or("0")
}

/// The request target of `url` in origin form (`/path?query`), as HTTP/1.1 sends it to the server itself.
fn origin_form(url: &Url) -> Result<String, hyper::http::uri::InvalidUri> {
    // Checked as a URI (what hyper would send), written as it is.
    let target = &url[url::Position::BeforePath..url::Position::AfterQuery];
    hyper::Uri::try_from(target)?;
    Ok(target.to_string())
}

const USER_AGENT: &str = concat!("hook-operator/", env!("CARGO_PKG_VERSION"));

/// The innermost cause of an error ("Connection reset by peer (os error 104)"), which is what a person needs.
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut innermost = error;
    while let Some(cause) = innermost.source() {
        innermost = cause;
    }
    innermost.to_string()
}

/// An error with its causes (reqwest's top-level text alone hides "connection refused").
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![error.to_string()];
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
}

/// reqwest's own text ("error sending request for url (...)") repeats the URL we already print; the
/// innermost cause is what a person needs ("Connection refused (os error 111)").
fn describe(error: &reqwest::Error) -> String {
    let innermost = innermost(error);
    let kind = if error.is_connect() {
        "cannot connect"
    } else if error.is_body() || error.is_decode() {
        "reading the response failed"
    } else if error.is_redirect() {
        "redirect failed"
    } else {
        "request failed"
    };
    format!("{kind}: {innermost}")
}

/// Where a redirect leads, or why it is refused: at most 5 redirects, and never to another origin (a template's
/// URL names the one origin its measurements may reach). Shared by both plain-HTTP clients.
pub(crate) fn redirect_target(
    url: &Url,
    current: Option<&Url>,
    location: &str,
    redirects: usize,
) -> Result<Url, String> {
    let from = current.unwrap_or(url);
    let next = from.join(location).map_err(|e| format!("invalid Location: {e}"))?;
    if redirects >= 5 {
        return Err("more than 5 redirects".to_string());
    }
    if next.origin() != url.origin() {
        return Err(format!(
            "redirect from {} to another origin ({}) refused",
            url.origin().ascii_serialization(),
            next.origin().ascii_serialization()
        ));
    }
    Ok(next)
}

/// Whether a request that failed on a connection taken from the pool (`kept`, and not already the one retry) is sent
/// again on a new connection: the server may have closed the kept one while it was idle. Safe when the connection
/// never took the request (`unsent`), or when the method is idempotent and the connection closed before any answer
/// (`stale`). Shared by both plain-HTTP clients, so the benchmark compares them under the same retry rule.
pub(crate) fn send_again(method: &Method, kept: bool, unsent: bool, stale: bool) -> bool {
    let idempotent = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    kept && (unsent || idempotent && stale)
}

/// Refuses an answer whose announced length is over the body limit before a byte of it is read. Shared by both
/// plain-HTTP clients.
pub(crate) fn refuse_announced_body(
    announced: Option<u64>,
    max_body: usize,
    what: &(dyn Fn() -> String + Sync),
) -> Result<(), ProviderError> {
    match announced {
        Some(length) if length > max_body as u64 => Err(ProviderError(format!(
            "{}: the response body ({length} bytes) exceeds the {max_body} byte limit",
            what()
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client whose requests to one `host:port` go elsewhere, by the `--web-resolve` `rule`.
    fn resolving(rule: &str) -> Http {
        Http::new(&ProviderSettings { resolve: vec![rule.parse().unwrap()], ..ProviderSettings::default() }).unwrap()
    }

    #[test]
    fn parses_resolve_rules() {
        let r: Resolve = "1.1.1.1:9091=127.0.0.1:18080".parse().unwrap();
        assert_eq!((r.host.as_str(), r.port, r.to), ("1.1.1.1", 9091, "127.0.0.1:18080".parse().unwrap()));
        let r: Resolve = "Example.COM:443=127.0.0.2:8443".parse().unwrap();
        assert_eq!(r.host, "example.com");
        assert!("1.1.1.1=127.0.0.1:1".parse::<Resolve>().is_err());
        assert!("1.1.1.1:9091=localhost".parse::<Resolve>().is_err());
    }

    #[test]
    fn rewrites_only_matching_targets() {
        let http = resolving("1.1.1.1:9091=127.0.0.1:18080");
        let mut url = Url::parse("http://1.1.1.1:9091/x?y=1").unwrap();
        assert_eq!(http.rewrite(&mut url).as_deref(), Some("1.1.1.1:9091"));
        assert_eq!(url.as_str(), "http://127.0.0.1:18080/x?y=1");
        let mut other = Url::parse("http://1.1.1.1:9092/").unwrap();
        assert_eq!(http.rewrite(&mut other), None);
        assert_eq!(other.as_str(), "http://1.1.1.1:9092/");
    }

    #[test]
    fn parsed_targets_are_reused_per_rendered_url_and_refusals_are_not_remembered() {
        let http = resolving("1.1.1.1:9091=169.254.169.254:80");
        let a = http.target(&Method::GET, "http://127.0.0.1:8080/a").unwrap();
        let again = http.target(&Method::GET, "http://127.0.0.1:8080/a").unwrap();
        assert!(Arc::ptr_eq(&a, &again), "the same rendered URL is parsed once");
        // A URL rendered differently (another pod's IP, another path) is its own target, never the cached one.
        let b = http.target(&Method::GET, "http://127.0.0.2:8080/a").unwrap();
        assert_eq!(b.url.as_str(), "http://127.0.0.2:8080/a");
        assert_eq!(a.url.as_str(), "http://127.0.0.1:8080/a");
        assert_eq!(http.cached_targets(), 2);
        // Refused targets (an IP literal, or where --web-resolve sends one) are refused on every request and never
        // cached as if they were allowed.
        for _ in 0..2 {
            let literal = http.target(&Method::GET, "http://169.254.169.254/latest/meta-data/").unwrap_err();
            assert!(literal.0.contains("refused by the egress policy"), "{}", literal.0);
            let rewritten = http.target(&Method::GET, "http://1.1.1.1:9091/").unwrap_err();
            assert!(rewritten.0.contains("(sent to 169.254.169.254:80 by --web-resolve)"), "{}", rewritten.0);
            assert!(rewritten.0.contains("refused by the egress policy"), "{}", rewritten.0);
            assert!(http.target(&Method::GET, "ftp://127.0.0.1/").unwrap_err().0.contains("only http and https"));
        }
        assert_eq!(http.cached_targets(), 2);
    }

    #[tokio::test]
    async fn one_timer_bounds_a_body_that_never_finishes() {
        use tokio::io::AsyncWriteExt;
        // Headers at once, then a body that stops half way and never ends.
        let (addr, _) = serve_connections(|mut socket, _| async move {
            let mut request = [0u8; 1024];
            let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut request).await;
            socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"age\":").await.unwrap();
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(socket);
        })
        .await;
        let http = Http::new(&ProviderSettings::default()).unwrap();
        let url = format!("http://{addr}/drip");
        let started = Instant::now();
        let Err(err) = http.send(Method::GET, &url, &[], None, Duration::from_secs(1), false).await else {
            panic!("the body never completes");
        };
        assert_eq!(err.0, format!("GET {url}: no response within 1s"));
        assert!(started.elapsed() < Duration::from_secs(30), "ended by the timeout, not by the server");
    }

    /// A loopback server that hands every connection it accepts to `serve`, on a task of its own, with its number
    /// (0 for the first): the test servers below differ only in what they do with a connection. Returns the address
    /// and how many connections were accepted so far. Its tasks end with the test's runtime.
    async fn serve_connections<S, F>(serve: S) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>)
    where
        S: Fn(tokio::net::TcpStream, usize) -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let number = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(serve(socket, number));
            }
        });
        (addr, accepted)
    }

    /// A raw HTTP/1.1 server: answers every request on a connection with `answer(request head)`, keeps the
    /// connection open, and counts the connections it accepted.
    async fn raw_server(
        answer: fn(&str) -> String,
    ) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>, Arc<std::sync::Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = heads.clone();
        let (addr, accepted) = serve_connections(move |mut socket, _| {
            let seen = seen.clone();
            async move {
                let mut buffer = vec![0u8; 16 * 1024];
                let mut filled = 0;
                loop {
                    let Ok(n) = socket.read(&mut buffer[filled..]).await else { return };
                    if n == 0 {
                        return;
                    }
                    filled += n;
                    let text = String::from_utf8_lossy(&buffer[..filled]).into_owned();
                    let Some(end) = text.find("\r\n\r\n") else { continue };
                    let length: usize = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string())
                        })
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    if filled < end + 4 + length {
                        continue;
                    }
                    seen.lock().unwrap().push(text.clone());
                    filled = 0;
                    if socket.write_all(answer(&text).as_bytes()).await.is_err() {
                        return;
                    }
                }
            }
        })
        .await;
        (addr, accepted, heads)
    }

    fn ok(body: &str) -> String {
        format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len())
    }

    #[tokio::test]
    async fn plain_http_to_an_ip_reuses_one_connection_and_sends_the_usual_head() {
        let (addr, accepted, heads) = raw_server(|_| ok(r#"{"age":45}"#)).await;
        let http = resolving(&format!("1.1.1.1:9091={addr}"));
        let headers = [("X-Pod".to_string(), "p-1".to_string())];
        for _ in 0..3 {
            let response =
                http.send(Method::GET, "http://1.1.1.1:9091/age?x=1", &headers, None, Duration::from_secs(10), false);
            let response = response.await.unwrap();
            assert_eq!((response.status.as_u16(), response.body.as_slice()), (200, br#"{"age":45}"#.as_slice()));
        }
        assert!(http.target(&Method::GET, "http://1.1.1.1:9091/age?x=1").unwrap().plain.is_some());
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1, "one keep-alive connection for all three");
        assert_eq!(http.connections.idle(), 1);
        let head = heads.lock().unwrap()[0].to_ascii_lowercase();
        assert!(head.starts_with("get /age?x=1 http/1.1\r\n"), "{head}");
        for expected in ["host: 1.1.1.1:9091", "x-pod: p-1", "accept: */*", "user-agent: hook-operator/"] {
            assert!(head.contains(expected), "{expected:?} missing from {head}");
        }
        // HTTPS and host names stay on reqwest (TLS, DNS checked by the egress policy).
        assert!(http.target(&Method::GET, "https://127.0.0.1:1/").unwrap().plain.is_none());
        assert!(http.target(&Method::GET, "http://localhost:1/").unwrap().plain.is_none());
    }

    #[tokio::test]
    async fn plain_http_follows_a_303_after_a_post_with_a_get_and_bounds_chunked_bodies() {
        let (addr, _, heads) = raw_server(|head| {
            if head.starts_with("POST /submit") {
                "HTTP/1.1 303 See Other\r\nlocation: /result\r\ncontent-length: 0\r\n\r\n".to_string()
            } else if head.starts_with("GET /chunked") {
                let chunk = "x".repeat(600);
                format!(
                    "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n258\r\n{chunk}\r\n258\r\n{chunk}\r\n0\r\n\r\n"
                )
            } else {
                ok(r#"{"done":true}"#)
            }
        })
        .await;
        let http = Http::new(&ProviderSettings { max_body_bytes: 1000, ..ProviderSettings::default() }).unwrap();
        let url = format!("http://{addr}/submit");
        let body = Some(r#"{"pod":"p-1"}"#.to_string());
        let response = http.send(Method::POST, &url, &[], body, Duration::from_secs(10), false).await.unwrap();
        assert_eq!(response.body, br#"{"done":true}"#);
        let heads = heads.lock().unwrap().clone();
        assert!(heads[0].starts_with("POST /submit") && heads[0].contains("application/json"), "{heads:?}");
        assert!(heads[0].ends_with(r#"{"pod":"p-1"}"#), "{heads:?}");
        assert!(heads[1].starts_with("GET /result") && !heads[1].contains("pod"), "{heads:?}");

        let chunked = format!("http://{addr}/chunked");
        let Err(err) = http.send(Method::GET, &chunked, &[], None, Duration::from_secs(10), false).await else {
            panic!("1,200 bytes in chunks are over the 1,000 byte limit");
        };
        assert_eq!(err.0, format!("GET {chunked}: the response body exceeds the 1000 byte limit"));
    }

    #[tokio::test]
    async fn hostile_plain_http_answers_become_clear_errors() {
        let (addr, _, _) = raw_server(|head| {
            if head.starts_with("GET /garbage") {
                "SSH-2.0-OpenSSH_9.6\r\n\r\n".to_string()
            } else if head.starts_with("GET /huge-head") {
                format!("HTTP/1.1 200 OK\r\nx-pad: {}\r\ncontent-length: 2\r\n\r\n{{}}", "a".repeat(2 << 20))
            } else {
                // Announces 100 bytes, sends 9, and the connection stays open: only the timeout ends it.
                "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"age\":45".to_string()
            }
        })
        .await;
        let http = Http::new(&ProviderSettings::default()).unwrap();
        let get = |path: &str| {
            let url = format!("http://{addr}{path}");
            let http = &http;
            async move { http.send(Method::GET, &url, &[], None, Duration::from_secs(2), false).await.map(|_| ()) }
        };
        let garbage = get("/garbage").await.unwrap_err().0;
        assert!(garbage.starts_with(&format!("GET http://{addr}/garbage: request failed: ")), "{garbage}");
        let huge = get("/huge-head").await.unwrap_err().0;
        assert!(huge.starts_with(&format!("GET http://{addr}/huge-head: request failed: ")), "{huge}");
        let short = get("/short").await.unwrap_err().0;
        assert_eq!(short, format!("GET http://{addr}/short: no response within 2s"));
        assert_eq!(http.connections.idle(), 0, "no broken connection is kept");
    }

    #[tokio::test]
    async fn plain_http_reads_answers_in_pieces_and_keeps_the_connection_after_a_chunked_body() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (addr, accepted) = serve_connections(|mut socket, _| async move {
            let mut buffer = vec![0u8; 4096];
            while let Ok(1..) = socket.read(&mut buffer).await {
                // An interim answer, then a chunked body with extensions and trailers, a few bytes per
                // write with pauses between them, so the client reads it in pieces.
                let answer = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
                    4;ext=1\r\n{\"ag\r\n6\r\ne\":45}\r\n0\r\nx-trailer: t\r\n\r\n";
                for piece in answer.as_bytes().chunks(7) {
                    if socket.write_all(piece).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        })
        .await;
        let http = Http::new(&ProviderSettings::default()).unwrap();
        let url = format!("http://{addr}/age");
        for _ in 0..2 {
            let response = http.send(Method::GET, &url, &[], None, Duration::from_secs(10), false).await.unwrap();
            assert_eq!((response.status.as_u16(), response.body.as_slice()), (200, br#"{"age":45}"#.as_slice()));
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1, "kept after a chunked body");
        assert_eq!(http.connections.idle(), 1);
    }

    #[tokio::test]
    async fn plain_http_honours_http_1_0_head_and_close_and_refuses_too_many_header_fields() {
        let (addr, accepted, _) = raw_server(|head| {
            if head.starts_with("GET /old") {
                "HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_string()
            } else if head.starts_with("GET /close") {
                "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}".to_string()
            } else if head.starts_with("GET /many") {
                let fields: String = (0..65).map(|i| format!("x-{i}: 1\r\n")).collect();
                format!("HTTP/1.1 200 OK\r\n{fields}content-length: 2\r\n\r\n{{}}")
            } else if head.starts_with("GET /none") {
                "HTTP/1.1 204 No Content\r\n\r\n".to_string()
            } else {
                // The answer to a HEAD announces a body it does not send.
                "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n".to_string()
            }
        })
        .await;
        let http = Http::new(&ProviderSettings::default()).unwrap();
        let send = |method: Method, path: &str| {
            let url = format!("http://{addr}{path}");
            let http = &http;
            async move { http.send(method, &url, &[], None, Duration::from_secs(5), false).await }
        };
        let count = || accepted.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(send(Method::GET, "/old").await.unwrap().body, b"{}");
        assert_eq!((count(), http.connections.idle()), (1, 0), "HTTP/1.0 without keep-alive: not kept");
        assert_eq!(send(Method::GET, "/close").await.unwrap().body, b"{}");
        assert_eq!((count(), http.connections.idle()), (2, 0), "Connection: close honoured");
        let head = send(Method::HEAD, "/head").await.unwrap();
        assert_eq!((head.status.as_u16(), head.body.len()), (200, 0));
        assert_eq!(send(Method::GET, "/none").await.unwrap().status.as_u16(), 204);
        assert_eq!((count(), http.connections.idle()), (3, 1), "one connection for the HEAD and the 204");
        let many = send(Method::GET, "/many").await.unwrap_err().0;
        assert_eq!(many, format!("GET http://{addr}/many: request failed: the answer has more than 64 header fields"));
        assert_eq!(http.connections.idle(), 0, "the connection that sent it is not kept");
    }

    #[tokio::test]
    async fn plain_http_frames_the_body_itself_whatever_the_template_says() {
        let (addr, _, heads) = raw_server(|_| ok("{}")).await;
        let http = Http::new(&ProviderSettings::default()).unwrap();
        let headers = [
            ("Content-Length".to_string(), "999".to_string()),
            ("Transfer-Encoding".to_string(), "chunked".to_string()),
            ("X-Pod".to_string(), "p-1".to_string()),
        ];
        let url = format!("http://{addr}/framed");
        for _ in 0..2 {
            let body = Some(r#"{"a":1}"#.to_string());
            let response = http.send(Method::POST, &url, &headers, body, Duration::from_secs(5), false).await.unwrap();
            assert_eq!(response.body, b"{}");
        }
        let head = heads.lock().unwrap()[1].to_ascii_lowercase();
        assert_eq!(head.matches("content-length").count(), 1, "{head}");
        assert!(head.contains("content-length: 7\r\n") && !head.contains("transfer-encoding"), "{head}");
        assert!(head.contains("x-pod: p-1\r\n") && head.ends_with("\r\n\r\n{\"a\":1}"), "{head}");
        assert_eq!(http.connections.idle(), 1, "both requests on one connection: the framing held");
    }

    #[tokio::test]
    async fn plain_http_reads_an_answer_sent_before_the_request_was_read() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (addr, _) = serve_connections(|mut socket, _| async move {
            let mut head = Vec::new();
            let mut buffer = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buffer).await.unwrap();
                head.extend_from_slice(&buffer[..n]);
            }
            // Answers after the head and never reads the body: the client's write cannot finish.
            socket.write_all(b"HTTP/1.1 413 Content Too Large\r\ncontent-length: 4\r\n\r\nbig!").await.unwrap();
            tokio::time::sleep(Duration::from_secs(60)).await;
        })
        .await;
        let http = Http::new(&ProviderSettings::default()).unwrap();
        let body = Some(format!("\"{}\"", "x".repeat(32 << 20)));
        let url = format!("http://{addr}/upload");
        let response = http.send(Method::POST, &url, &[], body, Duration::from_secs(20), false).await.unwrap();
        assert_eq!((response.status.as_u16(), response.body.as_slice()), (413, b"big!".as_slice()));
        assert_eq!(http.connections.idle(), 0, "a connection with half a request on it is not kept");
    }

    /// A server whose first connection answers one request and then closes on the next without answering (a
    /// keep-alive timeout racing the request); later connections answer every request.
    async fn closes_on_second_request() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        serve_connections(|mut socket, number| async move {
            let first = number == 0;
            let mut buffer = vec![0u8; 4096];
            for request in 0.. {
                match socket.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) if first && request == 1 => return,
                    Ok(_) => {
                        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
                        if socket.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            }
        })
        .await
    }

    #[tokio::test]
    async fn a_kept_connection_closed_under_a_get_is_retried_once_on_a_new_one_but_a_post_is_not() {
        let http = Http::new(&ProviderSettings::default()).unwrap();
        let send = |method: Method, addr: SocketAddr| {
            let http = &http;
            async move {
                http.send(method, &format!("http://{addr}/"), &[], None, Duration::from_secs(10), false)
                    .await
                    .map(|_| ())
            }
        };
        let (addr, accepted) = closes_on_second_request().await;
        send(Method::GET, addr).await.unwrap();
        send(Method::GET, addr).await.expect("the GET is sent again on a new connection");
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);

        let (addr, accepted) = closes_on_second_request().await;
        send(Method::POST, addr).await.unwrap();
        let Err(err) = send(Method::POST, addr).await else { panic!("a POST that reached the server is not repeated") };
        assert!(err.0.contains("request failed"), "{}", err.0);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_error_names_where_web_resolve_sent_the_request() {
        // A loopback port nothing listens on.
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        let http = resolving(&format!("1.1.1.1:9091=127.0.0.1:{port}"));
        let Err(err) = http.send(Method::GET, "http://1.1.1.1:9091/", &[], None, Duration::from_secs(5), false).await
        else {
            panic!("nothing listens on 127.0.0.1:{port}");
        };
        assert!(err.0.contains(&format!("(sent to 127.0.0.1:{port} by --web-resolve)")), "{}", err.0);
        assert!(err.0.contains("cannot connect"), "{}", err.0);
    }
}
