//! The keys that sign attempt stamps ([`crate::gate::attempt`]). A pod HookRun opens a gate only when its stamp
//! carries an HMAC-SHA256 over the attempt (GameDeployment UID, pod UID, change, Preparing timestamp, run name,
//! spec hash) made with a key only this operator holds: whoever may create HookRuns can copy every label and
//! annotation of a real run and compute its spec hash, but not this signature.
//!
//! A keyring holds one or more keys: the first signs, every one verifies, so a new key is added in front of the old
//! one (runs signed with the old key keep their gate) and the old one is removed once those runs are gone.
//!
//! Where the keys come from ([`load`]): `--hookrun-key-file` (the chart mounts a Secret it creates), one key per line;
//! without it the operator keeps a key in a Secret of its own namespace, made on first start (`--hookrun-key-secret`),
//! so a restarted operator still trusts its runs (transient API errors are waited out); if it may not read or create
//! that Secret it signs with a key of this process only (runs made before a restart are then foreign, and their
//! attempts get new runs: fail closed).

use std::path::PathBuf;

use aws_lc_rs::{digest, hmac};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

/// Least length of a key (bytes of the line, or of the generated key's text).
pub const MIN_KEY_BYTES: usize = 32;

/// The data key of the Secret (and the name of the file a mounted Secret gives).
pub const SECRET_DATA_KEY: &str = "keys";

/// Prefix of a signature: the version of the signed message's layout.
const VERSION: &str = "v1:";

/// Why no keyring could be made: the operator does not start, since without a key no gate could ever open.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// `--hookrun-key-file` cannot be read.
    #[error("reading the HookRun key file {path}: {source}")]
    Read {
        /// The key file.
        path: PathBuf,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// The file or Secret holds no key at all.
    #[error("the HookRun keys hold no key (one key per line, at least {MIN_KEY_BYTES} characters each)")]
    Empty,
    /// A key shorter than [`MIN_KEY_BYTES`]: too easy to guess to trust a signature made with it.
    #[error("HookRun key {line} is {len} characters long; at least {MIN_KEY_BYTES} are needed")]
    Short {
        /// 1-based line of the short key.
        line: usize,
        /// Its length in bytes.
        len: usize,
    },
    /// The system's random source failed while making a new key.
    #[error("generating a HookRun key failed")]
    Random,
}

/// One or more HMAC-SHA256 keys: the first signs, all verify.
pub struct Keyring {
    /// (id, key): the id is the first 8 hex digits of the key's SHA-256, for logs (never the key).
    keys: Vec<(String, hmac::Key)>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring").field("ids", &self.ids()).finish()
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

impl Keyring {
    /// A keyring of `secrets`, the first signing. Each must be at least [`MIN_KEY_BYTES`] long.
    pub fn new<S: AsRef<[u8]>>(secrets: &[S]) -> Result<Self, KeyError> {
        if secrets.is_empty() {
            return Err(KeyError::Empty);
        }
        let mut keys = Vec::with_capacity(secrets.len());
        for (i, secret) in secrets.iter().enumerate() {
            let secret = secret.as_ref();
            if secret.len() < MIN_KEY_BYTES {
                return Err(KeyError::Short { line: i + 1, len: secret.len() });
            }
            let id = hex(&digest::digest(&digest::SHA256, secret).as_ref()[..4]);
            keys.push((id, hmac::Key::new(hmac::HMAC_SHA256, secret)));
        }
        Ok(Self { keys })
    }

    /// Keys as a file or a Secret holds them: one per line (surrounding blanks ignored); empty lines and lines
    /// starting with `#` are skipped.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
        Self::new(&lines)
    }

    /// A keyring of one new random key, and that key's text (64 hex digits) to store.
    pub fn generate() -> Result<(Self, String), KeyError> {
        let mut bytes = [0u8; 32];
        aws_lc_rs::rand::fill(&mut bytes).map_err(|_| KeyError::Random)?;
        let text = hex(&bytes);
        Ok((Self::new(&[text.as_str()])?, text))
    }

    /// The keys' ids (first 8 hex digits of each key's SHA-256), signing key first.
    pub fn ids(&self) -> Vec<&str> {
        self.keys.iter().map(|(id, _)| id.as_str()).collect()
    }

    /// The signature of `message` with the first key: `v1:` and 64 hex digits.
    pub fn sign(&self, message: &[u8]) -> String {
        match self.keys.first() {
            Some((_, key)) => format!("{VERSION}{}", hex(hmac::sign(key, message).as_ref())),
            // `new` refuses an empty keyring; an empty signature never verifies.
            None => String::new(),
        }
    }

