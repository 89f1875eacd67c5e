//! 1,000 pods created in a burst all get scheduled, unique IPs and Ready; deleting them all frees
//! everything. Prints how long each phase took (a figure, not an assertion).

use crate::kubelet_support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use kubelet_support::*;

const PODS: usize = 1000;
/// Far more than needed even on a loaded two-core machine; the test never asserts on speed.
const SCALE_DEADLINE: Duration = Duration::from_secs(300);

async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> Result<bool>) -> Result<Duration> {
    let started = Instant::now();
    loop {
        if done().await? {
            return Ok(started.elapsed());
        }
        if started.elapsed() > SCALE_DEADLINE {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_thousand_pods_become_ready_and_go_away() -> Result<()> {
    let sim = start().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    let started = Instant::now();
    stream::iter(0..PODS)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let mut pod = pod(&format!("load-{i:04}"), vec![container("app", "app:v1", &[])], &[]);
                pod.metadata.labels = Some([("load".to_string(), "yes".to_string())].into());
                create(&pods, &pod).await
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    let created = started.elapsed();

    let selector = ListParams::default().labels("load=yes");
    let mut last = (0, 0);
    let ready_after = wait_for("1,000 ready pods", async || {
        let list = pods.list(&selector).await?;
        let ready = list.items.iter().filter(|p| is_ready(p)).count();
        let ips: HashSet<_> = list.items.iter().filter_map(|p| pod_ip(p).ok()).collect();
        last = (ready, ips.len());
        Ok(ready == PODS && ips.len() == PODS)
    })
    .await?;
    assert_eq!(last, (PODS, PODS), "every pod ready with its own IP");
    println!(
        "kubelet scale: created {PODS} pods in {created:.1?}, all Running+Ready {:.1?} after creation",
        ready_after
    );

    let deleting = Instant::now();
    pods.delete_collection(&DeleteParams::default(), &selector).await?;
    let gone_after =
        wait_for("all pods to be deleted", async || Ok(pods.list(&selector).await?.items.is_empty())).await?;
    println!("kubelet scale: {PODS} pods gracefully deleted in {:.1?}", deleting.elapsed().max(gone_after));
    sim.shutdown().await;
    Ok(())
}
