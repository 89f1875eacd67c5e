//! A pod's volumes as files on this host: each volume is a directory under the pod's own
//! directory (`<state dir>/pods/<uid>/volumes/<name>`), filled from its ConfigMap, Secret,
//! projected sources (service-account token, ConfigMaps, Secrets, downward API) or left empty
//! (`emptyDir`); `hostPath` is the host's own path. The container's process sees them at their
//! `mountPath`s through bind mounts in its own mount namespace (see `spawn`).
//!
//! What goes into each volume is decided by the pure [`volume_files`]; [`materialize`] writes it.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, KeyToPath, Pod, Volume};

use super::env::{PodAddresses, Sources, field_value, resource_value, secret_data};

/// The ConfigMap holding the cluster's CA, which every service-account volume projects. kube-sim
/// serves plain HTTP and has no CA, so a missing one projects an empty `ca.crt`.
pub(super) const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";

/// One file of a volume: its path inside the volume, content and mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct VolumeFile {
    pub path: PathBuf,
    pub content: Vec<u8>,
    pub mode: u32,
}

/// Where a volume's content lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum VolumeContent {
    /// Files written into the pod's volume directory.
    Files(Vec<VolumeFile>),
    /// An empty, writable directory (`emptyDir`).
    Empty,
    /// A path of the host (`hostPath`).
    Host(PathBuf),
}

/// What the volume contains, or why it cannot be mounted (the kubelet's `FailedMount`).
pub(super) fn volume_files(
    pod: &Pod,
    volume: &Volume,
    sources: &Sources,
    token: Option<&str>,
    addresses: &PodAddresses,
) -> Result<VolumeContent, String> {
    let mut files = Vec::new();
    if volume.empty_dir.is_some() {
        return Ok(VolumeContent::Empty);
    }
    if let Some(host) = &volume.host_path {
        return Ok(VolumeContent::Host(PathBuf::from(&host.path)));
    }
    if let Some(cm) = &volume.config_map {
        let mode = cm.default_mode.unwrap_or(0o644) as u32;
        match sources.config_maps.get(&cm.name) {
            Some(found) => {
                let data = config_map_data(found);
                project(&mut files, &data, cm.items.as_deref(), mode, &cm.name, cm.optional)?;
            }
            None if cm.optional == Some(true) => {}
            None => return Err(format!("configmap \"{}\" not found", cm.name)),
        }
        return Ok(VolumeContent::Files(files));
    }
    if let Some(secret) = &volume.secret {
        let name = secret.secret_name.clone().unwrap_or_default();
        let mode = secret.default_mode.unwrap_or(0o644) as u32;
        match sources.secrets.get(&name) {
            Some(found) => {
                project(&mut files, &secret_data(found), secret.items.as_deref(), mode, &name, secret.optional)?
            }
            None if secret.optional == Some(true) => {}
            None => return Err(format!("secret \"{name}\" not found")),
        }
        return Ok(VolumeContent::Files(files));
    }
    if let Some(downward) = &volume.downward_api {
        let mode = downward.default_mode.unwrap_or(0o644) as u32;
        downward_files(&mut files, pod, downward.items.iter().flatten(), mode, addresses)?;
        return Ok(VolumeContent::Files(files));
    }
    if let Some(projected) = &volume.projected {
        let mode = projected.default_mode.unwrap_or(0o644) as u32;
        for source in projected.sources.iter().flatten() {
            if let Some(sa) = &source.service_account_token {
                let token = token.ok_or("no service-account token was issued for the pod")?;
                files.push(VolumeFile { path: PathBuf::from(&sa.path), content: token.as_bytes().to_vec(), mode });
            }
            if let Some(cm) = &source.config_map {
                match sources.config_maps.get(&cm.name) {
                    Some(found) => {
                        project(&mut files, &config_map_data(found), cm.items.as_deref(), mode, &cm.name, cm.optional)?
                    }
                    None if cm.optional == Some(true) => {}
                    None if cm.name == ROOT_CA_CONFIG_MAP => {
                        for item in cm.items.iter().flatten() {
                            files.push(VolumeFile { path: PathBuf::from(&item.path), content: Vec::new(), mode });
                        }
                    }
                    None => return Err(format!("configmap \"{}\" not found", cm.name)),
                }
            }
            if let Some(secret) = &source.secret {
                match sources.secrets.get(&secret.name) {
                    Some(found) => project(
                        &mut files,
                        &secret_data(found),
                        secret.items.as_deref(),
                        mode,
                        &secret.name,
                        secret.optional,
                    )?,
                    None if secret.optional == Some(true) => {}
                    None => return Err(format!("secret \"{}\" not found", secret.name)),
                }
            }
            if let Some(downward) = &source.downward_api {
                downward_files(&mut files, pod, downward.items.iter().flatten(), mode, addresses)?;
            }
        }
        return Ok(VolumeContent::Files(files));
    }
    Err(format!(
        "volume {:?}: only configMap, secret, projected, downwardAPI, emptyDir and hostPath volumes can be mounted by kube-sim's process runtime",
        volume.name
    ))
}

