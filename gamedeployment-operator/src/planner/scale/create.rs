//! New pods: names `<gd>-<instance id>`, the BCS labels, the `InPlaceUpdateReady` readiness gate and the
//! optional pod index (`POD_INDEX`).

use std::collections::{BTreeMap, BTreeSet};

use common::api::GameDeployment;
use common::keys;
use k8s_openapi::api::core::v1::{EnvVar, Pod, PodReadinessGate, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

use crate::lifecycle::LifecycleState;
use crate::ownership;
pub(crate) use crate::planner::claim_names::ID_LEN;
use crate::revision::SAFE_ALPHABET;

/// Ids one call hands out at most (a pass creates at most [`super::CREATE_BURST`] pods).
pub const MAX_IDS: usize = 10 * super::CREATE_BURST;

/// Random draws per wanted id before [`IdSource::unique_ids`] gives up (a free name is found in a few draws
/// unless nearly all 27⁵ names are taken).
const ID_ATTEMPTS_PER_ID: usize = 32;

/// A small deterministic generator (SplitMix64): the planner stays a pure function of its inputs, the caller
/// passes a fresh random seed per pass.
#[derive(Debug, Clone)]
pub struct IdSource(u64);

impl IdSource {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn id_of_len(&mut self, len: usize) -> String {
        let alphabet = SAFE_ALPHABET.len() as u64;
        (0..len).map(|_| char::from(SAFE_ALPHABET[(self.next_u64() % alphabet) as usize])).collect()
    }

    /// `count` ids whose pod names are not in `taken` and differ from each other (BCS checks neither against
    /// pods of other owners nor within a batch, BCS-G13). At most [`MAX_IDS`], and the draws are bounded:
    /// when the name space is (nearly) used up, fewer ids come back (the caller reports it) instead of the loop
    /// never ending.
    pub fn unique_ids(&mut self, gd_name: &str, count: usize, taken: &BTreeSet<String>) -> Vec<String> {
        self.unique_ids_of_len(gd_name, count, taken, ID_LEN)
    }

    fn unique_ids_of_len(&mut self, gd_name: &str, count: usize, taken: &BTreeSet<String>, len: usize) -> Vec<String> {
        let count = count.min(MAX_IDS);
        let mut ids = Vec::with_capacity(count);
        let mut used: BTreeSet<String> = BTreeSet::new();
        let mut attempts = count.saturating_mul(ID_ATTEMPTS_PER_ID).saturating_add(ID_ATTEMPTS_PER_ID);
        while ids.len() < count && attempts > 0 {
            attempts -= 1;
            let id = self.id_of_len(len);
            let name = format!("{gd_name}-{id}");
            if taken.contains(&name) || !used.insert(name) {
                continue;
            }
            ids.push(id);
        }
        ids
    }
}

/// `tkex.bkbcs.tencent.com/gamedeployment-index-range`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexRange {
    pub pod_start_index: i64,
    pub pod_end_index: i64,
}

/// The index configuration of the GameDeployment: `None` when index injection is off.
pub fn index_range(gd: &GameDeployment, replicas: i32) -> Result<Option<IndexRange>, String> {
    let annotations = gd.metadata.annotations.as_ref();
    if annotations.and_then(|a| a.get(keys::INDEX_ON)).map(String::as_str) != Some("true") {
        return Ok(None);
    }
    let raw = annotations
        .and_then(|a| a.get(keys::INDEX_RANGE))
        .ok_or_else(|| format!("annotation {} is \"true\" but {} is missing", keys::INDEX_ON, keys::INDEX_RANGE))?;
    let range: IndexRange = serde_json::from_str(raw).map_err(|e| {
        format!("annotation {} must be JSON like {{\"podStartIndex\":0,\"podEndIndex\":100}}: {e}", keys::INDEX_RANGE)
    })?;
    if range.pod_start_index < 0 || range.pod_end_index <= range.pod_start_index {
        return Err(format!(
            "invalid index range [{}, {}): start must be >= 0 and below end",
            range.pod_start_index, range.pod_end_index
        ));
    }
    if range.pod_end_index > common::api::gamedeployment::MAX_POD_INDEX_END {
        return Err(format!(
            "index range [{}, {}) ends above the maximum {}: indices are 32-bit integers",
            range.pod_start_index,
            range.pod_end_index,
            common::api::gamedeployment::MAX_POD_INDEX_END
        ));
    }
    if i64::from(replicas) > range.pod_end_index - range.pod_start_index {
        return Err(format!(
            "{replicas} replicas do not fit in the index range [{}, {})",
            range.pod_start_index, range.pod_end_index
        ));
    }
    Ok(Some(range))
}

