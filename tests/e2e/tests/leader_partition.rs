//! Two replicas of each operator, each process with its own user, leader election on kube-sim. The leaders' Lease
//! requests are cut off (kube-sim faults scoped to their user) while everything else they send still works — the
//! asymmetric partition in which a leader that measured its renew deadline wrongly keeps writing pods and HookRun
//! status after a standby took over. From kube-sim's audit log of writes: no two identities of one component
//! wrote (pods, HookRuns, GameDeployments) in overlapping windows. Before that, 409s on Lease renewals must not
//! make a leader give up.

use std::time::Duration;

use e2e::gamedeployment::{Columns, apply, manifest, wait_columns};
use e2e::hook::hook_pod;
use e2e::observe::Observer;
use e2e::{Cluster, DEADLINE, FAST_ELECTION, Operator, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use kube_sim::{FaultConfig, FaultRule};

/// Keeps measuring (every measurement fails the condition, failures never fail the metric): its status is written
/// all the time, so a hook-operator that acts without the lease would show in the audit.
const BUSY: &str = e2e::manifests::load!("hooktemplate-busy");

fn start(cluster: &Cluster, package: &str, bin: &str, user: &str, extra: &[&str]) -> Operator {
    let kubeconfig = cluster.dir().join(format!("{user}.kubeconfig"));
    cluster.sim().write_kubeconfig_for_user(&kubeconfig, user, &["system:masters"]).expect("kubeconfig written");
    let mut args: Vec<&str> = FAST_ELECTION.to_vec();
    args.extend(["--leader-elect-identity", user]);
    args.extend_from_slice(extra);
    cluster.operator_with_kubeconfig(package, bin, &kubeconfig, &args)
}

async fn holder(cluster: &Cluster, lease: &str) -> String {
    cluster.kubectl(&["get", "lease", lease, "-o", "jsonpath={.spec.holderIdentity}"]).await.stdout
}

async fn wait_holder(cluster: &Cluster, lease: &str, who: &str) {
    wait_for(&format!("{who} to hold lease {lease}"), DEADLINE, || async {
        (holder(cluster, lease).await == who).then_some(())
    })
    .await;
}

/// Successful writes of one of `users`, by (received, answered) time, leaving out Leases and Events.
fn writes(
    cluster: &Cluster,
    users: &[&str],
) -> Vec<(String, k8s_openapi::jiff::Timestamp, k8s_openapi::jiff::Timestamp, String)> {
    cluster
        .sim()
        .audit()
        .items
        .into_iter()
        .filter(|e| users.contains(&e.user.as_str()) && (200..300).contains(&e.code))
        .filter(|e| e.resource != "leases" && e.resource != "events")
        .map(|e| {
            let what = format!(
                "{} {}/{}{}",
                e.verb,
                e.resource,
                e.name,
                e.subresource.map(|s| format!("/{s}")).unwrap_or_default()
            );
            (e.user, e.request_received_timestamp, e.stage_timestamp, what)
        })
        .collect()
}

/// The last write of `old` ends before the first write of `new` begins.
fn assert_no_overlap(cluster: &Cluster, old: &str, new: &str) -> usize {
    let all = writes(cluster, &[old, new]);
    let last_old = all.iter().filter(|w| w.0 == old).max_by_key(|w| w.2).cloned();
    let first_new = all.iter().filter(|w| w.0 == new).min_by_key(|w| w.1).cloned();
    let (Some(last_old), Some(first_new)) = (last_old, first_new) else {
        panic!("both {old} and {new} wrote: {all:?}");
    };
    assert!(
        last_old.2 < first_new.1,
        "{old} wrote ({} at {}) after {new} started writing ({} at {})",
        last_old.3,
        last_old.2,
        first_new.3,
        first_new.1
    );
    eprintln!("{old}'s last write {} at {}; {new}'s first {} at {}", last_old.3, last_old.2, first_new.3, first_new.1);
    all.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_leaders_stop_writing_before_standbys_start() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let ip = hook_pod(&cluster, "canary-hook").await;
    let resolve = format!("1.1.1.1:9091={ip}:9091");
    let hook_args = ["--interval-scale", "0.2", "--web-resolve", resolve.as_str()];
    let _gd_a = start(&cluster, "gamedeployment-operator", "gamedeployment-operator", "gd-a", &[]);
    let _hk_a = start(&cluster, "hook-operator", "hook-operator", "hk-a", &hook_args);
    wait_holder(&cluster, "gamedeployment-operator", "gd-a").await;
    wait_holder(&cluster, "hook-operator", "hk-a").await;
    let _gd_b = start(&cluster, "gamedeployment-operator", "gamedeployment-operator", "gd-b", &[]);
    let _hk_b = start(&cluster, "hook-operator", "hook-operator", "hk-b", &hook_args);

    apply(&cluster, BUSY).await;
    let strategy = "  preDeleteUpdateStrategy:\n    hook:\n      templateName: busy\n";
    apply(&cluster, &manifest("led", 6, "RollingUpdate", strategy, "python:latest")).await;
    wait_columns(&cluster, "led", Columns::new(6, 6, 6, 6, 6)).await;
    // Two pods held by a hook that measures every 200 ms: HookRun status is written all the time.
    cluster.kubectl_ok(&["scale", "--replicas=4", "gamedeployment/led"]).await;
    wait_for("two busy HookRuns", DEADLINE, || async {
        let out = cluster.kubectl(&["get", "hookrun", "--no-headers"]).await.stdout;
        (out.lines().filter(|l| l.contains("Running")).count() == 2).then_some(())
    })
    .await;
    // A second workload gives the gamedeployment-operator pods to create across the partition (scaling `led` up
    // would release its held pods and end the busy runs).
    apply(&cluster, &manifest("work", 2, "RollingUpdate", "", "python:latest")).await;
    wait_columns(&cluster, "work", Columns::new(2, 2, 2, 2, 2)).await;

    // 409s on Lease writes: re-read, keep leading. Every version of the Leases in the window is checked.
    let leases = Observer::<Lease>::namespaced(&cluster, "default").await;
    cluster.sim().set_faults(FaultConfig {
        rules: vec![FaultRule {
            users: vec!["gd-a".into(), "hk-a".into()],
            resources: vec!["leases".into()],
            verbs: vec!["update".into()],
            conflict_rate: 0.5,
            ..FaultRule::default()
        }],
    });
    tokio::time::sleep(Duration::from_secs(6)).await;
    leases.assert_never("a 409 on renew does not end leadership", |seen| {
        let holder = seen.object.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
        let leader = match seen.name() {
            "gamedeployment-operator" => "gd-a",
            "hook-operator" => "hk-a",
            _ => return false,
        };
        seen.deleted || holder != Some(leader)
    });
    assert_eq!(holder(&cluster, "gamedeployment-operator").await, "gd-a", "a 409 on renew does not end leadership");
    assert_eq!(holder(&cluster, "hook-operator").await, "hk-a");
    drop(leases);

    // The partition: every Lease request of the leaders fails; their other requests still work.
    cluster.sim().set_faults(FaultConfig {
        rules: vec![FaultRule {
            users: vec!["gd-a".into(), "hk-a".into()],
            resources: vec!["leases".into()],
            error_rate: 1.0,
            error_code: Some(503),
            ..FaultRule::default()
        }],
    });
    // Work for the gamedeployment-operator while the lease runs out: pods to create.
    cluster.kubectl_ok(&["scale", "--replicas=10", "gamedeployment/work"]).await;
    wait_holder(&cluster, "gamedeployment-operator", "gd-b").await;
    wait_holder(&cluster, "hook-operator", "hk-b").await;
    // The standbys carry on: more pods, more measurements.
    cluster.kubectl_ok(&["scale", "--replicas=12", "gamedeployment/work"]).await;
    wait_for("the standby to scale", DEADLINE, || async {
        let out = cluster.kubectl(&["get", "gamedeployment", "work", "-o", "jsonpath={.status.replicas}"]).await.stdout;
        (out.trim().parse::<i32>().ok()? >= 12).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.sim().set_faults(FaultConfig::default());

    let gd_writes = assert_no_overlap(&cluster, "gd-a", "gd-b");
    let hook_writes = assert_no_overlap(&cluster, "hk-a", "hk-b");
    eprintln!("checked {gd_writes} gamedeployment-operator and {hook_writes} hook-operator writes");
    cluster.shutdown().await;
}
