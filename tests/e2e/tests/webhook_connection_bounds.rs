//! Issue 52: the webhook server bounds what one connection, and one client, can hold.
//!
//! The gamedeployment-operator runs with its descriptor limit lowered to [`DESCRIPTORS`] (`prlimit`, soft and hard:
//! a scaled-down stand-in for a client holding as many connections as a real limit), serving the chart's webhooks
//! with the chart's certificate, kube-sim presenting the API server's client certificate (the chart's default). One
//! client address, [`ATTACKER`] (kube-sim calls the webhooks from 127.0.0.1), keeps [`HELD`] connections — more than
//! the operator's descriptors — open to the webhook port, reopening each one the operator closes, in each hostile
//! pattern in turn: idle TCP, unfinished TLS handshakes, request heads trickling in a byte at a time, bodies trickling
//! in a byte at a time. Meanwhile `kubectl delete pod` of a gated pod is refused by the gate itself (the webhook
//! answered within `timeoutSeconds`: a call that times out or cannot connect reads `failed calling webhook`), and a
//! `kubectl drain` of a node with gated game servers completes, each pod leaving through its pre-delete hook, under
//! the strict gate checker.
//!
//! Before the bounds, the operator ran out of descriptors ("webhook accept failed: Too many open files"), the API
//! server's calls failed, `kubectl delete pod` answered InternalError and the drain's evictions passed without their
//! hooks (the eviction webhook's `Ignore`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use e2e::gamedeployment::{Columns, pods, scrape, wait_columns};
use e2e::gate::GateChecker;
use e2e::{Cluster, DEADLINE, wait_for};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::Api;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

use crate::pod_gate_webhook::{
    Gated, NAME, NS, SPECIFIED_DELETE, drain, gated_pods_sharing_a_node, webhook_address, webhook_flags,
};

/// The operator's descriptor limit in this test.
const DESCRIPTORS: u64 = 256;
/// Connections the hostile client keeps open (or reopening) at once: more than [`DESCRIPTORS`].
const HELD: usize = 300;
/// The hostile client's source address: not the API server's (kube-sim connects from 127.0.0.1).
const ATTACKER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 5));

/// What the hostile client does on each connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pattern {
    /// Connects and sends nothing.
    IdleTcp,
    /// Sends the first bytes of a TLS ClientHello, never the rest.
    UnfinishedHandshake,
    /// Completes the handshake, then sends a request head one byte a second.
    SlowHeaders,
    /// Completes the handshake and a request head announcing a large body, then sends the body one byte a second.
    SlowBody,
}

/// [`HELD`] connections from [`ATTACKER`] in one [`Pattern`], each reopened half a second after the operator closes it.
struct Attack {
    stop: Arc<AtomicBool>,
    /// Connections the operator accepted at the TCP level (the kernel completed the connect), counted once each.
    opened: Arc<AtomicUsize>,
    /// Connections open right now, as the client sees them.
    held: Arc<AtomicUsize>,
    /// The most connections open at once.
    peak: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Attack {
    fn start(target: SocketAddr, pattern: Pattern, tls: TlsConnector, server_name: ServerName<'static>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let opened = Arc::new(AtomicUsize::new(0));
        let held = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let tasks = (0..HELD)
            .map(|_| {
                let (stop, opened, held, peak) = (stop.clone(), opened.clone(), held.clone(), peak.clone());
                let (tls, server_name) = (tls.clone(), server_name.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let socket = TcpSocket::new_v4().expect("a socket");
                        socket.bind(SocketAddr::new(ATTACKER, 0)).expect("the attacker's address binds");
                        if let Ok(tcp) = socket.connect(target).await {
                            opened.fetch_add(1, Ordering::Relaxed);
                            let now = held.fetch_add(1, Ordering::Relaxed) + 1;
                            peak.fetch_max(now, Ordering::Relaxed);
                            hold(tcp, pattern, &tls, &server_name, &stop).await;
                            held.fetch_sub(1, Ordering::Relaxed);
                        }
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                })
            })
            .collect();
        Self { stop, opened, held, peak, tasks }
    }

    /// Waits until every one of the [`HELD`] connections was opened at least once.
    async fn wait_all_opened(&self) {
        wait_for(&format!("the hostile client to open its {HELD} connections"), DEADLINE, || async {
            (self.opened.load(Ordering::Relaxed) >= HELD).then_some(())
        })
        .await;
    }

    async fn stop(self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.abort();
        }
        (self.opened.load(Ordering::Relaxed), self.peak.load(Ordering::Relaxed))
    }
}

