//! `meta.k8s.io/v1` Table responses: the server-side printers of the built-in kinds
//! (k8s.io/kubernetes/pkg/printers/internalversion) and CRD `additionalPrinterColumns`.

use std::sync::LazyLock;

use serde_json::{Map, Value, json};

use crate::meta;
use crate::resources::{PrinterColumn, ResourceDef, Special};

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// What each row carries besides its cells (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub(crate) fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

fn col(name: &str, type_: &str, format: &str, description: &str, priority: i64) -> Value {
    json!({"name": name, "type": type_, "format": format, "description": description, "priority": priority})
}

fn name_col() -> Value {
    col("Name", "string", "name", NAME_DESCRIPTION, 0)
}

fn age_col() -> Value {
    col("Age", "string", "", AGE_DESCRIPTION, 0)
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    meta::lookup(v, path).and_then(Value::as_str).unwrap_or("")
}

fn i(v: &Value, path: &[&str]) -> i64 {
    meta::lookup(v, path).and_then(Value::as_i64).unwrap_or(0)
}

fn none_if_empty(s: &str) -> String {
    if s.is_empty() { "<none>".to_string() } else { s.to_string() }
}

fn age(obj: &Value) -> String {
    meta::age(meta::meta_str(obj, "creationTimestamp"))
}

/// Column definitions for a resource.
pub(crate) fn columns(rd: &ResourceDef) -> Vec<Value> {
    if let Some(c) = &rd.custom {
        let mut cols = vec![name_col()];
        if c.printer_columns.is_empty() {
            cols.push(col("Age", "date", "", AGE_DESCRIPTION, 0));
        }
        for pc in &c.printer_columns {
            cols.push(col(&pc.name, &pc.type_, &pc.format, &pc.description, pc.priority));
        }
        return cols;
    }
    match printer(rd).and_then(|p| PRINTERS.iter().find(|(name, _)| *name == p)) {
        Some((_, columns)) => columns.clone(),
        None => vec![name_col(), col("Created At", "date", "", AGE_DESCRIPTION, 0)],
    }
}

/// The column definitions of the built-in kinds' printers (see its header for the format).
const PRINTER_COLUMNS: &str = include_str!("table_columns.txt");

/// [`PRINTER_COLUMNS`] read once: each printer's name and its column definitions.
static PRINTERS: LazyLock<Vec<(&'static str, Vec<Value>)>> = LazyLock::new(|| {
    // Invariant: the file is fixed at build time; `every_printer_has_its_columns` reads all of it.
    parse_printers(PRINTER_COLUMNS).unwrap_or_else(|e| unreachable!("table_columns.txt does not parse: {e}"))
});

/// The printer of a built-in kind, as `table_columns.txt` names it; `None` for the kinds printed with their name
/// and creation time only.
fn printer(rd: &ResourceDef) -> Option<&str> {
    Some(match (rd.special, rd.kind.as_str()) {
        (Special::Pod, _) => "Pod",
        (Special::Namespace, _) => "Namespace",
        (Special::Node, _) => "Node",
        (Special::ConfigMap, _) => "ConfigMap",
        (Special::Secret, _) => "Secret",
        (Special::ServiceAccount, _) => "ServiceAccount",
        (Special::Service, _) => "Service",
        (Special::CoreEvent | Special::EventsV1, _) => "Event",
        (Special::Deployment, _) => "Deployment",
        (Special::ReplicaSet, _) => "ReplicaSet",
        (Special::Plain, kind @ ("Endpoints" | "PodDisruptionBudget" | "EndpointSlice")) => kind,
        (Special::StatefulSet, _) => "StatefulSet",
        (Special::ControllerRevision, _) => "ControllerRevision",
        (Special::PersistentVolumeClaim, _) => "PersistentVolumeClaim",
        (Special::Rbac, "RoleBinding" | "ClusterRoleBinding") => "RoleBinding",
        (_, kind @ ("Lease" | "APIService" | "ValidatingWebhookConfiguration")) => kind,
        (Special::ComponentStatus, _) => "ComponentStatus",
        _ => return None,
    })
}

