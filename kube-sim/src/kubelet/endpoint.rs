//! HTTP servers that simulated containers run on their pod IP, so hooks have something real to
//! call: `http://{{ args.PodIP }}:9091` reaches the pod it names and no other.
//!
//! A server is bound synchronously (before the kubelet reports the container running) so nobody
//! can observe a running pod whose port is not open yet, and stopped by aborting its task, which
//! drops the listener and every open connection at once — what killing a container does. When
//! only the answer changes (an annotation edited on a live pod), the running server switches to
//! the new answer instead of being restarted, so the port never closes in between.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use k8s_openapi::jiff::Timestamp;

use super::behaviour::HttpBehaviour;
use super::image::{BuiltinServer, CANARY_HOOK_BODY};
use crate::logs::PodLogs;

/// How a server answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Responder {
    /// The same response to every request, after an optional delay.
    Fixed { status: u16, body: String, content_type: String, delay: Duration },
    /// Python's `http.server` serving `/` of a container image.
    PythonDirectory,
}

/// One server a pod should be running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct EndpointSpec {
    pub ip: Ipv4Addr,
    pub port: u16,
    pub responder: Responder,
    /// The container whose log records the server's requests.
    pub log: Option<LogTarget>,
}

/// Where a server logs its requests: a container's log, as `python -m http.server` prints them.
#[derive(Clone)]
pub(super) struct LogTarget {
    pub logs: Arc<PodLogs>,
    pub pod_uid: String,
    pub container: String,
}

impl std::fmt::Debug for LogTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LogTarget({}/{})", self.pod_uid, self.container)
    }
}

impl PartialEq for LogTarget {
    fn eq(&self, other: &Self) -> bool {
        (&self.pod_uid, &self.container) == (&other.pod_uid, &other.container)
    }
}

impl Eq for LogTarget {}

impl LogTarget {
    /// `127.0.0.1 - - [28/Nov/2026 02:18:00] "GET / HTTP/1.1" 200 -`, the access line of Python's `http.server`.
    fn request(&self, client: IpAddr, method: &Method, path: &str, status: StatusCode) {
        let now = Timestamp::now();
        let line = format!(
            "{client} - - [{}] \"{method} {path} HTTP/1.1\" {} -",
            now.strftime("%d/%b/%Y %H:%M:%S"),
            status.as_u16()
        );
        self.logs.line(&self.pod_uid, &self.container, now, line);
    }
}

/// The servers of a container running a built-in image.
pub(super) fn builtin_specs(ip: Ipv4Addr, server: &BuiltinServer) -> Vec<EndpointSpec> {
    match server {
        BuiltinServer::CanaryHook { ports } => {
            let responder = Responder::Fixed {
                status: 200,
                body: CANARY_HOOK_BODY.to_owned(),
                content_type: "application/json".to_owned(),
                delay: Duration::ZERO,
            };
            fixed_specs(ip, ports, &responder)
        }
        BuiltinServer::PythonHttpServer { port } => {
            vec![EndpointSpec { ip, port: *port, responder: Responder::PythonDirectory, log: None }]
        }
    }
}

/// The servers a pod's `kube-sim.kourse.dev/http-*` annotations ask for.
pub(super) fn annotation_specs(ip: Ipv4Addr, http: &HttpBehaviour) -> Vec<EndpointSpec> {
    let responder = Responder::Fixed {
        status: http.status,
        body: http.body.clone(),
        content_type: http.content_type.clone(),
        delay: http.delay,
    };
    fixed_specs(ip, &http.ports, &responder)
}

/// A server on each of `ports` answering every request with the same `responder`, its requests logged nowhere.
fn fixed_specs(ip: Ipv4Addr, ports: &[u16], responder: &Responder) -> Vec<EndpointSpec> {
    ports.iter().map(|port| EndpointSpec { ip, port: *port, log: None, responder: responder.clone() }).collect()
}

struct Running {
    ip: Ipv4Addr,
    port: u16,
    responder: watch::Sender<Responder>,
    task: JoinHandle<()>,
}

/// The servers running for every pod of this kubelet.
#[derive(Default)]
pub(super) struct Endpoints {
    by_pod: HashMap<String, Vec<Running>>,
}

