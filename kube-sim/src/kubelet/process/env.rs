//! A container's environment and command line, as the kubelet computes them
//! (`pkg/kubelet/kubelet_pods.go` `makeEnvironmentVariables`): `envFrom` first, then `env` in order
//! (each value may refer to the ones before it as `$(NAME)`), over the variables every container
//! gets (the API server's address as the `kubernetes` Service's `KUBERNETES_*` variables, the
//! pod name as `HOSTNAME`, the image's `PATH` and `HOME`). `$(NAME)` in `command` and `args`
//! expands the same way. Pure: the ConfigMaps and Secrets it reads are fetched by the caller.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};

use super::super::quantity;

/// `PATH` of the images the process runtime stands in for (Docker's default).
pub(super) const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The ConfigMaps and Secrets of the pod's namespace a container reads, by name.
#[derive(Clone, Debug, Default)]
pub(super) struct Sources {
    pub config_maps: HashMap<String, ConfigMap>,
    pub secrets: HashMap<String, Secret>,
}

/// What the environment depends on besides the pod and the sources.
#[derive(Clone, Copy, Debug)]
pub(super) struct PodAddresses {
    pub pod_ip: Ipv4Addr,
    pub host_ip: Ipv4Addr,
    /// Where the `kubernetes` Service (the API server) is reached.
    pub api_server: SocketAddr,
}

/// ConfigMap and Secret names the pod refers to (env, envFrom and volumes), with whether each
/// reference is optional everywhere (a missing optional one is no error).
pub(super) fn referenced(pod: &Pod) -> (BTreeMap<String, bool>, BTreeMap<String, bool>) {
    let mut config_maps = BTreeMap::new();
    let mut secrets = BTreeMap::new();
    let note = |map: &mut BTreeMap<String, bool>, name: &str, optional: Option<bool>| {
        let optional = optional.unwrap_or(false);
        map.entry(name.to_owned()).and_modify(|all| *all &= optional).or_insert(optional);
    };
    let Some(spec) = pod.spec.as_ref() else {
        return (config_maps, secrets);
    };
    for container in spec.containers.iter().chain(spec.init_containers.iter().flatten()) {
        for from in container.env_from.iter().flatten() {
            if let Some(r) = &from.config_map_ref {
                note(&mut config_maps, &r.name, r.optional);
            }
            if let Some(r) = &from.secret_ref {
                note(&mut secrets, &r.name, r.optional);
            }
        }
        for var in container.env.iter().flatten() {
            let Some(from) = &var.value_from else { continue };
            if let Some(r) = &from.config_map_key_ref {
                note(&mut config_maps, &r.name, r.optional);
            }
            if let Some(r) = &from.secret_key_ref {
                note(&mut secrets, &r.name, r.optional);
            }
        }
    }
    for volume in spec.volumes.iter().flatten() {
        if let Some(cm) = &volume.config_map {
            note(&mut config_maps, &cm.name, cm.optional);
        }
        if let Some(secret) = &volume.secret {
            note(&mut secrets, secret.secret_name.as_deref().unwrap_or_default(), secret.optional);
        }
        for source in volume.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(cm) = &source.config_map {
                note(&mut config_maps, &cm.name, cm.optional);
            }
            if let Some(secret) = &source.secret {
                note(&mut secrets, &secret.name, secret.optional);
            }
        }
    }
    (config_maps, secrets)
}

/// The value of a `fieldRef` (the downward API fields the kubelet supports).
pub(super) fn field_value(pod: &Pod, path: &str, addresses: &PodAddresses) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let keyed = |prefix: &str, map: Option<&BTreeMap<String, String>>| -> Option<String> {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(map.and_then(|m| m.get(key)).cloned().unwrap_or_default())
    };
    if let Some(value) = keyed("metadata.labels['", meta.labels.as_ref()) {
        return Ok(value);
    }
    if let Some(value) = keyed("metadata.annotations['", meta.annotations.as_ref()) {
        return Ok(value);
    }
    let format_map = |map: Option<&BTreeMap<String, String>>| -> String {
        map.into_iter().flatten().map(|(k, v)| format!("{k}={v:?}")).collect::<Vec<_>>().join("\n")
    };
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()).unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => addresses.host_ip.to_string(),
        "status.podIP" | "status.podIPs" => addresses.pod_ip.to_string(),
        other => return Err(format!("unsupported fieldRef fieldPath {other:?}")),
    })
}

