//! ControllerRevisions: one per pod template, named and hashed like Kubernetes `controller/history`, so pods can
//! say which template they run (`controller-revision-hash` = revision name) and old templates can be recreated
//! (partition, in-place diffs, rollback).
//!
//! Equality is semantic, not by hash: both templates are compared in the form the API machinery stores and runs
//! them ([`canonical`]: canonical quantities, Go's omitted zero values, API-server defaults, int-or-string ports,
//! empty maps and lists), so any revision BCS's Go operator or Kubernetes' history library could have written for
//! a template is recognised and reused, and switching operators restarts nothing.

pub mod canonical;
pub mod quantity;
#[cfg(test)]
mod styles_tests;

use std::collections::{BTreeMap, BTreeSet};

use common::api::GameDeployment;
use common::keys;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::{Value, json};

use crate::ownership;

/// Alphabet of Kubernetes `rand.SafeEncodeString` (no vowels, no look-alike characters).
pub const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Label values are limited to 63 characters; the revision name is used as a label value on every pod.
const MAX_LABEL_VALUE: usize = 63;

/// FNV-1a, 32 bit — the hash Kubernetes uses for revision names.
pub fn fnv32a(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in bytes {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// Kubernetes `rand.SafeEncodeString`: each byte mapped into [`SAFE_ALPHABET`].
pub fn safe_encode(s: &str) -> String {
    s.bytes().map(|b| char::from(SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()])).collect()
}

/// Removes nulls, empty objects and empty arrays, recursively. Go and Rust serialise "unset" differently
/// (`creationTimestamp: null`, `resources: {}`); after this, equal templates are equal values.
pub fn normalize(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter_map(|(k, v)| {
                    let v = normalize(v);
                    let empty = match &v {
                        Value::Null => true,
                        Value::Object(m) => m.is_empty(),
                        Value::Array(a) => a.is_empty(),
                        _ => false,
                    };
                    (!empty).then(|| (k.clone(), v))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

/// The template as a normalised JSON value (what is hashed and compared).
pub fn template_value(template: &PodTemplateSpec) -> Value {
    // A PodTemplateSpec always serialises (it has no maps with non-string keys).
    normalize(&serde_json::to_value(template).unwrap_or(Value::Null))
}

/// The revision payload, in the shape BCS and StatefulSets store: a patch replacing `spec.template`.
pub fn payload(template: &PodTemplateSpec) -> Value {
    let mut template = template_value(template);
    if let Value::Object(map) = &mut template {
        map.insert("$patch".into(), Value::String("replace".into()));
    }
    json!({ "spec": { "template": template } })
}

/// `value` with the keys of every object in sorted order. serde_json keeps insertion order when any crate of the
/// build enables its `preserve_order` feature, so without this the same template would hash differently in
/// different builds (the operator, `kubectl gd plan`).
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k.clone(), sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// The hash part of a revision name: FNV-32a over the payload (and the collision count, when set), printed in
/// decimal and safe-encoded, as `controller.HashControllerRevision` does.
pub fn hash(payload: &Value, collision_count: Option<i32>) -> String {
    let mut bytes = sorted(payload).to_string().into_bytes();
    if let Some(count) = collision_count.filter(|c| *c != 0) {
        bytes.extend_from_slice(count.to_string().as_bytes());
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

/// `<gd>-<hash>`, with the GameDeployment name shortened when the result would not fit in a label value
/// (BCS produces unusable names for GameDeployments longer than ~52 characters, BCS-G15).
pub fn revision_name(gd_name: &str, hash: &str) -> String {
    let room = MAX_LABEL_VALUE.saturating_sub(hash.len() + 1);
    let mut prefix: &str = gd_name;
    if prefix.len() > room {
        let mut end = room;
        while !prefix.is_char_boundary(end) {
            end -= 1;
        }
        prefix = prefix[..end].trim_end_matches(['-', '.']);
    }
    format!("{prefix}-{hash}")
}

/// The template stored in a revision, if it holds one (the `$patch` directive removed).
pub fn template_of(revision: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut template = revision.data.0.get("spec")?.get("template")?.clone();
    if let Value::Object(map) = &mut template {
        map.remove("$patch");
    }
    serde_json::from_value(template).ok()
}

/// The template a revision stores, in canonical form ([`canonical::template`]).
pub fn stored_canonical(revision: &ControllerRevision) -> Option<Value> {
    Some(canonical::template(revision.data.0.get("spec")?.get("template")?))
}

/// A template in canonical form ([`canonical::template`]).
pub fn canonical_template(template: &PodTemplateSpec) -> Value {
    // A PodTemplateSpec always serialises (it has no maps with non-string keys).
    canonical::template(&serde_json::to_value(template).unwrap_or(Value::Null))
}

/// The spec of a template in canonical form, `imagePullPolicy` as written
/// ([`canonical::template_apart_from_images`]): what an in-place update compares once the images are set aside.
pub fn canonical_spec_apart_from_images(template: &PodTemplateSpec) -> Value {
    let value = serde_json::to_value(template).unwrap_or(Value::Null);
    canonical::template_apart_from_images(&value).get("spec").cloned().unwrap_or(Value::Null)
}

/// Whether a revision stores this template, as the API machinery compares templates (spelling aside).
pub fn holds_template(revision: &ControllerRevision, template: &PodTemplateSpec) -> bool {
    stored_canonical(revision).is_some_and(|stored| stored == canonical_template(template))
}

/// Whether `revision` is one of `gd`'s: controlled by it, or controlled by nothing and given to it by name — the
/// GameDeployment name label (`gamedeployment.tkex.tencent.com/name`) that this operator writes on its own revisions,
/// set by hand on the revisions of a workload whose pods the GameDeployment takes over (an orphaned CloneSet's: the
/// pods name that revision, and it holds their template) — with labels its selector matches.
pub fn is_of(revision: &ControllerRevision, gd: &GameDeployment) -> bool {
    let meta = &revision.metadata;
    match crate::ownership::controller_of(meta.owner_references.as_ref()) {
        Some(owner) => crate::ownership::is_owned_by(owner, gd),
        None => {
            let empty = BTreeMap::new();
            let labels = meta.labels.as_ref().unwrap_or(&empty);
            let named = gd.metadata.name.as_deref().map(common::hookrun::workload_label_value);
            meta.deletion_timestamp.is_none()
                && named.is_some_and(|n| labels.get(keys::HOOKRUN_WORKLOAD_NAME) == Some(&n))
                && crate::ownership::validate_selector(gd).is_ok()
                && crate::ownership::selector_matches(&gd.spec.selector, labels)
        }
    }
}

fn number(revision: &ControllerRevision) -> i64 {
    revision.revision.unwrap_or(0)
}

/// What has to happen for the current template to have a revision.
#[derive(Debug, Clone, PartialEq)]
pub enum RevisionChange {
    /// Create this new revision.
    Create(Box<ControllerRevision>),
    /// A rollback: an older revision holds the template; give it the next number so it is the newest.
    Renumber { name: String, revision: i64 },
}

/// The update revision and, when it does not exist yet or is not the newest, the change that makes it so.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    pub update_revision: String,
    pub change: Option<RevisionChange>,
}

/// Finds (or designs) the revision of the GameDeployment's current template among its revisions.
pub fn resolve(gd: &GameDeployment, revisions: &[&ControllerRevision]) -> Resolution {
    let newest = revisions.iter().map(|r| number(r)).max().unwrap_or(0);
    let template = &gd.spec.template;
    // Canonicalised once per pass, not once per revision.
    let wanted = canonical_template(template);
    let equal = revisions
        .iter()
        .filter(|r| stored_canonical(r).as_ref() == Some(&wanted))
        .max_by_key(|r| (number(r), r.metadata.name.clone()));
    if let Some(existing) = equal {
        let name = existing.metadata.name.clone().unwrap_or_default();
        let change =
            (number(existing) < newest).then(|| RevisionChange::Renumber { name: name.clone(), revision: newest + 1 });
        return Resolution { update_revision: name, change };
    }
    let collision_count = gd.status.as_ref().and_then(|s| s.collision_count);
    let revision = new_revision(gd, collision_count, newest + 1);
    Resolution {
        update_revision: revision.metadata.name.clone().unwrap_or_default(),
        change: Some(RevisionChange::Create(Box::new(revision))),
    }
}

/// Builds the ControllerRevision for the current template: labels = template labels + the bare hash (as BCS) + the
/// GameDeployment's name (`gamedeployment.tkex.tencent.com/name`, which the operator's watch selects), BCS copies
/// the GameDeployment's annotations (we skip kubectl's last-applied copy, which only duplicates the spec).
pub fn new_revision(gd: &GameDeployment, collision_count: Option<i32>, number: i64) -> ControllerRevision {
    let data = payload(&gd.spec.template);
    let hash = hash(&data, collision_count);
    let gd_name = gd.metadata.name.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> =
        gd.spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    labels.insert(keys::CONTROLLER_REVISION_HASH_ONLY.to_string(), hash.clone());
    // The operator watches only revisions with this label (`controller::orphans::REVISION_WATCH_SELECTOR`).
    labels.insert(keys::HOOKRUN_WORKLOAD_NAME.to_string(), common::hookrun::workload_label_value(&gd_name));
    let annotations: BTreeMap<String, String> = gd
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != "kubectl.kubernetes.io/last-applied-configuration")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(&gd_name, &hash)),
            namespace: gd.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![ownership::owner_reference(gd)]),
            ..Default::default()
        },
        data: RawExtension(data),
        revision: Some(number),
    }
}

