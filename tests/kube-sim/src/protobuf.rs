//! Decoding of Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`).
//!
//! client-go's typed clients send protobuf for built-in kinds when configured to; Helm does
//! for its release Secrets. kube-sim decodes the kinds such clients write (Secret, ConfigMap,
//! DeleteOptions) into JSON and answers in JSON, which client-go accepts. The field numbers are
//! those of `k8s.io/api/core/v1/generated.proto` and `k8s.io/apimachinery/.../generated.proto`.

use base64::Engine;
use serde_json::{Map, Value, json};

const MAGIC: &[u8] = b"k8s\x00";

#[derive(Clone, Copy)]
enum Kind {
    Str,
    Int,
    Bool,
    Time,
    Msg(&'static [Field]),
    MapStr,
    MapBytes,
    RepStr,
    RepMsg(&'static [Field]),
    /// `FieldsV1`: a message whose `Raw` (1) holds JSON.
    RawJson,
}

#[derive(Clone, Copy)]
struct Field {
    num: u64,
    name: &'static str,
    kind: Kind,
}

const fn f(num: u64, name: &'static str, kind: Kind) -> Field {
    Field { num, name, kind }
}

const OWNER_REFERENCE: &[Field] = &[
    f(5, "apiVersion", Kind::Str),
    f(1, "kind", Kind::Str),
    f(3, "name", Kind::Str),
    f(4, "uid", Kind::Str),
    f(6, "controller", Kind::Bool),
    f(7, "blockOwnerDeletion", Kind::Bool),
];

const MANAGED_FIELDS_ENTRY: &[Field] = &[
    f(1, "manager", Kind::Str),
    f(2, "operation", Kind::Str),
    f(3, "apiVersion", Kind::Str),
    f(4, "time", Kind::Time),
    f(6, "fieldsType", Kind::Str),
    f(7, "fieldsV1", Kind::RawJson),
    f(8, "subresource", Kind::Str),
];

const OBJECT_META: &[Field] = &[
    f(1, "name", Kind::Str),
    f(2, "generateName", Kind::Str),
    f(3, "namespace", Kind::Str),
    f(4, "selfLink", Kind::Str),
    f(5, "uid", Kind::Str),
    f(6, "resourceVersion", Kind::Str),
    f(7, "generation", Kind::Int),
    f(8, "creationTimestamp", Kind::Time),
    f(9, "deletionTimestamp", Kind::Time),
    f(10, "deletionGracePeriodSeconds", Kind::Int),
    f(11, "labels", Kind::MapStr),
    f(12, "annotations", Kind::MapStr),
    f(13, "ownerReferences", Kind::RepMsg(OWNER_REFERENCE)),
    f(14, "finalizers", Kind::RepStr),
    f(17, "managedFields", Kind::RepMsg(MANAGED_FIELDS_ENTRY)),
];

const SECRET: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(5, "immutable", Kind::Bool),
    f(2, "data", Kind::MapBytes),
    f(4, "stringData", Kind::MapStr),
    f(3, "type", Kind::Str),
];

const CONFIG_MAP: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(4, "immutable", Kind::Bool),
    f(2, "data", Kind::MapStr),
    f(3, "binaryData", Kind::MapBytes),
];

const PRECONDITIONS: &[Field] = &[f(1, "uid", Kind::Str), f(2, "resourceVersion", Kind::Str)];

const DELETE_OPTIONS: &[Field] = &[
    f(1, "gracePeriodSeconds", Kind::Int),
    f(2, "preconditions", Kind::Msg(PRECONDITIONS)),
    f(3, "orphanDependents", Kind::Bool),
    f(4, "propagationPolicy", Kind::Str),
    f(5, "dryRun", Kind::RepStr),
];

