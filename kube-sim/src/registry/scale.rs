//! The `scale` subresource: an `autoscaling/v1` Scale view of any resource with replicas paths
//! (Deployments, ReplicaSets, StatefulSets and custom resources with `subresources.scale`).

use serde_json::{Map, Value, json};

use crate::resources::ResourceDef;

fn path_parts(p: &str) -> Vec<&str> {
    p.trim_start_matches('.').split('.').filter(|s| !s.is_empty()).collect()
}

/// `metav1.LabelSelectorAsSelector(...).String()`.
pub(crate) fn selector_string(sel: &Value) -> String {
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(ml) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in ml {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or_default())));
        }
    }
    if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
        for e in exprs {
            let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
            let mut values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            values.sort();
            let s = match e.get("operator").and_then(Value::as_str).unwrap_or_default() {
                "In" => format!("{key} in ({})", values.join(",")),
                "NotIn" => format!("{key} notin ({})", values.join(",")),
                "Exists" => key.to_string(),
                "DoesNotExist" => format!("!{key}"),
                _ => continue,
            };
            reqs.push((key.to_string(), s));
        }
    }
    reqs.sort();
    reqs.into_iter().map(|(_, s)| s).collect::<Vec<_>>().join(",")
}

/// Builds the Scale object for a stored object.
pub(crate) fn to_scale(rd: &ResourceDef, obj: &Value) -> Value {
    let Some(paths) = &rd.scale else { return Value::Null };
    let get = |p: &str| crate::meta::lookup(obj, &path_parts(p)).cloned();
    let spec_replicas = get(&paths.spec_replicas).and_then(|v| v.as_i64()).unwrap_or(0);
    let status_replicas = get(&paths.status_replicas).and_then(|v| v.as_i64()).unwrap_or(0);
    let selector = if rd.is_custom() {
        paths.label_selector.as_deref().and_then(get).and_then(|v| v.as_str().map(str::to_string))
    } else {
        crate::meta::lookup(obj, &["spec", "selector"]).map(selector_string)
    };
    let mut meta = Map::new();
    for k in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = crate::meta::metadata(obj).and_then(|m| m.get(k)) {
            meta.insert(k.into(), v.clone());
        }
    }
    let mut status = Map::new();
    status.insert("replicas".into(), json!(status_replicas));
    if let Some(s) = selector.filter(|s| !s.is_empty()) {
        status.insert("selector".into(), json!(s));
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": Value::Object(meta),
        "spec": {"replicas": spec_replicas},
        "status": Value::Object(status),
    })
}

/// Writes a Scale's `spec.replicas` into the object at the spec replicas path.
pub(crate) fn apply_scale(rd: &ResourceDef, obj: &mut Value, replicas: i64) {
    let Some(paths) = &rd.scale else { return };
    let parts = path_parts(&paths.spec_replicas);
    let Some((last, parents)) = parts.split_last() else { return };
    let mut cur = obj;
    for p in parents {
        if !cur.get(*p).is_some_and(Value::is_object)
            && let Value::Object(m) = cur
        {
            m.insert(p.to_string(), json!({}));
        }
        match cur.get_mut(*p) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Value::Object(m) = cur {
        m.insert(last.to_string(), json!(replicas));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_strings() {
        assert_eq!(selector_string(&json!({"matchLabels": {"b": "2", "a": "1"}})), "a=1,b=2");
        assert_eq!(
            selector_string(
                &json!({"matchExpressions": [{"key": "x", "operator": "In", "values": ["q", "p"]}, {"key": "y", "operator": "DoesNotExist"}]})
            ),
            "x in (p,q),!y"
        );
    }
}
