//! Hand-written OpenAPI fragments for fields whose derived schema would not say what the API server must
//! enforce: int-or-percent values, Go durations, CRD defaults that BCS users rely on, and the embedded pod
//! template.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// Go `time.ParseDuration` syntax as BCS accepts it (`300ms`, `30s`, `1m30s`, `1h`, `0`).
pub const DURATION_PATTERN: &str = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$";

/// An integer or a percentage string such as `"20%"` (Kubernetes IntOrString).
///
/// `pattern` only constrains strings and `minimum` only integers, so they sit beside the `anyOf`, the one
/// shape a structural schema allows for int-or-string.
pub fn int_or_percent(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-int-or-string": true,
        "anyOf": [{ "type": "integer" }, { "type": "string" }],
        "pattern": PERCENT_PATTERN,
        "minimum": 0
    })
}

/// A percentage as Kubernetes IntOrString accepts it.
pub const PERCENT_PATTERN: &str = "^[0-9]+%$";

/// A `partition`: an integer or a percentage, which may have a decimal part as CloneSet's does ("99.99%",
/// `common::intstr::partition`).
pub fn partition(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-int-or-string": true,
        "anyOf": [{ "type": "integer" }, { "type": "string" }],
        "pattern": PARTITION_PATTERN,
        "minimum": 0
    })
}

/// A partition percentage: digits, optionally a decimal part, then `%`.
pub const PARTITION_PATTERN: &str = "^[0-9]+(\\.[0-9]+)?%$";

/// [`int_or_percent`] with a CRD default.
pub fn int_or_percent_with_default(default: serde_json::Value) -> Schema {
    let mut schema = int_or_percent(&mut SchemaGenerator::default());
    schema.insert("default".into(), default);
    schema
}

pub fn max_surge(_: &mut SchemaGenerator) -> Schema {
    int_or_percent_with_default(serde_json::json!(0))
}

pub fn duration_string(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "pattern": DURATION_PATTERN })
}

pub fn http_method(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "enum": ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    })
}

pub fn hook_policy_with_default(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "enum": ["Parallel", "Ordered"], "default": "Parallel" })
}

/// Gives an enum of unit variants the schema it has without variant docs — `type: string` plus `enum` — instead of
/// the `oneOf` of described constants schemars makes once its variants are documented: that shape would lose the
/// `null` of an optional field's `enum` and put the type's description over the field's. The variant docs are for
/// rustdoc; the fields that use the enum describe its values for `kubectl explain`.
pub fn plain_enum(schema: &mut Schema) {
    let Some(variants) = schema.get("oneOf").and_then(|v| v.as_array()) else { return };
    let Some(values) = variants.iter().map(|v| v.get("const").cloned()).collect::<Option<Vec<_>>>() else { return };
    schema.remove("oneOf");
    schema.insert("type".into(), "string".into());
    schema.insert("enum".into(), values.into());
}

/// Removes a type's own `description`, for a type whose fields each describe it in their own words (the CRD
/// generator would otherwise put the type's text over theirs); the Rust doc comment stays for rustdoc.
pub fn without_description(schema: &mut Schema) {
    schema.remove("description");
}

/// Removes `description` from a schema subtree (as controller-gen's `maxDescLen=0`): the pod template's
/// descriptions alone would push the CRD past the 256 KiB `last-applied-configuration` annotation limit of
/// `kubectl apply`. `kubectl explain` still documents pod fields through the built-in Pod schema.
fn strip_descriptions(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            if map.get("description").is_some_and(|d| d.is_string()) {
                map.remove("description");
            }
            map.values_mut().for_each(strip_descriptions);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_descriptions),
        _ => {}
    }
}

/// The full PodTemplateSpec schema (as controller-gen emits for the BCS/kourse CRD), so the API server
/// validates pod templates and keeps every field through pruning; its `metadata` keeps unknown fields
/// because ObjectMeta is not described inside embedded templates.
pub fn pod_template(generator: &mut SchemaGenerator) -> Schema {
    let mut value = k8s_openapi::api::core::v1::PodTemplateSpec::json_schema(generator).to_value();
    strip_descriptions(&mut value);
    let mut schema = Schema::try_from(value).unwrap_or_else(|_| json_schema!({ "type": "object" }));
    if let Some(props) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) {
        props.insert(
            "metadata".into(),
            serde_json::json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true }),
        );
    }
    schema
}

