//! Scheme defaulting of built-in kinds (`SetDefaults_*` of k8s.io/kubernetes/pkg/apis/*/v1) and
//! the defaults mutating admission adds to pods (priority, default tolerations, service account
//! token volume), so objects read back look like they do on a real cluster.

use serde_json::{Map, Value, json};

fn obj(v: &mut Value) -> Option<&mut Map<String, Value>> {
    v.as_object_mut()
}

fn set_default(m: &mut Map<String, Value>, key: &str, value: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), value);
    }
}

/// `SetDefaults_Container` (+ probes, ports, env field refs).
fn container_defaults(c: &mut Value) {
    let Some(c) = obj(c) else { return };
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    if c.get("imagePullPolicy").is_none_or(Value::is_null) {
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        let policy = if image_tag_is_latest(image) { "Always" } else { "IfNotPresent" };
        c.insert("imagePullPolicy".into(), json!(policy));
    }
    set_default(c, "resources", json!({}));
    if let Some(Value::Array(ports)) = c.get_mut("ports") {
        for p in ports {
            if let Some(p) = obj(p) {
                set_default(p, "protocol", json!("TCP"));
            }
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(obj) {
            set_default(p, "timeoutSeconds", json!(1));
            set_default(p, "periodSeconds", json!(10));
            set_default(p, "successThreshold", json!(1));
            set_default(p, "failureThreshold", json!(3));
            if let Some(h) = p.get_mut("httpGet").and_then(obj) {
                set_default(h, "path", json!("/"));
                set_default(h, "scheme", json!("HTTP"));
            }
        }
    }
    if let Some(Value::Array(env)) = c.get_mut("env") {
        for e in env {
            if let Some(fr) = e.get_mut("valueFrom").and_then(|v| v.get_mut("fieldRef")).and_then(obj) {
                set_default(fr, "apiVersion", json!("v1"));
            }
        }
    }
}

/// `:latest` or no tag (and no digest) means `imagePullPolicy: Always`.
fn image_tag_is_latest(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

/// `SetDefaults_PodSpec` and its containers and volumes.
pub(crate) fn pod_spec_defaults(spec: &mut Value) {
    let Some(s) = obj(spec) else { return };
    set_default(s, "dnsPolicy", json!("ClusterFirst"));
    set_default(s, "restartPolicy", json!("Always"));
    set_default(s, "terminationGracePeriodSeconds", json!(30));
    set_default(s, "securityContext", json!({}));
    set_default(s, "schedulerName", json!("default-scheduler"));
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = s.get_mut(list) {
            cs.iter_mut().for_each(container_defaults);
        }
    }
    if let Some(Value::Array(vols)) = s.get_mut("volumes") {
        for v in vols {
            let Some(v) = obj(v) else { continue };
            for (kind, mode_key) in [
                ("secret", "defaultMode"),
                ("configMap", "defaultMode"),
                ("downwardAPI", "defaultMode"),
                ("projected", "defaultMode"),
            ] {
                if let Some(src) = v.get_mut(kind).and_then(obj) {
                    set_default(src, mode_key, json!(420));
                }
            }
        }
    }
}

/// Template defaults for workload kinds (`PodTemplateSpec`).
pub(crate) fn template_defaults(obj_: &mut Value) {
    if let Some(spec) = obj_.get_mut("spec").and_then(|s| s.get_mut("template")).and_then(|t| t.get_mut("spec")) {
        pod_spec_defaults(spec);
    }
}

/// Pod-level defaults: scheme defaults plus what the default admission chain adds.
pub(crate) fn pod_defaults(pod: &mut Value, service_account_automount: bool) {
    let Some(spec) = pod.get_mut("spec") else { return };
    pod_spec_defaults(spec);
    let Some(s) = obj(spec) else { return };
    set_default(s, "enableServiceLinks", json!(true));
    // Requests default to limits (SetDefaults_Pod).
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = s.get_mut(list) {
            for c in cs {
                let Some(res) = c.get_mut("resources").and_then(obj) else { continue };
                let Some(limits) = res.get("limits").and_then(Value::as_object).cloned() else { continue };
                let requests = res.entry("requests").or_insert_with(|| json!({}));
                if let Some(r) = obj(requests) {
                    for (k, v) in limits {
                        r.entry(k).or_insert(v);
                    }
                }
            }
        }
    }
    // ServiceAccount admission.
    if s.get("serviceAccountName").and_then(Value::as_str).is_none_or(str::is_empty) {
        let sa =
            s.get("serviceAccount").and_then(Value::as_str).filter(|v| !v.is_empty()).unwrap_or("default").to_string();
        s.insert("serviceAccountName".into(), json!(sa));
    }
    let sa_name = s.get("serviceAccountName").cloned().unwrap_or(json!("default"));
    s.insert("serviceAccount".into(), sa_name);
    let automount = s.get("automountServiceAccountToken").and_then(Value::as_bool).unwrap_or(service_account_automount);
    let has_token_mount = |s: &Map<String, Value>| {
        s.get("containers").and_then(Value::as_array).is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("volumeMounts").and_then(Value::as_array).is_some_and(|ms| {
                    ms.iter().any(|m| {
                        m.get("mountPath").and_then(Value::as_str)
                            == Some("/var/run/secrets/kubernetes.io/serviceaccount")
                    })
                })
            })
        })
    };
    if automount && !has_token_mount(s) {
        let name = format!("kube-api-access-{}", crate::meta::generate_name_suffix());
        let volume = json!({
            "name": name,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                ]
            }
        });
        match s.get_mut("volumes") {
            Some(Value::Array(v)) => v.push(volume),
            _ => {
                s.insert("volumes".into(), json!([volume]));
            }
        }
        let mount =
            json!({"name": name, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"});
        for list in ["containers", "initContainers"] {
            if let Some(Value::Array(cs)) = s.get_mut(list) {
                for c in cs {
                    if let Some(c) = obj(c) {
                        match c.get_mut("volumeMounts") {
                            Some(Value::Array(ms)) => ms.push(mount.clone()),
                            _ => {
                                c.insert("volumeMounts".into(), json!([mount.clone()]));
                            }
                        }
                    }
                }
            }
        }
    }
    // Priority admission.
    if s.get("priority").is_none_or(Value::is_null) {
        s.insert("priority".into(), json!(0));
    }
    set_default(s, "preemptionPolicy", json!("PreemptLowerPriority"));
    // DefaultTolerationSeconds admission.
    let tolerations = s.entry("tolerations").or_insert_with(|| json!([]));
    if let Value::Array(ts) = tolerations {
        for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
            let present = ts.iter().any(|t| t.get("key").and_then(Value::as_str) == Some(key));
            if !present {
                ts.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
}

/// `qos.GetPodQOS`.
pub(crate) fn qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| pod.get("spec").and_then(|s| s.get(*l)).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        let res = c.get("resources");
        let requests = res.and_then(|r| r.get("requests")).and_then(Value::as_object);
        let limits = res.and_then(|r| r.get("limits")).and_then(Value::as_object);
        let relevant = |m: Option<&Map<String, Value>>| -> Map<String, Value> {
            m.map(|m| {
                m.iter()
                    .filter(|(k, v)| (*k == "cpu" || *k == "memory") && !is_zero(v))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
        };
        let r = relevant(requests);
        let l = relevant(limits);
        if !r.is_empty() || !l.is_empty() {
            any = true;
        }
        if l.len() != 2 || r.iter().any(|(k, v)| l.get(k) != Some(v)) {
            guaranteed = false;
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.trim_start_matches('0').is_empty() || s == "0m",
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

pub(crate) fn deployment_defaults(d: &mut Value) {
    if let Some(spec) = d.get_mut("spec").and_then(obj) {
        set_default(spec, "replicas", json!(1));
        set_default(spec, "revisionHistoryLimit", json!(10));
        set_default(spec, "progressDeadlineSeconds", json!(600));
        rolling_update_defaults(spec, "strategy", [("maxUnavailable", json!("25%")), ("maxSurge", json!("25%"))]);
    }
    template_defaults(d);
}

/// Defaults a workload's update strategy (a Deployment's `strategy`, a StatefulSet's or DaemonSet's
/// `updateStrategy`) as the API server does: its type to `RollingUpdate`, and only when it is one, the parameters
/// of `rollingUpdate` to those of the kind.
fn rolling_update_defaults(
    spec: &mut Map<String, Value>,
    strategy_field: &str,
    parameters: impl IntoIterator<Item = (&'static str, Value)>,
) {
    let strategy = spec.entry(strategy_field).or_insert_with(|| json!({}));
    if let Some(st) = obj(strategy) {
        set_default(st, "type", json!("RollingUpdate"));
        if st.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
            let ru = st.entry("rollingUpdate").or_insert_with(|| json!({}));
            if let Some(ru) = obj(ru) {
                for (field, value) in parameters {
                    set_default(ru, field, value);
                }
            }
        }
    }
}

pub(crate) fn replicaset_defaults(d: &mut Value) {
    if let Some(spec) = d.get_mut("spec").and_then(obj) {
        set_default(spec, "replicas", json!(1));
    }
    template_defaults(d);
}

pub(crate) fn statefulset_defaults(d: &mut Value) {
    if let Some(spec) = d.get_mut("spec").and_then(obj) {
        set_default(spec, "replicas", json!(1));
        set_default(spec, "podManagementPolicy", json!("OrderedReady"));
        set_default(spec, "revisionHistoryLimit", json!(10));
        set_default(
            spec,
            "persistentVolumeClaimRetentionPolicy",
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
        );
        rolling_update_defaults(spec, "updateStrategy", [("partition", json!(0))]);
    }
    template_defaults(d);
}

pub(crate) fn daemonset_defaults(d: &mut Value) {
    if let Some(spec) = d.get_mut("spec").and_then(obj) {
        set_default(spec, "revisionHistoryLimit", json!(10));
        rolling_update_defaults(spec, "updateStrategy", [("maxUnavailable", json!(1)), ("maxSurge", json!(0))]);
    }
    template_defaults(d);
}

pub(crate) fn job_defaults(d: &mut Value) {
    if let Some(spec) = d.get_mut("spec").and_then(obj) {
        set_default(spec, "completions", json!(1));
        set_default(spec, "parallelism", json!(1));
        set_default(spec, "backoffLimit", json!(6));
        set_default(spec, "completionMode", json!("NonIndexed"));
        set_default(spec, "suspend", json!(false));
        set_default(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
        set_default(spec, "manualSelector", json!(false));
    }
    template_defaults(d);
}

pub(crate) fn cronjob_defaults(d: &mut Value) {
    if let Some(spec) = d.get_mut("spec").and_then(obj) {
        set_default(spec, "concurrencyPolicy", json!("Allow"));
        set_default(spec, "suspend", json!(false));
        set_default(spec, "successfulJobsHistoryLimit", json!(3));
        set_default(spec, "failedJobsHistoryLimit", json!(1));
        if let Some(jt) = spec.get_mut("jobTemplate") {
            job_defaults(jt);
        }
    }
}

pub(crate) fn rbac_defaults(d: &mut Value) {
    if let Some(Value::Array(subjects)) = d.get_mut("subjects") {
        for s in subjects {
            let Some(s) = obj(s) else { continue };
            let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
            if kind == "User" || kind == "Group" {
                set_default(s, "apiGroup", json!("rbac.authorization.k8s.io"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_gets_kubernetes_defaults() {
        let mut pod = json!({"spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}],
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}});
        pod_defaults(&mut pod, true);
        let s = &pod["spec"];
        assert_eq!(s["restartPolicy"], "Always");
        assert_eq!(s["terminationGracePeriodSeconds"], 30);
        assert_eq!(s["serviceAccountName"], "default");
        assert_eq!(s["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(s["containers"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(s["containers"][0]["resources"]["requests"]["cpu"], "1");
        assert_eq!(s["tolerations"].as_array().unwrap().len(), 2);
        assert_eq!(s["containers"][0]["volumeMounts"][0]["mountPath"], "/var/run/secrets/kubernetes.io/serviceaccount");
        assert_eq!(qos_class(&pod), "Guaranteed");
        let mut tagged = json!({"spec": {"containers": [{"name": "c", "image": "python:3.5"}]}});
        pod_defaults(&mut tagged, false);
        assert_eq!(tagged["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert!(tagged["spec"].get("volumes").is_none());
        assert_eq!(qos_class(&tagged), "BestEffort");
    }
}
