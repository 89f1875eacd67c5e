//! Events through the API (kube-sim): a repeated Event continues its series on the first object (one object,
//! `series.count` 2, 3, …), a different related object or reason is its own Event, a series whose Event was
//! deleted starts a new Event, and similar events about more than ten related objects are combined into one Event
//! whose series is written at most once per flush interval.

use std::time::Duration;

use common::runtime::events::{COMBINED_PREFIX, EventCounters, EventSettings, EventSink, Note};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::DeleteParams;
use kube::runtime::events::Reporter;
use kube_sim::testing::eventually;
use prometheus_client::metrics::counter::Counter;

fn reference(kind: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("tkex.tencent.com/v1alpha1".into()),
        kind: Some(kind.into()),
        name: Some(name.into()),
        namespace: Some("default".into()),
        uid: Some(format!("uid-{name}")),
        ..ObjectReference::default()
    }
}

fn note(reason: &str, message: &str) -> Note {
    Note { warning: false, reason: reason.into(), message: message.into(), action: "Test".into() }
}

/// (reason, related pod, series count) of every Event, sorted.
async fn events(api: &Api<Event>) -> anyhow::Result<Vec<(String, String, i32)>> {
    let mut seen: Vec<(String, String, i32)> = api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .map(|e| {
            let pod = e.related.and_then(|r| r.name).unwrap_or_default();
            (e.reason.unwrap_or_default(), pod, e.series.map_or(1, |s| s.count))
        })
        .collect();
    seen.sort();
    Ok(seen)
}

/// kube-sim without a kubelet, a sink flushing series every 200 ms, and the Events API of `default`.
async fn small_sink() -> anyhow::Result<(kube_sim::SimHandle, EventSink, Api<Event>)> {
    let sim = kube_sim::start(kube_sim::SimConfig { kubelet: None, ..Default::default() }).await?;
    let client = sim.client().await;
    let reporter = Reporter { controller: "test-operator".into(), instance: None };
    let settings = EventSettings { capacity: 64, flush: Duration::from_millis(200), ..EventSettings::default() };
    let sink = EventSink::start_with(client.clone(), reporter, settings, EventCounters::default());
    Ok((sim, sink, Api::namespaced(client, "default")))
}