/// The value of a `resourceFieldRef`: the container's limit (the node's allocatable when it has
/// none) or request, divided by the divisor and rounded up, as the kubelet does.
pub(super) fn resource_value(
    container: &Container,
    resource: &str,
    divisor: Option<&str>,
    node: (f64, f64),
) -> Result<String, String> {
    let resources = container.resources.as_ref();
    let (kind, name) = resource.split_once('.').ok_or_else(|| format!("unsupported resource {resource:?}"))?;
    let list = match kind {
        "limits" => resources.and_then(|r| r.limits.as_ref()),
        "requests" => resources.and_then(|r| r.requests.as_ref()),
        _ => return Err(format!("unsupported resource {resource:?}")),
    };
    let declared = list.and_then(|l| l.get(name)).and_then(|q| quantity::parse(&q.0));
    let value = match (declared, kind, name) {
        (Some(v), _, _) => v,
        (None, "limits", "cpu") => node.0,
        (None, "limits", "memory") => node.1,
        (None, "requests", _) => 0.0,
        (None, _, _) => return Err(format!("unsupported resource {resource:?}")),
    };
    let divisor = match divisor {
        Some(d) => quantity::parse(d).filter(|d| *d > 0.0).ok_or_else(|| format!("invalid divisor {d:?}"))?,
        None => 1.0,
    };
    Ok(format!("{}", (value / divisor - 1e-9).ceil().max(0.0) as u64))
}

/// `$(NAME)` expansion of Kubernetes (`third_party/forked/golang/expansion`): a defined name is
/// replaced, an undefined one is left as written, `$$` is a literal `$`.
pub(super) fn expand(text: &str, vars: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(close) = inner.find(')')
        {
            let name = &inner[..close];
            match vars(name) {
                Some(value) => out.push_str(&value),
                None => out.push_str(&rest[at..at + 2 + close + 1]),
            }
            rest = &inner[close + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The container's environment in the order the kubelet builds it (later entries win).
pub(super) fn container_env(
    pod: &Pod,
    container: &Container,
    sources: &Sources,
    addresses: &PodAddresses,
    node_allocatable: (f64, f64),
) -> Result<Vec<(String, String)>, String> {
    let api = addresses.api_server;
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOME".into(), "/root".into()),
        ("HOSTNAME".into(), pod.metadata.name.clone().unwrap_or_default()),
    ];
    let (host, port) = (api.ip().to_string(), api.port().to_string());
    for (k, v) in [
        ("KUBERNETES_SERVICE_HOST", host.clone()),
        ("KUBERNETES_SERVICE_PORT", port.clone()),
        ("KUBERNETES_SERVICE_PORT_HTTPS", port.clone()),
        ("KUBERNETES_PORT", format!("tcp://{host}:{port}")),
        (&format!("KUBERNETES_PORT_{port}_TCP"), format!("tcp://{host}:{port}")),
        (&format!("KUBERNETES_PORT_{port}_TCP_PROTO"), "tcp".into()),
        (&format!("KUBERNETES_PORT_{port}_TCP_PORT"), port.clone()),
        (&format!("KUBERNETES_PORT_{port}_TCP_ADDR"), host.clone()),
    ] {
        env.push((k.to_owned(), v));
    }
    let mut own: Vec<(String, String)> = Vec::new();
    let set = |own: &mut Vec<(String, String)>, name: String, value: String| {
        own.retain(|(k, _)| *k != name);
        own.push((name, value));
    };
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            match sources.config_maps.get(&r.name) {
                Some(cm) => {
                    for (k, v) in cm.data.iter().flatten() {
                        set(&mut own, format!("{prefix}{k}"), v.clone());
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("configmap \"{}\" not found", r.name)),
            }
        }
        if let Some(r) = &from.secret_ref {
            match sources.secrets.get(&r.name) {
                Some(secret) => {
                    for (k, v) in secret_data(secret) {
                        set(&mut own, format!("{prefix}{k}"), v);
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("secret \"{}\" not found", r.name)),
            }
        }
    }
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (_, Some(from)) => {
                if let Some(field) = &from.field_ref {
                    Some(field_value(pod, &field.field_path, addresses)?)
                } else if let Some(resource) = &from.resource_field_ref {
                    let divisor = resource.divisor.as_ref().map(|d| d.0.as_str());
                    Some(resource_value(container, &resource.resource, divisor, node_allocatable)?)
                } else if let Some(r) = &from.config_map_key_ref {
                    match sources.config_maps.get(&r.name).and_then(|cm| cm.data.as_ref()?.get(&r.key)) {
                        Some(v) => Some(v.clone()),
                        None if r.optional == Some(true) => None,
                        None => return Err(format!("couldn't find key {} in ConfigMap {}", r.key, r.name)),
                    }
                } else if let Some(r) = &from.secret_key_ref {
                    let value = sources.secrets.get(&r.name).and_then(|s| secret_data(s).remove(&r.key));
                    match value {
                        Some(v) => Some(v),
                        None if r.optional == Some(true) => None,
                        None => return Err(format!("couldn't find key {} in Secret {}", r.key, r.name)),
                    }
                } else {
                    None
                }
            }
            (Some(value), None) => {
                let lookup = |name: &str| own.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.clone());
                Some(expand(value, &lookup))
            }
            (None, None) => Some(String::new()),
        };
        if let Some(value) = value {
            set(&mut own, var.name.clone(), value);
        }
    }
    for (k, v) in own {
        env.retain(|(name, _)| *name != k);
        env.push((k, v));
    }
    Ok(env)
}