/// The first `wanted` free indices of the range, ascending (fewer when the range runs out). Indices of pods that
/// still exist reserve their index (a terminating pod keeps it until it is gone); finished (Succeeded/Failed)
/// pods release it, unlike BCS, where evicted pods exhaust the range (BCS-G11). Lazy: at most
/// `wanted + pods` indices are looked at, whatever the size of the range.
pub fn free_indices(range: IndexRange, pods: &[&common::cached_pod::Pod], wanted: usize) -> Vec<i64> {
    let used: BTreeSet<i64> = pods
        .iter()
        .filter(|p| !matches!(common::pod::phase(p), Some("Succeeded" | "Failed")))
        .filter_map(|p| common::pod::annotation(p, keys::INDEX_ID)?.parse().ok())
        .collect();
    (range.pod_start_index..range.pod_end_index).filter(|i| !used.contains(i)).take(wanted).collect()
}

/// What makes one new pod.
pub struct NewPod<'a> {
    pub gd: &'a GameDeployment,
    pub template: &'a PodTemplateSpec,
    pub revision: &'a str,
    pub id: &'a str,
    pub index: Option<i64>,
    pub now: Timestamp,
}

/// Builds the pod: the template's metadata and spec, plus the operator's labels (revision, instance id,
/// lifecycle state), the controller ownerReference, the readiness gate and the index.
pub fn build(new: &NewPod<'_>) -> Pod {
    let gd = new.gd;
    let gd_name = gd.metadata.name.clone().unwrap_or_default();
    let template_meta = new.template.metadata.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = template_meta.labels.unwrap_or_default();
    labels.insert(keys::CONTROLLER_REVISION_HASH.into(), new.revision.into());
    labels.insert(keys::INSTANCE_ID.into(), new.id.into());
    labels.insert(keys::LIFECYCLE_STATE.into(), LifecycleState::Normal.as_str().into());
    // Gated from creation: the webhook's objectSelector matches this label (the labeller keeps older pods in step).
    if crate::webhook::verdict::opted_in(gd) {
        labels.insert(crate::webhook::POD_GATE.into(), "true".into());
    }
    let mut annotations: BTreeMap<String, String> = template_meta.annotations.unwrap_or_default();
    annotations.insert(keys::LIFECYCLE_TIMESTAMP.into(), new.now.to_string());
    let mut spec: PodSpec = new.template.spec.clone().unwrap_or_default();
    if let Some(index) = new.index {
        annotations.insert(keys::INDEX_ID.into(), index.to_string());
        for container in &mut spec.containers {
            let env = container.env.get_or_insert_with(Vec::new);
            // BCS appends a duplicate when the template already sets POD_INDEX (BCS-G12); replace it.
            env.retain(|e| e.name != keys::POD_INDEX_ENV);
            env.push(EnvVar { name: keys::POD_INDEX_ENV.into(), value: Some(index.to_string()), value_from: None });
        }
    }
    if !gd.spec.disable_readiness_gate {
        let gates = spec.readiness_gates.get_or_insert_with(Vec::new);
        if !gates.iter().any(|g| g.condition_type == keys::IN_PLACE_UPDATE_READY) {
            gates.push(PodReadinessGate { condition_type: keys::IN_PLACE_UPDATE_READY.into() });
        }
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("{gd_name}-{}", new.id)),
            namespace: gd.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            finalizers: template_meta.finalizers,
            owner_references: Some(vec![ownership::owner_reference(gd)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use k8s_openapi::api::core::v1::Container;

    fn gd(annotations: &[(&str, &str)]) -> GameDeployment {
        let mut gd = fixtures::gd(3, "RollingUpdate");
        gd.metadata.annotations = Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        gd
    }

    #[test]
    fn ids_are_unique_and_from_the_alphabet() {
        let mut source = IdSource::new(42);
        let taken: BTreeSet<String> = BTreeSet::new();
        let ids = source.unique_ids("game", 500, &taken);
        let distinct: BTreeSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), 500);
        assert!(ids.iter().all(|id| id.len() == ID_LEN && id.bytes().all(|b| SAFE_ALPHABET.contains(&b))));
        // The same seed gives the same ids; a taken name is skipped.
        let again = IdSource::new(42).unique_ids("game", 1, &taken);
        assert_eq!(again[0], ids[0]);
        let taken: BTreeSet<String> = [format!("game-{}", ids[0])].into();
        assert_ne!(IdSource::new(42).unique_ids("game", 1, &taken)[0], ids[0]);
    }

    #[test]
    fn unique_ids_end_when_the_name_space_runs_out() {
        // The same loop over a 1-character id space (27 names), which runs out as 27^5 does in production.
        let mut source = IdSource::new(3);
        let none: BTreeSet<String> = BTreeSet::new();
        let ids = source.unique_ids_of_len("game", 28, &none, 1);
        let distinct: BTreeSet<&String> = ids.iter().collect();
        assert!(ids.len() <= SAFE_ALPHABET.len() && distinct.len() == ids.len(), "{ids:?}");
        let all: BTreeSet<String> = SAFE_ALPHABET.iter().map(|b| format!("game-{}", char::from(*b))).collect();
        assert!(source.unique_ids_of_len("game", 5, &all, 1).is_empty());
        // More than 27^5 requested: bounded, not an endless loop or a 14-million-entry set.
        assert!(source.unique_ids("game", usize::MAX, &none).len() <= MAX_IDS);
    }

    #[test]
    fn index_configuration() {
        assert_eq!(index_range(&gd(&[]), 3), Ok(None));
        let on = |range: &str| gd(&[(keys::INDEX_ON, "true"), (keys::INDEX_RANGE, range)]);
        assert_eq!(
            index_range(&on(r#"{"podStartIndex":5,"podEndIndex":10}"#), 3),
            Ok(Some(IndexRange { pod_start_index: 5, pod_end_index: 10 }))
        );
        assert!(index_range(&on(r#"{"podStartIndex":5,"podEndIndex":7}"#), 3).unwrap_err().contains("do not fit"));
        assert!(index_range(&on(r#"{"podStartIndex":5,"podEndIndex":5}"#), 0).is_err());
        assert!(index_range(&on("nonsense"), 3).unwrap_err().contains("JSON"));
        assert!(index_range(&gd(&[(keys::INDEX_ON, "true")]), 3).unwrap_err().contains("missing"));
    }

    #[test]
    fn index_ranges_above_the_maximum_are_refused() {
        // The annotation is not in the CRD schema, so the operator is the only place that can bound it.
        let on = |range: &str| gd(&[(keys::INDEX_ON, "true"), (keys::INDEX_RANGE, range)]);
        let huge = index_range(&on(r#"{"podStartIndex":0,"podEndIndex":9000000000000000000}"#), 3);
        assert!(huge.as_ref().is_err_and(|e| e.contains("maximum") && e.contains("2147483647")), "{huge:?}");
        let top = format!(r#"{{"podStartIndex":0,"podEndIndex":{}}}"#, common::api::gamedeployment::MAX_POD_INDEX_END);
        assert!(index_range(&on(&top), 3).is_ok(), "the maximum itself is allowed");
    }

    #[test]
    fn free_indices_skip_used_but_not_finished_pods() {
        let pod =
            |index: &str, phase: &str| fixtures::pod(index).annotation(keys::INDEX_ID, index).phase(phase).build();
        let (a, b, c) = (pod("0", "Running"), pod("2", "Pending"), pod("1", "Failed"));
        let free = free_indices(IndexRange { pod_start_index: 0, pod_end_index: 4 }, &[&a, &b, &c], 10);
        assert_eq!(free, [1, 3]);
    }

    #[test]
    fn free_indices_of_a_huge_range_are_computed_lazily() {
        // The largest range the annotation may name: only the indices needed are produced.
        let range = IndexRange { pod_start_index: 0, pod_end_index: common::api::gamedeployment::MAX_POD_INDEX_END };
        let pod = |index: &str| fixtures::pod(index).annotation(keys::INDEX_ID, index).phase("Running").build();
        let (a, b) = (pod("0"), pod("2"));
        assert_eq!(free_indices(range, &[&a, &b], 3), [1, 3, 4]);
        assert_eq!(free_indices(range, &[&a, &b], 0), Vec::<i64>::new());
        // The end of the range: only what is left.
        let end = IndexRange { pod_start_index: i64::MAX - 3, pod_end_index: i64::MAX };
        assert_eq!(free_indices(end, &[], 500).len(), 3);
    }

    #[test]
    fn builds_a_pod_with_labels_gate_and_index() {
        let mut gd = gd(&[]);
        let mut template = gd.spec.template.clone();
        template.spec.as_mut().unwrap().containers[0].env =
            Some(vec![EnvVar { name: "POD_INDEX".into(), value: Some("stale".into()), value_from: None }]);
        template.spec.as_mut().unwrap().containers.push(Container { name: "side".into(), ..Default::default() });
        let pod = build(&NewPod {
            gd: &gd,
            template: &template,
            revision: "game-1",
            id: "abcde",
            index: Some(7),
            now: Timestamp::UNIX_EPOCH,
        });
        assert_eq!(pod.metadata.name.as_deref(), Some("game-abcde"));
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["app"], "game");
        assert_eq!(labels[keys::CONTROLLER_REVISION_HASH], "game-1");
        assert_eq!(labels[keys::INSTANCE_ID], "abcde");
        assert_eq!(labels[keys::LIFECYCLE_STATE], "Normal");
        assert_eq!(pod.metadata.annotations.as_ref().unwrap()[keys::INDEX_ID], "7");
        let spec = pod.spec.as_ref().unwrap();
        for c in &spec.containers {
            let env = c.env.as_ref().unwrap();
            assert_eq!(env.iter().filter(|e| e.name == "POD_INDEX").count(), 1);
            assert_eq!(env.iter().find(|e| e.name == "POD_INDEX").unwrap().value.as_deref(), Some("7"));
        }
        assert_eq!(spec.readiness_gates.as_ref().unwrap()[0].condition_type, keys::IN_PLACE_UPDATE_READY);
        assert_eq!(pod.metadata.owner_references.as_ref().unwrap()[0].controller, Some(true));

        gd.spec.disable_readiness_gate = true;
        let pod = build(&NewPod {
            gd: &gd,
            template: &template,
            revision: "game-1",
            id: "abcde",
            index: None,
            now: Timestamp::UNIX_EPOCH,
        });
        assert!(pod.spec.unwrap().readiness_gates.is_none());
    }

    /// A pod of a GameDeployment that opted in to the pod gate is created with the label the webhook's
    /// objectSelector matches, so it is gated from its first moment (not only once the labeller saw it).
    #[test]
    fn pods_of_an_opted_in_gamedeployment_are_created_with_the_pod_gate_label() {
        let new_pod = |gd: &GameDeployment| {
            build(&NewPod {
                gd,
                template: &gd.spec.template,
                revision: "game-1",
                id: "abcde",
                index: None,
                now: Timestamp::UNIX_EPOCH,
            })
        };
        let gated = gd(&[(crate::webhook::POD_GATE, "true")]);
        assert_eq!(new_pod(&gated).metadata.labels.unwrap()[crate::webhook::POD_GATE], "true");
        for annotations in [&[][..], &[(crate::webhook::POD_GATE, "false")][..]] {
            let pod = new_pod(&gd(annotations));
            assert!(!pod.metadata.labels.unwrap().contains_key(crate::webhook::POD_GATE), "{annotations:?}");
        }
    }
}
