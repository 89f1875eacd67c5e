//! Accessors for `metadata` on untyped objects, plus the time and identifier formats the
//! apiserver uses (RFC 3339 seconds for `Time`, microseconds for `MicroTime`, random v4 UIDs).

use k8s_openapi::jiff::Timestamp;
use rand::RngExt;
use serde_json::{Map, Value, json};

/// Objects are kept as JSON maps: custom resources have no Rust type, and keeping built-ins the
/// same way lets one code path implement every verb.
pub(crate) type Object = Map<String, Value>;

pub(crate) fn metadata(obj: &Value) -> Option<&Object> {
    obj.get("metadata").and_then(Value::as_object)
}

/// Returns `metadata`, creating it when missing or not an object.
pub(crate) fn metadata_mut(obj: &mut Value) -> &mut Object {
    let Value::Object(map) = obj else {
        *obj = Value::Object(Map::new());
        return metadata_mut(obj);
    };
    let entry = map.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    match entry {
        Value::Object(m) => m,
        // Invariant: the entry was just made an object above.
        _ => unreachable!("metadata was just set to an object"),
    }
}

pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    metadata(obj).and_then(|m| m.get(field)).and_then(Value::as_str)
}

pub(crate) fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

pub(crate) fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or("")
}

pub(crate) fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid").unwrap_or("")
}

pub(crate) fn resource_version(obj: &Value) -> &str {
    meta_str(obj, "resourceVersion").unwrap_or("")
}

pub(crate) fn labels(obj: &Value) -> Option<&Object> {
    metadata(obj).and_then(|m| m.get("labels")).and_then(Value::as_object)
}

pub(crate) fn annotations(obj: &Value) -> Option<&Object> {
    metadata(obj).and_then(|m| m.get("annotations")).and_then(Value::as_object)
}

pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    metadata(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

pub(crate) fn set_finalizers(obj: &mut Value, finalizers: &[String]) {
    let m = metadata_mut(obj);
    if finalizers.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), json!(finalizers));
    }
}

pub(crate) fn deletion_timestamp(obj: &Value) -> Option<&str> {
    meta_str(obj, "deletionTimestamp")
}

pub(crate) fn deletion_grace_period(obj: &Value) -> Option<i64> {
    metadata(obj).and_then(|m| m.get("deletionGracePeriodSeconds")).and_then(Value::as_i64)
}

pub(crate) fn generation(obj: &Value) -> i64 {
    metadata(obj).and_then(|m| m.get("generation")).and_then(Value::as_i64).unwrap_or(0)
}

pub(crate) fn owner_references(obj: &Value) -> &[Value] {
    metadata(obj).and_then(|m| m.get("ownerReferences")).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// Looks up a dotted path of object keys (`spec.replicas`).
pub(crate) fn lookup<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = obj;
    for p in path {
        cur = cur.get(*p)?;
    }
    Some(cur)
}

/// `metav1.Time` format: RFC 3339 in UTC with second precision.
pub(crate) fn format_time(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `metav1.MicroTime` format: RFC 3339 in UTC with microsecond precision.
pub(crate) fn format_micro_time(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

pub(crate) fn now() -> String {
    format_time(Timestamp::now())
}

pub(crate) fn parse_time(s: &str) -> Option<Timestamp> {
    s.parse::<Timestamp>().ok()
}

/// A random RFC 4122 version 4 UUID, the format the apiserver uses for `metadata.uid`.
pub(crate) fn new_uid() -> String {
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    format!(
        "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]
    )
}

/// The alphabet and length of `names.SimpleNameGenerator` (no vowels, no confusable digits).
pub(crate) fn generate_name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect()
}

/// `SimpleNameGenerator.GenerateName`: truncates the base to keep the name within 63 characters.
pub(crate) fn generate_name(base: &str) -> String {
    const MAX_GENERATED_NAME_LENGTH: usize = 63 - 5;
    let base: String = base.chars().take(MAX_GENERATED_NAME_LENGTH).collect();
    format!("{base}{}", generate_name_suffix())
}

/// Human-readable age like kubectl's `duration.HumanDuration` ("5s", "3m", "2d4h").
pub(crate) fn human_duration(secs: i64) -> String {
    if secs < 0 {
        return "<invalid>".to_string();
    }
    let seconds = secs;
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        if s == 0 {
            return format!("{minutes}m");
        }
        return format!("{minutes}m{s}s");
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            return format!("{hours}h");
        }
        return format!("{hours}h{m}m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            return format!("{}d", hours / 24);
        }
        return format!("{}d{h}h", hours / 24);
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 {
            return format!("{}y", hours / 24 / 365);
        }
        return format!("{}y{dy}d", hours / 24 / 365);
    }
    format!("{}y", hours / 24 / 365)
}

/// Age of a timestamp relative to now, as printed in tables; `<unknown>` when unparsable.
pub(crate) fn age(ts: Option<&str>) -> String {
    match ts.and_then(parse_time) {
        Some(t) => human_duration(Timestamp::now().as_second() - t.as_second()),
        None => "<unknown>".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_is_v4_shaped() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_ne!(new_uid(), u);
    }

    #[test]
    fn human_duration_matches_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
    }

    #[test]
    fn generated_names_keep_base_and_add_five_chars() {
        let n = generate_name("web-");
        assert!(n.starts_with("web-"));
        assert_eq!(n.len(), 9);
    }

    #[test]
    fn time_formats() {
        let t: Timestamp = "2024-05-06T07:08:09.123456Z".parse().unwrap();
        assert_eq!(format_time(t), "2024-05-06T07:08:09Z");
        assert_eq!(format_micro_time(t), "2024-05-06T07:08:09.123456Z");
    }
}