/// Plays `pattern` on `tcp` until the operator closes the connection (or the attack stops).
async fn hold(tcp: TcpStream, pattern: Pattern, tls: &TlsConnector, name: &ServerName<'static>, stop: &AtomicBool) {
    match pattern {
        Pattern::IdleTcp => until_closed(tcp, &[], stop).await,
        Pattern::UnfinishedHandshake => {
            // A TLS record header announcing a 512-byte handshake message, and the first bytes of a ClientHello.
            let partial = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03];
            let mut tcp = tcp;
            if tcp.write_all(&partial).await.is_ok() {
                until_closed(tcp, &[], stop).await;
            }
        }
        Pattern::SlowHeaders => {
            if let Ok(stream) = tls.connect(name.clone(), tcp).await {
                let head =
                    format!("POST /validate-pods HTTP/1.1\r\nHost: {}\r\nX-Slow: {}\r\n", server(), "a".repeat(64));
                until_closed(stream, head.as_bytes(), stop).await;
            }
        }
        Pattern::SlowBody => {
            if let Ok(mut stream) = tls.connect(name.clone(), tcp).await {
                let head = format!(
                    "POST /validate-pods HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: \
                     100000\r\n\r\n",
                    server()
                );
                if stream.write_all(head.as_bytes()).await.is_ok() {
                    until_closed(stream, &[b' '; 4096], stop).await;
                }
            }
        }
    }
}

/// Sends `trickle` one byte a second (nothing when empty) and returns once the peer closes the connection (a read
/// ends or fails, or a write fails) or the attack stops.
async fn until_closed<S: AsyncRead + AsyncWrite + Unpin>(stream: S, trickle: &[u8], stop: &AtomicBool) {
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut next = 0;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut buf = [0u8; 1024];
    while !stop.load(Ordering::Relaxed) {
        tokio::select! {
            read = reader.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {} // an answer (408, 400): the close follows
            },
            _ = tick.tick() => {
                if next < trickle.len() {
                    if writer.write_all(&trickle[next..next + 1]).await.is_err() {
                        return;
                    }
                    next += 1;
                }
            }
        }
    }
}

/// The webhook Service's host, as the API server names it (the certificate's name).
fn server() -> String {
    format!("{NAME}-webhook.{NS}.svc")
}

