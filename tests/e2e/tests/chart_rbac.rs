//! The chart's RBAC is exactly what the operators need. Both operator binaries run against kube-sim with
//! ServiceAccount tokens bound to nothing but the RBAC objects the chart renders (release `ops` in
//! `kourse-system`), with leader election on the chart's Lease names, and complete a compact walkthrough (success
//! template, 6 ready, scale to 5 through a pre-delete HookRun, in-place image update of 3 pods, plus a HookRun with
//! a `kubernetes` metric). Then every rule of every rendered Role/ClusterRole is removed in turn: the operators
//! are restarted under the reduced RBAC and the scenario is driven until a Forbidden error naming that rule's
//! resource shows up in the operator logs, Events or HookRun status.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::api::{GameDeployment, HookPhase, HookRun};
use e2e::gamedeployment::Columns;
use e2e::observe::{Observed, Observer};
use e2e::{Cluster, Operator, helm, wait_for};
use k8s_openapi::api::events::v1::Event;
use kube_sim::{FaultConfig, FaultRule};
use serde_json::{Value, json};

const CHART: &str = "charts/gamedeployment-operators";
const NS: &str = "kourse-system";
const GD: &str = "test-gamedeployment";
const LONG: Duration = Duration::from_secs(240);
/// How long one removal case may take to show its Forbidden error (generous for a loaded 2-core machine).
const CASE_DEADLINE: Duration = Duration::from_secs(120);
/// How long a removal case waits for a step of the scenario to settle before driving it on regardless (the
/// missing rule may be what stops it).
const STEP: Duration = Duration::from_secs(15);
const NEW_IMAGE: &str =
    r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value":"python:3.5"}]"#;

const OLD_IMAGE: &str =
    r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value":"python:latest"}]"#;

const TARGET_POD: &str = e2e::manifests::load!("pod-target");

/// Finished ownerless HookRuns are collected 2 s after they finish, so the hook-operator's `delete` on hookruns
/// is exercised (the chart's default is 24 h).
const TTL: &[&str] = &["--finished-run-ttl", "2s"];

const RBAC_KINDS: [&str; 5] = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];

