//! The credentials kube-sim presents to admission webhooks, as kube-apiserver's
//! `--admission-control-config-file` configures them: an `AdmissionConfiguration` whose
//! `ValidatingAdmissionWebhook` plugin names a `WebhookAdmissionConfiguration` with a
//! `kubeConfigFile`; each user of that kubeconfig is a webhook host (`NAME.NAMESPACE.svc[:PORT]`,
//! a URL's `HOST[:PORT]`, `*.NAMESPACE.svc` or `*`) and its client certificate is what the API
//! server presents when it calls a webhook on that host. A webhook whose host no user names is
//! called without a certificate.
//!
//! Approximations (README): only client certificates are presented (a user's `token` or
//! `username`/`password` is ignored: webhooks here authenticate callers by TLS), and only the
//! `ValidatingAdmissionWebhook` plugin is read (kube-sim runs no mutating webhooks).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Client certificates by kubeconfig user name (the webhook host they are for): the PEM
/// certificate chain followed by its key, as `reqwest::Identity::from_pem` reads them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientAuth {
    pub identities: BTreeMap<String, Vec<u8>>,
}

impl ClientAuth {
    /// One identity for `name` (a host, `*.NAMESPACE.svc` or `*`).
    pub fn single(name: &str, cert_pem: &[u8], key_pem: &[u8]) -> Self {
        let mut pem = cert_pem.to_vec();
        if !pem.ends_with(b"\n") {
            pem.push(b'\n');
        }
        pem.extend_from_slice(key_pem);
        Self { identities: [(name.to_string(), pem)].into() }
    }

    /// The identity for a call to `target` (`HOST:PORT`), found as kube-apiserver's
    /// `AuthenticationInfoResolver` finds it: the exact name, then `*.`-prefixed suffixes; for
    /// port 443 the same again without the port; then `*`.
    pub fn for_target(&self, target: &str) -> Option<&[u8]> {
        let exact_or_star = |name: &str| {
            if let Some(pem) = self.identities.get(name) {
                return Some(pem.as_slice());
            }
            let steps: Vec<&str> = name.split('.').collect();
            (1..steps.len())
                .find_map(|i| self.identities.get(&format!("*.{}", steps[i..].join("."))).map(Vec::as_slice))
        };
        if let Some(pem) = exact_or_star(target) {
            return Some(pem);
        }
        if let Some(host) = target.strip_suffix(":443")
            && let Some(pem) = exact_or_star(host)
        {
            return Some(pem);
        }
        self.identities.get("*").map(Vec::as_slice)
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

fn yaml(path: &Path) -> Result<Value, String> {
    serde_yaml::from_str(&read(path)?).map_err(|e| format!("{}: {e}", path.display()))
}

fn relative_to(base: &Path, file: &str) -> PathBuf {
    let p = Path::new(file);
    if p.is_absolute() { p.to_path_buf() } else { base.parent().unwrap_or(Path::new(".")).join(p) }
}

/// Reads an `AdmissionConfiguration` file (`apiserver.config.k8s.io/v1` or `v1alpha1`) and the
/// kubeconfig its `ValidatingAdmissionWebhook` plugin names. No such plugin: no credentials.
pub fn load_admission_config(path: &Path) -> Result<ClientAuth, String> {
    let config = yaml(path)?;
    if config.get("kind").and_then(Value::as_str) != Some("AdmissionConfiguration") {
        return Err(format!("{}: kind must be AdmissionConfiguration", path.display()));
    }
    let plugins = config.get("plugins").and_then(Value::as_array).cloned().unwrap_or_default();
    let Some(plugin) =
        plugins.iter().find(|p| p.get("name").and_then(Value::as_str) == Some("ValidatingAdmissionWebhook"))
    else {
        return Ok(ClientAuth::default());
    };
    // The plugin's configuration inline, or in the file `path` names (relative to this file).
    let webhook_config = match (plugin.get("configuration"), plugin.get("path").and_then(Value::as_str)) {
        (Some(inline), _) => inline.clone(),
        (None, Some(file)) => yaml(&relative_to(path, file))?,
        (None, None) => return Ok(ClientAuth::default()),
    };
    let kind = webhook_config.get("kind").and_then(Value::as_str).unwrap_or_default();
    if !matches!(kind, "WebhookAdmissionConfiguration" | "WebhookAdmission") {
        return Err(format!(
            "{}: the ValidatingAdmissionWebhook configuration must be a WebhookAdmissionConfiguration, got {kind:?}",
            path.display()
        ));
    }
    let Some(kubeconfig) = webhook_config.get("kubeConfigFile").and_then(Value::as_str).filter(|f| !f.is_empty())
    else {
        return Ok(ClientAuth::default());
    };
    // kube-apiserver: "kubeConfigFile: must be an absolute file path".
    if !Path::new(kubeconfig).is_absolute() {
        return Err(format!("kubeConfigFile: Invalid value: {kubeconfig:?}: must be an absolute file path"));
    }
    load_kubeconfig(Path::new(kubeconfig))
}

/// The client certificates of a kubeconfig's users (`client-certificate[-data]`,
/// `client-key[-data]`; file paths relative to the kubeconfig).
pub(crate) fn load_kubeconfig(path: &Path) -> Result<ClientAuth, String> {
    let doc = yaml(path)?;
    let mut auth = ClientAuth::default();
    for user in doc.get("users").and_then(Value::as_array).into_iter().flatten() {
        let Some(name) = user.get("name").and_then(Value::as_str) else { continue };
        let info = user.get("user").cloned().unwrap_or(Value::Null);
        let part = |data: &str, file: &str| -> Result<Option<Vec<u8>>, String> {
            if let Some(b64) = info.get(data).and_then(Value::as_str) {
                return data_encoding::BASE64
                    .decode(b64.trim().as_bytes())
                    .map(Some)
                    .map_err(|e| format!("{}: user {name:?}: {data}: {e}", path.display()));
            }
            match info.get(file).and_then(Value::as_str) {
                Some(f) => Ok(Some(read(&relative_to(path, f))?.into_bytes())),
                None => Ok(None),
            }
        };
        match (part("client-certificate-data", "client-certificate")?, part("client-key-data", "client-key")?) {
            (Some(cert), Some(key)) => {
                auth.identities.extend(ClientAuth::single(name, &cert, &key).identities);
            }
            (None, None) => {}
            _ => {
                return Err(format!(
                    "{}: user {name:?} has a client certificate without its key, or a key without its certificate",
                    path.display()
                ));
            }
        }
    }
    Ok(auth)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(names: &[&str]) -> ClientAuth {
        ClientAuth { identities: names.iter().map(|n| (n.to_string(), n.as_bytes().to_vec())).collect() }
    }

    fn found<'a>(a: &'a ClientAuth, target: &str) -> Option<&'a str> {
        a.for_target(target).map(|b| std::str::from_utf8(b).unwrap())
    }