const TYPE_META: &[Field] = &[f(1, "apiVersion", Kind::Str), f(2, "kind", Kind::Str)];

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = *self.b.get(self.pos).ok_or("truncated varint")?;
            self.pos += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long".into())
    }

    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let len = self.varint()? as usize;
        let end = self.pos.checked_add(len).filter(|e| *e <= self.b.len()).ok_or("truncated field")?;
        let out = &self.b[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn skip(&mut self, wire: u64) -> Result<(), String> {
        match wire {
            0 => self.varint().map(|_| ()),
            1 => {
                self.pos += 8;
                Ok(())
            }
            2 => self.bytes().map(|_| ()),
            5 => {
                self.pos += 4;
                Ok(())
            }
            other => Err(format!("unsupported wire type {other}")),
        }
    }

    /// Iterates `(field number, wire type)` pairs.
    fn next_key(&mut self) -> Result<Option<(u64, u64)>, String> {
        if self.pos >= self.b.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        Ok(Some((key >> 3, key & 7)))
    }
}

fn utf8(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|e| e.to_string())
}

fn map_entry(b: &[u8], bytes_value: bool) -> Result<(String, Value), String> {
    let mut r = Reader { b, pos: 0 };
    let mut key = String::new();
    let mut value = Value::String(String::new());
    while let Some((num, wire)) = r.next_key()? {
        match (num, wire) {
            (1, 2) => key = utf8(r.bytes()?)?,
            (2, 2) => {
                let v = r.bytes()?;
                value = if bytes_value { json!(base64::engine::general_purpose::STANDARD.encode(v)) } else { json!(utf8(v)?) };
            }
            (_, w) => r.skip(w)?,
        }
    }
    Ok((key, value))
}

fn time(b: &[u8]) -> Result<Value, String> {
    let mut r = Reader { b, pos: 0 };
    let mut seconds: i64 = 0;
    while let Some((num, wire)) = r.next_key()? {
        match (num, wire) {
            (1, 0) => seconds = r.varint()? as i64,
            (_, w) => r.skip(w)?,
        }
    }
    let ts = k8s_openapi::jiff::Timestamp::from_second(seconds).map_err(|e| e.to_string())?;
    Ok(json!(crate::meta::format_time(ts)))
}

fn message(b: &[u8], fields: &[Field]) -> Result<Value, String> {
    let mut r = Reader { b, pos: 0 };
    let mut out = Map::new();
    while let Some((num, wire)) = r.next_key()? {
        let Some(field) = fields.iter().find(|f| f.num == num) else {
            r.skip(wire)?;
            continue;
        };
        match (field.kind, wire) {
            (Kind::Str, 2) => {
                out.insert(field.name.into(), json!(utf8(r.bytes()?)?));
            }
            (Kind::Int, 0) => {
                out.insert(field.name.into(), json!(r.varint()? as i64));
            }
            (Kind::Bool, 0) => {
                out.insert(field.name.into(), json!(r.varint()? != 0));
            }
            (Kind::Time, 2) => {
                out.insert(field.name.into(), time(r.bytes()?)?);
            }
            (Kind::Msg(sub), 2) => {
                out.insert(field.name.into(), message(r.bytes()?, sub)?);
            }
            (Kind::MapStr | Kind::MapBytes, 2) => {
                let (k, v) = map_entry(r.bytes()?, matches!(field.kind, Kind::MapBytes))?;
                let m = out.entry(field.name).or_insert_with(|| json!({}));
                if let Value::Object(m) = m {
                    m.insert(k, v);
                }
            }
            (Kind::RepStr, 2) => {
                let s = utf8(r.bytes()?)?;
                let a = out.entry(field.name).or_insert_with(|| json!([]));
                if let Value::Array(a) = a {
                    a.push(json!(s));
                }
            }
            (Kind::RepMsg(sub), 2) => {
                let v = message(r.bytes()?, sub)?;
                let a = out.entry(field.name).or_insert_with(|| json!([]));
                if let Value::Array(a) = a {
                    a.push(v);
                }
            }
            (Kind::RawJson, 2) => {
                let inner = r.bytes()?;
                let mut ir = Reader { b: inner, pos: 0 };
                let mut raw = Value::Null;
                while let Some((n, w)) = ir.next_key()? {
                    if n == 1 && w == 2 {
                        raw = serde_json::from_slice(ir.bytes()?).map_err(|e| e.to_string())?;
                    } else {
                        ir.skip(w)?;
                    }
                }
                out.insert(field.name.into(), raw);
            }
            (_, w) => r.skip(w)?,
        }
    }
    Ok(Value::Object(out))
}