#[tokio::test]
async fn repeated_events_continue_their_series_through_the_api() -> anyhow::Result<()> {
    let (_sim, sink, api) = small_sink().await?;
    let gd = reference("GameDeployment", "gd");
    let (p1, p2) = (Some(reference("Pod", "p1")), Some(reference("Pod", "p2")));

    for _ in 0..3 {
        sink.publish_related(&gd, p1.clone(), note("HookBlocked", "waiting"));
    }
    sink.publish_related(&gd, p2.clone(), note("HookBlocked", "waiting"));
    sink.publish_related(&gd, p1.clone(), note("SuccessfulCreate", "created"));
    let expected = vec![
        ("HookBlocked".to_string(), "p1".to_string(), 3),
        ("HookBlocked".to_string(), "p2".to_string(), 1),
        ("SuccessfulCreate".to_string(), "p1".to_string(), 1),
    ];
    let seen = eventually("three Events, the first a series of 3", || async {
        let seen = events(&api).await?;
        Ok((seen == expected).then_some(seen))
    })
    .await;
    assert!(seen.is_ok(), "{:?} (last seen {:?})", seen.err(), events(&api).await?);

    // The series' Event deleted (the API server's Event TTL): the next repeat creates a new one.
    for event in api.list(&Default::default()).await?.items {
        if event.related.and_then(|r| r.name).as_deref() == Some("p2") {
            api.delete(event.metadata.name.as_deref().unwrap_or_default(), &DeleteParams::default()).await?;
        }
    }
    sink.publish_related(&gd, p2.clone(), note("HookBlocked", "waiting again"));
    eventually("the deleted series started again as a new Event", || async {
        let seen = events(&api).await?;
        Ok(seen.contains(&("HookBlocked".to_string(), "p2".to_string(), 1)).then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(events(&api).await?.len(), 3, "nothing else was created");
    Ok(())
}

#[tokio::test]
async fn similar_events_about_many_pods_are_combined_and_their_writes_bounded() -> anyhow::Result<()> {
    let sim = kube_sim::start(kube_sim::SimConfig { kubelet: None, ..Default::default() }).await?;
    let client = sim.client().await;
    let reporter = Reporter { controller: "test-operator".into(), instance: None };
    let combined = Counter::default();
    let settings = EventSettings { capacity: 1024, flush: Duration::from_secs(2), ..EventSettings::default() };
    let counters = EventCounters { dropped: Counter::default(), combined: combined.clone() };
    let sink = EventSink::start_with(client.clone(), reporter, settings, counters);
    let api: Api<Event> = Api::namespaced(client, "default");
    let gd = reference("GameDeployment", "gd");

    // A roll of 500 pods: one Event each, as the gamedeployment-operator publishes them.
    for i in 0..500 {
        let pod = format!("pod-{i}");
        sink.publish_related(
            &gd,
            Some(reference("Pod", &pod)),
            note("SuccessfulUpdatePodInPlace", &format!("updated {pod}")),
        );
    }
    sink.publish(&gd, note("RolloutComplete", "done"));
    let expected: Vec<(String, String, i32)> = (0..10)
        .map(|i| ("SuccessfulUpdatePodInPlace".to_string(), format!("pod-{i}"), 1))
        .chain([
            ("RolloutComplete".to_string(), String::new(), 1),
            ("SuccessfulUpdatePodInPlace".to_string(), String::new(), 490),
        ])
        .collect();
    let mut expected = expected;
    expected.sort();
    let seen = eventually("ten Events of their own and one combining 490", || async {
        let seen = events(&api).await?;
        Ok((seen == expected).then_some(seen))
    })
    .await;
    assert!(seen.is_ok(), "{:?} (last seen {:?})", seen.err(), events(&api).await?);
    assert_eq!(combined.get(), 490);
    let all = api.list(&Default::default()).await?.items;
    let aggregate =
        all.iter().find(|e| e.related.is_none() && e.reason.as_deref() == Some("SuccessfulUpdatePodInPlace"));
    let note_of = aggregate.and_then(|e| e.note.clone()).unwrap_or_default();
    assert_eq!(note_of, format!("{COMBINED_PREFIX}updated pod-499"), "the latest note");

    // 12 Events created; the combined one patched a handful of times (once per 2 s flush), not 489 times.
    let writes: Vec<_> = sim
        .audit()
        .items
        .into_iter()
        .filter(|e| e.resource == "events" && e.verb != "list" && e.verb != "get" && e.verb != "watch")
        .collect();
    let creates = writes.iter().filter(|e| e.verb == "create").count();
    let patches = writes.iter().filter(|e| e.verb == "patch").count();
    assert_eq!(creates, 12, "{writes:#?}");
    assert!(patches <= 3, "{patches} patches: {writes:#?}");
    Ok(())
}

/// (note, series count) of every Event about `pod`, sorted.
async fn notes_about(api: &Api<Event>, pod: &str) -> anyhow::Result<Vec<(String, i32)>> {
    let mut seen: Vec<(String, i32)> = api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.related.as_ref().and_then(|r| r.name.as_deref()) == Some(pod))
        .map(|e| (e.note.unwrap_or_default(), e.series.map_or(1, |s| s.count)))
        .collect();
    seen.sort();
    Ok(seen)
}

#[tokio::test]
async fn an_event_whose_text_changed_is_its_own_event_not_a_stale_series() -> anyhow::Result<()> {
    // `kubectl describe gd` once showed `PodLifecycle (x3) pod P: held in PreparingUpdate` when P had been in
    // PreparingDelete for 13 s: the series kept its first text (issue 34, item 4). As client-go's events library
    // does, the note is part of what makes a series: a repeat with the same text counts, a new text is an Event.
    let (_sim, sink, api) = small_sink().await?;
    let (gd, p1) = (reference("GameDeployment", "gd"), Some(reference("Pod", "p1")));
    for state in ["PreparingUpdate", "PreparingUpdate", "PreparingDelete"] {
        sink.publish_related(&gd, p1.clone(), note("PodLifecycle", &format!("pod p1: held in {state}")));
    }
    let expected =
        vec![("pod p1: held in PreparingDelete".to_string(), 1), ("pod p1: held in PreparingUpdate".to_string(), 2)];
    let seen = eventually("one Event per text, each counting its own repeats", || async {
        let seen = notes_about(&api, "p1").await?;
        Ok((seen == expected).then_some(seen))
    })
    .await;
    assert!(seen.is_ok(), "{:?} (last seen {:?})", seen.err(), notes_about(&api, "p1").await?);
    Ok(())
}