/// Whether the volume needs a service-account token (and its `expirationSeconds`).
pub(super) fn wants_token(volume: &Volume) -> Option<i64> {
    volume
        .projected
        .iter()
        .flat_map(|p| p.sources.iter().flatten())
        .find_map(|s| s.service_account_token.as_ref())
        .map(|t| t.expiration_seconds.unwrap_or(3607))
}

fn config_map_data(cm: &k8s_openapi::api::core::v1::ConfigMap) -> BTreeMap<String, String> {
    let mut data = cm.data.clone().unwrap_or_default();
    for (k, v) in cm.binary_data.iter().flatten() {
        data.insert(k.clone(), String::from_utf8_lossy(&v.0).into_owned());
    }
    data
}

fn project(
    files: &mut Vec<VolumeFile>,
    data: &BTreeMap<String, String>,
    items: Option<&[KeyToPath]>,
    mode: u32,
    source: &str,
    optional: Option<bool>,
) -> Result<(), String> {
    match items {
        None => {
            for (key, value) in data {
                files.push(VolumeFile { path: safe_path(key)?, content: value.as_bytes().to_vec(), mode });
            }
        }
        Some(items) => {
            for item in items {
                match data.get(&item.key) {
                    Some(value) => files.push(VolumeFile {
                        path: safe_path(&item.path)?,
                        content: value.as_bytes().to_vec(),
                        mode: item.mode.map_or(mode, |m| m as u32),
                    }),
                    None if optional == Some(true) => {}
                    None => return Err(format!("configmap or secret \"{source}\" has no key {:?}", item.key)),
                }
            }
        }
    }
    Ok(())
}

fn downward_files<'a>(
    files: &mut Vec<VolumeFile>,
    pod: &Pod,
    items: impl Iterator<Item = &'a DownwardAPIVolumeFile>,
    mode: u32,
    addresses: &PodAddresses,
) -> Result<(), String> {
    for item in items {
        let value = if let Some(field) = &item.field_ref {
            field_value(pod, &field.field_path, addresses)?
        } else if let Some(resource) = &item.resource_field_ref {
            let container = pod
                .spec
                .iter()
                .flat_map(|s| &s.containers)
                .find(|c| Some(&c.name) == resource.container_name.as_ref())
                .cloned()
                .unwrap_or_default();
            resource_value(&container, &resource.resource, resource.divisor.as_ref().map(|d| d.0.as_str()), (0.0, 0.0))?
        } else {
            continue;
        };
        let mode = item.mode.map_or(mode, |m| m as u32);
        files.push(VolumeFile { path: safe_path(&item.path)?, content: value.into_bytes(), mode });
    }
    Ok(())
}

/// A relative path that stays inside the volume, as the API server validates it.
fn safe_path(path: &str) -> Result<PathBuf, String> {
    let p = Path::new(path);
    if path.is_empty() || p.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(format!("{path:?} is not a relative path inside the volume"));
    }
    Ok(p.to_path_buf())
}

