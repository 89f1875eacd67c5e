//! What the simulated container runtime knows about images: their digests, and the programs some
//! well-known images run.
//!
//! The runtime mimics the Docker (dockershim) runtime the BCS operators were written against:
//! `imageID` is `docker-pullable://<repository>@sha256:<digest>` and container IDs are
//! `docker://<64 hex>`. The digest is the SHA-256 of the image reference, so the same reference
//! always resolves to the same digest and a changed reference always to a different one.

use sha2::{Digest, Sha256};

/// The `imageID` a container running `image` reports.
pub(crate) fn image_id(image: &str) -> String {
    format!("docker-pullable://{}@sha256:{}", repository(image), sha256_hex(image))
}

/// A fresh `containerID` for one instance (identified by pod UID, container name and restart
/// count) of a container: stable for that instance, different for the next one.
pub(crate) fn container_id(pod_uid: &str, container: &str, restart_count: i32) -> String {
    format!("docker://{}", sha256_hex(&format!("{pod_uid}/{container}/{restart_count}")))
}

/// The repository part of an image reference: without `@digest` and without `:tag` (a colon in
/// the last path segment; a colon before a slash is a registry port).
pub(crate) fn repository(image: &str) -> &str {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last_segment_start = without_digest.rfind('/').map_or(0, |slash| slash + 1);
    match without_digest[last_segment_start..].rfind(':') {
        Some(colon) => &without_digest[..last_segment_start + colon],
        None => without_digest,
    }
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A server a container of a well-known image runs, so the walkthrough's manifests work as-is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum BuiltinServer {
    /// BCS `canary-hook` image (`gamedeployment-canary`): answers every request on every declared
    /// container port with [`CANARY_HOOK_BODY`].
    CanaryHook { ports: Vec<u16> },
    /// `python -m http.server [port]`: a directory listing of `/`.
    PythonHttpServer { port: u16 },
}

/// What the BCS `gamedeployment-canary` binary answers.
pub(crate) const CANARY_HOOK_BODY: &str = r#"{"name":"bryan","male":"yes","age":45}"#;

/// Recognises a container that runs a built-in server.
pub(crate) fn builtin_server(container: &k8s_openapi::api::core::v1::Container) -> Option<BuiltinServer> {
    let image = container.image.as_deref().unwrap_or_default();
    let name = repository(image).rsplit('/').next().unwrap_or_default();
    if name == "canary-hook" {
        let ports = container
            .ports
            .iter()
            .flatten()
            .filter(|port| port.protocol.as_deref().is_none_or(|p| p == "TCP"))
            .filter_map(|port| u16::try_from(port.container_port).ok())
            .filter(|port| *port != 0)
            .collect();
        return Some(BuiltinServer::CanaryHook { ports });
    }
    let argv: Vec<&str> =
        container.command.iter().flatten().chain(container.args.iter().flatten()).map(String::as_str).collect();
    let module = argv.windows(2).position(|pair| pair[0] == "-m" && pair[1] == "http.server")?;
    let port = argv.get(module + 2).and_then(|arg| arg.parse::<u16>().ok()).unwrap_or(8000);
    Some(BuiltinServer::PythonHttpServer { port })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerPort};

    #[test]
    fn image_ids_follow_docker_conventions() {
        let id = image_id("python:3.5");
        assert!(id.starts_with("docker-pullable://python@sha256:"), "{id}");
        assert_eq!(id.len(), "docker-pullable://python@sha256:".len() + 64);
        assert_eq!(id, image_id("python:3.5"), "deterministic");
        assert_ne!(id, image_id("python:latest"));
    }

    #[test]
    fn repository_strips_tag_and_digest_but_not_port() {
        assert_eq!(repository("python:3.5"), "python");
        assert_eq!(repository("python"), "python");
        assert_eq!(repository("registry:5000/team/app:v1"), "registry:5000/team/app");
        assert_eq!(repository("registry:5000/team/app"), "registry:5000/team/app");
        assert_eq!(repository("app@sha256:abc"), "app");
        assert_eq!(repository("app:v1@sha256:abc"), "app");
    }

    #[test]
    fn container_ids_differ_per_instance() {
        let first = container_id("uid", "main", 0);
        assert!(first.starts_with("docker://"));
        assert_eq!(first.len(), "docker://".len() + 64);
        assert_ne!(first, container_id("uid", "main", 1));
        assert_ne!(first, container_id("uid", "side", 0));
    }

    fn container(image: &str, command: &[&str], args: &[&str], ports: &[i32]) -> Container {
        let strings = |items: &[&str]| (!items.is_empty()).then(|| items.iter().map(|s| s.to_string()).collect());
        Container {
            name: "c".into(),
            image: Some(image.into()),
            command: strings(command),
            args: strings(args),
            ports: (!ports.is_empty()).then(|| {
                ports.iter().map(|port| ContainerPort { container_port: *port, ..Default::default() }).collect()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn recognises_the_walkthrough_images() {
        assert_eq!(
            builtin_server(&container("canary-hook:test", &[], &[], &[9091])),
            Some(BuiltinServer::CanaryHook { ports: vec![9091] })
        );
        assert_eq!(
            builtin_server(&container("registry.example/bcs/canary-hook:v2", &[], &[], &[1, 2])),
            Some(BuiltinServer::CanaryHook { ports: vec![1, 2] })
        );
        assert_eq!(
            builtin_server(&container("python:latest", &["python"], &["-m", "http.server", "8000"], &[8000])),
            Some(BuiltinServer::PythonHttpServer { port: 8000 })
        );
        assert_eq!(
            builtin_server(&container("python:3.5", &["python3", "-m", "http.server"], &[], &[])),
            Some(BuiltinServer::PythonHttpServer { port: 8000 })
        );
        assert_eq!(builtin_server(&container("nginx", &[], &[], &[80])), None);
        assert_eq!(builtin_server(&container("python", &["python"], &["app.py"], &[])), None);
    }
}