/// Names of revisions to delete so that at most `limit` revisions no pod (and neither the current nor the update
/// revision) uses remain, oldest first.
pub fn history_to_delete(revisions: &[&ControllerRevision], live: &BTreeSet<String>, limit: i32) -> Vec<String> {
    let mut dead: Vec<&ControllerRevision> = revisions
        .iter()
        .copied()
        .filter(|r| {
            r.metadata.name.as_ref().is_some_and(|n| !live.contains(n)) && r.metadata.deletion_timestamp.is_none()
        })
        .collect();
    let keep = usize::try_from(limit.max(0)).unwrap_or(0);
    if dead.len() <= keep {
        return Vec::new();
    }
    dead.sort_by_key(|r| (number(r), r.metadata.name.clone()));
    let excess = dead.len() - keep;
    dead.into_iter().take(excess).filter_map(|r| r.metadata.name.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn template(image: &str) -> PodTemplateSpec {
        gd(image).spec.template
    }

    fn gd(image: &str) -> GameDeployment {
        fixtures::gd_with_image(image)
    }

    #[test]
    fn fnv_and_safe_encoding_match_kubernetes() {
        // Reference values of Go's hash/fnv New32a.
        assert_eq!(fnv32a(b""), 0x811c9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c292c);
        assert_eq!(fnv32a(b"foobar"), 0xbf9cf968);
        // rand.SafeEncodeString maps each byte modulo the alphabet: '0' is 48, 48 % 27 = 21 -> '4'.
        assert_eq!(safe_encode("0"), "4");
        assert_eq!(safe_encode("123"), "567");
        let h = hash(&payload(&template("nginx:1")), None);
        assert!(h.len() <= 10 && h.bytes().all(|b| SAFE_ALPHABET.contains(&b)), "{h}");
    }

    #[test]
    fn names_fit_in_a_label_value() {
        assert_eq!(revision_name("test-gamedeployment", "67864c6f65"), "test-gamedeployment-67864c6f65");
        let long = "g".repeat(80);
        let name = revision_name(&long, "67864c6f65");
        assert_eq!(name.len(), 63);
        assert!(name.ends_with("-67864c6f65"));
    }

    /// The hash is taken over the payload with its keys in sorted order, whatever order the value holds them in:
    /// serde_json keeps insertion order when any crate of the build enables its `preserve_order` feature (the
    /// workspace build does, through expr-lang), and `$patch` is inserted last. Without this, `kubectl gd plan`
    /// (built with the feature) named a new revision differently from an operator built without it.
    #[test]
    fn the_hash_does_not_depend_on_the_order_keys_were_inserted_in() {
        let sorted = r#"{"spec":{"template":{"$patch":"replace","metadata":{"labels":{"app":"game"}},"spec":{"containers":[{"image":"nginx:1","name":"main"}]}}}}"#;
        let want = safe_encode(&fnv32a(sorted.as_bytes()).to_string());
        let mut inserted_last = serde_json::Map::new();
        inserted_last.insert("metadata".into(), json!({"labels": {"app": "game"}}));
        inserted_last.insert("spec".into(), json!({"containers": [{"name": "main", "image": "nginx:1"}]}));
        inserted_last.insert("$patch".into(), json!("replace"));
        let payload = json!({"spec": {"template": Value::Object(inserted_last)}});
        assert_eq!(hash(&payload, None), want);
    }

    #[test]
    fn collision_count_changes_the_hash() {
        let p = payload(&template("nginx:1"));
        assert_ne!(hash(&p, None), hash(&p, Some(1)));
        assert_eq!(hash(&p, None), hash(&p, Some(0)));
    }

    #[test]
    fn equality_ignores_go_style_empty_fields() {
        let gd = gd("nginx:1");
        let mut go_style = new_revision(&gd, None, 1);
        go_style.data = RawExtension(json!({"spec": {"template": {
            "metadata": {"creationTimestamp": null, "labels": {"app": "game"}},
            "spec": {"containers": [{"name": "main", "image": "nginx:1", "resources": {}}]},
            "$patch": "replace"
        }}}));
        assert!(holds_template(&go_style, &gd.spec.template));
        assert!(!holds_template(&go_style, &template("nginx:2")));
        assert_eq!(template_of(&go_style).unwrap().spec.unwrap().containers[0].image.as_deref(), Some("nginx:1"));
    }

    #[test]
    fn resolve_creates_reuses_and_renumbers() {
        let v1 = gd("nginx:1");
        let first = resolve(&v1, &[]);
        let Some(RevisionChange::Create(r1)) = first.change else { panic!("expected a new revision") };
        assert_eq!(r1.revision, Some(1));
        assert_eq!(Some(first.update_revision.clone()), r1.metadata.name);
        assert_eq!(r1.metadata.owner_references.as_ref().unwrap()[0].uid, fixtures::GD_UID);
        assert!(r1.metadata.labels.as_ref().unwrap().contains_key(keys::CONTROLLER_REVISION_HASH_ONLY));
        assert_eq!(r1.metadata.labels.as_ref().unwrap()[keys::HOOKRUN_WORKLOAD_NAME], "game");

        assert_eq!(resolve(&v1, &[&r1]).change, None);

        let v2 = gd("nginx:2");
        let Some(RevisionChange::Create(r2)) = resolve(&v2, &[&r1]).change else { panic!() };
        assert_eq!(r2.revision, Some(2));
        assert_ne!(r1.metadata.name, r2.metadata.name);

        // Rolling back to v1 reuses revision 1 with number 3.
        let back = resolve(&v1, &[&r1, &r2]);
        assert_eq!(Some(back.update_revision.clone()), r1.metadata.name);
        assert_eq!(back.change, Some(RevisionChange::Renumber { name: back.update_revision.clone(), revision: 3 }));
    }

    #[test]
    fn a_revision_is_the_gamedeployments_when_it_controls_it_or_when_an_orphan_is_given_to_it_by_name() {
        let gd = gd("nginx:1");
        let mut owned = new_revision(&gd, None, 1);
        assert!(is_of(&owned, &gd));
        owned.metadata.owner_references.as_mut().unwrap()[0].uid = "another".into();
        assert!(!is_of(&owned, &gd), "another GameDeployment's");
        let mut orphan = new_revision(&gd, None, 1);
        orphan.metadata.owner_references = None;
        assert!(is_of(&orphan, &gd), "an orphan named after it, matching its selector");
        let mut unnamed = orphan.clone();
        unnamed.metadata.labels.as_mut().unwrap().remove(keys::HOOKRUN_WORKLOAD_NAME);
        assert!(!is_of(&unnamed, &gd), "an orphan not given to it");
        let mut unmatched = orphan.clone();
        unmatched.metadata.labels.as_mut().unwrap().insert("app".into(), "other".into());
        assert!(!is_of(&unmatched, &gd), "an orphan its selector does not match");
    }

    #[test]
    fn history_keeps_live_revisions_and_the_newest_dead_ones() {
        let mut revs = Vec::new();
        for i in 1..=6 {
            let mut r = new_revision(&gd(&format!("nginx:{i}")), None, i);
            r.metadata.name = Some(format!("r{i}"));
            revs.push(r);
        }
        let refs: Vec<&ControllerRevision> = revs.iter().collect();
        let live: BTreeSet<String> = ["r1".to_string(), "r6".to_string()].into();
        assert_eq!(history_to_delete(&refs, &live, 2), ["r2", "r3"]);
        assert!(history_to_delete(&refs, &live, 10).is_empty());
        assert_eq!(history_to_delete(&refs, &live, 0), ["r2", "r3", "r4", "r5"]);
    }
}