/// Writes the volume into `dir` (replacing what an earlier attempt wrote) and returns the host
/// path the container's mounts of it refer to.
pub(super) fn materialize(dir: &Path, content: &VolumeContent) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    match content {
        VolumeContent::Host(path) => Ok(path.clone()),
        VolumeContent::Empty => {
            std::fs::create_dir_all(dir)?;
            Ok(dir.to_path_buf())
        }
        VolumeContent::Files(files) => {
            if dir.exists() {
                std::fs::remove_dir_all(dir)?;
            }
            std::fs::create_dir_all(dir)?;
            for file in files {
                let path = dir.join(&file.path);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(&path, &file.content)?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(file.mode & 0o777))?;
            }
            Ok(dir.to_path_buf())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ConfigMap, ConfigMapProjection, ObjectFieldSelector, ProjectedVolumeSource, Secret, SecretVolumeSource,
        ServiceAccountTokenProjection, VolumeProjection,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn addresses() -> PodAddresses {
        PodAddresses {
            pod_ip: "127.5.0.1".parse().unwrap(),
            host_ip: "127.0.100.1".parse().unwrap(),
            api_server: "127.0.0.1:6443".parse().unwrap(),
        }
    }

    #[test]
    fn secret_items_and_service_account_volumes_become_files() {
        let pod =
            Pod { metadata: ObjectMeta { namespace: Some("ns".into()), ..Default::default() }, ..Default::default() };
        let mut sources = Sources::default();
        sources.secrets.insert(
            "key".into(),
            Secret {
                data: Some(
                    [
                        ("keys".to_string(), k8s_openapi::ByteString(b"k1".to_vec())),
                        ("other".to_string(), k8s_openapi::ByteString(b"x".to_vec())),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
        );
        let secret = Volume {
            name: "hookrun-key".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some("key".into()),
                items: Some(vec![KeyToPath {
                    key: "keys".into(),
                    path: "keys".into(),
                    mode: None,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let content = volume_files(&pod, &secret, &sources, None, &addresses()).unwrap();
        assert_eq!(
            content,
            VolumeContent::Files(vec![VolumeFile { path: "keys".into(), content: b"k1".to_vec(), mode: 0o644 }])
        );
        let api_access = Volume {
            name: "kube-api-access-x".into(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(vec![
                    VolumeProjection {
                        service_account_token: Some(ServiceAccountTokenProjection {
                            path: "token".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    VolumeProjection {
                        config_map: Some(ConfigMapProjection {
                            name: ROOT_CA_CONFIG_MAP.into(),
                            items: Some(vec![KeyToPath {
                                key: "ca.crt".into(),
                                path: "ca.crt".into(),
                                mode: None,
                                ..Default::default()
                            }]),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                    VolumeProjection {
                        downward_api: Some(k8s_openapi::api::core::v1::DownwardAPIProjection {
                            items: Some(vec![DownwardAPIVolumeFile {
                                path: "namespace".into(),
                                field_ref: Some(ObjectFieldSelector {
                                    field_path: "metadata.namespace".into(),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            }]),
                        }),
                        ..Default::default()
                    },
                ]),
                default_mode: Some(0o644),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(wants_token(&api_access), Some(3607));
        assert!(volume_files(&pod, &api_access, &sources, None, &addresses()).is_err(), "no token, no volume");
        let VolumeContent::Files(files) = volume_files(&pod, &api_access, &sources, Some("t"), &addresses()).unwrap()
        else {
            panic!("files expected")
        };
        let names: Vec<_> = files.iter().map(|f| (f.path.display().to_string(), f.content.clone())).collect();
        assert_eq!(
            names,
            [("token".into(), b"t".to_vec()), ("ca.crt".into(), Vec::new()), ("namespace".into(), b"ns".to_vec())]
        );
        sources.config_maps.insert(ROOT_CA_CONFIG_MAP.into(), ConfigMap::default());
        assert!(volume_files(&pod, &api_access, &sources, Some("t"), &addresses()).is_err(), "the key must exist");
    }

    #[test]
    fn paths_must_stay_inside_the_volume() {
        assert!(safe_path("../etc/passwd").is_err());
        assert!(safe_path("/abs").is_err());
        assert!(safe_path("a/b").is_ok());
    }
}