/// `command` and `args` with `$(NAME)` expanded from the container's environment.
pub(super) fn expand_command(container: &Container, env: &[(String, String)]) -> (Vec<String>, Vec<String>) {
    let lookup = |name: &str| env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let expand_all = |list: &Option<Vec<String>>| list.iter().flatten().map(|s| expand(s, &lookup)).collect();
    (expand_all(&container.command), expand_all(&container.args))
}

/// A Secret's `data` (and `stringData`, which the API server has already merged in) as text.
pub(super) fn secret_data(secret: &Secret) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in secret.data.iter().flatten() {
        out.insert(k.clone(), String::from_utf8_lossy(&v.0).into_owned());
    }
    for (k, v) in secret.string_data.iter().flatten() {
        out.insert(k.clone(), v.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, EnvFromSource, EnvVar, EnvVarSource, ObjectFieldSelector, PodSpec, ResourceFieldSelector,
        ResourceRequirements, SecretKeySelector,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn var(name: &str, value: &str) -> EnvVar {
        EnvVar { name: name.into(), value: Some(value.into()), ..Default::default() }
    }

    fn from(name: &str, source: EnvVarSource) -> EnvVar {
        EnvVar { name: name.into(), value_from: Some(source), ..Default::default() }
    }

    #[test]
    fn env_follows_the_kubelets_order_and_sources() {
        let container = Container {
            name: "app".into(),
            env_from: Some(vec![EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource { name: "cm".into(), optional: None }),
                prefix: Some("CM_".into()),
                ..Default::default()
            }]),
            env: Some(vec![
                var("A", "one"),
                var("B", "$(A)-two-$$(A)-$(MISSING)"),
                from(
                    "POD",
                    EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "metadata.name".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                ),
                from(
                    "IP",
                    EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "status.podIP".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                ),
                from(
                    "KEY",
                    EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector { name: "s".into(), key: "k".into(), optional: None }),
                        ..Default::default()
                    },
                ),
                from(
                    "MEM",
                    EnvVarSource {
                        resource_field_ref: Some(ResourceFieldSelector {
                            resource: "limits.memory".into(),
                            divisor: Some(Quantity("1Mi".into())),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                ),
            ]),
            resources: Some(ResourceRequirements {
                limits: Some([("memory".to_string(), Quantity("64Mi".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pod = Pod {
            metadata: ObjectMeta { name: Some("p-1".into()), namespace: Some("ns".into()), ..Default::default() },
            spec: Some(PodSpec { containers: vec![container.clone()], ..Default::default() }),
            ..Default::default()
        };
        let mut sources = Sources::default();
        sources.config_maps.insert(
            "cm".into(),
            ConfigMap { data: Some([("x".to_string(), "1".to_string())].into()), ..Default::default() },
        );
        sources.secrets.insert(
            "s".into(),
            Secret {
                data: Some([("k".to_string(), k8s_openapi::ByteString(b"secret".to_vec()))].into()),
                ..Default::default()
            },
        );
        let addresses = PodAddresses {
            pod_ip: Ipv4Addr::new(127, 5, 0, 1),
            host_ip: Ipv4Addr::new(127, 0, 100, 1),
            api_server: "127.0.0.1:6443".parse().unwrap(),
        };
        let env = container_env(&pod, &container, &sources, &addresses, (32.0, 1e9)).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CM_x"), Some("1"));
        assert_eq!(get("B"), Some("one-two-$(A)-$(MISSING)"));
        assert_eq!(get("POD"), Some("p-1"));
        assert_eq!(get("HOSTNAME"), Some("p-1"));
        assert_eq!(get("IP"), Some("127.5.0.1"));
        assert_eq!(get("KEY"), Some("secret"));
        assert_eq!(get("MEM"), Some("64"));
        assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some("127.0.0.1"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT"), Some("6443"));

        sources.secrets.clear();
        let missing = container_env(&pod, &container, &sources, &addresses, (32.0, 1e9)).unwrap_err();
        assert!(missing.contains("Secret s"), "{missing}");

        let mut with_args = container.clone();
        with_args.args = Some(vec!["--bind=$(IP):80".into()]);
        let (_, args) = expand_command(&with_args, &[("IP".into(), "127.5.0.1".into())]);
        assert_eq!(args, ["--bind=127.5.0.1:80"]);
    }

    #[test]
    fn resource_fields_round_up_and_default_to_the_node() {
        let container = Container::default();
        assert_eq!(resource_value(&container, "limits.cpu", None, (4.0, 1e9)).unwrap(), "4");
        assert_eq!(resource_value(&container, "requests.cpu", Some("1m"), (4.0, 1e9)).unwrap(), "0");
        assert!(resource_value(&container, "limits.gpu", None, (4.0, 1e9)).is_err());
    }
}