impl Endpoints {
    /// Makes the pod's running servers exactly `desired`: starts missing ones, stops vanished or
    /// changed ones. Returns the servers that could not be bound, with the reason.
    pub(super) fn reconcile(&mut self, pod_uid: &str, desired: Vec<EndpointSpec>) -> Vec<String> {
        let running = self.by_pod.entry(pod_uid.to_owned()).or_default();
        running.retain(|server| {
            let wanted = desired.iter().find(|s| (s.ip, s.port) == (server.ip, server.port));
            match wanted {
                Some(spec) if !server.task.is_finished() => {
                    server.responder.send_if_modified(|current| {
                        let changed = *current != spec.responder;
                        if changed {
                            *current = spec.responder.clone();
                        }
                        changed
                    });
                    true
                }
                _ => {
                    server.task.abort();
                    false
                }
            }
        });
        let mut failures = Vec::new();
        for spec in desired {
            if running.iter().any(|server| (server.ip, server.port) == (spec.ip, spec.port)) {
                continue;
            }
            match start(&spec) {
                Ok(server) => running.push(server),
                Err(e) => failures.push(format!("cannot serve {}:{}: {e}", spec.ip, spec.port)),
            }
        }
        if running.is_empty() {
            self.by_pod.remove(pod_uid);
        }
        failures
    }

    /// Stops every server of a pod.
    pub(super) fn remove_pod(&mut self, pod_uid: &str) {
        for server in self.by_pod.remove(pod_uid).into_iter().flatten() {
            server.task.abort();
        }
    }

    /// Number of servers running.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_pod.values().map(Vec::len).sum()
    }

    /// Whether no server runs.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Endpoints {
    fn drop(&mut self) {
        for server in self.by_pod.values().flatten() {
            server.task.abort();
        }
    }
}

/// Binds now, serves in a task.
fn start(spec: &EndpointSpec) -> std::io::Result<Running> {
    let listener = std::net::TcpListener::bind(SocketAddr::from((spec.ip, spec.port)))?;
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let (responder, answers) = watch::channel(spec.responder.clone());
    let task = tokio::spawn(serve(listener, answers, spec.log.clone()));
    Ok(Running { ip: spec.ip, port: spec.port, responder, task })
}

async fn serve(listener: TcpListener, answers: watch::Receiver<Responder>, log: Option<LogTarget>) {
    // Connections live in this set so that aborting the server aborts them too.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, client) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::debug!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let answers = answers.clone();
                let log = log.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        // Each request gets the answer current when it arrives.
                        let responder = answers.borrow().clone();
                        let log = log.clone();
                        async move {
                            let (method, path) = (request.method().clone(), request.uri().path().to_owned());
                            let response = respond(&responder, request).await;
                            if let Some(log) = &log {
                                log.request(client.ip(), &method, &path, response.status());
                            }
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let connection = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service);
                    if let Err(e) = connection.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn respond(responder: &Responder, request: Request<Incoming>) -> Response<Body> {
    match responder {
        Responder::Fixed { status, body, content_type, delay } => {
            if !delay.is_zero() {
                tokio::time::sleep(*delay).await;
            }
            let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::OK);
            response(status, content_type, body.clone())
        }
        Responder::PythonDirectory => python_http_server(request.method(), request.uri().path()),
    }
}

fn response(status: StatusCode, content_type: &str, body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    if let Ok(value) = header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}

/// Directories at the root of the `python` images (their working directory is `/`).
const ROOT_ENTRIES: [&str; 18] = [
    ".dockerenv",
    "bin@",
    "boot/",
    "dev/",
    "etc/",
    "home/",
    "lib@",
    "lib64@",
    "media/",
    "mnt/",
    "opt/",
    "proc/",
    "root/",
    "run/",
    "sbin@",
    "srv/",
    "sys/",
    "tmp/",
];

/// What `python -m http.server` answers, down to its error pages.
fn python_http_server(method: &Method, path: &str) -> Response<Body> {
    let server = header::HeaderValue::from_static("SimpleHTTP/0.6 Python/3.11.9");
    let mut response = if method != Method::GET && method != Method::HEAD {
        let message = format!("Unsupported method ({:?})", method.as_str());
        python_error(StatusCode::NOT_IMPLEMENTED, &message)
    } else if path == "/" {
        let mut items = String::new();
        for entry in ROOT_ENTRIES.iter().chain(["usr/", "var/"].iter()) {
            // Symlinks are listed with a trailing `@` but link to the plain name.
            let href = entry.trim_end_matches('@');
            items.push_str(&format!("<li><a href=\"{href}\">{entry}</a></li>\n"));
        }
        let html = format!(
            "<!DOCTYPE HTML>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <title>Directory listing for /</title>\n</head>\n<body>\n\
             <h1>Directory listing for /</h1>\n<hr>\n<ul>\n{items}</ul>\n<hr>\n</body>\n</html>\n"
        );
        response(StatusCode::OK, "text/html; charset=utf-8", html)
    } else {
        python_error(StatusCode::NOT_FOUND, "File not found")
    };
    response.headers_mut().insert(header::SERVER, server);
    if method == Method::HEAD {
        *response.body_mut() = Body::empty();
    }
    response
}