/// Reads `[Printer]` sections of column lines: `Name`, `Age`, or `name | type | format | priority | description`.
fn parse_printers(text: &'static str) -> Result<Vec<(&'static str, Vec<Value>)>, String> {
    let mut printers: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for line in text.lines().filter(|line| !line.is_empty() && !line.starts_with('#')) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            printers.push((name, Vec::new()));
            continue;
        }
        let (_, columns) = printers.last_mut().ok_or_else(|| format!("column `{line}` before the first [printer]"))?;
        columns.push(match line {
            "Name" => name_col(),
            "Age" => age_col(),
            _ => {
                let fields: Vec<&str> = line.splitn(5, '|').map(str::trim).collect();
                let [name, type_, format, priority, description] = fields[..] else {
                    return Err(format!("column `{line}` is not name | type | format | priority | description"));
                };
                let priority = priority.parse().map_err(|e| format!("column `{line}`: priority: {e}"))?;
                col(name, type_, format, description, priority)
            }
        });
    }
    Ok(printers)
}

/// The cells of one object's row.
pub(crate) fn cells(rd: &ResourceDef, obj: &Value) -> Vec<Value> {
    let name = json!(meta::name(obj));
    if let Some(c) = &rd.custom {
        let mut out = vec![name];
        if c.printer_columns.is_empty() {
            out.push(json!(age(obj)));
        }
        for pc in &c.printer_columns {
            out.push(custom_cell(pc, obj));
        }
        return out;
    }
    match (rd.special, rd.kind.as_str()) {
        (Special::Pod, _) => pod_cells(obj),
        (Special::Namespace, _) => vec![name, json!(s(obj, &["status", "phase"])), json!(age(obj))],
        (Special::Node, _) => node_cells(obj),
        (Special::ConfigMap, _) => {
            let n = obj.get("data").and_then(Value::as_object).map_or(0, Map::len)
                + obj.get("binaryData").and_then(Value::as_object).map_or(0, Map::len);
            vec![name, json!(n), json!(age(obj))]
        }
        (Special::Secret, _) => {
            let n = obj.get("data").and_then(Value::as_object).map_or(0, Map::len);
            vec![name, json!(s(obj, &["type"])), json!(n), json!(age(obj))]
        }
        (Special::ServiceAccount, _) => {
            vec![name, json!(obj.get("secrets").and_then(Value::as_array).map_or(0, Vec::len)), json!(age(obj))]
        }
        (Special::Service, _) => service_cells(obj),
        (Special::CoreEvent | Special::EventsV1, _) => event_cells(obj),
        (Special::Deployment, _) => {
            let mut row = vec![
                name,
                json!(format!("{}/{}", i(obj, &["status", "readyReplicas"]), i(obj, &["spec", "replicas"]))),
                json!(i(obj, &["status", "updatedReplicas"])),
                json!(i(obj, &["status", "availableReplicas"])),
            ];
            row.extend(age_and_template_cells(obj));
            row
        }
        (Special::ReplicaSet, _) => {
            let mut row = vec![
                name,
                json!(i(obj, &["spec", "replicas"])),
                json!(i(obj, &["status", "replicas"])),
                json!(i(obj, &["status", "readyReplicas"])),
            ];
            row.extend(age_and_template_cells(obj));
            row
        }
        (Special::Plain, "Endpoints") => vec![name, json!(endpoints_cell(obj)), json!(age(obj))],
        (Special::Plain, "PodDisruptionBudget") => {
            // An int-or-string as written (`1`, `50%`), `N/A` when unset.
            let bound = |field: &str| match meta::lookup(obj, &["spec", field]) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => "N/A".to_string(),
            };
            vec![
                name,
                json!(bound("minAvailable")),
                json!(bound("maxUnavailable")),
                json!(i(obj, &["status", "disruptionsAllowed"])),
                json!(age(obj)),
            ]
        }
        (Special::Plain, "EndpointSlice") => {
            let (ports, endpoints) = endpoint_slice_cells(obj);
            vec![name, json!(s(obj, &["addressType"])), json!(ports), json!(endpoints), json!(age(obj))]
        }
        (Special::StatefulSet, _) => vec![
            name,
            json!(format!("{}/{}", i(obj, &["status", "readyReplicas"]), i(obj, &["spec", "replicas"]))),
            json!(age(obj)),
        ],
        (Special::ControllerRevision, _) => {
            let controller = meta::owner_references(obj)
                .iter()
                .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
                .map(|o| {
                    let api = o.get("apiVersion").and_then(Value::as_str).unwrap_or("");
                    let group = api.split_once('/').map(|(g, _)| g).unwrap_or("");
                    let kind = o.get("kind").and_then(Value::as_str).unwrap_or("").to_lowercase();
                    let kind = if group.is_empty() { kind } else { format!("{kind}.{group}") };
                    format!("{kind}/{}", o.get("name").and_then(Value::as_str).unwrap_or(""))
                })
                .unwrap_or_else(|| "<none>".into());
            vec![name, json!(controller), json!(i(obj, &["revision"])), json!(age(obj))]
        }
        (Special::PersistentVolumeClaim, _) => {
            let modes = obj
                .get("status")
                .and_then(|s| s.get("accessModes"))
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(access_mode_short).collect::<Vec<_>>().join(","))
                .unwrap_or_default();
            vec![
                name,
                json!(s(obj, &["status", "phase"])),
                json!(s(obj, &["spec", "volumeName"])),
                json!(s(obj, &["status", "capacity", "storage"])),
                json!(modes),
                json!(none_if_empty(s(obj, &["spec", "storageClassName"]))),
                json!(none_if_empty(s(obj, &["spec", "volumeAttributesClassName"]))),
                json!(age(obj)),
            ]
        }
        (Special::Rbac, "RoleBinding" | "ClusterRoleBinding") => {
            let subjects = obj.get("subjects").and_then(Value::as_array).cloned().unwrap_or_default();
            let of = |k: &str| {
                subjects
                    .iter()
                    .filter(|s| s.get("kind").and_then(Value::as_str) == Some(k))
                    .map(|s| {
                        let n = s.get("name").and_then(Value::as_str).unwrap_or("");
                        if k == "ServiceAccount" {
                            format!("{}/{n}", s.get("namespace").and_then(Value::as_str).unwrap_or(""))
                        } else {
                            n.to_string()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            vec![
                name,
                json!(format!("{}/{}", s(obj, &["roleRef", "kind"]), s(obj, &["roleRef", "name"]))),
                json!(age(obj)),
                json!(of("User")),
                json!(of("Group")),
                json!(of("ServiceAccount")),
            ]
        }
        (_, "Lease") => vec![name, json!(s(obj, &["spec", "holderIdentity"])), json!(age(obj))],
        (_, "APIService") => {
            let service = match obj.pointer("/spec/service") {
                Some(svc) if !svc.is_null() => format!("{}/{}", s(svc, &["namespace"]), s(svc, &["name"])),
                _ => "Local".to_string(),
            };
            let conditions = obj.pointer("/status/conditions").and_then(Value::as_array);
            let available = match conditions.and_then(|c| c.iter().find(|c| c["type"] == "Available")) {
                Some(c) if c["status"] == "True" => "True".to_string(),
                Some(c) => format!("{} ({})", s(c, &["status"]), s(c, &["reason"])),
                None => "Unknown".to_string(),
            };
            vec![name, json!(service), json!(available), json!(age(obj))]
        }
        (_, "ValidatingWebhookConfiguration") => {
            vec![name, json!(obj.get("webhooks").and_then(Value::as_array).map_or(0, Vec::len)), json!(age(obj))]
        }
        (Special::ComponentStatus, _) => component_status_cells(obj),
        _ => vec![name, json!(meta::meta_str(obj, "creationTimestamp"))],
    }
}

/// kube-apiserver's printer: the `Healthy` conditions as Healthy/Unhealthy/Unknown, joined with their messages
/// and errors.
fn component_status_cells(obj: &Value) -> Vec<Value> {
    let mut status = Vec::new();
    let mut message = Vec::new();
    let mut error = Vec::new();
    for c in obj.get("conditions").and_then(Value::as_array).into_iter().flatten() {
        if s(c, &["type"]) != "Healthy" {
            continue;
        }
        status.push(match s(c, &["status"]) {
            "True" => "Healthy",
            "False" => "Unhealthy",
            _ => "Unknown",
        });
        message.push(s(c, &["message"]));
        error.push(s(c, &["error"]));
    }
    vec![json!(meta::name(obj)), json!(status.join(",")), json!(message.join(",")), json!(error.join(","))]
}

fn access_mode_short(m: &str) -> &str {
    match m {
        "ReadWriteOnce" => "RWO",
        "ReadOnlyMany" => "ROX",
        "ReadWriteMany" => "RWX",
        "ReadWriteOncePod" => "RWOP",
        other => other,
    }
}

/// At most three entries, then ` + N more...`, as kubectl's printers shorten address lists.
fn first_three(items: &[String], empty: &str) -> String {
    match items.len() {
        0 => empty.to_string(),
        n if n <= 3 => items.join(","),
        n => format!("{} + {} more...", items[..3].join(","), n - 3),
    }
}

/// `formatEndpoints`: every ready `ip:port` of the subsets.
fn endpoints_cell(obj: &Value) -> String {
    let mut out = Vec::new();
    for subset in obj.get("subsets").and_then(Value::as_array).into_iter().flatten() {
        let ports = subset.get("ports").and_then(Value::as_array).cloned().unwrap_or_default();
        for a in subset.get("addresses").and_then(Value::as_array).into_iter().flatten() {
            let ip = a.get("ip").and_then(Value::as_str).unwrap_or("");
            if ports.is_empty() {
                out.push(ip.to_string());
            }
            for p in &ports {
                out.push(format!("{ip}:{}", p.get("port").and_then(Value::as_i64).unwrap_or(0)));
            }
        }
    }
    first_three(&out, "<none>")
}

/// `formatDiscoveryPorts` and `formatDiscoveryEndpoints`.
fn endpoint_slice_cells(obj: &Value) -> (String, String) {
    let ports: Vec<String> = obj
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| p.get("port").and_then(Value::as_i64).map_or_else(|| "<unset>".to_string(), |n| n.to_string()))
        .collect();
    let addresses: Vec<String> = obj
        .get("endpoints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|e| e.get("addresses").and_then(Value::as_array).cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    (if ports.is_empty() { "<unset>".to_string() } else { ports.join(",") }, first_three(&addresses, "<unset>"))
}

/// The cells Deployments and ReplicaSets print after their replica counts: Age, then the wide Containers, Images
/// and Selector of their pod template.
fn age_and_template_cells(obj: &Value) -> [Value; 4] {
    let (containers, images) = template_containers(obj);
    let selector = obj
        .get("spec")
        .and_then(|s| s.get("selector"))
        .map(crate::registry::scale::selector_string)
        .unwrap_or_default();
    [json!(age(obj)), json!(containers), json!(images), json!(selector)]
}

fn template_containers(obj: &Value) -> (String, String) {
    let cs = meta::lookup(obj, &["spec", "template", "spec", "containers"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = cs.iter().filter_map(|c| c.get("name").and_then(Value::as_str)).collect();
    let images: Vec<&str> = cs.iter().filter_map(|c| c.get("image").and_then(Value::as_str)).collect();
    (names.join(","), images.join(","))
}

fn custom_cell(pc: &PrinterColumn, obj: &Value) -> Value {
    let found = crate::jsonpath::find(obj, &pc.json_path);
    let Some(v) = found.first() else { return Value::Null };
    match pc.type_.as_str() {
        "integer" => match v {
            Value::Number(n) => n.as_i64().map(|x| json!(x)).unwrap_or_else(|| json!(n.as_f64().map(|f| f as i64))),
            Value::String(s) => s.parse::<i64>().map(|x| json!(x)).unwrap_or(Value::Null),
            _ => Value::Null,
        },
        "number" => match v {
            Value::Number(_) => (*v).clone(),
            _ => Value::Null,
        },
        "boolean" => match v {
            Value::Bool(_) => (*v).clone(),
            _ => Value::Null,
        },
        // `ConvertToHumanReadableDateType`: date cells are ages, computed by the server.
        "date" => match v {
            Value::String(s) => match meta::parse_time(s) {
                Some(_) => json!(meta::age(Some(s))),
                None => json!("<invalid>"),
            },
            _ => Value::Null,
        },
        _ => match v {
            Value::String(s) => json!(s),
            Value::Null => Value::Null,
            other => json!(go_print(other)),
        },
    }
}

/// How client-go's jsonpath prints non-string values (maps as `map[k:v]`, lists as `[a b]`).
fn go_print(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_print).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => {
            format!("map[{}]", m.iter().map(|(k, v)| format!("{k}:{}", go_print(v))).collect::<Vec<_>>().join(" "))
        }
        other => other.to_string(),
    }
}

fn restartable_init(c: &Value) -> bool {
    c.get("restartPolicy").and_then(Value::as_str) == Some("Always")
}

/// `printPod`.
fn pod_cells(pod: &Value) -> Vec<Value> {
    let spec = pod.get("spec").cloned().unwrap_or(Value::Null);
    let status = pod.get("status").cloned().unwrap_or(Value::Null);
    let arr = |v: &Value, k: &str| v.get(k).and_then(Value::as_array).cloned().unwrap_or_default();
    let init_specs = arr(&spec, "initContainers");
    let mut total = arr(&spec, "containers").len();
    total += init_specs.iter().filter(|c| restartable_init(c)).count();
    let phase = s(&status, &["phase"]).to_string();
    let mut reason = phase.clone();
    if !s(&status, &["reason"]).is_empty() {
        reason = s(&status, &["reason"]).to_string();
    }
    for c in arr(&status, "conditions") {
        if s(&c, &["type"]) == "PodScheduled" && s(&c, &["reason"]) == "SchedulingGated" {
            reason = "SchedulingGated".into();
        }
    }
    let mut restarts: i64 = 0;
    let mut ready = 0;
    let mut last_restart: Option<String> = None;
    let mut restartable_restarts: i64 = 0;
    let mut restartable_last: Option<String> = None;
    let later = |a: &Option<String>, b: &str| -> bool {
        a.as_deref().is_none_or(|a| meta::parse_time(a) < meta::parse_time(b))
    };
    let mut initializing = false;
    let init_statuses = arr(&status, "initContainerStatuses");
    let n_init = init_specs.len();
    for (idx, c) in init_statuses.iter().enumerate() {
        restarts += c.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
        let finished = s(c, &["lastState", "terminated", "finishedAt"]);
        if !finished.is_empty() && later(&last_restart, finished) {
            last_restart = Some(finished.to_string());
        }
        let spec_c = init_specs.iter().find(|sc| sc.get("name") == c.get("name"));
        let is_restartable = spec_c.is_some_and(restartable_init);
        if is_restartable {
            restartable_restarts += c.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
            if !finished.is_empty() && later(&restartable_last, finished) {
                restartable_last = Some(finished.to_string());
            }
        }
        let terminated = c.get("state").and_then(|s| s.get("terminated"));
        let waiting_reason = s(c, &["state", "waiting", "reason"]);
        if terminated.is_some_and(|t| t.get("exitCode").and_then(Value::as_i64) == Some(0)) {
            continue;
        }
        if is_restartable && c.get("started").and_then(Value::as_bool) == Some(true) {
            if c.get("ready").and_then(Value::as_bool) == Some(true) {
                ready += 1;
            }
            continue;
        }
        if let Some(t) = terminated {
            let r = s(t, &["reason"]);
            reason = if r.is_empty() {
                let sig = t.get("signal").and_then(Value::as_i64).unwrap_or(0);
                if sig != 0 {
                    format!("Init:Signal:{sig}")
                } else {
                    format!("Init:ExitCode:{}", t.get("exitCode").and_then(Value::as_i64).unwrap_or(0))
                }
            } else {
                format!("Init:{r}")
            };
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{idx}/{n_init}");
        }
        initializing = true;
        break;
    }
    let initialized =
        arr(&status, "conditions").iter().any(|c| s(c, &["type"]) == "Initialized" && s(c, &["status"]) == "True");
    if !initializing || initialized {
        restarts = restartable_restarts;
        last_restart = restartable_last;
        let mut has_running = false;
        let statuses = arr(&status, "containerStatuses");
        for c in statuses.iter().rev() {
            restarts += c.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
            let finished = s(c, &["lastState", "terminated", "finishedAt"]);
            if !finished.is_empty() && later(&last_restart, finished) {
                last_restart = Some(finished.to_string());
            }
            let waiting = s(c, &["state", "waiting", "reason"]);
            let terminated = c.get("state").and_then(|s| s.get("terminated"));
            if !waiting.is_empty() {
                reason = waiting.to_string();
            } else if let Some(t) = terminated {
                let r = s(t, &["reason"]);
                reason = if !r.is_empty() {
                    r.to_string()
                } else {
                    let sig = t.get("signal").and_then(Value::as_i64).unwrap_or(0);
                    if sig != 0 {
                        format!("Signal:{sig}")
                    } else {
                        format!("ExitCode:{}", t.get("exitCode").and_then(Value::as_i64).unwrap_or(0))
                    }
                };
            } else if c.get("ready").and_then(Value::as_bool) == Some(true)
                && c.get("state").and_then(|s| s.get("running")).is_some()
            {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready =
                arr(&status, "conditions").iter().any(|c| s(c, &["type"]) == "Ready" && s(c, &["status"]) == "True");
            reason = if pod_ready { "Running".into() } else { "NotReady".into() };
        }
    }
    let terminal = phase == "Succeeded" || phase == "Failed";
    if meta::deletion_timestamp(pod).is_some() && s(&status, &["reason"]) == "NodeLost" {
        reason = "Unknown".into();
    } else if meta::deletion_timestamp(pod).is_some() && !terminal {
        reason = "Terminating".into();
    }
    let restarts_str = match (&last_restart, restarts) {
        (Some(t), r) if r != 0 => format!("{r} ({} ago)", meta::age(Some(t))),
        (_, r) => r.to_string(),
    };
    let pod_ip =
        arr(&status, "podIPs").first().and_then(|p| p.get("ip")).and_then(Value::as_str).unwrap_or("").to_string();
    let gates = arr(&spec, "readinessGates");
    let gates_str = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let conds = arr(&status, "conditions");
        let ok = gates
            .iter()
            .filter(|g| {
                let t = s(g, &["conditionType"]);
                conds.iter().find(|c| s(c, &["type"]) == t).is_some_and(|c| s(c, &["status"]) == "True")
            })
            .count();
        format!("{ok}/{}", gates.len())
    };
    vec![
        json!(meta::name(pod)),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_str),
        json!(age(pod)),
        json!(none_if_empty(&pod_ip)),
        json!(none_if_empty(s(&spec, &["nodeName"]))),
        json!(none_if_empty(s(&status, &["nominatedNodeName"]))),
        json!(gates_str),
    ]
}

fn node_cells(node: &Value) -> Vec<Value> {
    let conds =
        node.get("status").and_then(|s| s.get("conditions")).and_then(Value::as_array).cloned().unwrap_or_default();
    let mut status: Vec<String> = Vec::new();
    match conds.iter().find(|c| s(c, &["type"]) == "Ready") {
        Some(c) if s(c, &["status"]) == "True" => status.push("Ready".into()),
        Some(_) => status.push("NotReady".into()),
        None => status.push("Unknown".into()),
    }
    if node.get("spec").and_then(|s| s.get("unschedulable")).and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled".into());
    }
    let mut roles: Vec<String> = meta::labels(node)
        .map(|l| {
            l.keys()
                .filter_map(|k| {
                    k.strip_prefix("node-role.kubernetes.io/")
                        .map(str::to_string)
                        .or_else(|| (k == "kubernetes.io/role").then(|| l[k].as_str().unwrap_or("").to_string()))
                })
                .filter(|r| !r.is_empty())
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    let addr = |t: &str| {
        node.get("status")
            .and_then(|s| s.get("addresses"))
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|x| s(x, &["type"]) == t))
            .and_then(|x| x.get("address"))
            .and_then(Value::as_str)
            .unwrap_or("<none>")
            .to_string()
    };
    vec![
        json!(meta::name(node)),
        json!(status.join(",")),
        json!(if roles.is_empty() { "<none>".to_string() } else { roles.join(",") }),
        json!(age(node)),
        json!(s(node, &["status", "nodeInfo", "kubeletVersion"])),
        json!(addr("InternalIP")),
        json!(addr("ExternalIP")),
        json!(s(node, &["status", "nodeInfo", "osImage"])),
        json!(s(node, &["status", "nodeInfo", "kernelVersion"])),
        json!(s(node, &["status", "nodeInfo", "containerRuntimeVersion"])),
    ]
}

