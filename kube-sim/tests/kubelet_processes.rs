//! The process runtime: containers whose image is mapped to a program on this host run as real processes, with
//! their command, environment and volumes, their output as the container's log, probes driving readiness and
//! restarts, `preStop`, SIGTERM then SIGKILL after the grace period, and the kubelet's restart back-off.

use crate::kubelet_support;

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube_sim::{ImageRule, KubeletConfig, SimHandle};
use kubelet_support::*;
use serde_json::json;

/// `busybox` runs this host's tools, `python` its Python 3 (`--host-images`); real grace periods.
async fn start_processes() -> Result<SimHandle> {
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"].into_iter().find(|p| Path::new(p).is_file());
    let mut image_map: Vec<ImageRule> = vec!["busybox=/usr/bin".parse().map_err(anyhow::Error::msg)?];
    image_map.push(format!("python={}", python.context("python3 on this host")?).parse().map_err(anyhow::Error::msg)?);
    start_with(KubeletConfig { image_map, grace_period_scale: 1.0, ..KubeletConfig::fast() }).await
}

fn pod_from(value: serde_json::Value) -> Result<Pod> {
    Ok(serde_json::from_value(value)?)
}

/// [`kubectl`] with a kubeconfig for `sim`.
async fn kubectl_for(sim: &SimHandle, args: &[&str]) -> Result<String> {
    let (_, kubeconfig) = kubeconfig_dir(sim, "kubelet-processes")?;
    kubectl(&kubeconfig, args).await
}

/// Waits until `kubectl logs` (with `extra` flags) of the pod's container prints a line containing `wanted`.
async fn wait_log(sim: &SimHandle, pod: &str, extra: &[&str], wanted: &str) -> Result<String> {
    eventually(&format!("log of {pod} containing {wanted:?}"), || async {
        let mut args = vec!["logs", pod];
        args.extend_from_slice(extra);
        Ok(kubectl_for(sim, &args).await.ok().filter(|logs| logs.contains(wanted)))
    })
    .await
}

fn terminated(pod: &Pod, container: &str) -> Option<(i32, String)> {
    let state = container_status(pod, container)?.state.as_ref()?.terminated.as_ref()?;
    Some((state.exit_code, state.reason.clone().unwrap_or_default()))
}

