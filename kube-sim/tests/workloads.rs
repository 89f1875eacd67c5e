//! kube-sim's workload controllers driven by the real `kubectl`, as a user drives a cluster:
//! Deployments rolling out (`rollout status`, `set image`, `rollout undo`, `rollout restart`,
//! `scale`), a progress deadline running out, a ReplicaSet adopting and scaling, Service
//! endpoints following readiness (with the propagation delay), and `kubectl drain` of a node
//! running a Deployment's pods behind a PodDisruptionBudget.

use crate::kubelet_support;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, ListParams, WatchEvent, WatchParams};
use kube_sim::{KubeletConfig, SimConfig, SimHandle};
use kubelet_support::*;

/// kube-sim with the fast kubelet, its kubeconfig and kubectl's cache in a directory of its own.
struct Cluster {
    sim: SimHandle,
    dir: PathBuf,
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Cluster {
    async fn start(endpoint_delay: Duration) -> Result<Self> {
        let sim = kube_sim::start(SimConfig {
            kubelet: Some(KubeletConfig::fast()),
            endpoint_propagation_delay: endpoint_delay,
            ..SimConfig::default()
        })
        .await?;
        let dir = std::env::temp_dir().join(format!("kube-sim-workloads-{}-{}", std::process::id(), sim.addr().port()));
        std::fs::create_dir_all(dir.join("cache"))?;
        sim.write_kubeconfig(&dir.join("kubeconfig"))?;
        Ok(Self { sim, dir })
    }

    async fn kubectl(&self, args: &[&str]) -> Result<Run> {
        let out = tokio::time::timeout(
            Duration::from_secs(180),
            tokio::process::Command::new("kubectl")
                .args(args)
                .env("KUBECONFIG", self.dir.join("kubeconfig"))
                .env("KUBECACHEDIR", self.dir.join("cache"))
                .env("HOME", &self.dir)
                .kill_on_drop(true)
                .output(),
        )
        .await
        .with_context(|| format!("kubectl {args:?} timed out"))??;
        Ok(Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    async fn ok(&self, args: &[&str]) -> Result<String> {
        let r = self.kubectl(args).await?;
        if r.code != 0 {
            bail!("kubectl {args:?} failed ({}):\n{}\n{}", r.code, r.stdout, r.stderr);
        }
        Ok(r.stdout)
    }

    async fn apply(&self, name: &str, yaml: &str) -> Result<String> {
        let path = self.dir.join(name);
        std::fs::write(&path, yaml)?;
        self.ok(&["apply", "-f", &path.to_string_lossy()]).await
    }

    async fn stop(self) {
        self.sim.shutdown().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  strategy: {rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 5
      containers: [{name: c, image: "nginx:1.27", ports: [{name: http, containerPort: 8080}]}]
"#;

fn rows(table: &str) -> Vec<Vec<String>> {
    table.lines().map(|l| l.split_whitespace().map(str::to_string).collect()).collect()
}

fn replica_sets_of(l: &[ReplicaSet]) -> Vec<(String, i32)> {
    let mut v: Vec<(String, i32)> =
        l.iter().map(|rs| (rs.metadata.name.clone().unwrap_or_default(), rs.spec.replicas.unwrap_or(0))).collect();
    v.sort();
    v
}

fn image(d: &Deployment) -> Option<String> {
    d.spec.template.spec.as_ref()?.containers.first()?.image.clone()
}

/// The whole `kubectl rollout` story on one Deployment: it rolls out, `set image` rolls to a
/// second ReplicaSet (never fewer than 3 ready pods with `maxUnavailable: 0`), `rollout undo`
/// returns to the first template as revision 3, `rollout restart` stamps `restartedAt` and rolls
/// again, `scale` resizes; `get deploy`/`get rs` print a cluster's columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rollout_status_set_image_undo_restart_and_scale() -> Result<()> {
    let c = Cluster::start(Duration::ZERO).await?;
    let client = c.sim.client().await;
    let deploys: Api<Deployment> = Api::default_namespaced(client.clone());
    let sets: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    c.apply("web.yaml", WEB).await?;
    let out = c.ok(&["rollout", "status", "deployment/web", "--timeout=120s"]).await?;
    assert!(out.contains("deployment \"web\" successfully rolled out"), "{out}");
    let table = rows(&c.ok(&["get", "deploy", "web"]).await?);
    assert_eq!(table[0], ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]);
    assert_eq!(table[1][..4], ["web", "3/3", "3", "3"]);
    let d = deploys.get("web").await?;
    let status = d.status.clone().context("status")?;
    assert_eq!(
        (status.replicas, status.updated_replicas, status.ready_replicas, status.available_replicas),
        (Some(3), Some(3), Some(3), Some(3))
    );
    assert_eq!(status.observed_generation, d.metadata.generation);
    let conds = status.conditions.unwrap_or_default();
    let reason = |t: &str| conds.iter().find(|x| x.type_.as_deref() == Some(t)).and_then(|x| x.reason.clone());
    assert_eq!(reason("Available").as_deref(), Some("MinimumReplicasAvailable"));
    assert_eq!(reason("Progressing").as_deref(), Some("NewReplicaSetAvailable"));
    let first = sets.list(&ListParams::default()).await?.items;
    assert_eq!(first.len(), 1);
    let first_name = first[0].metadata.name.clone().context("name")?;
    let hash =
        first[0].metadata.labels.as_ref().and_then(|l| l.get("pod-template-hash")).cloned().context("hash label")?;
    assert_eq!(first_name, format!("web-{hash}"));
    let rs_table = rows(&c.ok(&["get", "rs", "-o", "wide"]).await?);
    assert_eq!(rs_table[0], ["NAME", "DESIRED", "CURRENT", "READY", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]);
    assert_eq!(rs_table[1][..4], [first_name.as_str(), "3", "3", "3"]);
    assert_eq!(rs_table[1][7], format!("app=web,pod-template-hash={hash}"));
    let listed = pods.list(&ListParams::default().labels(&format!("pod-template-hash={hash}"))).await?.items;
    assert_eq!(listed.len(), 3);
    // The controllers' Events, as `kubectl describe` shows them.
    let described = c.ok(&["describe", "deployment", "web"]).await?;
    assert!(described.contains("ScalingReplicaSet"), "{described}");
    assert!(described.contains(&format!("Scaled up replica set {first_name}")), "{described}");
    let described = c.ok(&["describe", "rs", &first_name]).await?;
    assert!(described.contains("SuccessfulCreate"), "{described}");

    // A new image: a second ReplicaSet, watched from before the change: with maxUnavailable 0 the
    // ready pods never drop below 3.
    let watch = {
        let pods = pods.clone();
        let before = pods.list(&ListParams::default()).await?;
        let rv = before.metadata.resource_version.context("rv")?;
        let mut ready: std::collections::BTreeSet<String> =
            before.items.iter().filter(|p| is_ready(p)).filter_map(|p| p.metadata.name.clone()).collect();
        assert_eq!(ready.len(), 3);
        tokio::spawn(async move {
            let mut least = usize::MAX;
            let mut stream = pods.watch(&WatchParams::default(), &rv).await?.boxed();
            while let Some(ev) = stream.next().await {
                match ev? {
                    WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        if is_ready(&p) && p.metadata.deletion_timestamp.is_none() {
                            ready.insert(name);
                        } else {
                            ready.remove(&name);
                        }
                    }
                    WatchEvent::Deleted(p) => {
                        ready.remove(&p.metadata.name.clone().unwrap_or_default());
                    }
                    _ => {}
                }
                least = least.min(ready.len());
                if ready.len() == 3
                    && least < usize::MAX
                    && ready.iter().all(|n| !n.starts_with(&format!("web-{hash}-")))
                {
                    break;
                }
            }
            anyhow::Ok(least)
        })
    };
    c.ok(&["set", "image", "deployment/web", "c=nginx:1.28"]).await?;
    let out = c.ok(&["rollout", "status", "deployment/web", "--timeout=120s"]).await?;
    assert!(out.contains("successfully rolled out"), "{out}");
    let least = tokio::time::timeout(Duration::from_secs(120), watch).await???;
    assert!(least >= 3, "ready pods fell to {least} during a rollout with maxUnavailable 0");
    let second = replica_sets_of(&sets.list(&ListParams::default()).await?.items);
    assert_eq!(second.len(), 2);
    assert!(second.contains(&(first_name.clone(), 0)), "{second:?}");
    let history = c.ok(&["rollout", "history", "deployment/web"]).await?;
    assert!(history.contains("1 ") && history.contains("2 "), "{history}");

    // Undo: back to the first template, which becomes revision 3.
    c.ok(&["rollout", "undo", "deployment/web"]).await?;
    c.ok(&["rollout", "status", "deployment/web", "--timeout=120s"]).await?;
    let d = deploys.get("web").await?;
    assert_eq!(image(&d).as_deref(), Some("nginx:1.27"));
    let revision = |o: &Option<std::collections::BTreeMap<String, String>>| {
        o.as_ref().and_then(|a| a.get("deployment.kubernetes.io/revision")).cloned()
    };
    assert_eq!(revision(&d.metadata.annotations).as_deref(), Some("3"));
    let back = sets.get(&first_name).await?;
    assert_eq!(revision(&back.metadata.annotations).as_deref(), Some("3"));
    assert_eq!(back.spec.replicas, Some(3));

    // Restart: a new template (the restartedAt annotation), a third ReplicaSet.
    c.ok(&["rollout", "restart", "deployment/web"]).await?;
    c.ok(&["rollout", "status", "deployment/web", "--timeout=120s"]).await?;
    let d = deploys.get("web").await?;
    let stamped = d.spec.template.metadata.as_ref().and_then(|m| m.annotations.as_ref());
    assert!(stamped.is_some_and(|a| a.contains_key("kubectl.kubernetes.io/restartedAt")), "{stamped:?}");
    assert_eq!(sets.list(&ListParams::default()).await?.items.len(), 3);

    // Scale.
    c.ok(&["scale", "deployment/web", "--replicas=5"]).await?;
    c.ok(&["rollout", "status", "deployment/web", "--timeout=120s"]).await?;
    let table = rows(&c.ok(&["get", "deploy", "web"]).await?);
    assert_eq!(table[1][..4], ["web", "5/5", "5", "5"]);
    eventually("5 running pods", || async {
        let l = pods.list(&ListParams::default()).await?;
        Ok((l.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).count() == 5).then_some(()))
    })
    .await?;
    // Deleting the Deployment takes its ReplicaSets and pods with it.
    c.ok(&["delete", "deployment/web", "--wait=false"]).await?;
    eventually("the ReplicaSets to go", || async {
        Ok(sets.list(&ListParams::default()).await?.items.is_empty().then_some(()))
    })
    .await?;
    c.stop().await;
    Ok(())
}

/// A rollout whose pods never become ready runs out of `progressDeadlineSeconds`: the
/// Deployment's `Progressing` condition turns `False`/`ProgressDeadlineExceeded` and `kubectl
/// rollout status` fails with kubectl's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_rollout_exceeds_its_progress_deadline() -> Result<()> {
    let c = Cluster::start(Duration::ZERO).await?;
    let stuck = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: stuck}
spec:
  replicas: 2
  progressDeadlineSeconds: 2
  selector: {matchLabels: {app: stuck}}
  template:
    metadata:
      labels: {app: stuck}
      annotations: {kube-sim.kourse.dev/never-ready: "true"}
    spec: {containers: [{name: c, image: busybox}]}
"#;
    c.apply("stuck.yaml", stuck).await?;
    let r = c.kubectl(&["rollout", "status", "deployment/stuck", "--timeout=120s"]).await?;
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("deployment \"stuck\" exceeded its progress deadline"), "{}\n{}", r.stdout, r.stderr);
    let d: Deployment = Api::default_namespaced(c.sim.client().await).get("stuck").await?;
    let conds = d.status.and_then(|s| s.conditions).unwrap_or_default();
    let progressing = conds.iter().find(|x| x.type_.as_deref() == Some("Progressing")).context("Progressing")?;
    assert_eq!(
        (progressing.status.as_deref(), progressing.reason.as_deref()),
        (Some("False"), Some("ProgressDeadlineExceeded"))
    );
    let available = conds.iter().find(|x| x.type_.as_deref() == Some("Available")).context("Available")?;
    assert_eq!(available.status.as_deref(), Some("False"));
    c.stop().await;
    Ok(())
}