    /// Whether `signature` is the signature of `message` by any of the keys (compared in constant time).
    pub fn verify(&self, message: &[u8], signature: &str) -> bool {
        let Some(tag) = signature.strip_prefix(VERSION).and_then(unhex) else { return false };
        self.keys.iter().any(|(_, key)| hmac::verify(key, message, &tag).is_ok())
    }
}

/// A keyring shared by the tests of this crate (a fixed key).
#[cfg(test)]
pub fn test_keys() -> &'static Keyring {
    static KEYS: std::sync::LazyLock<Keyring> = std::sync::LazyLock::new(|| {
        Keyring::parse("test-key-0123456789-0123456789-0123456789").unwrap_or_else(|e| panic!("{e}"))
    });
    &KEYS
}

/// The flags that say where the keys are.
#[derive(clap::Args, Debug, Clone)]
pub struct KeyFlags {
    /// File of the keys that sign pod HookRuns' attempt stamps (a run whose stamp does not verify never opens a
    /// gate): one key per line, at least 32 characters each; the first signs, every one verifies (to rotate, add the
    /// new key in front, remove the old one once its runs are gone). The chart mounts a Secret it creates. Unset: a
    /// key kept in the Secret --hookrun-key-secret of the operator's namespace, made on first start.
    #[arg(long, env = "HOOKRUN_KEY_FILE", value_name = "PATH")]
    pub hookrun_key_file: Option<PathBuf>,
    /// The Secret (in the operator's namespace: POD_NAMESPACE, else its service account's) that keeps the key when
    /// no --hookrun-key-file is given.
    #[arg(long, default_value = "gamedeployment-operator-hookrun-key", value_name = "NAME")]
    pub hookrun_key_secret: String,
}

impl KeyFlags {
    /// Where [`load`] looks, from the flags and the operator's own namespace.
    pub fn source(&self, client: &Client) -> KeySource {
        KeySource {
            file: self.hookrun_key_file.clone(),
            secret: self.hookrun_key_secret.clone(),
            namespace: own_namespace(client),
        }
    }
}

/// Where [`load`] finds the keys.
#[derive(Debug, Clone)]
pub struct KeySource {
    /// A file of keys (a mounted Secret); when set, nothing else is tried.
    pub file: Option<PathBuf>,
    /// Otherwise this Secret in `namespace`, made with a new key if it does not exist.
    pub secret: String,
    /// The operator's own namespace ([`own_namespace`]): the key never lives where tenants can read it.
    pub namespace: String,
}

/// The operator's own namespace: `POD_NAMESPACE`, else the service account's, else the client's default.
pub fn own_namespace(client: &Client) -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
        })
        .unwrap_or_else(|| client.default_namespace().to_string())
}

fn from_secret(secret: &Secret) -> Option<Result<Keyring, KeyError>> {
    let data = secret.data.as_ref()?.get(SECRET_DATA_KEY)?;
    Some(Keyring::parse(&String::from_utf8_lossy(&data.0)))
}

/// First and longest wait between two tries of the key Secret after a transient error.
const RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(200);
const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// The Secret that keeps a newly generated key.
fn new_secret(source: &KeySource) -> Result<Secret, KeyError> {
    let (_, text) = Keyring::generate()?;
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(source.secret.clone()),
            namespace: Some(source.namespace.clone()),
            labels: Some([("app.kubernetes.io/name".to_string(), "gamedeployment-operator".to_string())].into()),
            ..ObjectMeta::default()
        },
        data: Some([(SECRET_DATA_KEY.to_string(), ByteString(format!("{text}\n").into_bytes()))].into()),
        type_: Some("Opaque".into()),
        ..Secret::default()
    })
}

/// Whether an error of the API server may go away by itself (overload, a restart, a timeout, the network), as
/// opposed to an answer that will stay the same (the operator may not read Secrets, the request is invalid).
fn is_transient(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        _ => true,
    }
}