fn python_error(status: StatusCode, message: &str) -> Response<Body> {
    let code = status.as_u16();
    let html = format!(
        "<!DOCTYPE HTML>\n<html lang=\"en\">\n    <head>\n        <meta charset=\"utf-8\">\n        \
         <title>Error response</title>\n    </head>\n    <body>\n        <h1>Error response</h1>\n        \
         <p>Error code: {code}</p>\n        <p>Message: {message}.</p>\n    </body>\n</html>\n"
    );
    response(status, "text/html;charset=utf-8", html)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Sends one HTTP/1.1 request and returns the raw response.
    async fn get(ip: Ipv4Addr, port: u16, method: &str, path: &str) -> std::io::Result<String> {
        let mut stream = tokio::net::TcpStream::connect((ip, port)).await?;
        let request = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok(response)
    }

    fn free_ip() -> (crate::kubelet::ipam::PodIpPool, Ipv4Addr) {
        let mut pool = crate::kubelet::ipam::PodIpPool::new(None);
        let ip = pool.allocate().unwrap();
        (pool, ip)
    }

    #[tokio::test]
    async fn canary_hook_answers_the_walkthrough_body_until_stopped() {
        let (_pool, ip) = free_ip();
        let mut endpoints = Endpoints::default();
        let specs = builtin_specs(ip, &BuiltinServer::CanaryHook { ports: vec![9091] });
        assert!(endpoints.reconcile("uid", specs.clone()).is_empty());
        let response = get(ip, 9091, "GET", "/").await.unwrap();
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        assert!(response.ends_with(CANARY_HOOK_BODY), "{response}");
        let response = get(ip, 9091, "POST", "/anything").await.unwrap();
        assert!(response.ends_with(CANARY_HOOK_BODY), "{response}");

        // Reconciling the same spec keeps the server; an empty set stops it.
        assert!(endpoints.reconcile("uid", specs).is_empty());
        assert_eq!(endpoints.len(), 1);
        endpoints.reconcile("uid", vec![]);
        assert!(endpoints.is_empty());
        tokio::task::yield_now().await;
        assert!(get(ip, 9091, "GET", "/").await.is_err(), "port closed once stopped");
    }

    #[tokio::test]
    async fn annotation_endpoint_serves_status_and_body() {
        let (_pool, ip) = free_ip();
        let mut endpoints = Endpoints::default();
        let http = HttpBehaviour {
            ports: vec![8080],
            status: 503,
            body: r#"{"ready":false}"#.into(),
            content_type: "application/json".into(),
            delay: Duration::ZERO,
        };
        endpoints.reconcile("uid", annotation_specs(ip, &http));
        let response = get(ip, 8080, "GET", "/health").await.unwrap();
        assert!(response.starts_with("HTTP/1.1 503"), "{response}");
        assert!(response.to_lowercase().contains("content-type: application/json"));
        assert!(response.ends_with(r#"{"ready":false}"#));

        // Changing the answer switches the running server over without closing the port.
        let http = HttpBehaviour { status: 200, body: r#"{"ready":true}"#.into(), ..http };
        assert!(endpoints.reconcile("uid", annotation_specs(ip, &http)).is_empty());
        let response = get(ip, 8080, "GET", "/").await.unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.ends_with(r#"{"ready":true}"#));
        endpoints.remove_pod("uid");
    }

    #[tokio::test]
    async fn python_http_server_lists_root_and_404s_the_rest() {
        let (_pool, ip) = free_ip();
        let mut endpoints = Endpoints::default();
        endpoints.reconcile("uid", builtin_specs(ip, &BuiltinServer::PythonHttpServer { port: 8000 }));
        let response = get(ip, 8000, "GET", "/").await.unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.contains("Directory listing for /"));
        assert!(response.contains("<a href=\"etc/\">etc/</a>"));
        assert!(response.contains("Server: SimpleHTTP/0.6") || response.contains("server: SimpleHTTP/0.6"));
        let response = get(ip, 8000, "GET", "/missing").await.unwrap();
        assert!(response.starts_with("HTTP/1.1 404"), "{response}");
        let response = get(ip, 8000, "POST", "/").await.unwrap();
        assert!(response.starts_with("HTTP/1.1 501"), "{response}");
    }

    #[tokio::test]
    async fn a_port_taken_elsewhere_is_reported() {
        let (_pool, ip) = free_ip();
        let _taken = std::net::TcpListener::bind((ip, 9999)).unwrap();
        let mut endpoints = Endpoints::default();
        let failures = endpoints.reconcile("uid", builtin_specs(ip, &BuiltinServer::PythonHttpServer { port: 9999 }));
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(endpoints.is_empty());
    }
}