/// A ReplicaSet of its own adopts a matching orphan, creates the rest, scales down through the
/// kubelet's graceful deletion, releases a pod relabelled out of its selector, and leaves pods
/// another controller owns alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_set_adopts_scales_and_releases() -> Result<()> {
    let c = Cluster::start(Duration::ZERO).await?;
    let client = c.sim.client().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    c.apply("orphan.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: orphan, labels: {app: cache}}\nspec: {containers: [{name: c, image: redis}]}\n").await?;
    c.ok(&["create", "configmap", "other-controller"]).await?;
    let uid = c.ok(&["get", "configmap", "other-controller", "-o", "jsonpath={.metadata.uid}"]).await?;
    c.apply("owned.yaml", &format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: someone-elses\n  labels: {{app: cache}}\n  ownerReferences: [{{apiVersion: v1, kind: ConfigMap, name: other-controller, uid: {uid}, controller: true}}]\nspec: {{containers: [{{name: c, image: redis}}]}}\n")).await?;
    let rs = "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: cache}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: cache}}\n  template:\n    metadata: {labels: {app: cache}}\n    spec: {containers: [{name: c, image: redis}]}\n";
    c.apply("rs.yaml", rs).await?;
    let owned_by_rs = |p: &Pod| {
        p.metadata
            .owner_references
            .as_ref()
            .is_some_and(|o| o.iter().any(|r| r.kind == "ReplicaSet" && r.name == "cache"))
    };
    eventually("3 ready pods of the ReplicaSet", || async {
        let l = pods.list(&ListParams::default()).await?;
        let mine: Vec<&Pod> = l.items.iter().filter(|p| owned_by_rs(p) && is_ready(p)).collect();
        Ok((mine.len() == 3).then_some(()))
    })
    .await?;
    assert!(owned_by_rs(&pods.get("orphan").await?), "the orphan was adopted");
    assert!(!owned_by_rs(&pods.get("someone-elses").await?), "another controller's pod is not claimed");
    let table = rows(&c.ok(&["get", "rs", "cache"]).await?);
    assert_eq!(table[1][..4], ["cache", "3", "3", "3"]);
    c.ok(&["scale", "rs/cache", "--replicas=1"]).await?;
    eventually("one pod of the ReplicaSet", || async {
        let l = pods.list(&ListParams::default()).await?;
        Ok((l.items.iter().filter(|p| owned_by_rs(p)).count() == 1).then_some(()))
    })
    .await?;
    let survivor =
        pods.list(&ListParams::default()).await?.items.into_iter().find(|p| owned_by_rs(p)).context("survivor")?;
    let name = survivor.metadata.name.clone().context("name")?;
    c.ok(&["label", "pod", &name, "app=debug", "--overwrite"]).await?;
    wait_pod(&pods, &name, "released", |p| !owned_by_rs(p)).await?;
    eventually("a replacement", || async {
        let l = pods.list(&ListParams::default()).await?;
        Ok((l.items.iter().filter(|p| owned_by_rs(p) && p.metadata.name.as_deref() != Some(&name)).count() == 1)
            .then_some(()))
    })
    .await?;
    c.stop().await;
    Ok(())
}