/// A TLS client trusting the chart's `caBundle`, presenting no client certificate.
async fn tls_client(cluster: &Cluster) -> TlsConnector {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(cluster.client());
    let vwc = api.get(NAME).await.expect("the chart's ValidatingWebhookConfiguration");
    let bundle = vwc.webhooks.unwrap()[0].client_config.ca_bundle.clone().expect("a caBundle").0;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&bundle) {
        roots.add(cert.expect("a PEM certificate")).expect("a CA certificate");
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// The gamedeployment-operator of `gated`, replaced by one running with [`DESCRIPTORS`] descriptors and the same
/// flags (those the chart renders, with the client CA); the webhook Service points at it once its caches are synced.
async fn restart_with_descriptor_limit(gated: &mut Gated) -> SocketAddr {
    gated.gamedeployment.kill().await;
    let cert_dir = gated.cert_dir.display().to_string();
    let mut args = webhook_flags(&cert_dir, "Always");
    args.extend(gated.client_ca.iter().map(String::as_str));
    gated.gamedeployment = gated.cluster.operator_with_descriptor_limit(
        "gamedeployment-operator",
        "gamedeployment-operator",
        &gated.operator_kubeconfig,
        DESCRIPTORS,
        &args,
    );
    let address = webhook_address(&gated.gamedeployment, 1).await;
    let started = std::time::Instant::now();
    loop {
        // The first operator may have been killed before its caches synced: only lines after the limited one's start
        // count.
        let logs = e2e::gamedeployment::strip_ansi(&gated.gamedeployment.logs());
        let limited = logs.match_indices("serving admission webhooks").nth(1).map_or(logs.len(), |(at, _)| at);
        if logs[limited..].contains("webhook caches synced; ready") {
            break;
        }
        let tail: Vec<&str> = logs.lines().rev().take(40).collect();
        assert!(
            started.elapsed() < DEADLINE,
            "the limited operator's webhook caches never synced:\n{}",
            tail.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    gated.cluster.sim().set_service_address(&format!("{NS}/{NAME}-webhook"), Some(443), address);
    println!("the limited operator holds {} descriptors once ready", descriptors_of(&gated.gamedeployment));
    address
}

/// How many descriptors the operator process holds now (`/proc/PID/fd`).
fn descriptors_of(operator: &e2e::Operator) -> usize {
    let pid = operator.pid().expect("the operator runs");
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |entries| entries.count())
}

/// The pods of `drained` on `node`, by UID.
async fn uids_on(cluster: &Cluster, node: &str) -> Vec<String> {
    pods(cluster, "drained")
        .await
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .map(|p| p.metadata.uid.unwrap())
        .collect()
}

/// The node holding the most pods of `drained`.
async fn busiest_node(cluster: &Cluster) -> String {
    let mut per_node = std::collections::BTreeMap::<String, usize>::new();
    for p in pods(cluster, "drained").await {
        *per_node.entry(p.spec.and_then(|s| s.node_name).unwrap_or_default()).or_default() += 1;
    }
    per_node.into_iter().max_by_key(|(_, n)| *n).map(|(node, _)| node).expect("a node with pods")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_holding_more_connections_than_the_operator_has_descriptors_starves_no_api_server_call() {
    let mut gated = Gated::start("Always", &[]).await;
    let target = restart_with_descriptor_limit(&mut gated).await;
    let cluster = &gated.cluster;
    let (_, _) = gated_pods_sharing_a_node(cluster).await;
    let tls = tls_client(cluster).await;
    let name = ServerName::try_from(server()).unwrap();
    let metrics = e2e::gamedeployment::nth_metrics_address(&gated.gamedeployment, 1).await;
    let checker = GateChecker::start(cluster, "default").await;
    let mut drained = 0;

    for pattern in [Pattern::IdleTcp, Pattern::UnfinishedHandshake, Pattern::SlowHeaders, Pattern::SlowBody] {
        // The bound each pattern runs into.
        let phase = match pattern {
            Pattern::IdleTcp | Pattern::UnfinishedHandshake => "handshake",
            Pattern::SlowHeaders => "request_head",
            Pattern::SlowBody => "body",
        };
        let timed_out =
            format!("gamedeployment_server_connections_timed_out_total{{server=\"webhook\",phase=\"{phase}\"}}");
        let refused = r#"gamedeployment_server_connections_refused_total{server="webhook",reason="per_address"}"#;
        let before = scrape(metrics).await;
        let attack = Attack::start(target, pattern, tls.clone(), name.clone());
        attack.wait_all_opened().await;
        // Let the pattern take hold: every connection opened, the slow ones a few bytes in.
        tokio::time::sleep(Duration::from_secs(3)).await;
        println!("{pattern:?}: {} connections open from {ATTACKER}", attack.held.load(Ordering::Relaxed));

        // `kubectl delete pod` of a gated pod: refused by the gate, which marks it; it leaves through its hook.
        let node = busiest_node(cluster).await;
        let victim = pods(cluster, "drained")
            .await
            .into_iter()
            .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(node.as_str()))
            .expect("a gated pod on another node");
        let victim_name = victim.metadata.name.clone().unwrap();
        let out = cluster.kubectl(&["delete", "pod", &victim_name, "--wait=false"]).await;
        println!("{pattern:?}: $ kubectl delete pod {victim_name}\n{}{}", out.stdout, out.stderr);
        assert!(!out.success, "{pattern:?}: the delete is refused");
        for needle in [
            "admission webhook \"pod-gate.gamedeployment.tkex.tencent.com\" denied the request",
            "it is now marked for deletion",
        ] {
            assert!(out.stderr.contains(needle), "{pattern:?}: the gate's own answer: {needle:?} in {}", out.stderr);
        }

        // A drain of the node holding the most gated pods completes, each pod through its hook.
        let on_node = uids_on(cluster, &node).await;
        let output = tokio::time::timeout(Duration::from_secs(240), drain(cluster, &node, "180s"))
            .await
            .expect("the drain ends")
            .unwrap()
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        println!("{pattern:?}: $ kubectl drain {node} --ignore-daemonsets\n{stdout}{stderr}");
        assert!(output.status.success(), "{pattern:?}: the drain completes");
        assert!(!stderr.contains("failed calling webhook"), "{pattern:?}: every call was answered: {stderr}");
        drained += on_node.len() + 1;
        wait_for(&format!("{pattern:?}: the victim to leave through its hook"), DEADLINE, || async {
            let now = pods(cluster, "drained").await;
            (!now.iter().any(|p| p.metadata.name.as_deref() == Some(victim_name.as_str()))).then_some(())
        })
        .await;
        wait_columns(cluster, "drained", Columns::new(4, 4, 4, 4, 4)).await;
        let after = scrape(metrics).await;
        let held = descriptors_of(&gated.gamedeployment);
        let (opened, peak) = attack.stop().await;
        let grew = |key: &str| after.get(key).copied().unwrap_or(0.0) - before.get(key).copied().unwrap_or(0.0);
        println!(
            "{pattern:?}: the hostile client opened {opened} connections, at most {peak} at once; the operator refused \
             {} at once, closed {} at the {phase} timeout and held {held} of its {DESCRIPTORS} descriptors",
            grew(refused),
            grew(&timed_out)
        );
        assert!(opened >= HELD, "{pattern:?}: the client opened more connections than the operator has descriptors");
        assert!(grew(refused) > 0.0, "{pattern:?}: the surplus was refused: {after:?}");
        assert!(grew(&timed_out) > 0.0, "{pattern:?}: the {phase} timeout closed connections: {after:?}");
        cluster.kubectl_ok(&["uncordon", &node]).await;
    }

    let report = checker.stop().await;
    report.assert_clean();
    assert!(report.gated_deletions >= drained, "every drained or deleted pod consumed a run: {report:?}");
    for pod in pods(cluster, "drained").await {
        assert_eq!(e2e::gamedeployment::label(&pod, SPECIFIED_DELETE), None, "no pod is left marked");
    }
    let logs = e2e::gamedeployment::strip_ansi(&gated.gamedeployment.logs());
    assert!(!logs.contains("Too many open files"), "the operator never ran out of descriptors");
    let samples = scrape(metrics).await;
    let open = |caller: &str| format!("gamedeployment_server_connections{{server=\"webhook\",caller=\"{caller}\"}}");
    println!(
        "open webhook connections at the end: {:?} verified, {:?} unverified",
        samples.get(&open("verified")),
        samples.get(&open("unverified"))
    );
    gated.cluster.shutdown().await;
}
