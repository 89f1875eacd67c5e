//! kube-sim driven by the real `kubectl` binary: everything below must work exactly as a user
//! types it, with client-side validation on (the default), against the project's CRDs and
//! examples.

#![recursion_limit = "256"]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kube_sim::{SimConfig, SimHandle};
use tokio::io::{AsyncBufReadExt, BufReader};

const DEADLINE: Duration = Duration::from_secs(60);

struct Kubectl {
    sim: SimHandle,
    dir: PathBuf,
    kubeconfig: PathBuf,
}

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn kubectl_bin() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".to_string())
}

impl Kubectl {
    async fn start(config: SimConfig) -> Result<Self> {
        let sim = kube_sim::start(config).await?;
        let dir = std::env::temp_dir().join(format!("kube-sim-kubectl-{}-{}", std::process::id(), sim.addr().port()));
        std::fs::create_dir_all(dir.join("cache"))?;
        let kubeconfig = dir.join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig)?;
        Ok(Self { sim, dir, kubeconfig })
    }

    async fn new() -> Result<Self> {
        Self::start(SimConfig { kubelet: None, ..SimConfig::default() }).await
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(kubectl_bin());
        c.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", self.dir.join("cache"))
            .env("HOME", &self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }

    async fn run(&self, args: &[&str]) -> Result<Output> {
        let out = tokio::time::timeout(DEADLINE, self.command(args).output())
            .await
            .with_context(|| format!("kubectl {args:?} timed out"))?
            .with_context(|| format!("running kubectl {args:?} (is kubectl on PATH?)"))?;
        Ok(Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Runs kubectl and requires success.
    async fn ok(&self, args: &[&str]) -> Result<String> {
        let o = self.run(args).await?;
        if o.code != 0 {
            bail!("kubectl {args:?} failed ({}):\n{}\n{}", o.code, o.stdout, o.stderr);
        }
        Ok(o.stdout)
    }

    /// Writes a manifest into the test directory.
    fn file(&self, name: &str, content: &str) -> Result<String> {
        let p = self.dir.join(name);
        std::fs::write(&p, content)?;
        Ok(p.to_string_lossy().into_owned())
    }

    async fn install_project_crds(&self) -> Result<()> {
        let crds = repo_root().join("crds");
        self.ok(&["apply", "-f", &crds.to_string_lossy()]).await?;
        self.ok(&[
            "wait",
            "--for",
            "condition=established",
            "--timeout=60s",
            "crd/gamedeployments.tkex.tencent.com",
            "crd/hookruns.tkex.tencent.com",
            "crd/hooktemplates.tkex.tencent.com",
        ])
        .await?;
        Ok(())
    }

    /// A kubectl against a sim with the project's CRDs and the example GameDeployment (`GAME_DEPLOYMENT`, written
    /// to `gd.yaml`) applied.
    async fn with_game_deployment() -> Result<Self> {
        let k = Self::new().await?;
        k.install_project_crds().await?;
        let f = k.file("gd.yaml", GAME_DEPLOYMENT)?;
        k.ok(&["apply", "-f", &f]).await?;
        Ok(k)
    }

    async fn eventually(&self, what: &str, args: &[&str], pred: impl Fn(&str) -> bool) -> Result<String> {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let o = self.run(args).await?;
            if o.code == 0 && pred(&o.stdout) {
                return Ok(o.stdout);
            }
            if tokio::time::Instant::now() > deadline {
                bail!("timed out waiting for {what}; last output:\n{}\n{}", o.stdout, o.stderr);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn stop(self) {
        self.sim.shutdown().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn header(table: &str) -> Vec<String> {
    table.lines().next().unwrap_or("").split_whitespace().map(str::to_string).collect()
}

const GAME_DEPLOYMENT: &str = r#"
apiVersion: tkex.tencent.com/v1alpha1
kind: GameDeployment
metadata:
  name: test-gamedeployment
  labels:
    app: test-gamedeployment
spec:
  replicas: 3
  selector:
    matchLabels:
      app: test-gamedeployment
  template:
    metadata:
      labels:
        app: test-gamedeployment
    spec:
      containers:
      - name: python
        image: python:3.4
        command: ["python"]
        args: ["-m", "http.server", "8000"]
  updateStrategy:
    type: InplaceUpdate
"#;

#[tokio::test]
async fn project_crds_and_examples_apply_and_print_their_columns() -> Result<()> {
    let k = Kubectl::new().await?;
    k.install_project_crds().await?;
    let examples = repo_root().join("examples");
    let out = k.ok(&["apply", "-f", &examples.to_string_lossy()]).await?;
    assert!(out.contains("gamedeployment.tkex.tencent.com/"), "{out}");
    assert!(out.contains("hooktemplate.tkex.tencent.com/"), "{out}");
    let table = k.ok(&["get", "gamedeployment"]).await?;
    assert_eq!(header(&table), vec!["NAME", "DESIRED", "UPDATED", "UPDATED_READY", "READY", "TOTAL", "AGE"], "{table}");
    let hooktemplates = k.ok(&["get", "hooktemplates"]).await?;
    assert!(hooktemplates.lines().count() >= 2, "{hooktemplates}");
    let none = k.run(&["get", "hookruns"]).await?;
    assert_eq!(none.code, 0);
    assert!(none.stderr.contains("No resources found in default namespace."), "{}", none.stderr);
    // Re-applying unchanged manifests is a no-op.
    let again = k.ok(&["apply", "-f", &examples.join("hook-template-success.yaml").to_string_lossy()]).await?;
    assert!(again.contains("unchanged"), "{again}");
    k.stop().await;
    Ok(())
}

#[tokio::test]
async fn scale_patch_describe_and_explain() -> Result<()> {
    let k = Kubectl::with_game_deployment().await?;
    let out = k.ok(&["scale", "--replicas=5", "gamedeployment/test-gamedeployment"]).await?;
    assert_eq!(out.trim(), "gamedeployment.tkex.tencent.com/test-gamedeployment scaled");
    assert_eq!(k.ok(&["get", "gamedeployment", "test-gamedeployment", "-o", "jsonpath={.spec.replicas}"]).await?, "5");
    let table = k.ok(&["get", "gd"]).await?;
    let row: Vec<&str> = table.lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!(&row[..2], &["test-gamedeployment", "5"], "{table}");
    let out = k
        .ok(&[
            "patch",
            "gamedeployment",
            "test-gamedeployment",
            "--type=json",
            "-p=[{\"op\":\"replace\",\"path\":\"/spec/template/spec/containers/0/image\",\"value\":\"python:3.5\"}]",
        ])
        .await?;
    assert_eq!(out.trim(), "gamedeployment.tkex.tencent.com/test-gamedeployment patched");
    assert_eq!(
        k.ok(&["get", "gd", "test-gamedeployment", "-o", "jsonpath={.spec.template.spec.containers[0].image}"]).await?,
        "python:3.5"
    );
    let out =
        k.ok(&["patch", "gd", "test-gamedeployment", "--type=merge", "-p", "{\"spec\":{\"paused\":true}}"]).await?;
    assert!(out.contains("patched"), "{out}");
    let describe = k.ok(&["describe", "gamedeployment", "test-gamedeployment"]).await?;
    assert!(describe.contains("Name:         test-gamedeployment"), "{describe}");
    assert!(describe.contains("Kind:         GameDeployment"), "{describe}");
    let explain = k.ok(&["explain", "gamedeployment.spec.replicas"]).await?;
    assert!(explain.contains("KIND:       GameDeployment"), "{explain}");
    assert!(explain.contains("FIELD: replicas <integer>"), "{explain}");
    let explain = k.ok(&["explain", "pods.spec.containers.image"]).await?;
    assert!(explain.contains("FIELD: image <string>"), "{explain}");
    // Strategic merge patch of a built-in kind through kubectl.
    k.ok(&["create", "configmap", "cfg", "--from-literal=a=1"]).await?;
    k.ok(&["patch", "configmap", "cfg", "-p", "{\"data\":{\"b\":\"2\"}}"]).await?;
    assert_eq!(k.ok(&["get", "cm", "cfg", "-o", "jsonpath={.data.a},{.data.b}"]).await?, "1,2");
    k.stop().await;
    Ok(())
}

#[tokio::test]
async fn client_side_validation_reports_unknown_and_invalid_fields() -> Result<()> {
    let k = Kubectl::new().await?;
    k.install_project_crds().await?;
    let bad = GAME_DEPLOYMENT.replace("  replicas: 3\n", "  replicas: 3\n  bogus: true\n");
    let f = k.file("bad.yaml", &bad)?;
    let o = k.run(&["apply", "-f", &f]).await?;
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("unknown field \"spec.bogus\""), "{}", o.stderr);
    let invalid = GAME_DEPLOYMENT.replace("  replicas: 3\n", "  replicas: -3\n");
    let f = k.file("invalid.yaml", &invalid)?;
    let o = k.run(&["apply", "-f", &f]).await?;
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("The GameDeployment \"test-gamedeployment\" is invalid"), "{}", o.stderr);
    assert!(o.stderr.contains("spec.replicas"), "{}", o.stderr);
    // --validate=false downgrades unknown fields to pruning.
    let f = k.file("bad2.yaml", &bad)?;
    k.ok(&["apply", "--validate=false", "-f", &f]).await?;
    assert_eq!(k.ok(&["get", "gd", "test-gamedeployment", "-o", "jsonpath={.spec.bogus}"]).await?, "");
    k.stop().await;
    Ok(())
}

#[tokio::test]
async fn get_watch_streams_changes() -> Result<()> {
    let k = Kubectl::with_game_deployment().await?;
    let mut child = k.command(&["get", "gamedeployment", "-w"]).spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(DEADLINE, lines.next_line()).await??.context("header")?;
    assert!(first.starts_with("NAME"), "{first}");
    let row = tokio::time::timeout(DEADLINE, lines.next_line()).await??.context("row")?;
    assert!(row.starts_with("test-gamedeployment"), "{row}");
    k.ok(&["scale", "--replicas=7", "gd/test-gamedeployment"]).await?;
    let changed = tokio::time::timeout(DEADLINE, async {
        loop {
            match lines.next_line().await? {
                Some(l) if l.split_whitespace().nth(1) == Some("7") => return Ok::<String, anyhow::Error>(l),
                Some(_) => continue,
                None => bail!("kubectl get -w ended"),
            }
        }
    })
    .await??;
    assert!(changed.starts_with("test-gamedeployment"), "{changed}");
    child.kill().await?;
    k.stop().await;
    Ok(())
}

#[tokio::test]
async fn delete_cascades_to_owned_objects() -> Result<()> {
    let k = Kubectl::with_game_deployment().await?;
    let uid = k.ok(&["get", "gd", "test-gamedeployment", "-o", "jsonpath={.metadata.uid}"]).await?;
    for (kind, name) in [("Pod", "test-gamedeployment-a"), ("ControllerRevision", "test-gamedeployment-rev1")] {
        let body = match kind {
            "Pod" => format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  ownerReferences:\n  - {{apiVersion: tkex.tencent.com/v1alpha1, kind: GameDeployment, name: test-gamedeployment, uid: {uid}, controller: true, blockOwnerDeletion: true}}\nspec:\n  containers: [{{name: python, image: python:3.4}}]\n"
            ),
            _ => format!(
                "apiVersion: apps/v1\nkind: ControllerRevision\nmetadata:\n  name: {name}\n  ownerReferences:\n  - {{apiVersion: tkex.tencent.com/v1alpha1, kind: GameDeployment, name: test-gamedeployment, uid: {uid}, controller: true, blockOwnerDeletion: true}}\nrevision: 1\ndata: {{spec: {{template: {{}}}}}}\n"
            ),
        };
        let f = k.file(&format!("{name}.yaml"), &body)?;
        k.ok(&["apply", "-f", &f]).await?;
    }
    let out = k.ok(&["delete", "gamedeployment", "test-gamedeployment"]).await?;
    assert_eq!(out.trim(), "gamedeployment.tkex.tencent.com \"test-gamedeployment\" deleted");
    k.eventually("owned objects to be garbage collected", &["get", "pods,controllerrevisions", "-o", "name"], |o| {
        o.trim().is_empty()
    })
    .await?;
    // Foreground: the owner stays until its blocking dependents are gone.
    k.ok(&["apply", "-f", &k.file("gd.yaml", GAME_DEPLOYMENT)?]).await?;
    k.ok(&["delete", "gd", "test-gamedeployment", "--cascade=foreground"]).await?;
    assert_eq!(k.run(&["get", "gd", "test-gamedeployment"]).await?.code, 1);
    k.stop().await;
    Ok(())
}

#[tokio::test]
async fn pod_columns_and_terminating_status() -> Result<()> {
    let k = Kubectl::new().await?;
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  finalizers: [example.com/hold]\nspec:\n  nodeName: node-1\n  containers: [{name: c, image: nginx}]\n";
    let f = k.file("pod.yaml", pod)?;
    k.ok(&["apply", "-f", &f]).await?;
    let table = k.ok(&["get", "pods"]).await?;
    assert_eq!(header(&table), vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"], "{table}");
    let row: Vec<&str> = table.lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!(&row[..4], &["web", "0/1", "Pending", "0"], "{table}");
    let wide = k.ok(&["get", "pods", "-o", "wide"]).await?;
    assert_eq!(
        header(&wide),
        vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE", "READINESS", "GATES"],
        "{wide}"
    );
    k.ok(&["delete", "pod", "web", "--wait=false"]).await?;
    let table = k.ok(&["get", "pods"]).await?;
    assert_eq!(table.lines().nth(1).unwrap_or("").split_whitespace().nth(2), Some("Terminating"), "{table}");
    k.ok(&["patch", "pod", "web", "--type=json", "-p", "[{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}]"])
        .await?;
    // Grace period not over and no kubelet here: force it like an operator would.
    k.ok(&["delete", "pod", "web", "--grace-period=0", "--force"]).await?;
    k.eventually("pod web gone", &["get", "pods", "-o", "name"], |o| o.trim().is_empty()).await?;
    k.stop().await;
    Ok(())
}

#[tokio::test]
async fn server_side_apply_and_legacy_discovery() -> Result<()> {
    let k = Kubectl::start(SimConfig { kubelet: None, aggregated_discovery: false, ..SimConfig::default() }).await?;
    k.install_project_crds().await?;
    let f = k.file("gd.yaml", GAME_DEPLOYMENT)?;
    let out = k.ok(&["apply", "--server-side", "-f", &f]).await?;
    assert_eq!(out.trim(), "gamedeployment.tkex.tencent.com/test-gamedeployment serverside-applied");
    let managers = k
        .ok(&[
            "get",
            "gd",
            "test-gamedeployment",
            "--show-managed-fields",
            "-o",
            "jsonpath={.metadata.managedFields[*].manager}",
        ])
        .await?;
    assert_eq!(managers, "kubectl");
    // A conflicting client-side change, then a server-side apply without --force-conflicts.
    k.ok(&["scale", "gd/test-gamedeployment", "--replicas=9"]).await?;
    let o = k.run(&["apply", "--server-side", "-f", &f]).await?;
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("conflict"), "{}", o.stderr);
    k.ok(&["apply", "--server-side", "--force-conflicts", "-f", &f]).await?;
    assert_eq!(k.ok(&["get", "gd", "test-gamedeployment", "-o", "jsonpath={.spec.replicas}"]).await?, "3");
    let resources = k.ok(&["api-resources", "--api-group=tkex.tencent.com", "-o", "name"]).await?;
    assert_eq!(
        resources.lines().collect::<Vec<_>>(),
        vec!["gamedeployments.tkex.tencent.com", "hookruns.tkex.tencent.com", "hooktemplates.tkex.tencent.com"]
    );
    let version = k.ok(&["version", "-o", "json"]).await?;
    assert!(version.contains("\"serverVersion\""), "{version}");
    k.stop().await;
    Ok(())
}

/// kubectl supports one minor version of skew with its server, and the gcloud dispatcher at `/usr/bin/kubectl` runs
/// the client matching the server's minor: `kubectl version` reports kube-sim's one release and, with a client
/// within the skew (the dispatcher's choice when `KUBECTL` is not set), warns of nothing.
#[tokio::test]
async fn version_is_the_one_release_without_a_skew_warning() -> Result<()> {
    let k = Kubectl::new().await?;
    let o = k.run(&["version", "-o", "json"]).await?;
    anyhow::ensure!(o.code == 0, "kubectl version failed ({}):\n{}\n{}", o.code, o.stdout, o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout)?;
    assert_eq!(v["serverVersion"]["gitVersion"], kube_sim::GIT_VERSION, "{}", o.stdout);
    let minor = |side: &str| -> Result<u32> {
        let text = v[side]["minor"].as_str().with_context(|| format!("{side}.minor in {}", o.stdout))?;
        Ok(text.trim_end_matches('+').parse()?)
    };
    let (client, server) = (minor("clientVersion")?, minor("serverVersion")?);
    if std::env::var_os("KUBECTL").is_none() {
        assert!(client.abs_diff(server) <= 1, "kubectl 1.{client} for a 1.{server} server:\n{}", o.stdout);
    }
    if client.abs_diff(server) <= 1 {
        assert!(!o.stderr.contains("WARNING"), "{}", o.stderr);
    }
    k.stop().await;
    Ok(())
}

#[tokio::test]
async fn auth_can_i_for_token_users() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("kube-sim-kubectl-tokens-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, "op-token,system:serviceaccount:default:operator,2001\n")?;
    let k = Kubectl::start(SimConfig { kubelet: None, token_file: Some(tokens), ..SimConfig::default() }).await?;
    k.install_project_crds().await?;
    let role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: gd-editor}\nrules:\n- apiGroups: [tkex.tencent.com]\n  resources: [gamedeployments, gamedeployments/status]\n  verbs: [get, list, watch, update, patch]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: operator}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: gd-editor}\nsubjects:\n- {kind: ServiceAccount, name: operator, namespace: default}\n";
    let f = k.file("rbac.yaml", role)?;
    k.ok(&["apply", "-f", &f]).await?;
    // kubectl does not send bearer tokens to a plain-HTTP server, so it acts as the service
    // account through impersonation (the admin may impersonate anyone, as on a real cluster).
    let sa = "system:serviceaccount:default:operator";
    let can = k.run(&["auth", "can-i", "patch", "gamedeployments.tkex.tencent.com/status", "--as", sa]).await?;
    assert_eq!(can.stdout.trim(), "yes", "{}", can.stderr);
    assert_eq!(k.run(&["auth", "can-i", "delete", "pods", "--as", sa]).await?.stdout.trim(), "no");
    let o = k.run(&["get", "pods", "--as", sa]).await?;
    assert!(
        o.stderr.contains("Error from server (Forbidden): pods is forbidden: User \"system:serviceaccount:default:operator\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""),
        "{}",
        o.stderr
    );
    k.ok(&["get", "gamedeployments", "--as", sa]).await?;
    // kube-rs sends the token itself.
    let client = k.sim.client_for_token("op-token").await?;
    let gds: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        client,
        "default",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("tkex.tencent.com", "v1alpha1", "GameDeployment"),
            "gamedeployments",
        ),
    );
    gds.list(&Default::default()).await?;
    k.stop().await;
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

#[tokio::test]
async fn get_apiservices_prints_the_local_group_versions() -> Result<()> {
    let k = Kubectl::new().await?;
    let out = k.ok(&["get", "apiservices"]).await?;
    assert_eq!(header(&out), ["NAME", "SERVICE", "AVAILABLE", "AGE"]);
    let row = out.lines().find(|l| l.starts_with("v1.apps ")).context("v1.apps row")?;
    assert_eq!(row.split_whitespace().take(3).collect::<Vec<_>>(), ["v1.apps", "Local", "True"], "{out}");
    k.stop().await;
    Ok(())
}
