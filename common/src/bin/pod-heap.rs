//! `pod-heap`: the heap a pod store holds per pod. A command that prints figures, not a test.
//!
//! ```text
//! cargo run --release -p common --bin pod-heap -- --pods 5000
//! ```
//!
//! It decodes `--pods` pods of a hooked fleet as the API server serves them (the operator's labels, annotations and
//! ownerReference, kube-sim's kubelet status: six conditions, one container status), feeds them to a kube reflector
//! store as the gamedeployment-operator's pod watch does, and prints the bytes and allocations still live afterwards,
//! per pod: in all, and for the metadata, spec and status decoded alone. Bytes are what the program asked for (the
//! allocator's size classes and its own bookkeeping come on top), counted by this binary's allocator: an exact figure,
//! the same on any machine for the same code.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

use common::cached_pod::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

/// The system allocator, with the bytes and allocations live at any moment counted.
struct Counting;

static BYTES: AtomicI64 = AtomicI64::new(0);
static ALLOCATIONS: AtomicI64 = AtomicI64::new(0);

/// A layout's size as a counter step (sizes fit in an `i64` on every platform Rust targets).
fn size(layout: Layout) -> i64 {
    i64::try_from(layout.size()).unwrap_or(i64::MAX)
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counters have no effect on the memory
// handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(size(layout), Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        BYTES.fetch_sub(size(layout), Ordering::Relaxed);
        ALLOCATIONS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(size(layout), Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        BYTES.fetch_add(i64::try_from(new_size).unwrap_or(i64::MAX) - size(layout), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes and allocations live now.
fn live() -> (i64, i64) {
    (BYTES.load(Ordering::Relaxed), ALLOCATIONS.load(Ordering::Relaxed))
}

/// A hex string of `len` digits that differs with `seed`.
fn hex(seed: usize, len: usize) -> String {
    let mut out = String::with_capacity(len);
    let mut x = (seed as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push_str(&format!("{x:016x}"));
    }
    out.truncate(len);
    out
}

/// The `i`th pod of a settled hooked fleet (the benchmark's GameDeployment), as the API server serves it.
fn served(i: usize) -> Value {
    let id = &format!("{i:05x}");
    let condition = |type_: &str| {
        json!({"type": type_, "status": "True", "lastProbeTime": null,
               "lastTransitionTime": "2026-01-01T00:00:05Z", "observedGeneration": 1})
    };
    let conditions: Vec<Value> =
        ["InPlaceUpdateReady", "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
            .map(condition)
            .into();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("fleet-{id}"), "namespace": "default",
            "uid": format!("{}-{}-{}-{}-{}", hex(i, 8), hex(i + 1, 4), hex(i + 2, 4), hex(i + 3, 4), hex(i + 4, 12)),
            "resourceVersion": format!("{}", 100_000 + i * 7), "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {
                "app": "fleet",
                "controller-revision-hash": "fleet-5d8c9b7f6",
                "tkex.bkbcs.tencent.com/gamedeployment-instance-id": id,
                "lifecycle.apps.kruise.io/state": "Normal",
            },
            "annotations": {
                "kube-sim.kourse.dev/http-port": "9091",
                "kube-sim.kourse.dev/http-delay": "100ms",
                "kube-sim.kourse.dev/http-body": "{\"age\": 45}",
                "lifecycle.apps.kruise.io/timestamp": "2026-01-01T00:00:00Z",
            },
            "ownerReferences": [{"apiVersion": "tkex.tencent.com/v1alpha1", "kind": "GameDeployment", "name": "fleet",
                                 "uid": "0f3c2a9e-5b1d-4c8e-9a7f-2d6b4e8c1a30", "controller": true,
                                 "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "gamedeployment-operator", "operation": "Update", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}}]
        },
        "spec": {
            "nodeName": format!("node-{}", i % 10),
            "readinessGates": [{"conditionType": "InPlaceUpdateReady"}],
            "containers": [{"name": "game", "image": "game:v1", "resources": {},
                            "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}],
            "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler"
        },
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": format!("10.0.0.{}", i % 10), "podIP": format!("10.1.{}.{}", i / 250, i % 250),
            "podIPs": [{"ip": format!("10.1.{}.{}", i / 250, i % 250)}], "startTime": "2026-01-01T00:00:01Z",
            "containerStatuses": [{
                "name": "game", "image": "game:v1",
                "imageID": format!("docker-pullable://game@sha256:{}", hex(7, 64)),
                "containerID": format!("containerd://{}", hex(i, 64)),
                "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": "2026-01-01T00:00:02Z"}}
            }],
            "qosClass": "BestEffort"
        }
    })
}

/// A pod's metadata as the cached pod decodes it.
#[derive(Clone, serde::Deserialize)]
#[expect(dead_code, reason = "held only to be measured")]
struct Meta(#[serde(deserialize_with = "common::lean_meta::deserialize")] ObjectMeta);

/// Bytes and allocations per item that `decode` leaves live, over `docs`.
/// Like the store, it keeps a clone of each decoded value: serde grows a list as it reads it, so a decoded list has
/// room to spare, and a clone has none.
fn per_item<T: Clone>(
    docs: &[Vec<u8>],
    decode: impl Fn(&[u8]) -> Result<T, serde_json::Error>,
) -> Result<(f64, f64), String> {
    let mut kept = Vec::with_capacity(docs.len());
    let before = live();
    for doc in docs {
        kept.push(decode(doc).map_err(|e| e.to_string())?.clone());
    }
    let after = live();
    let n = docs.len() as f64;
    let out = ((after.0 - before.0) as f64 / n, (after.1 - before.1) as f64 / n);
    drop(kept);
    Ok(out)
}

fn main() -> Result<(), String> {
    let mut pods = 5000_usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--pods" => pods = args.next().and_then(|v| v.parse().ok()).ok_or("--pods needs a number")?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let served: Vec<Value> = (0..pods).map(served).collect();
    let encode = |part: Option<&str>| -> Result<Vec<Vec<u8>>, String> {
        served.iter().map(|pod| serde_json::to_vec(part.map_or(pod, |p| &pod[p])).map_err(|e| e.to_string())).collect()
    };
    let whole = encode(None)?;

    // The store as the pod watch fills it: one `Arc<Pod>` per pod, keyed by its `ObjectRef`.
    let before = live();
    let (reader, mut writer) = reflector::store::<Pod>();
    for doc in &whole {
        let pod: Pod = serde_json::from_slice(doc).map_err(|e| e.to_string())?;
        writer.apply_watcher_event(&Event::Apply(pod));
    }
    let after = live();
    let n = pods as f64;
    println!("pod store, {pods} pods (kube reflector store, as the pod watch fills it):");
    println!(
        "  {:>8.0} bytes/pod  {:>6.1} allocations/pod  ({:.1} MiB in all)",
        (after.0 - before.0) as f64 / n,
        (after.1 - before.1) as f64 / n,
        (after.0 - before.0) as f64 / (1024.0 * 1024.0)
    );
    if reader.state().len() != pods {
        return Err(format!("the store holds {} pods, not {pods}", reader.state().len()));
    }
    drop((reader, writer));

    println!(
        "each part decoded alone and cloned, as the store keeps it (its own size, held inline in the pod, excluded):"
    );
    let (bytes, allocs) = per_item(&whole, |d| serde_json::from_slice::<Pod>(d))?;
    println!(
        "  pod       {bytes:>8.0} bytes/pod  {allocs:>6.1} allocations/pod  (the pod itself: {} bytes)",
        size_of::<Pod>()
    );
    let (bytes, allocs) = per_item(&encode(Some("metadata"))?, |d| serde_json::from_slice::<Meta>(d))?;
    println!("  metadata  {bytes:>8.0} bytes/pod  {allocs:>6.1} allocations/pod");
    let (bytes, allocs) = per_item(&encode(Some("spec"))?, |d| serde_json::from_slice::<PodSpec>(d))?;
    println!("  spec      {bytes:>8.0} bytes/pod  {allocs:>6.1} allocations/pod");
    let (bytes, allocs) = per_item(&encode(Some("status"))?, |d| serde_json::from_slice::<PodStatus>(d))?;
    println!("  status    {bytes:>8.0} bytes/pod  {allocs:>6.1} allocations/pod");
    Ok(())
}