fn slice_conditions(s: &EndpointSlice) -> Vec<(String, bool, bool, bool)> {
    let mut v: Vec<(String, bool, bool, bool)> = s
        .endpoints
        .iter()
        .flatten()
        .map(|e| {
            let c = e.conditions.clone().unwrap_or_default();
            (
                e.target_ref.as_ref().and_then(|r| r.name.clone()).unwrap_or_default(),
                c.ready.unwrap_or(false),
                c.serving.unwrap_or(false),
                c.terminating.unwrap_or(false),
            )
        })
        .collect();
    v.sort();
    v
}

/// A Service's Endpoints and EndpointSlice follow its pods' readiness; a deleted pod's endpoint
/// turns `ready: false, serving: true, terminating: true` — but only after the propagation delay
/// (3 s here), and it is gone once the pod is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_follow_readiness_after_the_propagation_delay() -> Result<()> {
    let delay = Duration::from_secs(3);
    let c = Cluster::start(delay).await?;
    let client = c.sim.client().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let slices: Api<EndpointSlice> = Api::default_namespaced(client.clone());
    c.apply("web.yaml", WEB).await?;
    c.apply("svc.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http}]\n").await?;
    c.ok(&["rollout", "status", "deployment/web", "--timeout=120s"]).await?;
    let by_service = ListParams::default().labels("kubernetes.io/service-name=web");
    let slice = eventually("3 ready endpoints", || async {
        let l = slices.list(&by_service).await?;
        Ok(l.items.into_iter().next().filter(|s| {
            let c = slice_conditions(s);
            c.len() == 3 && c.iter().all(|(_, r, s, t)| *r && *s && !*t)
        }))
    })
    .await?;
    assert_eq!(slice.address_type, "IPv4");
    let ports = slice.ports.clone().unwrap_or_default();
    assert_eq!((ports[0].name.as_deref(), ports[0].port), (Some("http"), Some(8080)));
    let table = rows(&c.ok(&["get", "endpointslices"]).await?);
    assert_eq!(table[0], ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]);
    let ep = rows(&c.ok(&["get", "endpoints", "web"]).await?);
    assert_eq!(ep[0], ["NAME", "ENDPOINTS", "AGE"]);
    assert!(ep[1][1].ends_with("more...") || ep[1][1].matches(":8080").count() == 3, "{ep:?}");

    // Delete one pod with a long grace period; watch the slice from before.
    let victim =
        pods.list(&ListParams::default().labels("app=web")).await?.items[0].metadata.name.clone().context("name")?;
    let rv = slices.list(&by_service).await?.metadata.resource_version.context("rv")?;
    let mut stream = slices.watch(&WatchParams::default().labels("kubernetes.io/service-name=web"), &rv).await?.boxed();
    let deleted_at = tokio::time::Instant::now();
    pods.delete(&victim, &DeleteParams { grace_period_seconds: Some(600), ..DeleteParams::default() }).await?;
    let seen = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(ev) = stream.next().await {
            if let WatchEvent::Modified(s) = ev?
                && let Some(e) = slice_conditions(&s).into_iter().find(|e| e.0 == victim && e.3)
            {
                return anyhow::Ok((e, tokio::time::Instant::now()));
            }
        }
        bail!("watch ended")
    })
    .await??;
    assert_eq!((seen.0.1, seen.0.2, seen.0.3), (false, true, true), "ready false, serving true, terminating");
    assert!(seen.1 - deleted_at >= delay, "withdrawn after {:?}, before the {delay:?} delay", seen.1 - deleted_at);
    // The Endpoints object leaves the terminating pod out.
    eventually("the endpoint leaves Endpoints", || async {
        let out =
            c.ok(&["get", "endpoints", "web", "-o", "jsonpath={.subsets[*].addresses[*].targetRef.name}"]).await?;
        Ok((!out.contains(&victim) && out.split_whitespace().count() >= 2).then_some(()))
    })
    .await?;
    c.stop().await;
    Ok(())
}

