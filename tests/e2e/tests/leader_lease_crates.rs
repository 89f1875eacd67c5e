//! The property the operators' leader election (`common::runtime::leader`) exists for, put to the maintained crate
//! that would replace it: a leader whose Lease renewals fail stops acting before its Lease can expire, so a standby
//! that takes the Lease over never acts beside it (client-go's rule).
//!
//! Both tests play the same story on kube-sim: a holder and a standby, each its own user; once the holder leads,
//! every Lease write of the holder's user fails (500) while its reads still work, and the standby's requests all go
//! through. The standby takes the Lease once it expired. kube-lease-manager's holder keeps saying "leader" (its
//! `watch()` channel) past its Lease's expiry, until it reads the Lease after the standby released or took it; ours
//! stops its work at the renew deadline, before the expiry and before the standby starts. kube-leader-election (0.44) is built on kube 4, a major the workspace
//! does not use, and leaves renewing and stopping to its caller.

use std::sync::Arc;
use std::time::Duration;

use common::runtime::{LeaderElection, Shutdown};
use e2e::{Cluster, DEADLINE, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube_sim::{FaultConfig, FaultRule};
use tokio::sync::Mutex;

/// Who started or stopped leading (true: leads), and when, on the wall clock.
type Log = Arc<Mutex<Vec<(&'static str, bool, Timestamp)>>>;

/// A client of kube-sim as `user` (a member of `system:masters`).
async fn client_as(cluster: &Cluster, user: &str) -> kube::Client {
    let path = cluster.dir().join(format!("{user}.kubeconfig"));
    cluster.sim().write_kubeconfig_for_user(&path, user, &["system:masters"]).expect("kubeconfig written");
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig read");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .expect("kubeconfig is valid");
    kube::Client::try_from(config).expect("client")
}

/// Every Lease write of `user` fails with 500 from now on; its reads and everyone else's requests still work.
fn fail_lease_writes_of(cluster: &Cluster, user: &str) {
    cluster.sim().set_faults(FaultConfig {
        rules: vec![FaultRule {
            users: vec![user.into()],
            resources: vec!["leases".into()],
            verbs: vec!["create".into(), "update".into(), "patch".into()],
            error_rate: 1.0,
            error_code: Some(500),
            ..FaultRule::default()
        }],
    });
}

async fn holder(cluster: &Cluster, name: &str) -> Option<String> {
    let lease = Api::<Lease>::namespaced(cluster.client(), "default").get_opt(name).await.ok()??;
    lease.spec?.holder_identity
}

/// When the Lease `name` held by `user` expires, read once a Lease write of `user` failed (every later one fails
/// too, so its last renewal is final): its `renewTime` plus `leaseDurationSeconds`.
async fn expiry_once_renewals_fail(cluster: &Cluster, name: &str, user: &str) -> Timestamp {
    wait_for(&format!("a Lease write of {user} to fail"), DEADLINE, || async {
        let audit = cluster.sim().audit().items;
        audit.iter().any(|e| e.user == user && e.resource == "leases" && e.code == 500).then_some(())
    })
    .await;
    let lease = Api::<Lease>::namespaced(cluster.client(), "default").get(name).await.expect("the Lease");
    let spec = lease.spec.expect("a spec");
    assert_eq!(spec.holder_identity.as_deref(), Some(user), "{user} still holds the Lease when its renewals fail");
    let renewed = spec.renew_time.expect("a renewTime").0;
    let duration = spec.lease_duration_seconds.expect("a duration");
    renewed + std::time::Duration::from_secs(u64::try_from(duration).expect("a positive duration"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_lease_manager_keeps_a_holder_whose_renewals_fail_leading_past_its_lease_expiry() {
    use kube_lease_manager::LeaseManagerBuilder;
    let cluster = Cluster::start_with(kube_sim::SimConfig { kubelet: None, ..kube_sim::SimConfig::default() }).await;
    // Every change of each manager's "leader" channel, with the wall-clock time it was seen.
    let log: Log = Arc::default();
    let manager = |user: &'static str| {
        let (cluster, log) = (&cluster, log.clone());
        async move {
            let (mut leads, task) = LeaseManagerBuilder::new(client_as(cluster, user).await, "crate-lease")
                .with_namespace("default")
                .with_identity(user)
                .with_duration(3)
                .with_grace(1)
                .build()
                .await
                .expect("lease manager")
                .watch()
                .await;
            tokio::spawn(async move {
                while leads.changed().await.is_ok() {
                    let now = *leads.borrow_and_update();
                    log.lock().await.push((user, now, Timestamp::now()));
                }
            });
            // Detached: the manager runs until the test ends.
            drop(task);
        }
    };
    let leads = |who: &'static str| {
        let log = log.clone();
        async move { log.lock().await.iter().rev().find(|(w, ..)| *w == who).is_some_and(|(_, leads, _)| *leads) }
    };
    manager("first").await;
    wait_for("the first manager to lead", DEADLINE, || async { leads("first").await.then_some(()) }).await;
    manager("second").await;

    fail_lease_writes_of(&cluster, "first");
    let expiry = expiry_once_renewals_fail(&cluster, "crate-lease", "first").await;
    wait_for("the second manager to take the expired lease", DEADLINE, || async {
        leads("second").await.then_some(())
    })
    .await;
    assert_eq!(holder(&cluster, "crate-lease").await.as_deref(), Some("second"), "the Lease says so too");
    // The first manager learns that it lost only by reading the Lease after the second took it (if it reads at
    // all: its retries back off to 30 s), never from its own clock.
    wait_for("the first manager to notice", DEADLINE, || async { (!leads("first").await).then_some(()) }).await;
    let log = log.lock().await.clone();
    let (_, _, stopped) = log.iter().rev().find(|(who, leads, _)| *who == "first" && !*leads).copied().unwrap();
    let (_, _, second) = log.iter().find(|(who, leads, _)| *who == "second" && *leads).copied().unwrap();
    eprintln!(
        "kube-lease-manager's first holder said leader for {:?} past its Lease's expiry",
        stopped.duration_since(expiry)
    );
    // (The second may have logged its takeover a moment after the first read it: the overlap is between the expiry
    // and the first's drop, whoever logged first.)
    assert!(
        stopped > expiry,
        "the first manager said leader until {stopped}, past its Lease's expiry at {expiry}, while the second led \
         from {second}: {log:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_elector_stops_a_holder_whose_renewals_fail_before_its_lease_can_expire() {
    let cluster = Cluster::start_with(kube_sim::SimConfig { kubelet: None, ..kube_sim::SimConfig::default() }).await;
    // When each replica's work started and stopped, with the wall-clock time.
    let log: Log = Arc::default();
    let elect = |user: &'static str| {
        let (cluster, log) = (&cluster, log.clone());
        async move {
            let api = Api::<Lease>::namespaced(client_as(cluster, user).await, "default");
            let elector = LeaderElection::new(
                api,
                "default",
                "our-lease",
                user,
                Duration::from_secs(6),
                Duration::from_secs(3),
                Duration::from_millis(500),
            )
            .expect("valid settings");
            let leading = elector.leading();
            let task = tokio::spawn(async move {
                let shutdown = Shutdown::default();
                let work = || async {
                    log.lock().await.push((user, true, Timestamp::now()));
                    std::future::pending::<()>().await
                };
                let outcome = elector.run_while_leading(&shutdown, work).await;
                log.lock().await.push((user, false, Timestamp::now()));
                outcome
            });
            (leading, task)
        }
    };
    let (first_leads, first) = elect("first").await;
    wait_for("the first replica to lead", DEADLINE, || async { first_leads.get().then_some(()) }).await;
    let (second_leads, _second) = elect("second").await;

    fail_lease_writes_of(&cluster, "first");
    let expiry = expiry_once_renewals_fail(&cluster, "our-lease", "first").await;
    wait_for("the second replica to take the expired lease", DEADLINE, || async { second_leads.get().then_some(()) })
        .await;
    assert_eq!(holder(&cluster, "our-lease").await.as_deref(), Some("second"));
    let outcome = first.await.expect("the first replica's task ends");
    assert!(matches!(&outcome, Err(common::runtime::LeaderError::Lost { .. })), "the first gave up: {outcome:?}");
    let log = log.lock().await.clone();
    let (_, _, stopped) = log.iter().find(|(who, leads, _)| *who == "first" && !*leads).copied().unwrap();
    let (_, _, second) = log.iter().find(|(who, leads, _)| *who == "second" && *leads).copied().unwrap();
    assert!(
        stopped < expiry && stopped < second,
        "the first replica stopped at {stopped}, before its Lease's expiry at {expiry} and before the second started \
         at {second}: {log:?}"
    );
}