fn service_cells(svc: &Value) -> Vec<Value> {
    let ty = s(svc, &["spec", "type"]);
    let external = match ty {
        "ExternalName" => s(svc, &["spec", "externalName"]).to_string(),
        "LoadBalancer" => {
            let ing: Vec<String> = meta::lookup(svc, &["status", "loadBalancer", "ingress"])
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|i| {
                            i.get("ip").or_else(|| i.get("hostname")).and_then(Value::as_str).map(str::to_string)
                        })
                        .collect()
                })
                .unwrap_or_default();
            if ing.is_empty() { "<pending>".into() } else { ing.join(",") }
        }
        _ => {
            let ips: Vec<String> = meta::lookup(svc, &["spec", "externalIPs"])
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
                .unwrap_or_default();
            if ips.is_empty() { "<none>".into() } else { ips.join(",") }
        }
    };
    let ports: Vec<String> = meta::lookup(svc, &["spec", "ports"])
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|p| {
                    let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
                    let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                    match p.get("nodePort").and_then(Value::as_i64) {
                        Some(np) => format!("{port}:{np}/{proto}"),
                        None => format!("{port}/{proto}"),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let selector = svc
        .get("spec")
        .and_then(|s| s.get("selector"))
        .and_then(Value::as_object)
        .map(|m| {
            let mut parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect();
            parts.sort();
            parts.join(",")
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "<none>".into());
    vec![
        json!(meta::name(svc)),
        json!(ty),
        json!(none_if_empty(s(svc, &["spec", "clusterIP"]))),
        json!(external),
        json!(if ports.is_empty() { "<none>".to_string() } else { ports.join(",") }),
        json!(age(svc)),
        json!(selector),
    ]
}

fn event_cells(ev: &Value) -> Vec<Value> {
    let first = [s(ev, &["firstTimestamp"]), s(ev, &["eventTime"]), s(ev, &["deprecatedFirstTimestamp"])]
        .into_iter()
        .find(|x| !x.is_empty())
        .unwrap_or("");
    let last =
        [s(ev, &["series", "lastObservedTime"]), s(ev, &["lastTimestamp"]), s(ev, &["deprecatedLastTimestamp"]), first]
            .into_iter()
            .find(|x| !x.is_empty())
            .unwrap_or("");
    let obj = ev.get("involvedObject").or_else(|| ev.get("regarding")).cloned().unwrap_or(Value::Null);
    let object = format!("{}/{}", s(&obj, &["kind"]).to_lowercase(), s(&obj, &["name"]));
    let count =
        ev.get("series").and_then(|x| x.get("count")).or_else(|| ev.get("count")).and_then(Value::as_i64).unwrap_or(1);
    let source = {
        let c = [s(ev, &["source", "component"]), s(ev, &["reportingComponent"]), s(ev, &["reportingController"])]
            .into_iter()
            .find(|x| !x.is_empty())
            .unwrap_or("");
        let h = s(ev, &["source", "host"]);
        if h.is_empty() { c.to_string() } else { format!("{c}, {h}") }
    };
    vec![
        json!(if last.is_empty() { "<unknown>".to_string() } else { meta::age(Some(last)) }),
        json!(s(ev, &["type"])),
        json!(s(ev, &["reason"])),
        json!(object),
        json!(s(&obj, &["fieldPath"])),
        json!(source),
        json!([s(ev, &["message"]), s(ev, &["note"])].into_iter().find(|x| !x.is_empty()).unwrap_or("")),
        json!(if first.is_empty() { "<unknown>".to_string() } else { meta::age(Some(first)) }),
        json!(count.to_string()),
        json!(meta::name(ev)),
    ]
}

fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
}

/// A Table with one row per object.
pub(crate) fn table(
    rd: &ResourceDef,
    objects: &[std::sync::Arc<Value>],
    include: IncludeObject,
    list_meta: Value,
    headers: bool,
) -> Value {
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut row = Map::new();
            row.insert("cells".into(), Value::Array(cells(rd, o)));
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row.insert("object".into(), partial_metadata(o));
                }
                IncludeObject::Object => {
                    row.insert("object".into(), (**o).clone());
                }
            }
            Value::Object(row)
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": if headers { Value::Array(columns(rd)) } else { json!([]) },
        "rows": rows,
    })
}