/// `spec.volumeClaimTemplates`: PersistentVolumeClaim schemas as controller-gen emits them for CloneSet (no
/// descriptions, embedded `metadata` kept whole), at most `max_items`, each named (the name is the pod volume's and
/// the claim name's prefix: a DNS label).
pub fn volume_claim_templates(generator: &mut SchemaGenerator, max_items: usize) -> Schema {
    let mut item = k8s_openapi::api::core::v1::PersistentVolumeClaim::json_schema(generator).to_value();
    strip_descriptions(&mut item);
    if let Some(props) = item.get_mut("properties").and_then(|p| p.as_object_mut()) {
        props.remove("status");
        props.remove("apiVersion");
        props.remove("kind");
        props.insert(
            "metadata".into(),
            serde_json::json!({
                "type": "object",
                "description": "The claim template's name (the pod volume's name and the claim names' prefix), labels and annotations.",
                "x-kubernetes-preserve-unknown-fields": true,
                "required": ["name"],
                "properties": {
                    "name": {
                        "type": "string",
                        "maxLength": 63,
                        "pattern": DNS_LABEL_PATTERN,
                        "description": "Name of the pod volume; each pod's claim is named <name>-<gamedeployment>-<instance id>."
                    }
                }
            }),
        );
        if let Some(spec) = props.get_mut("spec").and_then(|s| s.as_object_mut()) {
            spec.insert(
                "description".into(),
                serde_json::json!(
                    "The PersistentVolumeClaim spec each pod's claim gets (Kubernetes PersistentVolumeClaimSpec)."
                ),
            );
        }
    }
    if let Some(obj) = item.as_object_mut() {
        obj.insert("required".into(), serde_json::json!(["metadata"]));
    }
    let value = serde_json::json!({
        "type": "array",
        "maxItems": max_items,
        "items": item
    });
    Schema::try_from(value).unwrap_or_else(|_| json_schema!({ "type": "array" }))
}

/// A DNS-1123 label (Kubernetes volume names and name segments).
pub const DNS_LABEL_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// The descriptions of a hook gate's fields that name its change: the rest of `HookGateStrategy`'s schema is
/// one for the three gates, these three sentences say what each one holds.
struct GateDescriptions {
    hook: &'static str,
    shadow_hook: &'static str,
    retry: &'static str,
}

fn describe_gate(schema: &mut Schema, text: &GateDescriptions) {
    let Some(properties) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) else { return };
    for (field, description) in [("hook", text.hook), ("shadowHook", text.shadow_hook), ("retry", text.retry)] {
        if let Some(property) = properties.get_mut(field).and_then(|p| p.as_object_mut()) {
            property.insert("description".into(), description.into());
        }
    }
}

/// The shadow hook of the two gates that run before a change.
const SHADOW_BEFORE: &str = "Addition (kourse): a HookTemplate trialled beside `hook` (or alone): its HookRun is \
    made and measured for each pod exactly as the real one, and its result recorded (`status.shadowHookResults`, \
    an Event, the metric), but it never holds or releases a pod — the real hook alone decides.";

/// `preDeleteUpdateStrategy`'s descriptions.
pub fn pre_delete_gate(schema: &mut Schema) {
    describe_gate(
        schema,
        &GateDescriptions {
            hook: "The HookTemplate to run for each pod before deleting it; the pod is deleted once its HookRun is \
               Successful.",
            shadow_hook: SHADOW_BEFORE,
            retry: "Set to true to delete the failed pre-delete HookRuns and run them again; the operator sets it back \
                to false once it has acted on it.",
        },
    );
}

/// `preInplaceUpdateStrategy`'s descriptions.
pub fn pre_inplace_gate(schema: &mut Schema) {
    describe_gate(
        schema,
        &GateDescriptions {
            hook: "The HookTemplate to run for each pod before updating it in place; the update starts once its \
               HookRun is Successful.",
            shadow_hook: SHADOW_BEFORE,
            retry: "Set to true to delete the failed pre-inplace HookRuns and run them again; the operator sets it \
                back to false once it has acted on it.",
        },
    );
}

/// `postInplaceUpdateStrategy`'s descriptions.
pub fn post_inplace_gate(schema: &mut Schema) {
    describe_gate(
        schema,
        &GateDescriptions {
            hook: "The HookTemplate to run for each pod after its in-place update completed; the pod counts as updated \
               once its HookRun is Successful.",
            shadow_hook: "Addition (kourse): a HookTemplate trialled beside `hook` (or alone): its HookRun is made and \
                      measured for each pod once its in-place update completed, exactly as the real one, and its \
                      result recorded (`status.shadowHookResults`, an Event, the metric), but it never holds a pod \
                      in `Updated` or releases one — the real hook alone decides.",
            retry: "Set to true to delete the failed post-inplace HookRuns and run them again; the operator sets it \
                back to false once it has acted on it.",
        },
    );
}