/// `kubectl drain` of a node running a Deployment's pods behind a PodDisruptionBudget: evictions
/// wait for the budget (kubectl retries the 429s), the ReplicaSet replaces each evicted pod on
/// another node, the drain completes and the Deployment is Available again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drain_moves_a_deployment_through_its_budget() -> Result<()> {
    let c = Cluster::start(Duration::ZERO).await?;
    let client = c.sim.client().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let spread = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: game}
spec:
  replicas: 6
  selector: {matchLabels: {app: game}}
  template:
    metadata: {labels: {app: game}}
    spec:
      terminationGracePeriodSeconds: 5
      containers: [{name: c, image: "python:3"}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: game}
spec:
  minAvailable: 5
  selector: {matchLabels: {app: game}}
"#;
    c.apply("game.yaml", spread).await?;
    c.ok(&["rollout", "status", "deployment/game", "--timeout=120s"]).await?;
    let node = "kube-sim-node-1";
    let on_node =
        |l: &[Pod]| l.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)).count();
    let before = on_node(&pods.list(&ListParams::default()).await?.items);
    assert!(before >= 2, "the scheduler spreads 6 pods over 3 nodes ({before} on {node})");
    eventually("the budget to allow one disruption", || async {
        let out = c.ok(&["get", "pdb", "game", "-o", "jsonpath={.status.disruptionsAllowed}"]).await?;
        Ok((out == "1").then_some(()))
    })
    .await?;
    let r = c.kubectl(&["drain", node, "--ignore-daemonsets", "--timeout=180s"]).await?;
    if r.code != 0 {
        bail!("kubectl drain failed:\n{}\n{}", r.stdout, r.stderr);
    }
    assert!(r.stdout.contains(&format!("node/{node} drained")), "{}", r.stdout);
    assert!(r.stderr.contains("Cannot evict pod as it would violate the pod's disruption budget."), "{}", r.stderr);
    c.ok(&["rollout", "status", "deployment/game", "--timeout=120s"]).await?;
    let l = pods.list(&ListParams::default()).await?.items;
    assert_eq!(on_node(&l), 0);
    assert_eq!(l.iter().filter(|p| is_ready(p)).count(), 6);
    c.stop().await;
    Ok(())
}