    #[test]
    fn identities_are_found_as_kube_apiserver_finds_them() {
        let a = auth(&["gdo-webhook.ops.svc:443", "*.ops.svc", "hooks.example.com:8443", "*"]);
        assert_eq!(found(&a, "gdo-webhook.ops.svc:443"), Some("gdo-webhook.ops.svc:443"));
        assert_eq!(found(&a, "other.ops.svc:443"), Some("*.ops.svc"), "a star suffix without the default port");
        assert_eq!(found(&a, "hooks.example.com:8443"), Some("hooks.example.com:8443"));
        assert_eq!(found(&a, "x.elsewhere.svc:443"), Some("*"));
        let b = auth(&["gdo-webhook.ops.svc"]);
        assert_eq!(found(&b, "gdo-webhook.ops.svc:443"), Some("gdo-webhook.ops.svc"), "port 443 may be left out");
        assert_eq!(found(&b, "gdo-webhook.ops.svc:9443"), None, "another port must be named");
        assert_eq!(found(&ClientAuth::default(), "gdo-webhook.ops.svc:443"), None);
    }

    #[test]
    fn the_admission_configuration_names_a_kubeconfig_of_client_certificates() {
        let dir = std::env::temp_dir().join(format!("kube-sim-admission-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("client.crt"), "CERT\n").unwrap();
        std::fs::write(dir.join("client.key"), "KEY\n").unwrap();
        let kubeconfig = dir.join("webhook-kubeconfig.yaml");
        std::fs::write(
            &kubeconfig,
            "apiVersion: v1\nkind: Config\nusers:\n- name: '*.ops.svc'\n  user:\n    client-certificate: client.crt\n    client-key: client.key\n- name: hooks.example.com\n  user:\n    client-certificate-data: QkNFUlQ=\n    client-key-data: QktFWQ==\n- name: tokens-only\n  user: {token: abc}\n",
        )
        .unwrap();
        let inline = dir.join("admission.yaml");
        std::fs::write(
            &inline,
            format!(
                "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: ValidatingAdmissionWebhook\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: {}\n",
                kubeconfig.display()
            ),
        )
        .unwrap();
        let a = load_admission_config(&inline).unwrap();
        assert_eq!(found(&a, "gdo.ops.svc:443"), Some("CERT\nKEY\n"));
        assert_eq!(found(&a, "hooks.example.com:443"), Some("BCERT\nBKEY"));
        assert_eq!(a.identities.len(), 2, "a user without a certificate presents none");
        // The plugin's configuration in its own file, relative to the AdmissionConfiguration.
        std::fs::write(
            dir.join("webhook.yaml"),
            format!(
                "apiVersion: apiserver.config.k8s.io/v1\nkind: WebhookAdmissionConfiguration\nkubeConfigFile: {}\n",
                kubeconfig.display()
            ),
        )
        .unwrap();
        let by_path = dir.join("admission-path.yaml");
        std::fs::write(
            &by_path,
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: ValidatingAdmissionWebhook\n  path: webhook.yaml\n",
        )
        .unwrap();
        assert_eq!(load_admission_config(&by_path).unwrap(), a);
        // kube-apiserver's rule: the kubeconfig path must be absolute.
        let relative = dir.join("admission-relative.yaml");
        std::fs::write(
            &relative,
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: ValidatingAdmissionWebhook\n  configuration: {apiVersion: apiserver.config.k8s.io/v1, kind: WebhookAdmissionConfiguration, kubeConfigFile: webhook-kubeconfig.yaml}\n",
        )
        .unwrap();
        assert!(load_admission_config(&relative).unwrap_err().contains("must be an absolute file path"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