/// Loads the keyring (see the module's documentation). An unusable key file is an error (the operator does not
/// start). Transient errors of the API server (429, 5xx, a connection or a timeout) are retried, with backoff, until
/// the Secret is read or made: a key of this process would turn every run made before the restart foreign, and each
/// held pod would get a new attempt nobody asked for (a Failed record replaced, a retry without `retry: true`). A
/// Secret the operator may not read or make (401, 403, …) or that holds no usable key gives a key of this process
/// only, with a warning.
pub async fn load(client: &Client, source: &KeySource) -> Result<Keyring, KeyError> {
    if let Some(path) = &source.file {
        let text = std::fs::read_to_string(path).map_err(|e| KeyError::Read { path: path.clone(), source: e })?;
        let keys = Keyring::parse(&text)?;
        tracing::info!(file = %path.display(), keys = ?keys.ids(), "HookRun stamps signed with the first key of the file");
        return Ok(keys);
    }
    let api: Api<Secret> = Api::namespaced(client.clone(), &source.namespace);
    let (secret, namespace) = (&source.secret, &source.namespace);
    let mut backoff = RETRY_FIRST;
    loop {
        let (what, error): (&str, kube::Error) = match api.get_opt(secret).await {
            Ok(Some(found)) => match from_secret(&found) {
                Some(Ok(keys)) => {
                    tracing::info!(%secret, %namespace, keys = ?keys.ids(), "HookRun stamps signed with the key kept in the Secret");
                    return Ok(keys);
                }
                Some(Err(e)) => {
                    tracing::warn!(%secret, %namespace, error = %e, "the HookRun key Secret holds no usable key");
                    break;
                }
                None => {
                    tracing::warn!(%secret, %namespace, "the HookRun key Secret has no data key {SECRET_DATA_KEY:?}");
                    break;
                }
            },
            Ok(None) => match api.create(&PostParams::default(), &new_secret(source)?).await {
                // Read back what was stored: the key of whichever replica (or earlier attempt) made it.
                Ok(_) => {
                    tracing::info!(%secret, %namespace, "made a HookRun key and keeps it in a Secret");
                    continue;
                }
                // Another replica made it first: read theirs.
                Err(kube::Error::Api(status)) if status.code == 409 => continue,
                Err(e) => ("cannot keep a HookRun key in a Secret", e),
            },
            Err(e) => ("cannot read the HookRun key Secret", e),
        };
        if !is_transient(&error) {
            tracing::warn!(%secret, %namespace, %error, "{what}");
            break;
        }
        // The runs this operator made before it restarted keep their gates only with this key: wait for the API.
        tracing::warn!(%secret, %namespace, %error, retry_in = ?backoff, "{what} (transient; trying again)");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(RETRY_MAX);
    }
    let (keys, _) = Keyring::generate()?;
    tracing::warn!(
        keys = ?keys.ids(),
        "HookRun stamps signed with a key of this process only: HookRuns made before a restart will not open gates \
         (their attempts get new runs); give --hookrun-key-file or let the operator keep its key in a Secret"
    );
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "key-a-0123456789-0123456789-0123456789";
    const B: &str = "key-b-0123456789-0123456789-0123456789";

    #[test]
    fn the_first_key_signs_and_every_key_verifies() {
        let old = Keyring::parse(A).unwrap();
        let rotated = Keyring::parse(&format!("# rotated\n{B}\n\n  {A}  \n")).unwrap();
        assert_eq!(rotated.ids().len(), 2);
        assert_eq!(rotated.ids()[1], old.ids()[0], "the same key, the same id");
        let signed_by_old = old.sign(b"attempt");
        assert!(rotated.verify(b"attempt", &signed_by_old), "a run signed before the rotation keeps its gate");
        let signed_by_new = rotated.sign(b"attempt");
        assert_ne!(signed_by_new, signed_by_old, "the new key signs");
        assert!(!old.verify(b"attempt", &signed_by_new), "the old keyring does not know the new key");
        assert!(!rotated.verify(b"another attempt", &signed_by_new));
        let dropped = Keyring::parse(B).unwrap();
        assert!(!dropped.verify(b"attempt", &signed_by_old), "a removed key verifies nothing");
    }

    #[test]
    fn signatures_are_versioned_hex_and_anything_else_does_not_verify() {
        let keys = Keyring::parse(A).unwrap();
        let signature = keys.sign(b"m");
        assert!(signature.starts_with("v1:") && signature.len() == 3 + 64, "{signature}");
        for bad in ["", "v1:", "v2:00", &signature[3..], &format!("{signature}0"), &signature.to_uppercase()] {
            assert!(!keys.verify(b"m", bad), "{bad:?}");
        }
        let mut flipped = signature.clone().into_bytes();
        flipped[10] = if flipped[10] == b'0' { b'1' } else { b'0' };
        assert!(!keys.verify(b"m", std::str::from_utf8(&flipped).unwrap()));
    }

    #[test]
    fn short_or_missing_keys_are_refused_and_keys_never_show() {
        assert!(matches!(Keyring::parse("# nothing\n\n"), Err(KeyError::Empty)));
        assert!(matches!(Keyring::parse(&format!("{A}\nshort")), Err(KeyError::Short { line: 2, len: 5 })));
        let (generated, text) = Keyring::generate().unwrap();
        assert_eq!(text.len(), 64);
        assert!(Keyring::parse(&text).unwrap().verify(b"m", &generated.sign(b"m")));
        let shown = format!("{generated:?} {:?}", Keyring::parse(A).unwrap());
        assert!(!shown.contains(&text) && !shown.contains(A), "{shown}");
    }
}
