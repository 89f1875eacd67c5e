//! The webhook's serving certificate: PEM files (the chart mounts its Secret as `tls.crt` / `tls.key`), re-read
//! when they change, so a rotated Secret (the kubelet updates a mounted Secret in place) is served without a
//! restart. Handshakes run concurrently, each bounded in time by the server ([`common::runtime::http_server`]), so a
//! slow or silent client never stalls accepting others; a connection whose handshake proves the API server's client
//! certificate is verified, which the server's connection caps never refuse
//! ([`common::runtime::connections`]).
//!
//! With a client CA ([`server_config`]'s `client_ca`, flag `--webhook-client-ca`) the server asks every caller for a
//! certificate: one signed by that CA makes the connection [`Caller::Verified`] (kube-apiserver presents it when its
//! `AdmissionConfiguration` names a client certificate for the webhook's host), a certificate from anyone else fails
//! the handshake, and a caller without one is still served but [`Caller::Unverified`]: its answers cause no write
//! unless the operator is told they may (`--webhook-unverified-may-mark`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::runtime::http_server::{Handshake, Handshaken};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::server::TlsStream;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Pem { path: String, message: String },
    #[error("the key in {path} cannot sign: {source}")]
    Key { path: String, source: rustls::Error },
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    #[error("client CA {path}: {message}")]
    ClientCa { path: String, message: String },
}

/// Who is on the other end of a webhook connection, as far as TLS proves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// Presented a certificate signed by the client CA (the API server, configured to present one).
    Verified,
    /// No client certificate (or no client CA configured): anyone who can reach the port.
    Unverified,
}

impl Caller {
    fn of(tls: &TlsStream<TcpStream>) -> Self {
        // rustls only completes a handshake with a client certificate it verified against the client CA.
        match tls.get_ref().1.peer_certificates() {
            Some(certs) if !certs.is_empty() => Caller::Verified,
            _ => Caller::Unverified,
        }
    }
}

/// The verifier of callers' certificates: signed by one of the CAs in `path` (PEM), or no certificate at all.
fn client_verifier(
    path: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let error = |message: String| TlsError::ClientCa { path: path.display().to_string(), message };
    let pem = std::fs::read(path).map_err(|e| error(e.to_string()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.map_err(|e| error(e.to_string()))?).map_err(|e| error(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(error("no CERTIFICATE block".into()));
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| error(e.to_string()))
}

/// Where the certificate chain and its key are.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    /// `tls.crt` and `tls.key` in `dir` (the layout of a `kubernetes.io/tls` Secret mounted as a volume).
    pub fn in_dir(dir: &Path) -> Self {
        Self { cert: dir.join("tls.crt"), key: dir.join("tls.key") }
    }

    fn modified(&self) -> (Option<SystemTime>, Option<SystemTime>) {
        let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        (m(&self.cert), m(&self.key))
    }

    fn load(&self, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
        let path = |p: &Path| p.display().to_string();
        let read = |p: &Path| std::fs::read(p).map_err(|source| TlsError::Read { path: path(p), source });
        let cert_pem = read(&self.cert)?;
        let key_pem = read(&self.key)?;
        let certs = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Pem { path: path(&self.cert), message: e.to_string() })?;
        if certs.is_empty() {
            return Err(TlsError::Pem { path: path(&self.cert), message: "no CERTIFICATE block".into() });
        }
        let key = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| TlsError::Pem { path: path(&self.key), message: e.to_string() })?;
        let signing = provider
            .key_provider
            .load_private_key(key)
            .map_err(|source| TlsError::Key { path: path(&self.key), source })?;
        Ok(CertifiedKey::new(certs, signing))
    }
}

/// Serves the certificate of [`CertFiles`], re-reading the files when their modification time changes (checked
/// at most once a second). A rotation that leaves unreadable files keeps serving the previous certificate.
#[derive(Debug)]
struct ReloadingCert {
    files: CertFiles,
    provider: Arc<CryptoProvider>,
    state: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    modified: (Option<SystemTime>, Option<SystemTime>),
    checked: std::time::Instant,
    key: Arc<CertifiedKey>,
}

impl ReloadingCert {
    fn current(&self) -> Arc<CertifiedKey> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.checked.elapsed() >= Duration::from_secs(1) {
            state.checked = std::time::Instant::now();
            let modified = self.files.modified();
            if modified != state.modified {
                match self.files.load(&self.provider) {
                    Ok(key) => {
                        tracing::info!(cert = %self.files.cert.display(), "webhook certificate reloaded");
                        state.key = Arc::new(key);
                        state.modified = modified;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "webhook certificate changed but cannot be loaded; serving the previous one")
                    }
                }
            }
        }
        state.key.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// A TLS configuration serving `files` (loaded now, so a missing or bad certificate fails start-up), verifying the
/// certificates callers present against `client_ca` when given (read once, at start-up).
pub fn server_config(files: &CertFiles, client_ca: Option<&Path>) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let key = files.load(&provider)?;
    let resolver = ReloadingCert {
        files: files.clone(),
        provider: provider.clone(),
        state: Mutex::new(Loaded {
            modified: files.modified(),
            checked: std::time::Instant::now(),
            key: Arc::new(key),
        }),
    };
    let builder = ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
    let builder = match client_ca {
        Some(path) => builder.with_client_cert_verifier(client_verifier(path, &provider)?),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The webhook's bound port and its TLS configuration (bound at start-up, so a taken port or a bad certificate fails
/// it).
pub struct WebhookListener {
    pub(super) tcp: TcpListener,
    pub(super) tls: Arc<ServerConfig>,
}

impl WebhookListener {
    pub fn new(tcp: TcpListener, tls: Arc<ServerConfig>) -> Self {
        Self { tcp, tls }
    }

    /// The bound address (a port 0 request gets a real port).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// The TLS handshake of a webhook connection; handlers learn the [`Caller`].
#[derive(Clone)]
pub struct TlsHandshake {
    acceptor: TlsAcceptor,
}

impl TlsHandshake {
    pub fn new(config: Arc<ServerConfig>) -> Self {
        Self { acceptor: TlsAcceptor::from(config) }
    }
}

impl Handshake for TlsHandshake {
    type Io = TlsStream<TcpStream>;
    type Peer = Caller;

    async fn handshake(
        &self,
        tcp: TcpStream,
        _address: SocketAddr,
    ) -> std::io::Result<Handshaken<TlsStream<TcpStream>, Caller>> {
        let tls = self.acceptor.accept(tcp).await?;
        let caller = Caller::of(&tls);
        Ok(Handshaken { io: tls, peer: caller, verified: caller == Caller::Verified })
    }
}