pub fn is_protobuf(content_type: &str) -> bool {
    content_type.split(';').next().is_some_and(|b| b.trim() == "application/vnd.kubernetes.protobuf")
}

/// Decodes a protobuf envelope into a JSON object. `expected_kind` decides how a body without
/// type information (DeleteOptions) is read.
pub fn decode(body: &[u8], expected_kind: &str) -> Result<Value, String> {
    let payload = body.strip_prefix(MAGIC).ok_or("missing the k8s protobuf magic number")?;
    let mut r = Reader { b: payload, pos: 0 };
    let mut type_meta = json!({});
    let mut raw: &[u8] = &[];
    while let Some((num, wire)) = r.next_key()? {
        match (num, wire) {
            (1, 2) => type_meta = message(r.bytes()?, TYPE_META)?,
            (2, 2) => raw = r.bytes()?,
            (_, w) => r.skip(w)?,
        }
    }
    let kind = type_meta.get("kind").and_then(Value::as_str).filter(|k| !k.is_empty()).unwrap_or(expected_kind).to_string();
    let fields = match kind.as_str() {
        "Secret" => SECRET,
        "ConfigMap" => CONFIG_MAP,
        "DeleteOptions" => DELETE_OPTIONS,
        other => return Err(format!("kube-sim cannot decode protobuf for kind {other:?}; send JSON")),
    };
    let mut v = message(raw, fields)?;
    if let Value::Object(m) = &mut v
        && kind != "DeleteOptions"
    {
        if let Some(av) = type_meta.get("apiVersion").filter(|a| a.as_str().is_some_and(|s| !s.is_empty())) {
            m.insert("apiVersion".into(), av.clone());
        }
        m.insert("kind".into(), json!(kind));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes_field(num: u64, b: &[u8], out: &mut Vec<u8>) {
        varint((num << 3) | 2, out);
        varint(b.len() as u64, out);
        out.extend_from_slice(b);
    }

    #[test]
    fn decodes_a_secret_envelope() {
        let mut meta = Vec::new();
        bytes_field(1, b"sh.helm.release.v1.demo.v1", &mut meta);
        let mut label = Vec::new();
        bytes_field(1, b"owner", &mut label);
        bytes_field(2, b"helm", &mut label);
        bytes_field(11, &label, &mut meta);
        let mut secret = Vec::new();
        bytes_field(1, &meta, &mut secret);
        let mut entry = Vec::new();
        bytes_field(1, b"release", &mut entry);
        bytes_field(2, b"\x01\x02", &mut entry);
        bytes_field(2, &entry, &mut secret);
        bytes_field(3, b"helm.sh/release.v1", &mut secret);
        let mut tm = Vec::new();
        bytes_field(1, b"v1", &mut tm);
        bytes_field(2, b"Secret", &mut tm);
        let mut unknown = Vec::new();
        bytes_field(1, &tm, &mut unknown);
        bytes_field(2, &secret, &mut unknown);
        let mut body = MAGIC.to_vec();
        body.extend(unknown);
        let v = decode(&body, "Secret").unwrap();
        assert_eq!(v["kind"], "Secret");
        assert_eq!(v["metadata"]["name"], "sh.helm.release.v1.demo.v1");
        assert_eq!(v["metadata"]["labels"]["owner"], "helm");
        assert_eq!(v["data"]["release"], "AQI=");
        assert_eq!(v["type"], "helm.sh/release.v1");
    }
}
