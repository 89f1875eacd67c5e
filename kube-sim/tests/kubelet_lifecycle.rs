//! The kubelet simulator against kube-sim through a real kube-rs client: scheduling, pod IPs,
//! container statuses and conditions, readiness gates, in-place image updates, crash loops,
//! graceful deletion with finalizers.

use crate::kubelet_support;

use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, PodReadinessGate};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube_sim::KubeletConfig;
use kubelet_support::*;
use serde_json::json;

#[tokio::test]
async fn nodes_register_ready_with_distinct_loopback_addresses() -> Result<()> {
    let sim = start().await?;
    let nodes: Api<Node> = Api::all(sim.client().await);
    let list = eventually("3 ready nodes", || async {
        let list = nodes.list(&ListParams::default()).await?;
        let ready = list.items.iter().filter(|node| {
            let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
            conditions.into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
        });
        Ok((ready.count() == 3).then_some(list))
    })
    .await?;
    let mut ips = HashSet::new();
    for node in &list.items {
        let status = node.status.as_ref().context("node status")?;
        let address = status.addresses.iter().flatten().find(|a| a.type_ == "InternalIP").context("InternalIP")?;
        let ip: Ipv4Addr = address.address.parse()?;
        assert!(ip.is_loopback() && ip != Ipv4Addr::LOCALHOST, "{ip}");
        assert!(ips.insert(ip), "duplicate node IP {ip}");
        assert!(status.allocatable.as_ref().is_some_and(|a| a.contains_key("pods")));
        let info = status.node_info.as_ref().context("nodeInfo")?;
        assert_eq!(info.kubelet_version, kube_sim::KUBELET_VERSION);
    }

    // Each node's heartbeat Lease, held by the node and owned by its Node object.
    let leases: Api<Lease> = Api::namespaced(sim.client().await, "kube-node-lease");
    for node in &list.items {
        let name = node.metadata.name.clone().context("node name")?;
        let lease = eventually(&format!("lease of {name}"), || async { Ok(leases.get_opt(&name).await?) }).await?;
        let spec = lease.spec.context("lease spec")?;
        assert_eq!(spec.holder_identity.as_deref(), Some(name.as_str()));
        assert!(spec.renew_time.is_some());
        let owner = lease.metadata.owner_references.and_then(|o| o.into_iter().next()).context("owner")?;
        assert_eq!((owner.kind.as_str(), Some(owner.uid)), ("Node", node.metadata.uid.clone()));
    }
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn pods_are_scheduled_given_unique_ips_and_become_ready() -> Result<()> {
    let sim = start().await?;
    let client = sim.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for i in 0..6 {
        let pod = pod(&format!("web-{i}"), vec![container("app", "python:3.5", &[8000])], &[]);
        create(&pods, &pod).await?;
    }
    let mut ips = HashSet::new();
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    let nodes: Api<Node> = Api::all(client);
    for i in 0..6 {
        let name = format!("web-{i}");
        let pod = wait_pod(&pods, &name, "Running and Ready", |p| phase(p) == Some("Running") && is_ready(p)).await?;
        let ip = pod_ip(&pod)?;
        let [a, b, _, _] = ip.octets();
        assert!(a == 127 && b != 0, "pod IP {ip} must be loopback outside 127.0.0.0/16");
        assert!(ips.insert(ip), "pod IP {ip} handed out twice");
        let status = pod.status.as_ref().context("status")?;
        assert_eq!(status.pod_ips.as_ref().map(|ips| ips[0].ip.clone()), Some(ip.to_string()));

        let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone()).context("nodeName")?;
        *per_node.entry(node_name.clone()).or_default() += 1;
        let node = nodes.get(&node_name).await?;
        let node_ip = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
            .map(|a| a.address.clone());
        assert_eq!(status.host_ip, node_ip, "hostIP is the node's InternalIP");

        let app = container_status(&pod, "app").context("container status")?;
        assert_eq!(app.image, "python:3.5");
        assert!(app.image_id.starts_with("docker-pullable://python@sha256:"), "{}", app.image_id);
        assert!(app.container_id.as_deref().is_some_and(|id| id.starts_with("docker://")));
        assert!(app.ready);
        assert_eq!(app.started, Some(true));
        assert_eq!(app.restart_count, 0);
        let running = app.state.as_ref().and_then(|s| s.running.as_ref()).context("running state")?;
        assert!(running.started_at.is_some());
        for type_ in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
            assert_eq!(condition(&pod, type_), Some("True"), "{type_}");
        }
        assert!(status.start_time.is_some());
        assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));
    }
    assert_eq!(per_node.len(), 3, "6 pods spread over the 3 nodes: {per_node:?}");
    assert!(per_node.values().all(|count| *count == 2), "{per_node:?}");
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn ready_honours_readiness_gates_set_by_controllers() -> Result<()> {
    let sim = start().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    let mut gated = pod("gated", vec![container("app", "app:v1", &[])], &[]);
    gated.spec.as_mut().context("spec")?.readiness_gates =
        Some(vec![PodReadinessGate { condition_type: "InPlaceUpdateReady".into() }]);
    create(&pods, &gated).await?;

    let pod = wait_pod(&pods, "gated", "containers ready", |p| condition(p, "ContainersReady") == Some("True")).await?;
    assert_eq!(condition(&pod, "Ready"), Some("False"), "no gate condition yet");
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .context("Ready condition")?;
    assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some("corresponding condition of pod readiness gate \"InPlaceUpdateReady\" does not exist.")
    );

    let set_gate = |value: &'static str| {
        let patch = json!({"status": {"conditions": [{"type": "InPlaceUpdateReady", "status": value}]}});
        let pods = pods.clone();
        async move { pods.patch_status("gated", &PatchParams::default(), &Patch::Strategic(patch)).await }
    };
    set_gate("True").await?;
    wait_pod(&pods, "gated", "Ready once the gate is True", is_ready).await?;

    // An in-place update starting: the controller flips its gate, the kubelet follows.
    set_gate("False").await?;
    let pod = wait_pod(&pods, "gated", "not Ready once the gate is False", |p| condition(p, "Ready") == Some("False"))
        .await?;
    assert_eq!(condition(&pod, "ContainersReady"), Some("True"));
    assert_eq!(condition(&pod, "InPlaceUpdateReady"), Some("False"), "the kubelet keeps the controller's condition");
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn image_change_restarts_only_that_container() -> Result<()> {
    let sim = start().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    let two = pod("two", vec![container("main", "python:latest", &[]), container("side", "busybox:1", &[])], &[]);
    create(&pods, &two).await?;
    let before = wait_pod(&pods, "two", "Ready", is_ready).await?;
    let main_before = container_status(&before, "main").context("main")?.clone();
    let side_before = container_status(&before, "side").context("side")?.clone();

    let patch = json!({"spec": {"containers": [{"name": "main", "image": "python:3.5"}]}});
    pods.patch("two", &PatchParams::default(), &Patch::Strategic(patch)).await?;

    let after = wait_pod(&pods, "two", "main restarted with the new image and ready again", |p| {
        container_status(p, "main").is_some_and(|s| s.restart_count == 1 && s.image == "python:3.5" && s.ready)
            && is_ready(p)
    })
    .await?;
    let main = container_status(&after, "main").context("main")?;
    assert_ne!(main.image_id, main_before.image_id, "new image, new imageID");
    assert!(main.image_id.starts_with("docker-pullable://python@sha256:"));
    assert_ne!(main.container_id, main_before.container_id, "a new container instance");
    let last = main.last_state.as_ref().and_then(|s| s.terminated.as_ref()).context("lastState.terminated")?;
    assert_eq!(last.container_id, main_before.container_id);
    let side = container_status(&after, "side").context("side")?;
    assert_eq!(side.restart_count, 0, "the other container is untouched");
    assert_eq!(side.container_id, side_before.container_id);
    assert_eq!(side.state, side_before.state);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn hot_patch_annotation_swaps_image_without_restart() -> Result<()> {
    let sim = start().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    let hot = pod("hot", vec![container("main", "main:v1", &[])], &[("io.kubernetes.hotpatch.container", "true")]);
    create(&pods, &hot).await?;
    let before = wait_pod(&pods, "hot", "Ready", is_ready).await?;
    let patch = json!({"spec": {"containers": [{"name": "main", "image": "main:v2"}]}});
    pods.patch("hot", &PatchParams::default(), &Patch::Strategic(patch)).await?;
    let after = wait_pod(&pods, "hot", "running main:v2", |p| {
        container_status(p, "main").is_some_and(|s| s.image == "main:v2")
    })
    .await?;
    let (old, new) =
        (container_status(&before, "main").context("old")?, container_status(&after, "main").context("new")?);
    assert_eq!(new.restart_count, 0);
    assert_eq!(new.container_id, old.container_id);
    assert_ne!(new.image_id, old.image_id);
    assert!(new.ready);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn annotations_control_readiness_and_crash_loops() -> Result<()> {
    let sim = start_with(KubeletConfig {
        crash_loop_backoff: std::time::Duration::from_millis(300),
        ..KubeletConfig::fast()
    })
    .await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    create(&pods, &pod("never", vec![container("app", "app", &[])], &[("kube-sim.kourse.dev/never-ready", "true")]))
        .await?;
    create(&pods, &pod("slow", vec![container("app", "app", &[])], &[("kube-sim.kourse.dev/ready-after", "2s")]))
        .await?;
    create(
        &pods,
        &pod(
            "crashy",
            vec![container("app", "app", &[])],
            &[("kube-sim.kourse.dev/crash-loop", "true"), ("kube-sim.kourse.dev/exit-after", "100ms")],
        ),
    )
    .await?;

    let crashy = wait_pod(&pods, "crashy", "in CrashLoopBackOff after restarts", |p| {
        container_status(p, "app").is_some_and(|s| {
            let waiting = s.state.as_ref().and_then(|st| st.waiting.as_ref());
            s.restart_count >= 2 && waiting.and_then(|w| w.reason.as_deref()) == Some("CrashLoopBackOff")
        })
    })
    .await?;
    let app = container_status(&crashy, "app").context("app")?;
    let last = app.last_state.as_ref().and_then(|s| s.terminated.as_ref()).context("lastState")?;
    assert_eq!(last.exit_code, 1);
    assert_eq!(last.reason.as_deref(), Some("Error"));
    assert_eq!(phase(&crashy), Some("Running"), "restartPolicy Always keeps the pod Running");
    assert_eq!(condition(&crashy, "Ready"), Some("False"));

    wait_pod(&pods, "slow", "Ready after its 2 s", is_ready).await?;
    let never = wait_pod(&pods, "never", "Running", |p| phase(p) == Some("Running")).await?;
    assert!(!is_ready(&never), "never-ready pods stay unready");
    assert_eq!(container_status(&never, "app").map(|s| s.ready), Some(false));

    // Dropping the annotation on the live pod makes it ready.
    let patch = json!({"metadata": {"annotations": {"kube-sim.kourse.dev/never-ready": null}}});
    pods.patch("never", &PatchParams::default(), &Patch::Merge(patch)).await?;
    wait_pod(&pods, "never", "Ready once the annotation is gone", is_ready).await?;
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn graceful_deletion_waits_for_the_scaled_grace_period_and_finalizers() -> Result<()> {
    let sim = start().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    create(&pods, &pod("plain", vec![container("app", "app", &[])], &[])).await?;
    let mut held = pod("held", vec![container("app", "app", &[])], &[]);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    create(&pods, &held).await?;
    wait_pod(&pods, "plain", "Ready", is_ready).await?;
    wait_pod(&pods, "held", "Ready", is_ready).await?;

    // 30 s grace × 0.01 = 0.3 s.
    let delete = DeleteParams { grace_period_seconds: Some(30), ..Default::default() };
    pods.delete("plain", &delete).await?;
    pods.delete("held", &delete).await?;
    wait_gone(&pods, "plain").await?;

    let held =
        wait_pod(&pods, "held", "terminated but kept by its finalizer", |p| phase(p) == Some("Succeeded")).await?;
    assert!(held.metadata.deletion_timestamp.is_some());
    let app = container_status(&held, "app").context("app")?;
    let terminated = app.state.as_ref().and_then(|s| s.terminated.as_ref()).context("terminated")?;
    assert_eq!(terminated.exit_code, 0);
    assert_eq!(condition(&held, "Ready"), Some("False"));

    let patch = json!({"metadata": {"finalizers": null}});
    pods.patch("held", &PatchParams::default(), &Patch::Merge(patch)).await?;
    wait_gone(&pods, "held").await?;
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn unschedulable_pods_wait_for_a_fitting_node() -> Result<()> {
    let sim = start().await?;
    let client = sim.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut picky = pod("picky", vec![container("app", "app", &[])], &[]);
    picky.spec.as_mut().context("spec")?.node_selector = Some([("disk".to_string(), "ssd".to_string())].into());
    create(&pods, &picky).await?;
    let pending =
        wait_pod(&pods, "picky", "marked Unschedulable", |p| condition(p, "PodScheduled") == Some("False")).await?;
    let scheduled = pending
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .context("PodScheduled")?;
    assert_eq!(scheduled.reason.as_deref(), Some("Unschedulable"));
    assert_eq!(
        scheduled.message.as_deref(),
        Some("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.")
    );
    assert_eq!(phase(&pending), Some("Pending"));

    let nodes: Api<Node> = Api::all(client);
    let patch = json!({"metadata": {"labels": {"disk": "ssd"}}});
    nodes.patch("kube-sim-node-2", &PatchParams::default(), &Patch::Merge(patch)).await?;
    let pod = wait_pod(&pods, "picky", "scheduled to the labelled node and Ready", is_ready).await?;
    assert_eq!(pod.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some("kube-sim-node-2"));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn events_tell_the_pod_story() -> Result<()> {
    use k8s_openapi::api::core::v1::Event;
    let sim = start().await?;
    let client = sim.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let events: Api<Event> = Api::namespaced(client, "default");
    let mut story = pod("story", vec![container("app", "app:v1", &[])], &[]);
    story.spec.as_mut().context("spec")?.containers[0].image_pull_policy = Some("IfNotPresent".into());
    create(&pods, &story).await?;
    wait_pod(&pods, "story", "Ready", is_ready).await?;
    let patch = json!({"spec": {"containers": [{"name": "app", "image": "app:v2"}]}});
    pods.patch("story", &PatchParams::default(), &Patch::Strategic(patch)).await?;
    wait_pod(&pods, "story", "restarted", |p| container_status(p, "app").is_some_and(|s| s.restart_count == 1)).await?;

    let expected = ["Scheduled", "Pulled", "Created", "Started", "Killing", "Pulled", "Created", "Started"];
    let story_events = eventually("the pod's events", || async {
        let mut list: Vec<Event> = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some("story"))
            .collect();
        list.sort_by_key(|e| e.metadata.name.clone());
        Ok((list.len() >= expected.len()).then_some(list))
    })
    .await?;
    let reasons: Vec<_> = story_events.iter().filter_map(|e| e.reason.as_deref()).collect();
    for reason in expected {
        assert!(reasons.contains(&reason), "{reason} missing from {reasons:?}");
    }
    let scheduled = story_events.iter().find(|e| e.reason.as_deref() == Some("Scheduled")).context("Scheduled")?;
    let node = pods.get("story").await?.spec.and_then(|s| s.node_name).context("nodeName")?;
    assert_eq!(scheduled.message.as_deref(), Some(format!("Successfully assigned default/story to {node}").as_str()));
    let killing = story_events.iter().find(|e| e.reason.as_deref() == Some("Killing")).context("Killing")?;
    assert_eq!(killing.message.as_deref(), Some("Container app definition changed, will be restarted"));
    assert_eq!(killing.involved_object.field_path.as_deref(), Some("spec.containers{app}"));
    sim.shutdown().await;
    Ok(())
}