/// `PartialObjectMetadata` of one object.
pub(crate) fn partial_object_metadata(obj: &Value) -> Value {
    partial_metadata(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_rd() -> std::sync::Arc<ResourceDef> {
        crate::resources::Catalog::new().get("", "v1", "pods").unwrap()
    }

    #[test]
    fn every_printer_has_its_columns() {
        let printers = parse_printers(PRINTER_COLUMNS).unwrap();
        let mut named: Vec<&str> = printers.iter().map(|(name, _)| *name).collect();
        let mut used: Vec<String> =
            crate::resources::Catalog::new().all().iter().filter_map(|rd| printer(rd).map(str::to_string)).collect();
        used.sort();
        used.dedup();
        named.sort();
        assert_eq!(named, used, "a section for each printer, and a printer for each section");
        assert!(printers.iter().all(|(_, columns)| !columns.is_empty()));
        assert!(parse_printers("Name").is_err(), "a column outside a printer");
        assert!(parse_printers("[P]\nX | string | | 0").is_err(), "a column without a description");
        assert!(parse_printers("[P]\nX | string | | wide | d").is_err(), "a priority that is not a number");
    }

    #[test]
    fn pod_columns_and_terminating_status() {
        let pod = json!({"metadata": {"name": "web-0", "creationTimestamp": meta::now()},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1", "readinessGates": [{"conditionType": "x/ready"}]},
            "status": {"phase": "Running", "podIPs": [{"ip": "127.1.0.5"}],
                "conditions": [{"type": "x/ready", "status": "True"}],
                "containerStatuses": [
                    {"name": "a", "ready": true, "restartCount": 1, "state": {"running": {}}, "lastState": {"terminated": {"finishedAt": meta::now()}}},
                    {"name": "b", "ready": false, "restartCount": 0, "state": {"running": {}}}]}});
        let c = cells(&pod_rd(), &pod);
        assert_eq!(c[1], "1/2");
        assert_eq!(c[2], "Running");
        assert!(c[3].as_str().unwrap().starts_with("1 ("));
        assert_eq!(c[5], "127.1.0.5");
        assert_eq!(c[8], "1/1");
        let mut deleting = pod.clone();
        deleting["metadata"]["deletionTimestamp"] = json!(meta::now());
        assert_eq!(cells(&pod_rd(), &deleting)[2], "Terminating");
        let waiting = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]},
            "status": {"phase": "Pending", "containerStatuses": [{"name": "a", "ready": false, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        assert_eq!(cells(&pod_rd(), &waiting)[2], "CrashLoopBackOff");
        assert_eq!(columns(&pod_rd()).len(), 9);
    }

    #[test]
    fn pod_disruption_budget_columns_as_kubectl_get_pdb_shows_them() {
        let rd = crate::resources::Catalog::new().get("policy", "v1", "poddisruptionbudgets").unwrap();
        let cols = columns(&rd);
        let names: Vec<&str> = cols.iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(names, ["Name", "Min Available", "Max Unavailable", "Allowed Disruptions", "Age"]);
        let pdb = json!({"metadata": {"name": "web", "creationTimestamp": meta::now()},
            "spec": {"minAvailable": 1}, "status": {"disruptionsAllowed": 2}});
        let c = cells(&rd, &pdb);
        assert_eq!((&c[1], &c[2], &c[3]), (&json!("1"), &json!("N/A"), &json!(2)));
        let percent = json!({"metadata": {"name": "web"}, "spec": {"maxUnavailable": "50%"}});
        assert_eq!(cells(&rd, &percent)[1..4], [json!("N/A"), json!("50%"), json!(0)]);
    }
}
