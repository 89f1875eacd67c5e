//! Container probes as the kubelet runs them (`pkg/kubelet/prober`): an HTTP(S) GET, a TCP
//! connect or a command run inside the container, every `periodSeconds` after
//! `initialDelaySeconds`, each attempt bounded by `timeoutSeconds`; a result flips only after
//! `successThreshold` consecutive successes or `failureThreshold` consecutive failures
//! ([`Tracker`]). HTTPS probes skip certificate verification and 2xx/3xx answers succeed, as on
//! the kubelet.

use std::net::Ipv4Addr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// What one probe attempt does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Action {
    Http { https: bool, host: String, port: u16, path: String, headers: Vec<(String, String)> },
    Tcp { host: String, port: u16 },
    Exec { command: Vec<String> },
}

/// A probe with the kubelet's defaults filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ProbeSpec {
    pub action: Action,
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

fn seconds(value: Option<i32>, default: i32, min: i32) -> Duration {
    Duration::from_secs(value.unwrap_or(default).max(min) as u64)
}

/// Resolves a port that may name one of the container's ports.
pub(super) fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    let number = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => match name.parse::<i32>() {
            Ok(n) => n,
            Err(_) => container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| format!("port {name:?} is not a named port of container {:?}", container.name))?,
        },
    };
    u16::try_from(number).ok().filter(|n| *n > 0).ok_or_else(|| format!("invalid port {number}"))
}

impl ProbeSpec {
    /// The probe of a container on `pod_ip`; `Err` for a probe kube-sim cannot run (gRPC).
    pub(super) fn from_probe(probe: &Probe, container: &Container, pod_ip: Ipv4Addr) -> Result<Self, String> {
        let action = if let Some(http) = &probe.http_get {
            Action::Http {
                https: http.scheme.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("HTTPS")),
                host: http.host.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| pod_ip.to_string()),
                port: resolve_port(&http.port, container)?,
                path: http.path.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "/".into()),
                headers: http.http_headers.iter().flatten().map(|h| (h.name.clone(), h.value.clone())).collect(),
            }
        } else if let Some(tcp) = &probe.tcp_socket {
            Action::Tcp {
                host: tcp.host.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| pod_ip.to_string()),
                port: resolve_port(&tcp.port, container)?,
            }
        } else if let Some(exec) = &probe.exec {
            Action::Exec { command: exec.command.clone().unwrap_or_default() }
        } else {
            return Err("only httpGet, tcpSocket and exec probes are run by kube-sim's process runtime".into());
        };
        Ok(Self {
            action,
            initial_delay: seconds(probe.initial_delay_seconds, 0, 0),
            period: seconds(probe.period_seconds, 10, 1),
            timeout: seconds(probe.timeout_seconds, 1, 1),
            success_threshold: probe.success_threshold.unwrap_or(1).max(1) as u32,
            failure_threshold: probe.failure_threshold.unwrap_or(3).max(1) as u32,
        })
    }
}

/// The kubelet's probe worker bookkeeping: the current result changes only once the new outcome
/// repeated its threshold's number of times in a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Tracker {
    pub result: bool,
    last: Option<bool>,
    streak: u32,
}

impl Tracker {
    /// Starts at `initial`: failure for readiness and startup, success for liveness.
    pub(super) fn new(initial: bool) -> Self {
        Self { result: initial, last: None, streak: 0 }
    }

    /// Records one attempt; returns the result after it.
    pub(super) fn record(&mut self, success: bool, spec: &ProbeSpec) -> bool {
        if self.last == Some(success) {
            self.streak = self.streak.saturating_add(1);
        } else {
            self.last = Some(success);
            self.streak = 1;
        }
        let threshold = if success { spec.success_threshold } else { spec.failure_threshold };
        if self.streak >= threshold {
            self.result = success;
        }
        self.result
    }
}

/// One HTTP(S) probe attempt.
pub(super) async fn http(
    client: &reqwest::Client,
    https: bool,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
    timeout: Duration,
) -> bool {
    let scheme = if https { "https" } else { "http" };
    let path = if path.starts_with('/') { path.to_owned() } else { format!("/{path}") };
    let mut request = client.get(format!("{scheme}://{host}:{port}{path}")).timeout(timeout);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    match request.send().await {
        Ok(response) => (200..400).contains(&response.status().as_u16()),
        Err(_) => false,
    }
}

/// One TCP probe attempt.
pub(super) async fn tcp(host: &str, port: u16, timeout: Duration) -> bool {
    matches!(tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port))).await, Ok(Ok(_)))
}

/// The HTTP client of the prober: no certificate checks, no redirects followed (a redirect
/// counts as success), the kubelet's user agent.
pub(super) fn client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(0)
        .user_agent(crate::version::PROBE_USER_AGENT)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPGetAction};

    #[test]
    fn defaults_and_named_ports_resolve() {
        let container = Container {
            name: "app".into(),
            ports: Some(vec![ContainerPort { name: Some("web".into()), container_port: 8080, ..Default::default() }]),
            ..Default::default()
        };
        let probe = Probe {
            http_get: Some(HTTPGetAction { port: IntOrString::String("web".into()), ..Default::default() }),
            ..Default::default()
        };
        let spec = ProbeSpec::from_probe(&probe, &container, Ipv4Addr::new(127, 5, 0, 1)).unwrap();
        assert_eq!(
            spec.action,
            Action::Http { https: false, host: "127.5.0.1".into(), port: 8080, path: "/".into(), headers: vec![] }
        );
        assert_eq!(
            (spec.period, spec.timeout, spec.failure_threshold, spec.success_threshold),
            (Duration::from_secs(10), Duration::from_secs(1), 3, 1)
        );
        let bad = Probe {
            http_get: Some(HTTPGetAction { port: IntOrString::String("nope".into()), ..Default::default() }),
            ..Default::default()
        };
        assert!(ProbeSpec::from_probe(&bad, &container, Ipv4Addr::LOCALHOST).is_err());
        assert!(ProbeSpec::from_probe(&Probe::default(), &container, Ipv4Addr::LOCALHOST).is_err());
    }

    #[tokio::test]
    async fn http_probes_name_the_reported_release_in_their_user_agent() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "the probe closed before its headers ended");
                request.extend_from_slice(&buf[..n]);
            }
            stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await.unwrap();
            String::from_utf8(request).unwrap()
        });
        let ok = http(&client().unwrap(), false, "127.0.0.1", port, "/healthz", &[], Duration::from_secs(30)).await;
        assert!(ok);
        let request = server.await.unwrap().to_ascii_lowercase();
        let (major, minor, _) = crate::version::tests::numbers(crate::version::GIT_VERSION);
        assert!(request.contains(&format!("\r\nuser-agent: kube-probe/{major}.{minor}\r\n")), "{request}");
    }

    #[test]
    fn results_flip_only_after_their_thresholds() {
        let spec = ProbeSpec {
            action: Action::Tcp { host: "h".into(), port: 1 },
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            success_threshold: 2,
            failure_threshold: 3,
        };
        let mut readiness = Tracker::new(false);
        assert!(!readiness.record(true, &spec), "one success is not enough");
        assert!(readiness.record(true, &spec));
        assert!(readiness.record(false, &spec) && readiness.record(false, &spec), "two failures are not enough");
        assert!(readiness.record(true, &spec), "a success interrupts the failure streak");
        assert!(readiness.record(false, &spec) && readiness.record(false, &spec));
        assert!(!readiness.record(false, &spec), "the third failure in a row flips it");
    }
}
