//! Watch semantics: resource versions, ordering, selectors, bookmarks, timeouts,
//! `sendInitialEvents`, `410 Gone`, dropped connections, and kube-rs watchers on top.

use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube_sim::SimConfig;
use serde_json::json;

use crate::support::*;

fn cm(name: &str, label: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": label}}, "data": {"v": "0"}}))
        .unwrap_or_default()
}

#[tokio::test]
async fn watch_from_a_resource_version_delivers_every_change_in_order() -> Result<()> {
    let sim = sim().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().await);
    let raw = Raw::new(&sim);
    let start = raw.configmaps_version().await?;
    api.create(&PostParams::default(), &cm("a", "x")).await?;
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "1"}}))).await?;
    api.delete("a", &DeleteParams::default()).await?;
    let mut w = raw.watch(&format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={start}")).await?;
    let mut last_rv = start.parse::<u64>()?;
    for want in ["ADDED", "MODIFIED", "DELETED"] {
        let e = w.next_event().await?;
        assert_eq!(e["type"], want);
        assert_eq!(e["object"]["kind"], "ConfigMap", "watch objects carry their kind");
        let rv: u64 = e["object"]["metadata"]["resourceVersion"].as_str().context("rv")?.parse()?;
        assert!(rv > last_rv, "resource versions increase: {rv} after {last_rv}");
        last_rv = rv;
    }
    // Without a resource version, the current state comes first as ADDED events.
    api.create(&PostParams::default(), &cm("b", "x")).await?;
    let mut w = raw.watch("/api/v1/namespaces/default/configmaps?watch=1").await?;
    let first = w.next_event().await?;
    assert_eq!((first["type"].as_str(), first["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("b")));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn selector_watches_see_objects_enter_and_leave_the_selection() -> Result<()> {
    let sim = sim().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().await);
    let raw = Raw::new(&sim);
    let rv = raw.configmaps_version().await?;
    let mut w = raw
        .watch(&format!(
            "/api/v1/namespaces/default/configmaps?watch=true&labelSelector=app%3Dweb&resourceVersion={rv}"
        ))
        .await?;
    api.create(&PostParams::default(), &cm("c", "other")).await?;
    api.patch("c", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}}))).await?;
    api.patch("c", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "2"}}))).await?;
    api.patch("c", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "gone"}}}))).await?;
    let kinds = [w.next_event().await?, w.next_event().await?, w.next_event().await?];
    let types: Vec<&str> = kinds.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types, vec!["ADDED", "MODIFIED", "DELETED"]);
    // The DELETED event carries the last matching state, at the new resource version.
    assert_eq!(kinds[2]["object"]["metadata"]["labels"]["app"], "web");
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn bookmarks_timeouts_and_initial_events() -> Result<()> {
    let sim =
        sim_with(SimConfig { kubelet: None, bookmark_interval: Duration::from_millis(100), ..SimConfig::default() })
            .await?;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().await);
    api.create(&PostParams::default(), &cm("d", "x")).await?;
    let raw = Raw::new(&sim);
    let rv = raw.configmaps_version().await?;
    let mut w = raw
        .watch(&format!(
            "/api/v1/namespaces/default/configmaps?watch=true&allowWatchBookmarks=true&resourceVersion={rv}"
        ))
        .await?;
    let b = w.next().await?.context("bookmark")?;
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(b["object"]["kind"], "ConfigMap");
    assert!(b["object"]["metadata"]["resourceVersion"].as_str().is_some());

    // timeoutSeconds ends the stream.
    let mut t = raw
        .watch(&format!("/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1&resourceVersion={rv}"))
        .await?;
    assert!(t.next().await?.is_none(), "no events, and the server closes the watch after the timeout");

    // Streaming lists: the state as ADDED events, then a bookmark marking its end.
    let mut s = raw
        .watch("/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan")
        .await?;
    let added = s.next().await?.context("added")?;
    assert_eq!((added["type"].as_str(), added["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("d")));
    let end = s.next().await?.context("end bookmark")?;
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    let bad = raw.get("/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true").await?;
    assert_eq!(bad.status, 422);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn expired_resource_versions_get_410_and_kube_watchers_recover() -> Result<()> {
    let sim = sim_with(SimConfig { kubelet: None, watch_history: 5, ..SimConfig::default() }).await?;
    let client = sim.client().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let first = api.create(&PostParams::default(), &cm("e", "x")).await?;
    let old_rv = first.metadata.resource_version.clone().context("rv")?;
    for i in 0..10 {
        api.patch("e", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": i.to_string()}}))).await?;
    }
    let raw = Raw::new(&sim);
    let mut w =
        raw.watch(&format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={old_rv}")).await?;
    let e = w.next().await?.context("error event")?;
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["code"], 410);
    assert_eq!(e["object"]["reason"], "Expired");
    assert!(
        e["object"]["message"].as_str().unwrap_or("").starts_with(&format!("too old resource version: {old_rv} ("))
    );
    assert!(w.next().await?.is_none());

    // A kube-rs watcher over the same resource sees the final state, even when its watch is
    // cut and must resume (or re-list after 410).
    let stream = watcher(api.clone(), watcher::Config::default()).default_backoff().applied_objects().boxed();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<String, String>::new()));
    let s2 = seen.clone();
    let task = tokio::spawn(async move {
        let mut stream = stream;
        while let Some(item) = stream.next().await {
            // Errors (a 410 after the dropped watch) make the watcher re-list; keep going.
            let Ok(obj) = item else { continue };
            let v = obj.data.as_ref().and_then(|d| d.get("v").cloned()).unwrap_or_default();
            if let (Some(n), Ok(mut m)) = (obj.metadata.name.clone(), s2.lock()) {
                m.insert(n, v);
            }
        }
    });
    eventually("the watcher to see e=9", || async {
        Ok(seen.lock().ok().and_then(|m| (m.get("e").map(String::as_str) == Some("9")).then_some(())))
    })
    .await?;
    assert!(sim.drop_watches() >= 1);
    for i in 0..20 {
        api.patch("e", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": format!("after-{i}")}}))).await?;
    }
    api.create(&PostParams::default(), &cm("f", "x")).await?;
    eventually("the watcher to catch up after the dropped watch", || async {
        Ok(seen
            .lock()
            .ok()
            .and_then(|m| (m.get("e").map(String::as_str) == Some("after-19") && m.contains_key("f")).then_some(())))
    })
    .await?;
    task.abort();
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn watching_a_single_object_by_name() -> Result<()> {
    let sim = sim().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().await);
    api.create(&PostParams::default(), &cm("one", "x")).await?;
    api.create(&PostParams::default(), &cm("two", "x")).await?;
    let raw = Raw::new(&sim);
    let mut w = raw.watch("/api/v1/namespaces/default/configmaps?watch=true&fieldSelector=metadata.name%3Dtwo").await?;
    let e = w.next_event().await?;
    assert_eq!(e["object"]["metadata"]["name"], "two");
    api.patch("one", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "9"}}))).await?;
    api.patch("two", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "9"}}))).await?;
    let e = w.next_event().await?;
    assert_eq!((e["type"].as_str(), e["object"]["metadata"]["name"].as_str()), (Some("MODIFIED"), Some("two")));
    sim.shutdown().await;
    Ok(())
}