#[tokio::test]
async fn a_mapped_container_runs_its_command_with_env_volumes_and_service_account() -> Result<()> {
    let sim = start_processes().await?;
    let client = sim.client().await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = json!({"metadata": {"name": "settings"}, "data": {"greeting": "hello from a configmap"}});
    config_maps.create(&PostParams::default(), &serde_json::from_value(cm)?).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // A mount path this host lacks, two levels deep: kube-sim creates it to mount onto, and removes it after.
    let parent = format!("/etc/kube-sim-test-{}", std::process::id());
    let settings = format!("{parent}/settings");
    assert!(!Path::new(&parent).exists());
    let script = r#"echo "pod=$POD_NAME ip=$POD_IP greeting=$GREETING arg=$1"; cat greeting; echo;
        echo "namespace=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)";
        echo "token=$(cat /var/run/secrets/kubernetes.io/serviceaccount/token)"; echo "cwd=$(pwd)"; exec sleep 3600"#;
    let pod = pod_from(json!({
        "metadata": {"name": "shell"},
        "spec": {
            "containers": [{
                "name": "main",
                "image": "busybox:1.36",
                "command": ["sh", "-c", script, "sh"],
                "args": ["$(POD_NAME)-arg"],
                "workingDir": settings,
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}}}
                ],
                "volumeMounts": [{"name": "settings", "mountPath": settings, "readOnly": true}]
            }],
            "volumes": [{"name": "settings", "configMap": {"name": "settings"}}]
        }
    }))?;
    create(&pods, &pod).await?;
    let running = wait_pod(&pods, "shell", "Ready", is_ready).await?;
    let ip = pod_ip(&running)?;
    let logs = wait_log(&sim, "shell", &[], "cwd=").await?;
    assert!(logs.contains(&format!("pod=shell ip={ip} greeting=hello from a configmap arg=shell-arg")), "{logs}");
    assert!(logs.contains("\nhello from a configmap\n"), "the ConfigMap is a file at its mountPath: {logs}");
    assert!(logs.contains("namespace=default\n"), "{logs}");
    assert!(logs.contains(&format!("cwd={settings}\n")), "{logs}");
    assert!(!logs.contains("[kube-sim]"), "a process container's log is its own output only: {logs}");
    assert!(!Path::new(&settings).join("greeting").exists(), "the volume is mounted for the container only");

    // The projected token authenticates as the pod's ServiceAccount.
    let token = logs.lines().find_map(|l| l.strip_prefix("token=")).context("token line")?;
    let as_pod = sim.client_for_token(token).await?;
    let denied = Api::<Pod>::namespaced(as_pod, "default").list(&Default::default()).await.unwrap_err();
    assert!(denied.to_string().contains("system:serviceaccount:default:default"), "{denied}");

    pods.delete("shell", &DeleteParams::default()).await?;
    wait_gone(&pods, "shell").await?;
    kube_sim::testing::eventually("the mount point kube-sim created is removed with the container", || async {
        Ok((!Path::new(&parent).exists()).then_some(()))
    })
    .await?;
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn probes_drive_readiness_and_a_failed_liveness_probe_restarts_the_container() -> Result<()> {
    let sim = start_processes().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    // A real `python -m http.server`, bound to the pod IP (pods share the host's network namespace).
    let pod = pod_from(json!({
        "metadata": {"name": "web"},
        "spec": {"containers": [{
            "name": "http",
            "image": "python:3.12",
            "command": ["python", "-m", "http.server", "8000", "--bind", "$(POD_IP)"],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "ports": [{"name": "web", "containerPort": 8000}],
            "readinessProbe": {"httpGet": {"path": "/", "port": "web"}, "periodSeconds": 1},
            "livenessProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 1, "failureThreshold": 3}
        }]}
    }))?;
    create(&pods, &pod).await?;
    let ready = wait_pod(&pods, "web", "Ready", is_ready).await?;
    let ip = pod_ip(&ready)?;
    let (status, _) = http(ip, 8000, "GET", "/nope").await?;
    assert_eq!(status, 404, "the real server answers");
    wait_log(&sim, "web", &[], "\"GET /nope HTTP/1.1\" 404").await?;

    // Liveness: the marker file in an emptyDir goes away, the exec probe fails, the kubelet kills the container
    // (SIGTERM: exit 143) and starts it again; readiness waits for the marker.
    let script = "echo instance; touch /data/healthy; sleep 2; rm /data/healthy; exec sleep 3600";
    let pod = pod_from(json!({
        "metadata": {"name": "flaky"},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main",
                "image": "busybox",
                "command": ["sh", "-c", script],
                "livenessProbe": {"exec": {"command": ["test", "-f", "/data/healthy"]}, "periodSeconds": 1, "failureThreshold": 1},
                "readinessProbe": {"exec": {"command": ["cat", "/data/healthy"]}, "periodSeconds": 1},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]
            }],
            "volumes": [{"name": "data", "emptyDir": {}}]
        }
    }))?;
    create(&pods, &pod).await?;
    let restarted = wait_pod(&pods, "flaky", "restarted after a failed liveness probe", |p| {
        container_status(p, "main").is_some_and(|s| s.restart_count >= 1)
    })
    .await?;
    let last = container_status(&restarted, "main").and_then(|s| s.last_state.as_ref()?.terminated.clone());
    let last = last.context("lastState.terminated")?;
    assert_eq!((last.exit_code, last.reason.as_deref()), (143, Some("Error")), "{last:?}");
    wait_log(&sim, "flaky", &["--previous"], "instance").await?;
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn deletion_runs_pre_stop_then_sigterm_then_sigkill_after_the_grace_period() -> Result<()> {
    let sim = start_processes().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    let marks = std::env::temp_dir().join(format!("kube-sim-prestop-{}", std::process::id()));
    std::fs::create_dir_all(&marks)?;
    let pod_with = |name: &str, script: &str| {
        pod_from(json!({
            "metadata": {"name": name},
            "spec": {
                "terminationGracePeriodSeconds": 2,
                "containers": [{
                    "name": "main",
                    "image": "busybox",
                    "command": ["sh", "-c", script],
                    "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", format!("echo preStop > /marks/{name}")]}}},
                    "volumeMounts": [{"name": "marks", "mountPath": "/marks"}]
                }],
                "volumes": [{"name": "marks", "hostPath": {"path": marks.display().to_string()}}]
            }
        }))
    };
    // One honours SIGTERM, the other ignores it and is killed when the grace period ends.
    let polite = "trap 'echo SIGTERM > /marks/polite.term; exit 0' TERM; echo up; while true; do sleep 0.1; done";
    create(&pods, &pod_with("polite", polite)?).await?;
    create(&pods, &pod_with("stubborn", "trap '' TERM; echo up; while true; do sleep 0.1; done")?).await?;
    for name in ["polite", "stubborn"] {
        wait_pod(&pods, name, "Ready", is_ready).await?;
        wait_log(&sim, name, &[], "up").await?;
    }
    // The last status each pod had before it went away, from a watch started before the deletions.
    let watch = watcher(pods.clone(), watcher::Config::default()).applied_objects().boxed();
    let collector = tokio::spawn(async move {
        let mut last = std::collections::HashMap::<String, Pod>::new();
        let mut watch = watch;
        while let Ok(Some(pod)) = watch.try_next().await {
            let name = pod.metadata.name.clone().unwrap_or_default();
            if terminated(&pod, "main").is_some() {
                last.insert(name, pod);
            }
            if last.len() == 2 {
                return last;
            }
        }
        last
    });
    for name in ["polite", "stubborn"] {
        pods.delete(name, &DeleteParams::default()).await?;
    }
    for name in ["polite", "stubborn"] {
        wait_gone(&pods, name).await?;
    }
    let last = tokio::time::timeout(Duration::from_secs(30), collector).await??;
    assert_eq!(terminated(&last["polite"], "main"), Some((0, "Completed".into())));
    assert_eq!(terminated(&last["stubborn"], "main"), Some((137, "Error".into())), "SIGKILL after the grace period");
    assert_eq!(std::fs::read_to_string(marks.join("polite.term"))?, "SIGTERM\n", "the program got SIGTERM");
    for name in ["polite", "stubborn"] {
        assert_eq!(std::fs::read_to_string(marks.join(name))?, "preStop\n", "the preStop hook ran in the container");
    }
    std::fs::remove_dir_all(&marks)?;
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn exits_restart_with_back_off_and_keep_the_previous_log() -> Result<()> {
    let sim = start_processes().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    let crashing = pod_from(json!({
        "metadata": {"name": "crashing"},
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", "echo run $(date +%s%N); exit 3"]}]}
    }))?;
    create(&pods, &crashing).await?;
    let backing_off = wait_pod(&pods, "crashing", "in CrashLoopBackOff after restarts", |p| {
        container_status(p, "main").is_some_and(|s| {
            s.restart_count >= 2
                && s.state.as_ref().and_then(|st| st.waiting.as_ref()).and_then(|w| w.reason.as_deref())
                    == Some("CrashLoopBackOff")
        })
    })
    .await?;
    let status = container_status(&backing_off, "main").context("status")?;
    let last = status.last_state.as_ref().and_then(|s| s.terminated.as_ref()).context("lastState.terminated")?;
    assert_eq!((last.exit_code, last.reason.as_deref()), (3, Some("Error")));
    wait_log(&sim, "crashing", &["--previous"], "run ").await?;

    let once = pod_from(json!({
        "metadata": {"name": "once"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", "echo done; exit 7"]}]}
    }))?;
    create(&pods, &once).await?;
    let failed = wait_pod(&pods, "once", "Failed", |p| phase(p) == Some("Failed")).await?;
    assert_eq!(terminated(&failed, "main"), Some((7, "Error".into())));
    assert_eq!(container_status(&failed, "main").map(|s| s.restart_count), Some(0));
    let logs = kubectl_for(&sim, &["logs", "once", "--tail=1"]).await?;
    assert_eq!(logs, "done\n");

    // A program the image does not have: the runtime's StartError.
    let missing = pod_from(json!({
        "metadata": {"name": "missing"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "command": ["no-such-program"]}]}
    }))?;
    create(&pods, &missing).await?;
    let failed = wait_pod(&pods, "missing", "Failed", |p| phase(p) == Some("Failed")).await?;
    assert_eq!(terminated(&failed, "main"), Some((128, "StartError".into())));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn kubectl_logs_follow_streams_a_running_process_until_it_exits() -> Result<()> {
    let sim = start_processes().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    let gate = std::env::temp_dir().join(format!("kube-sim-follow-{}", std::process::id()));
    std::fs::create_dir_all(&gate)?;
    let pod = pod_from(json!({
        "metadata": {"name": "talker"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "main",
                "image": "busybox",
                "command": ["sh", "-c", "echo first; while [ ! -f /gate/go ]; do sleep 0.1; done; echo second"],
                "volumeMounts": [{"name": "gate", "mountPath": "/gate"}]
            }],
            "volumes": [{"name": "gate", "hostPath": {"path": gate.display().to_string()}}]
        }
    }))?;
    create(&pods, &pod).await?;
    wait_log(&sim, "talker", &[], "first").await?;
    let dir = std::env::temp_dir().join(format!("kubelet-processes-{}-{}", std::process::id(), sim.addr().port()));
    let follow = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"))
        .args(["logs", "-f", "talker"])
        .output();
    let follow = tokio::spawn(follow);
    // The second line is printed only once the follower is attached: `-f` must wait for it, then end with the process.
    tokio::time::sleep(Duration::from_secs(1)).await;
    std::fs::write(gate.join("go"), "")?;
    let output = tokio::time::timeout(Duration::from_secs(60), follow).await???;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(String::from_utf8(output.stdout)?, "first\nsecond\n");
    std::fs::remove_dir_all(&gate)?;
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn an_image_change_restarts_the_process_from_the_new_spec() -> Result<()> {
    let sim = start_processes().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    let pod = pod_from(json!({
        "metadata": {"name": "updated"},
        "spec": {"containers": [{
            "name": "main",
            "image": "busybox:1.35",
            "command": ["sh", "-c", "echo running $IMAGE_TAG; exec sleep 3600"],
            "env": [{"name": "IMAGE_TAG", "value": "old"}]
        }]}
    }))?;
    create(&pods, &pod).await?;
    wait_log(&sim, "updated", &[], "running old").await?;
    kubectl_for(&sim, &["set", "image", "pod/updated", "main=busybox:1.36"]).await?;
    let restarted = wait_pod(&pods, "updated", "restarted from the new image", |p| {
        container_status(p, "main").is_some_and(|s| s.restart_count == 1 && s.image == "busybox:1.36" && s.ready)
    })
    .await?;
    let last = container_status(&restarted, "main").and_then(|s| s.last_state.as_ref()?.terminated.clone());
    assert_eq!(last.map(|t| t.exit_code), Some(143), "stopped with SIGTERM");
    wait_log(&sim, "updated", &["--previous"], "running old").await?;
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn processes_never_outlive_kube_sim() -> Result<()> {
    let sim = start_processes().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    let pod = pod_from(json!({
        "metadata": {"name": "sleeper"},
        // `$$` is a literal `$` in Kubernetes' `$(VAR)` expansion, so the shell sees `$$`.
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", "echo pid=$$$$; sleep 3600 & wait"]}]}
    }))?;
    create(&pods, &pod).await?;
    let logs = wait_log(&sim, "sleeper", &[], "pid=").await?;
    let pid: u32 = logs.lines().find_map(|l| l.strip_prefix("pid=")).context("pid line")?.parse()?;
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    sim.shutdown().await;
    eventually("the container's process is gone", || async {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        // Gone, or a zombie waiting to be reaped by this test process.
        Ok(state.is_none_or(|s| s.split_whitespace().nth(2) == Some("Z")).then_some(()))
    })
    .await?;
    Ok(())
}