fn is_role(doc: &Value) -> bool {
    doc["kind"] == "ClusterRole" || doc["kind"] == "Role"
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// The rendered objects of one operator (its name suffix `-gamedeployment` / `-hook`).
struct OperatorSpec {
    package: &'static str,
    bin: &'static str,
    account: String,
    extra: Vec<String>,
}

struct Harness {
    rbac: Vec<Value>,
    specs: Vec<OperatorSpec>,
    kubeconfigs: Vec<PathBuf>,
    running: Vec<Operator>,
    /// Per operator, the log length when it was last started: evidence is searched only after that.
    log_marks: Vec<usize>,
    /// Last: dropped after the operators, so a failing test still prints their logs from its directory.
    cluster: Cluster,
}

impl Harness {
    async fn apply_rbac(&self, docs: &[Value]) {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": docs});
        let path = self.cluster.dir().join("rbac.json");
        std::fs::write(&path, list.to_string()).expect("rbac written");
        self.cluster.kubectl_ok(&["apply", "--validate=false", "-f", &path.display().to_string()]).await;
    }

    async fn stop(&mut self) {
        for op in &mut self.running {
            op.kill().await;
        }
        self.running.clear();
    }

    async fn start(&mut self) {
        self.stop().await;
        self.log_marks.clear();
        for (spec, kubeconfig) in self.specs.iter().zip(&self.kubeconfigs) {
            let args: Vec<&str> = spec.extra.iter().map(String::as_str).collect();
            let log = self.cluster.dir().join(format!("{}.log", spec.bin));
            self.log_marks.push(std::fs::metadata(&log).map_or(0, |m| m.len() as usize));
            let op = self.cluster.operator_with_kubeconfig(spec.package, spec.bin, kubeconfig, &args);
            self.running.push(op);
        }
    }

    /// Operator logs since the last start, and every version of the Events and HookRuns `watches` saw (a run's
    /// status message lasts only until the finished-run TTL collects it: the watch keeps it).
    fn evidence(&self, watches: &Watches) -> String {
        let mut all = String::new();
        for (op, mark) in self.running.iter().zip(&self.log_marks) {
            all.push_str(op.logs().get(*mark..).unwrap_or(""));
        }
        for event in watches.events.versions() {
            all.push_str(&serde_json::to_string(&event.object).unwrap_or_default());
        }
        for run in watches.runs.versions() {
            all.push_str(&serde_json::to_string(&run.object).unwrap_or_default());
        }
        all
    }
}

/// Watches on one scenario's namespace, started before the scenario: what the tests look for is observed, not
/// polled for, so a state that does not last (a run's phase before it is collected) cannot be missed.
struct Watches {
    runs: Observer<HookRun>,
    events: Observer<Event>,
    gamedeployments: Observer<GameDeployment>,
}

impl Watches {
    async fn start(cluster: &Cluster, ns: &str) -> Self {
        Self {
            runs: Observer::namespaced(cluster, ns).await,
            events: Observer::namespaced(cluster, ns).await,
            gamedeployments: Observer::namespaced(cluster, ns).await,
        }
    }

    /// The printer columns of the GameDeployment at its last observed version.
    fn columns(&self) -> Option<Columns> {
        self.gamedeployments.current().iter().find(|g| g.metadata.name.as_deref() == Some(GD)).map(Columns::of)
    }

    async fn wait_gd(&self, want: Columns) {
        self.gamedeployments
            .wait_state(&format!("{GD} to show {want:?}"), LONG, |gds| {
                gds.iter().any(|g| g.metadata.name.as_deref() == Some(GD) && Columns::of(g) == want).then_some(())
            })
            .await;
    }
}

fn phase(run: &Observed<HookRun>) -> Option<HookPhase> {
    run.object.status.as_ref()?.phase
}

async fn write(cluster: &Cluster, name: &str, text: &str) -> String {
    let path = cluster.dir().join(name);
    std::fs::write(&path, text).expect("manifest written");
    path.display().to_string()
}

async fn token_kubeconfig(cluster: &Cluster, account: &str) -> PathBuf {
    let token = cluster.kubectl_ok(&["-n", NS, "create", "token", account, "--duration=24h"]).await;
    let path = cluster.dir().join(format!("kubeconfig-{account}"));
    cluster.sim().write_kubeconfig_for_token(&path, token.trim()).expect("token kubeconfig written");
    path
}

/// Sets up namespace `ns` for a scenario: the success template, a target pod and the kubernetes-metric HookRun.
async fn prepare(cluster: &Cluster, ns: &str) {
    cluster.kubectl_ok(&["create", "namespace", ns]).await;
    cluster.kubectl_ok(&["-n", ns, "apply", "-f", "examples/hook-template-success.yaml"]).await;
    let pod = write(cluster, "target.yaml", TARGET_POD).await;
    cluster.kubectl_ok(&["-n", ns, "apply", "-f", &pod]).await;
    let run = write(
        cluster,
        &format!("kube-run-{ns}.yaml"),
        &e2e::manifests::load!(
            "hookrun-drain-flag",
            name = "drain-flag",
            key = "example.com/drain-state",
            pod = "target",
            namespace = ns,
            value = "draining"
        ),
    )
    .await;
    cluster.kubectl_ok(&["-n", ns, "apply", "-f", &run]).await;
    // With a claim template, so the claim verbs are used: claims created with each pod, deleted on scale-in.
    let with_claims = format!(
        "{}  volumeClaimTemplates:\n    - metadata:\n        name: data\n      spec:\n        accessModes: [ReadWriteOnce]\n        resources:\n          requests:\n            storage: 1Gi\n",
        quick_example()
    );
    let gd = write(cluster, &format!("gamedeployment-{ns}.yaml"), &with_claims).await;
    cluster.kubectl_ok(&["-n", ns, "apply", "-f", &gd]).await;
}

/// `examples/gamedeployment.yaml` with its waits shortened: `minReadySeconds` 1 instead of 30 and an in-place
/// update's `gracePeriodSeconds` 1 instead of 30. The requests the operators send are the same (the RBAC is what
/// this suite is about); with the example's 30 s each, an in-place update of 5 pods two at a time spent minutes
/// waiting for pods to become available.
fn quick_example() -> String {
    let example = std::fs::read_to_string(e2e::repo_root().join("examples/gamedeployment.yaml")).expect("example");
    assert!(example.contains("  minReadySeconds: 30\n") && example.contains("      gracePeriodSeconds: 30\n"));
    example.replacen("  minReadySeconds: 30\n", "  minReadySeconds: 1\n", 1).replacen(
        "      gracePeriodSeconds: 30\n",
        "      gracePeriodSeconds: 1\n",
        1,
    )
}

/// The compact walkthrough with the full chart RBAC, asserted to complete. Each result is observed on watches
/// started before the scenario: the drain-flag run is collected 2 s after it succeeds (`--finished-run-ttl`) and a
/// pre-delete run goes with its pod, so a poll can miss both phases on a loaded machine.
async fn walkthrough(cluster: &Cluster, ns: &str) {
    let watches = Watches::start(cluster, ns).await;
    prepare(cluster, ns).await;
    let runs = &watches.runs;
    runs.wait("the kubernetes-metric HookRun to succeed", LONG, |run| {
        (run.name() == "drain-flag" && phase(run) == Some(HookPhase::Successful)).then_some(())
    })
    .await;
    let annotation = cluster
        .kubectl_ok(&[
            "-n",
            ns,
            "get",
            "pod",
            "target",
            "-o",
            r#"jsonpath={.metadata.annotations.example\.com/drain-state}"#,
        ])
        .await;
    assert_eq!(annotation, "draining");
    // The hook-operator deletes the finished ownerless run itself (`--finished-run-ttl 2s`).
    runs.wait("the finished drain-flag HookRun to be collected", LONG, |run| {
        (run.name() == "drain-flag" && run.deleted).then_some(())
    })
    .await;
    watches.wait_gd(Columns::new(6, 6, 6, 6, 6)).await;

    cluster.kubectl_ok(&["-n", ns, "scale", "--replicas=5", &format!("gamedeployment/{GD}")]).await;
    let run = runs
        .wait("a pre-delete HookRun to succeed", LONG, |run| {
            (run.name().starts_with("predelete-") && phase(run) == Some(HookPhase::Successful))
                .then(|| run.uid().to_string())
        })
        .await;
    watches.wait_gd(Columns::new(5, 5, 5, 5, 5)).await;
    runs.wait("the pre-delete HookRun to be removed", LONG, |seen| (seen.uid() == run && seen.deleted).then_some(()))
        .await;

    cluster.kubectl_ok(&["-n", ns, "patch", "gamedeployment", GD, "--type=json", "-p", NEW_IMAGE]).await;
    watches.wait_gd(Columns::new(5, 3, 3, 5, 5)).await;
    runs.wait_state("every HookRun to be removed", LONG, |all| all.is_empty().then_some(())).await;
    let images = cluster
        .kubectl_ok(&[
            "-n",
            ns,
            "get",
            "pod",
            "-l",
            &format!("app={GD}"),
            "-o",
            "jsonpath={.items[*].spec.containers[0].image}",
        ])
        .await;
    assert_eq!(images.split_whitespace().filter(|i| *i == "python:3.5").count(), 3, "{images}");
}

/// Whether `text` names one of `rule`'s verbs on one of its resources as Forbidden.
fn names_rule(text: &str, rule: &Value) -> Option<String> {
    for resource in strings(&rule["resources"]) {
        for verb in strings(&rule["verbs"]) {
            let needle = format!("cannot {verb} resource \\\"{resource}\\\"");
            let plain = format!("cannot {verb} resource \"{resource}\"");
            if text.contains(&needle) || text.contains(&plain) {
                return Some(plain);
            }
        }
    }
    None
}

/// kube-sim with the chart's RBAC applied (release `ops`, default values), a token kubeconfig per operator
/// ServiceAccount, the walkthrough's hook pod, and the operators' flags (the chart's Lease names; `hook_extra` is
/// added to the hook-operator's). No operator is started yet.
async fn chart_harness(hook_extra: &[&str]) -> Harness {
    let cluster = Cluster::start().await;
    let out = helm(&["render", CHART, "--release", "ops", "--namespace", NS]).await;
    let docs: Vec<Value> = serde_json::from_str(&out).expect("rendered JSON");
    let rbac: Vec<Value> = docs.iter().filter(|d| RBAC_KINDS.iter().any(|k| d["kind"] == *k)).cloned().collect();
    let lease = |suffix: &str| format!("ops-gamedeployment-operators-{suffix}");
    assert!(
        docs.iter().any(|d| d["kind"] == "Deployment"
            && d.to_string().contains(&format!("--leader-elect-lease-name={}", lease("hook")))),
        "the chart names the Lease after the operator"
    );

    cluster.install_crds().await;
    cluster.kubectl_ok(&["create", "namespace", NS]).await;
    let ip = e2e::hook::hook_pod(&cluster, "canary-hook").await;
    let resolve = format!("1.1.1.1:9091={ip}:9091");
    let common = |name: &str| -> Vec<String> {
        [
            "--leader-elect",
            "--leader-elect-namespace",
            NS,
            "--leader-elect-lease-name",
            name,
            "--leader-elect-identity",
            name,
            "--leader-elect-lease-duration",
            "4s",
            "--leader-elect-renew-deadline",
            "3s",
            "--leader-elect-retry-period",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let mut hook_args = common(&lease("hook"));
    hook_args.extend(["--interval-scale", "0.01", "--web-resolve", &resolve].map(String::from));
    hook_args.extend(hook_extra.iter().map(|a| a.to_string()));
    let mut gd_args = common(&lease("gamedeployment"));
    gd_args.extend(["--expectations-timeout", "20s"].map(String::from));
    // The chart mounts its HookRun key Secret and names the file (the operator then reads no Secret itself).
    assert!(
        docs.iter().any(|d| d["kind"] == "Deployment" && d.to_string().contains("--hookrun-key-file=")),
        "the chart gives the gamedeployment-operator its HookRun key file"
    );
    let key_file = cluster.dir().join("hookrun-key");
    std::fs::write(&key_file, "chart-rbac-test-key-0123456789-0123456789\n").expect("key file written");
    gd_args.extend(["--hookrun-key-file".to_string(), key_file.display().to_string()]);
    let specs = vec![
        OperatorSpec { package: "hook-operator", bin: "hook-operator", account: lease("hook"), extra: hook_args },
        OperatorSpec {
            package: "gamedeployment-operator",
            bin: "gamedeployment-operator",
            account: lease("gamedeployment"),
            extra: gd_args,
        },
    ];
    let mut h = Harness { cluster, rbac, specs, kubeconfigs: Vec::new(), running: Vec::new(), log_marks: Vec::new() };
    h.apply_rbac(&h.rbac).await;
    for spec in &h.specs {
        let kc = token_kubeconfig(&h.cluster, &spec.account).await;
        h.kubeconfigs.push(kc);
    }
    h
}

/// Rules no request exercises: `update` on `gamedeployments/finalizers` is what the
/// OwnerReferencesPermissionEnforcement admission plugin checks when an object names its owner with
/// `blockOwnerDeletion: true`, and kube-sim does not run that plugin; `every_granted_verb_is_used` proves it.
fn checked_by_admission_only(rule: &Value) -> bool {
    strings(&rule["resources"]).iter().all(|r| r.ends_with("/finalizers"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_need_exactly_the_chart_rbac() {
    let mut h = chart_harness(TTL).await;

    // With exactly the chart's RBAC, the walkthrough completes.
    h.start().await;
    let watches = Watches::start(&h.cluster, "walkthrough").await;
    walkthrough(&h.cluster, "walkthrough").await;
    let logs = h.evidence(&watches);
    assert!(!logs.contains("Forbidden") && !logs.contains("forbidden"), "no request was refused:\n{logs}");

    // Removing any one rule shows a Forbidden error naming it.
    let mut cases = Vec::new();
    for (doc_index, doc) in h.rbac.iter().enumerate().filter(|(_, d)| is_role(d)) {
        for rule_index in 0..doc["rules"].as_array().map_or(0, Vec::len) {
            if !checked_by_admission_only(&doc["rules"][rule_index]) {
                cases.push((doc_index, rule_index));
            }
        }
    }
    assert!(cases.len() >= 10, "the chart renders its rules: {cases:?}");
    let mut proven = Vec::new();
    for (case, (doc_index, rule_index)) in cases.into_iter().enumerate() {
        h.stop().await;
        let mut reduced = h.rbac.clone();
        let rules = reduced[doc_index]["rules"].as_array_mut().expect("rules");
        let rule = rules.remove(rule_index);
        let role = reduced[doc_index]["metadata"]["name"].as_str().unwrap_or("").to_string();
        h.apply_rbac(&reduced).await;
        // Each case starts without Leases, so the rule allowing their creation is exercised too.
        h.cluster.kubectl(&["-n", NS, "delete", "lease", "--all"]).await;
        let ns = format!("case-{case}");
        h.start().await;
        let watches = Watches::start(&h.cluster, &ns).await;
        prepare(&h.cluster, &ns).await;
        let start = Instant::now();
        // Drive the scenario on as soon as each step has settled (or, when the missing rule stops it, after
        // `STEP`): scale in once the 6 pods are ready, then update in place once the scale-in is done.
        let mut step = (0, Instant::now());
        let found = loop {
            let text = h.evidence(&watches);
            if let Some(found) = names_rule(&text, &rule) {
                break found;
            }
            assert!(
                start.elapsed() < CASE_DEADLINE,
                "without rule {rule} of {role}, no Forbidden error naming it appeared:\n{text}"
            );
            let columns = watches.columns();
            let settled = |want: Columns| columns == Some(want) || step.1.elapsed() > STEP;
            if step.0 == 0 && settled(Columns::new(6, 6, 6, 6, 6)) {
                h.cluster.kubectl(&["-n", &ns, "scale", "--replicas=5", &format!("gamedeployment/{GD}")]).await;
                step = (1, Instant::now());
            } else if step.0 == 1 && settled(Columns::new(5, 5, 5, 5, 5)) {
                h.cluster.kubectl(&["-n", &ns, "patch", "gamedeployment", GD, "--type=json", "-p", NEW_IMAGE]).await;
                step = (2, Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        println!("without {rule} in {role}: {found} (after {:?})", start.elapsed());
        proven.push(found);
        h.stop().await;
        h.cluster.kubectl(&["delete", "namespace", &ns, "--wait=false"]).await;
    }
    h.apply_rbac(&h.rbac).await;
    println!("{} rules proven necessary", proven.len());
    h.cluster.shutdown().await;
}

/// One verb on one resource that the chart grants a ServiceAccount.
#[derive(Debug, Clone)]
struct Grant {
    role: String,
    user: String,
    group: String,
    resource: String,
    verb: String,
}

impl Grant {
    /// The resource as kube-sim's fault rules name it: `plural[.group][/subresource]`.
    fn probe_resource(&self) -> String {
        let (plural, sub) = match self.resource.split_once('/') {
            Some((p, s)) => (p, Some(s)),
            None => (self.resource.as_str(), None),
        };
        let base = if self.group.is_empty() { plural.to_string() } else { format!("{plural}.{}", self.group) };
        sub.map_or(base.clone(), |s| format!("{base}/{s}"))
    }
}

/// Every (ServiceAccount user, apiGroup, resource, verb) of every rendered Role/ClusterRole.
fn grants(rbac: &[Value]) -> Vec<Grant> {
    let mut out = Vec::new();
    for doc in rbac.iter().filter(|d| is_role(d)) {
        let role = doc["metadata"]["name"].as_str().unwrap_or("").to_string();
        let bindings = rbac.iter().filter(|b| {
            (b["kind"] == "RoleBinding" || b["kind"] == "ClusterRoleBinding")
                && b["roleRef"]["name"] == role.as_str()
                && b["roleRef"]["kind"] == doc["kind"]
        });
        let subjects: Vec<String> = bindings
            .flat_map(|b| b["subjects"].as_array().cloned().unwrap_or_default())
            .map(|s| {
                format!(
                    "system:serviceaccount:{}:{}",
                    s["namespace"].as_str().unwrap_or(""),
                    s["name"].as_str().unwrap_or("")
                )
            })
            .collect();
        assert!(!subjects.is_empty(), "{role} is bound to a ServiceAccount");
        for rule in doc["rules"].as_array().into_iter().flatten() {
            for user in &subjects {
                for group in strings(&rule["apiGroups"]) {
                    for resource in strings(&rule["resources"]) {
                        for verb in strings(&rule["verbs"]) {
                            out.push(Grant {
                                role: role.clone(),
                                user: user.clone(),
                                group: group.clone(),
                                resource: resource.clone(),
                                verb,
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// The chart's webhook objects (certificate Secret, Service, ValidatingWebhookConfiguration) applied to kube-sim,
/// and the gamedeployment-operator's flags to serve them as the chart's Deployment does, with that certificate.
/// Returns the Service (`namespace/name`) to point at the operator once it listens.
async fn serve_webhooks(h: &mut Harness) -> String {
    let out = helm(&["render", CHART, "--release", "ops", "--namespace", NS]).await;
    let docs: Vec<Value> = serde_json::from_str(&out).expect("rendered JSON");
    let webhook: Vec<Value> = docs
        .into_iter()
        .filter(|d| {
            let name = d["metadata"]["name"].as_str().unwrap_or("");
            (d["kind"] == "Secret" && name.ends_with("-webhook-tls"))
                || (d["kind"] == "Service" && name.ends_with("-webhook"))
                || d["kind"] == "ValidatingWebhookConfiguration"
        })
        .collect();
    assert_eq!(webhook.len(), 3, "the chart renders its webhook objects: {webhook:?}");
    let service = webhook.iter().find(|d| d["kind"] == "Service").expect("webhook Service");
    let service = format!("{NS}/{}", service["metadata"]["name"].as_str().unwrap_or(""));
    let secret = webhook.iter().find(|d| d["kind"] == "Secret").expect("webhook Secret");
    let secret_name = secret["metadata"]["name"].as_str().unwrap_or("").to_string();
    h.apply_rbac(&webhook).await;
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(h.cluster.client(), NS);
    let data = secrets.get(&secret_name).await.expect("webhook Secret applied").data.unwrap_or_default();
    let cert_dir = h.cluster.dir().join("webhook-tls");
    std::fs::create_dir_all(&cert_dir).expect("cert dir");
    for file in ["tls.crt", "tls.key"] {
        std::fs::write(cert_dir.join(file), &data[file].0).expect("certificate written");
    }
    let spec = h.specs.iter_mut().find(|s| s.bin == "gamedeployment-operator").expect("gamedeployment-operator");
    let user = format!("system:serviceaccount:{NS}:{}", spec.account);
    spec.extra.extend([
        "--webhook-address".to_string(),
        "127.0.0.1:0".to_string(),
        "--webhook-cert-dir".to_string(),
        cert_dir.display().to_string(),
        "--webhook-operator-user".to_string(),
        user,
    ]);
    service
}

/// The address the operator logged that it serves the webhooks on.
async fn webhook_address(operator: &Operator) -> std::net::SocketAddr {
    wait_for("the gamedeployment-operator to serve its webhooks", LONG, || async {
        let logs = operator.logs();
        let line = logs.lines().find(|l| l.contains("serving admission webhooks"))?;
        // The flag binds 127.0.0.1 (the log may carry colour codes around `address=`).
        let rest = &line[line.find("127.0.0.1:")?..];
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':')).unwrap_or(rest.len());
        rest[..end].parse().ok()
    })
    .await
}

async fn gd_field(cluster: &Cluster, ns: &str, jsonpath: &str) -> String {
    cluster.kubectl(&["-n", ns, "get", "gamedeployment", GD, "-o", &format!("jsonpath={jsonpath}")]).await.stdout
}

async fn revisions(cluster: &Cluster, ns: &str) -> Vec<(String, i64)> {
    let out = cluster.kubectl(&["-n", ns, "get", "controllerrevisions", "-o", "json"]).await;
    let list: Value = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| (r["metadata"]["name"].as_str().unwrap_or("").to_string(), r["revision"].as_i64().unwrap_or(0)))
        .collect()
}

/// After the walkthrough in `ns`, the paths it does not take, each driven as a user would:
/// - an eviction: the admission webhook reads the pod and its GameDeployment;
/// - a rollback of every pod (partition 0) to the first template (its ControllerRevision is renumbered) with
///   `revisionHistoryLimit: 0` (the second template's revision is deleted once no pod runs it), and a `podsToDelete` entry naming no pod (pruned
///   from the spec);
/// - in another namespace, a foreign ControllerRevision already holding the name of the GameDeployment's first
///   revision: the create is refused, the operator reads the revision, and moves to a new name (`collisionCount`);
/// - a HookTemplate whose interval is below the operator's minimum, edited and still too short: the hook-operator
///   warns twice about the same template, and the second Warning continues the first as a series (`patch` on
///   Events).
async fn rarer_paths(cluster: &Cluster, ns: &str) {
    let first = revisions(cluster, ns).await.into_iter().find(|(_, n)| *n == 1).expect("the first revision").0;
    let pod = cluster
        .kubectl_ok(&["-n", ns, "get", "pod", "-l", &format!("app={GD}"), "-o", "jsonpath={.items[0].metadata.name}"])
        .await;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(cluster.client(), ns);
    // Allowed or refused, the webhook has answered from the pod and its GameDeployment.
    let evicted = pods.evict(pod.trim(), &Default::default()).await;
    println!("eviction of {}: {:?}", pod.trim(), evicted.map(|_| ()));

    let spec = json!({"spec": {
        "revisionHistoryLimit": 0,
        "scaleStrategy": {"podsToDelete": ["no-such-pod"]},
        "updateStrategy": {"partition": 0},
    }});
    cluster.kubectl_ok(&["-n", ns, "patch", "gamedeployment", GD, "--type=merge", "-p", &spec.to_string()]).await;
    cluster.kubectl_ok(&["-n", ns, "patch", "gamedeployment", GD, "--type=json", "-p", OLD_IMAGE]).await;

    let collide = "collide";
    cluster.kubectl_ok(&["create", "namespace", collide]).await;
    let foreign = json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": first, "namespace": collide},
        "revision": 1,
        "data": {"spec": {"template": {"spec": {"containers": [{"name": "other", "image": "other:1"}]}}}},
    });
    let path = write(cluster, "foreign-revision.json", &foreign.to_string()).await;
    cluster.kubectl_ok(&["apply", "-f", &path]).await;
    let example = std::fs::read_to_string(e2e::repo_root().join("examples/gamedeployment.yaml")).expect("example");
    let gd = write(cluster, "gamedeployment-collide.yaml", &example.replacen("replicas: 6", "replicas: 1", 1)).await;
    cluster.kubectl_ok(&["-n", collide, "apply", "-f", &gd]).await;

    wait_for("the first revision to be renumbered and the second deleted", LONG, || async {
        let now = revisions(cluster, ns).await;
        (now.len() == 1 && now[0].0 == first && now[0].1 > 2).then_some(())
    })
    .await;
    wait_for("podsToDelete to be pruned", LONG, || async {
        gd_field(cluster, ns, "{.spec.scaleStrategy.podsToDelete}")
            .await
            .trim()
            .trim_matches(&['[', ']'][..])
            .is_empty()
            .then_some(())
    })
    .await;
    wait_for("the collision to be counted", LONG, || async {
        (gd_field(cluster, collide, "{.status.collisionCount}").await.trim() == "1").then_some(())
    })
    .await;

    // The same problem twice (the template's URL changes, its interval stays below the operator's minimum): the
    // second Warning has the same text, so it continues the first one's series (a patch); a changed text would be an
    // Event of its own. (A warning, not an invalid template: the validation webhook refuses those at apply.)
    let template = |url: &str| {
        json!({
            "apiVersion": "tkex.tencent.com/v1alpha1", "kind": "HookTemplate",
            "metadata": {"name": "too-often", "namespace": ns},
            "spec": {"metrics": [{"name": "m", "count": 2, "interval": "1ms", "successCondition": "result == 'ok'",
                                  "provider": {"web": {"url": url}}}]},
        })
        .to_string()
    };
    for (i, url) in ["http://127.0.0.1:1/", "http://127.0.0.1:2/"].into_iter().enumerate() {
        let path = write(cluster, &format!("too-often-{i}.json"), &template(url)).await;
        cluster.kubectl_ok(&["apply", "-f", &path]).await;
        wait_for("the Warning about the template's interval", LONG, || async {
            let out = cluster.kubectl_ok(&["-n", ns, "get", "events.events.k8s.io", "-o", "json"]).await;
            let list: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
            let count = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["reason"] == "HookTemplateWarning" && e["regarding"]["name"] == "too-often")
                .map(|e| e["series"]["count"].as_i64().unwrap_or(1))
                .max();
            (count >= Some(i as i64 + 1)).then_some(())
        })
        .await;
    }
}

/// Verb by verb: every (resource, verb) the chart grants an operator is used by it during the compact
/// walkthrough (plus a collected ownerless HookRun). kube-sim counts, per probe — a fault rule without any fault,
/// scoped to the operator's ServiceAccount user, one verb and one resource — the requests it matched; every probe
/// must have matched. `update` on `gamedeployments/finalizers` is sent by no one: it is what
/// OwnerReferencesPermissionEnforcement checks when an object names its owner with `blockOwnerDeletion: true`
/// (kube-sim does not run that plugin), so for it the test shows that every object the gamedeployment-operator
/// owns does set `blockOwnerDeletion: true` and that the ServiceAccount may `update` the subresource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_granted_verb_is_used() {
    let mut h = chart_harness(TTL).await;
    let all = grants(&h.rbac);
    let (admission, probed): (Vec<Grant>, Vec<Grant>) =
        all.into_iter().partition(|g| g.resource.ends_with("/finalizers"));
    assert!(
        admission.iter().any(|g| g.resource == "gamedeployments/finalizers" && g.verb == "update"),
        "the chart grants update on gamedeployments/finalizers: {admission:?}"
    );
    // A core-group probe without a subresource (`events`) also matches the same plural in other groups
    // (`events.events.k8s.io`), so each such probe gets exact companions to subtract.
    let mut rules: Vec<FaultRule> = Vec::new();
    let mut companions: Vec<Vec<usize>> = Vec::new();
    let groups: std::collections::BTreeSet<String> =
        probed.iter().map(|g| g.group.clone()).filter(|g| !g.is_empty()).chain(["events.k8s.io".into()]).collect();
    for g in &probed {
        let probe = |resource: String| FaultRule {
            users: vec![g.user.clone()],
            verbs: vec![g.verb.clone()],
            resources: vec![resource],
            ..FaultRule::default()
        };
        rules.push(probe(g.probe_resource()));
        let mut mine = Vec::new();
        if g.group.is_empty() && !g.resource.contains('/') {
            for other in &groups {
                mine.push(rules.len());
                rules.push(probe(format!("{}.{other}", g.resource)));
            }
        }
        companions.push(mine);
    }
    let probe_index: Vec<usize> = {
        let mut at = 0;
        companions
            .iter()
            .map(|c| {
                let i = at;
                at += 1 + c.len();
                i
            })
            .collect()
    };
    h.cluster.sim().set_faults(FaultConfig { rules });
    let webhook = serve_webhooks(&mut h).await;
    h.start().await;
    let address = webhook_address(&h.running[1]).await;
    h.cluster.sim().set_service_address(&webhook, Some(443), address);
    walkthrough(&h.cluster, "verbs").await;
    rarer_paths(&h.cluster, "verbs").await;
    let counts = h.cluster.sim().fault_counts().matched;

    let mut unused = Vec::new();
    for ((g, at), mine) in probed.iter().zip(&probe_index).zip(&companions) {
        let matched = counts.get(*at).copied().unwrap_or(0);
        let elsewhere: u64 = mine.iter().map(|i| counts.get(*i).copied().unwrap_or(0)).sum();
        let own = matched.saturating_sub(elsewhere);
        println!("{:>6}  {} {} {:?}/{} ({})", own, g.user, g.verb, g.group, g.resource, g.role);
        if own == 0 {
            unused.push(format!("{} {:?}/{} granted to {} by {}", g.verb, g.group, g.resource, g.user, g.role));
        }
    }
    assert!(unused.is_empty(), "granted but never used during the walkthrough:\n  {}", unused.join("\n  "));
    assert!(probed.len() >= 30, "the chart renders its verbs: {}", probed.len());

    // gamedeployments/finalizers: every owned object blocks its owner's deletion, and the account may do that.
    for kind in ["pods", "hookruns", "controllerrevisions"] {
        let list = h.cluster.kubectl_ok(&["-n", "verbs", "get", kind, "-o", "json"]).await;
        let list: Value = serde_json::from_str(&list).expect("list JSON");
        let owned: Vec<&Value> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|o| o["metadata"]["ownerReferences"].as_array().into_iter().flatten())
            .filter(|r| r["kind"] == "GameDeployment")
            .collect();
        assert!(kind == "hookruns" || !owned.is_empty(), "the GameDeployment owns {kind}");
        assert!(owned.iter().all(|r| r["blockOwnerDeletion"] == true), "{kind}: {owned:?}");
    }
    for g in &admission {
        let allowed = h
            .cluster
            .kubectl(&[
                "auth",
                "can-i",
                &g.verb,
                &format!("{}.{}", g.resource.split('/').next().unwrap_or(""), g.group),
                "--subresource",
                g.resource.split('/').nth(1).unwrap_or(""),
                "--as",
                &g.user,
                "-n",
                "verbs",
            ])
            .await;
        assert_eq!(allowed.stdout.trim(), "yes", "{g:?}: {}", allowed.stderr);
    }
    h.stop().await;
    h.cluster.shutdown().await;
}