/// Each change is encoded once and the bytes shared by the watches that receive it (kube-sim's watch cache of
/// encodings): every watch must still get the object as *its* request asks for it — two JSON watches of one version
/// the same object, a watch of another served version that version's `apiVersion` and defaults, a Table watch rows,
/// a metadata watch `PartialObjectMetadata` — and the state after each write, not an earlier one.
#[tokio::test]
async fn watches_of_one_change_share_its_encoding_but_each_gets_its_own_representation() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let mut crd = test_crd();
    // A second served version whose schema defaults a field the storage version does not know.
    let mut beta = crd["spec"]["versions"][0].clone();
    beta["name"] = json!("v1beta1");
    beta["storage"] = json!(false);
    beta["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["tier"] =
        json!({"type": "string", "default": "beta"});
    crd["spec"]["versions"].as_array_mut().context("versions")?.push(beta);
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.create(&PostParams::default(), &serde_json::from_value(crd)?).await?;
    let gs: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), "default", &gameserver_resource());
    let raw = Raw::new(&sim);
    let alpha = "/apis/sim.kube-sim.test/v1alpha1/namespaces/default/gameservers";
    let rv = raw.get(alpha).await?.body["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string();
    let watch = |version: &str| {
        format!("/apis/sim.kube-sim.test/{version}/namespaces/default/gameservers?watch=true&resourceVersion={rv}")
    };
    let mut json_a = raw.watch(&watch("v1alpha1")).await?;
    let mut json_b = raw.watch(&watch("v1alpha1")).await?;
    let mut beta_watch = raw.watch(&watch("v1beta1")).await?;
    let mut table =
        raw.watch_with(&watch("v1alpha1"), &[("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")]).await?;
    let mut metadata = raw
        .watch_with(&watch("v1alpha1"), &[("Accept", "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io")])
        .await?;

    gs.create(&PostParams::default(), &gameserver("a")).await?;
    gs.patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await?;
    gs.patch_status("a", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Running"}}))).await?;
    for (i, (kind, replicas, phase)) in
        [("ADDED", 2, None), ("MODIFIED", 3, None), ("MODIFIED", 3, Some("Running"))].into_iter().enumerate()
    {
        let a = json_a.next_event().await?;
        let b = json_b.next_event().await?;
        let beta = beta_watch.next_event().await?;
        assert_eq!(a, b, "event {i}: two watches of one version get the same object");
        assert_eq!((a["type"].as_str(), beta["type"].as_str()), (Some(kind), Some(kind)), "event {i}");
        assert_eq!(a["object"]["apiVersion"], "sim.kube-sim.test/v1alpha1", "event {i}");
        assert_eq!(beta["object"]["apiVersion"], "sim.kube-sim.test/v1beta1", "event {i}");
        assert_eq!(beta["object"]["spec"]["tier"], "beta", "event {i}: the served version's defaults");
        assert!(a["object"]["spec"].get("tier").is_none(), "event {i}: not the other version's");
        for e in [&a, &beta] {
            assert_eq!(e["object"]["spec"]["replicas"], replicas, "event {i}: the state after the write");
            assert_eq!(e["object"]["status"].get("phase").and_then(|p| p.as_str()), phase, "event {i}");
        }
        let rv = &a["object"]["metadata"]["resourceVersion"];
        assert_eq!(&beta["object"]["metadata"]["resourceVersion"], rv, "event {i}");
        let t = table.next_event().await?;
        assert_eq!((t["type"].as_str(), t["object"]["kind"].as_str()), (Some(kind), Some("Table")), "event {i}");
        assert_eq!(t["object"]["rows"][0]["cells"][1], replicas, "event {i}: the DESIRED column");
        let m = metadata.next_event().await?;
        assert_eq!(m["object"]["kind"], "PartialObjectMetadata", "event {i}");
        assert!(m["object"].get("spec").is_none(), "event {i}");
        assert_eq!(&m["object"]["metadata"]["resourceVersion"], rv, "event {i}");
    }
    sim.shutdown().await;
    Ok(())
}

/// A write's JSON response is encoded once with the change's watch event (whichever is made first) and is byte for
/// byte what the object's own encoding gives: the body a GET returns afterwards and the object the watch sends.
#[tokio::test]
async fn a_writes_response_is_the_encoding_its_watches_send() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let list = "/api/v1/namespaces/default/configmaps";
    let rv = raw.get(list).await?.body["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string();
    let mut watch = raw.watch(&format!("{list}?watch=true&resourceVersion={rv}")).await?;
    let one = format!("{list}/c");
    let merge = "application/merge-patch+json";
    let mut responses = vec![
        ("ADDED", raw.post(list, &json!({"metadata": {"name": "c"}, "data": {"a": "1"}})).await?),
        ("MODIFIED", raw.patch(&one, merge, &json!({"data": {"b": "2"}})).await?),
    ];
    let current = raw.get(&one).await?.body;
    let mut put = current.clone();
    put["data"]["c"] = json!("3");
    responses.push(("MODIFIED", raw.put(&one, &put).await?));
    for (i, (kind, response)) in responses.iter().enumerate() {
        assert!((200..300).contains(&response.status), "write {i}: {}", response.text);
        let line = watch.next_line().await?.context("watch event")?;
        assert_eq!(
            line,
            format!("{{\"type\":\"{kind}\",\"object\":{}}}\n", response.text),
            "write {i}: the watch's object, byte for byte"
        );
    }
    let after_put = raw.get(&one).await?;
    assert_eq!(responses[2].1.text, after_put.text, "the last write's response is what a GET returns");
    // A write that changes nothing and a dry run answer with what they would store, encoded as before.
    let noop = raw.patch(&one, merge, &json!({"data": {"c": "3"}})).await?;
    assert_eq!(noop.text, after_put.text);
    let dry = raw.patch(&format!("{one}?dryRun=All"), merge, &json!({"data": {"d": "4"}})).await?;
    assert_eq!(dry.status, 200, "{}", dry.text);
    assert_eq!(dry.body["data"]["d"], "4");
    assert!(dry.text.starts_with(r#"{"kind":"ConfigMap","apiVersion":"v1","#), "{}", dry.text);
    assert_eq!(raw.get(&one).await?.text, after_put.text, "the dry run stored nothing");
    let last = raw.patch(&one, merge, &json!({"data": {"e": "5"}})).await?;
    let line = watch.next_line().await?.context("watch event")?;
    assert_eq!(
        line,
        format!("{{\"type\":\"MODIFIED\",\"object\":{}}}\n", last.text),
        "the watch got nothing for the no-op and the dry run"
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn events_already_queued_for_a_watch_arrive_together_and_intact() -> Result<()> {
    let sim = sim().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().await);
    let raw = Raw::new(&sim);
    let start = raw.configmaps_version().await?;
    for i in 0..30 {
        api.create(&PostParams::default(), &cm(&format!("burst-{i}"), "x")).await?;
    }
    // All thirty are queued before the watch starts, so its first chunk carries more than one of them (one per
    // chunk before): fewer socket writes and reader wake-ups for a burst. The lines stay whole and in order.
    let url = format!("{}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={start}", raw.base);
    let mut response = raw.http.get(url).send().await?;
    let first = tokio::time::timeout(Duration::from_secs(30), response.chunk()).await??.context("first chunk")?;
    let lines_in_first = first.iter().filter(|b| **b == b'\n').count();
    assert!(lines_in_first > 1, "the first chunk held {lines_in_first} complete events");
    let mut text = first.to_vec();
    while text.iter().filter(|b| **b == b'\n').count() < 30 {
        let chunk = tokio::time::timeout(Duration::from_secs(30), response.chunk()).await??.context("more")?;
        text.extend_from_slice(&chunk);
    }
    let names: Vec<String> = text
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(serde_json::from_slice::<serde_json::Value>)
        .map(|event| event.map(|e| e["object"]["metadata"]["name"].as_str().unwrap_or_default().to_string()))
        .collect::<Result<_, _>>()?;
    let expected: Vec<String> = (0..30).map(|i| format!("burst-{i}")).collect();
    assert_eq!(names, expected);
    sim.shutdown().await;
    Ok(())
}
