//! `ObjectMeta` decoded without `managedFields`.
//!
//! k8s-openapi decodes each `managedFields` entry's `fieldsV1` into a tree of JSON values: CPU and allocations for
//! a field no operator step reads. [`LeanMeta`] has every other field of `ObjectMeta`; serde skips the unknown key
//! without building it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

/// `ObjectMeta` without `managedFields`.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct LeanMeta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl From<LeanMeta> for ObjectMeta {
    fn from(m: LeanMeta) -> Self {
        Self {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: None,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        }
    }
}

/// `#[serde(deserialize_with)]` for an `ObjectMeta` field: decoded as [`LeanMeta`].
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    LeanMeta::deserialize(d).map(Into::into)
}
