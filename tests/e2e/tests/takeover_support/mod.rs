//! Shared by the takeover tests (`bcs_takeover`, `cloneset_takeover`): how Go's history library names a revision,
//! the wait that brings a hand-written pod to Running and Ready through its `InPlaceUpdateReady` gate, and BCS's
//! walkthrough pre-delete hook.

use std::collections::HashMap;

use e2e::gamedeployment::is_ready;
use e2e::{Cluster, DEADLINE, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

/// FNV-1a 32 and `rand.SafeEncodeString`, as `controller.HashControllerRevision` names a revision.
pub fn revision_hash(payload: &Value) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut hash: u32 = 0x811c_9dc5;
    for b in payload.to_string().bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash.to_string().bytes().map(|b| char::from(ALPHABET[usize::from(b) % ALPHABET.len()])).collect()
}

/// Waits for each pod to run, sets its `InPlaceUpdateReady` condition as the previous operator's update loop does,
/// and waits for it to be Ready.
pub async fn gate_ready<'a>(pods_api: &Api<Pod>, pods: impl IntoIterator<Item = &'a String>) {
    for pod in pods {
        wait_for(&format!("{pod} running"), DEADLINE, || async {
            (pods_api.get(pod).await.ok()?.status?.phase.as_deref() == Some("Running")).then_some(())
        })
        .await;
        let condition = json!({"status": {"conditions": [{"type": "InPlaceUpdateReady", "status": "True"}]}});
        pods_api.patch_status(pod, &PatchParams::default(), &Patch::Strategic(condition)).await.expect("condition set");
        wait_for(&format!("{pod} ready"), DEADLINE, || async {
            is_ready(&pods_api.get(pod).await.ok()?).then_some(())
        })
        .await;
    }
}

/// BCS's walkthrough hook, HookTemplate `drain` in `ns`: a web probe that reads an age above 30 (one measurement),
/// served here with age 60, applied with kubectl from `hook.json`.
pub async fn apply_drain_hook(cluster: &Cluster, ns: &str) {
    let answers = HashMap::from([("age".to_string(), br#"{"age": 60}"#.to_vec())]);
    let endpoint = e2e::hook::serve_answers(answers).await;
    let hook = json!({"apiVersion": "tkex.tencent.com/v1alpha1", "kind": "HookTemplate",
        "metadata": {"name": "drain", "namespace": ns},
        "spec": {"metrics": [{"name": "webtest", "count": 1, "successCondition": "asInt(result) > 30",
            "provider": {"web": {"url": format!("http://{endpoint}/age"), "jsonPath": "{$.age}"}}}]}});
    let hook_file = cluster.dir().join("hook.json");
    std::fs::write(&hook_file, hook.to_string()).expect("hook written");
    cluster.kubectl_ok(&["apply", "-f", &hook_file.display().to_string()]).await;
}
