//! Token authentication and RBAC authorization for non-admin users.

use anyhow::Result;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use kube::api::{Api, ListParams, PostParams};
use kube_sim::SimConfig;
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn token_users_are_authorized_by_rbac() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("kube-sim-rbac-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, "alice-token,alice,1001,\"devs,qa\"\nbob-token,bob,1002\n")?;
    let sim = sim_with(SimConfig { kubelet: None, token_file: Some(tokens), ..SimConfig::default() }).await?;
    let admin = sim.client().await;
    let alice = sim.client_for_token("alice-token").await?;

    let pods: Api<Pod> = Api::default_namespaced(alice.clone());
    let err = api_error(pods.list(&ListParams::default()).await)?;
    assert_eq!(err.code, 403);
    assert_eq!(err.reason, "Forbidden");
    assert_eq!(
        err.message,
        "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    let cluster: Api<ClusterRole> = Api::all(alice.clone());
    let err = api_error(cluster.get("view").await)?;
    assert_eq!(
        err.message,
        "clusterroles.rbac.authorization.k8s.io \"view\" is forbidden: User \"alice\" cannot get resource \"clusterroles\" in API group \"rbac.authorization.k8s.io\" at the cluster scope"
    );

    // A Role for pods (and pods/status) bound to a group alice is in.
    let roles: Api<Role> = Api::default_namespaced(admin.clone());
    roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "pod-reader"}, "rules": [
                {"apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["allowed"], "verbs": ["get", "list"]}
            ]}))?,
        )
        .await?;
    let bindings: Api<RoleBinding> = Api::default_namespaced(admin.clone());
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "devs-read"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
                "subjects": [{"kind": "Group", "name": "devs"}]}))?,
        )
        .await?;
    pods.list(&ListParams::default()).await?;
    let err = api_error(
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
            )?,
        )
        .await,
    )?;
    assert_eq!(
        err.message,
        "pods is forbidden: User \"alice\" cannot create resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    let cms: Api<ConfigMap> = Api::default_namespaced(alice.clone());
    let admin_cms: Api<ConfigMap> = Api::default_namespaced(admin.clone());
    for n in ["allowed", "other"] {
        admin_cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": n}}))?).await?;
    }
    cms.get("allowed").await?;
    // A list pinned to an allowed name by a field selector is authorized as that name; an
    // unpinned list is not.
    assert_eq!(cms.list(&ListParams::default().fields("metadata.name=allowed")).await?.items.len(), 1);
    assert_eq!(api_error(cms.list(&ListParams::default()).await)?.code, 403);
    let err = api_error(cms.get("other").await)?;
    assert_eq!(
        err.message,
        "configmaps \"other\" is forbidden: User \"alice\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    // Other namespaces are not covered by the RoleBinding.
    let elsewhere: Api<Pod> = Api::namespaced(alice.clone(), "kube-system");
    assert_eq!(api_error(elsewhere.list(&ListParams::default()).await)?.code, 403);

    // Access reviews answer the same questions.
    let raw = Raw::new(&sim);
    let review = |verb: &str, resource: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
               "spec": {"resourceAttributes": {"namespace": "default", "verb": verb, "resource": resource}}})
    };
    let ssar = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let r = raw.send_as("alice-token", "POST", ssar, Some(&review("list", "pods"))).await?;
    assert_eq!((r.status, r.body["status"]["allowed"].as_bool()), (201, Some(true)));
    let r = raw.send_as("alice-token", "POST", ssar, Some(&review("delete", "pods"))).await?;
    assert_eq!(r.body["status"]["allowed"], false);
    // Discovery is open to authenticated users; unknown tokens are rejected.
    let r = raw.send_as("bob-token", "GET", "/apis", None).await?;
    assert_eq!(r.status, 200);
    let r = raw.send_as("nope", "GET", "/api/v1/namespaces", None).await?;
    assert_eq!((r.status, r.body["reason"].as_str()), (401, Some("Unauthorized")));
    let ssr = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let whoami =
        raw.send_as("bob-token", "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", Some(&ssr)).await?;
    assert_eq!(whoami.body["status"]["userInfo"]["username"], "bob");
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

#[tokio::test]
async fn service_account_tokens_from_token_requests() -> Result<()> {
    let sim = sim().await?;
    let admin = sim.client().await;
    let raw = Raw::new(&sim);
    let sa = raw.post("/api/v1/namespaces/default/serviceaccounts", &json!({"metadata": {"name": "operator"}})).await?;
    assert_eq!(sa.status, 201);
    let roles: Api<Role> = Api::default_namespaced(admin.clone());
    roles
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "cm-reader"}, "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}))?)
        .await?;
    let bindings: Api<RoleBinding> = Api::default_namespaced(admin.clone());
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "operator"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": "default"}]}))?,
        )
        .await?;
    let tr = raw
        .post("/api/v1/namespaces/default/serviceaccounts/operator/token", &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}))
        .await?;
    assert_eq!(tr.status, 201, "{}", tr.text);
    assert_eq!(tr.body["kind"], "TokenRequest");
    let token = tr.body["status"]["token"].as_str().unwrap_or_default().to_string();
    assert!(tr.body["status"]["expirationTimestamp"].as_str().is_some());
    let client = sim.client_for_token(&token).await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.list(&ListParams::default()).await?;
    let err = api_error(
        cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "x"}}))?).await,
    )?;
    assert_eq!(
        err.message,
        "configmaps is forbidden: User \"system:serviceaccount:default:operator\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    // Tokens die with their service account.
    raw.delete("/api/v1/namespaces/default/serviceaccounts/operator", None).await?;
    assert_eq!(api_error(cms.list(&ListParams::default()).await)?.code, 401);
    let missing = raw.post("/api/v1/namespaces/default/serviceaccounts/nobody/token", &json!({"spec": {}})).await?;
    assert_eq!(missing.status, 404);
    sim.shutdown().await;
    Ok(())
}

/// `POST /apis/authentication.k8s.io/v1/tokenreviews` answers for the tokens kube-sim knows (the token file's users,
/// TokenRequest tokens of live service accounts) with their user info, `authenticated` omitted (false) and an empty
/// user otherwise; an empty token is `400`; it is in discovery and authorized as `create tokenreviews`.
#[tokio::test]
async fn token_reviews_authenticate_static_and_service_account_tokens() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("kube-sim-tokenreview-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, "alice-token,alice,1001,\"devs,qa\"\n")?;
    let sim = sim_with(SimConfig { kubelet: None, token_file: Some(tokens), ..SimConfig::default() }).await?;
    let raw = Raw::new(&sim);
    let review = |token: &str| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}});
    let path = "/apis/authentication.k8s.io/v1/tokenreviews";

    let r = raw.post(path, &review("alice-token")).await?;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["kind"], "TokenReview");
    assert_eq!(r.body["status"]["authenticated"], true);
    assert_eq!(
        r.body["status"]["user"],
        json!({"username": "alice", "uid": "1001", "groups": ["devs", "qa", "system:authenticated"]})
    );

    let sa = raw.post("/api/v1/namespaces/default/serviceaccounts", &json!({"metadata": {"name": "operator"}})).await?;
    let tr = raw.post("/api/v1/namespaces/default/serviceaccounts/operator/token", &json!({"spec": {}})).await?;
    let token = tr.body["status"]["token"].as_str().unwrap_or_default().to_string();
    let r = raw.post(path, &review(&token)).await?;
    assert_eq!(r.body["status"]["authenticated"], true, "{}", r.text);
    assert_eq!(
        r.body["status"]["user"],
        json!({"username": "system:serviceaccount:default:operator", "uid": sa.body["metadata"]["uid"],
               "groups": ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]})
    );

    // Unknown tokens: not authenticated (the field omitted, as Go omits a false bool), an empty user, no error.
    let r = raw.post(path, &review("nope")).await?;
    assert_eq!(r.status, 201);
    assert_eq!(r.body["status"], json!({"user": {}}), "{}", r.text);
    // A deleted service account's token no longer authenticates.
    raw.delete("/api/v1/namespaces/default/serviceaccounts/operator", None).await?;
    assert_eq!(raw.post(path, &review(&token)).await?.body["status"], json!({"user": {}}));
    let r = raw.post(path, &json!({"spec": {}})).await?;
    assert_eq!(
        (r.status, r.body["message"].as_str()),
        (400, Some("token is required for TokenReview in authentication"))
    );

    // Discovery, and RBAC: alice may not review tokens until she is bound to system:auth-delegator.
    let resources = raw.get("/apis/authentication.k8s.io/v1").await?;
    let tokenreviews = resources.body["resources"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["name"] == "tokenreviews"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (tokenreviews["kind"].as_str(), tokenreviews["namespaced"].as_bool()),
        (Some("TokenReview"), Some(false))
    );
    assert_eq!(tokenreviews["verbs"], json!(["create"]));
    let body = review("alice-token");
    let r = raw.send_as("alice-token", "POST", path, Some(&body)).await?;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.body["message"],
        "tokenreviews.authentication.k8s.io is forbidden: User \"alice\" cannot create resource \"tokenreviews\" in API group \"authentication.k8s.io\" at the cluster scope"
    );
    let binding = json!({"metadata": {"name": "alice-delegator"}, "subjects": [{"kind": "User", "name": "alice"}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"}});
    assert_eq!(raw.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", &binding).await?.status, 201);
    let r = raw.send_as("alice-token", "POST", path, Some(&body)).await?;
    assert_eq!(r.status, 201, "{}", r.text);
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

/// A TokenRequest with a `boundObjectRef` of kind Pod (`kubectl create token --bound-object-kind Pod`), as
/// `saTokenREST` checks it: the pod must exist (`404`), run as the account (`400`), have the referenced UID when one
/// is given (`409`); kube-sim binds to nothing but pods (`400`, where a real server also binds Secrets and Nodes).
/// The token's user carries `authentication.kubernetes.io/pod-name`, `pod-uid` and `node-name` in `extra`, which
/// TokenReview and SelfSubjectReview return; it dies with the pod.
#[tokio::test]
async fn pod_bound_tokens_carry_the_pod_in_extra_and_die_with_it() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    raw.post("/api/v1/namespaces/default/serviceaccounts", &json!({"metadata": {"name": "game"}})).await?;
    let pod = |name: &str, account: &str| {
        json!({"metadata": {"name": name}, "spec": {"serviceAccountName": account,
        "nodeName": "node-a", "containers": [{"name": "c", "image": "game:1"}]}})
    };
    let gs = raw.post("/api/v1/namespaces/default/pods", &pod("gs-0", "game")).await?;
    assert_eq!(gs.status, 201, "{}", gs.text);
    let uid = gs.body["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    raw.post("/api/v1/namespaces/default/pods", &pod("other", "default")).await?;
    let request = |r: serde_json::Value| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"boundObjectRef": r}})
    };
    let path = "/api/v1/namespaces/default/serviceaccounts/game/token";

    let tr = raw.post(path, &request(json!({"apiVersion": "v1", "kind": "Pod", "name": "gs-0", "uid": uid}))).await?;
    assert_eq!(tr.status, 201, "{}", tr.text);
    assert_eq!(tr.body["spec"]["boundObjectRef"]["name"], "gs-0");
    let token = tr.body["status"]["token"].as_str().unwrap_or_default().to_string();
    let extra = json!({"authentication.kubernetes.io/node-name": ["node-a"],
        "authentication.kubernetes.io/pod-name": ["gs-0"], "authentication.kubernetes.io/pod-uid": [uid]});
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}});
    let r = raw.post("/apis/authentication.k8s.io/v1/tokenreviews", &review).await?;
    assert_eq!(r.body["status"]["user"]["username"], "system:serviceaccount:default:game", "{}", r.text);
    assert_eq!(r.body["status"]["user"]["extra"], extra, "{}", r.text);
    let ssr = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let me = raw.send_as(&token, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", Some(&ssr)).await?;
    assert_eq!(me.status, 201, "{}", me.text);
    assert_eq!(me.body["status"]["userInfo"]["extra"], extra, "{}", me.text);

    let refused = |r: &RawResponse| (r.status, r.body["message"].as_str().unwrap_or_default().to_string());
    let r = raw.post(path, &request(json!({"apiVersion": "v1", "kind": "Pod", "name": "other"}))).await?;
    assert_eq!(
        refused(&r),
        (
            400,
            "cannot bind token for serviceaccount \"game\" to pod running with different serviceaccount name.".into()
        )
    );
    let r = raw.post(path, &request(json!({"apiVersion": "v1", "kind": "Pod", "name": "gone"}))).await?;
    assert_eq!(refused(&r), (404, "pods \"gone\" not found".into()));
    let r = raw.post(path, &request(json!({"apiVersion": "v1", "kind": "Pod", "name": "gs-0", "uid": "x"}))).await?;
    assert_eq!(
        refused(&r),
        (
            409,
            "Operation cannot be fulfilled on Pod \"gs-0\": the UID in the bound object reference (x) does not match \
             the UID in record. The object might have been deleted and then recreated"
                .into()
        )
    );
    let r = raw.post(path, &request(json!({"apiVersion": "v1", "kind": "Secret", "name": "s"}))).await?;
    assert_eq!(refused(&r), (400, "cannot bind token to object of type /v1, Kind=Secret".into()));

    // The token dies with its pod.
    let d = raw.delete("/api/v1/namespaces/default/pods/gs-0?gracePeriodSeconds=0", None).await?;
    assert_eq!(d.status, 200, "{}", d.text);
    let r = raw.post("/apis/authentication.k8s.io/v1/tokenreviews", &review).await?;
    assert_eq!(r.body["status"], json!({"user": {}}), "{}", r.text);
    sim.shutdown().await;
    Ok(())
}

/// The bootstrap `view` ClusterRole reads EndpointSlices (and so, by aggregation, do `edit` and `admin`), and
/// `edit` does not write Endpoints, as in kube-apiserver's bootstrap policy since CVE-2021-25740.
#[tokio::test]
async fn bootstrap_view_reads_endpointslices_and_edit_does_not_write_endpoints() -> Result<()> {
    use k8s_openapi::api::core::v1::Endpoints;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube_sim::TokenUser;

    let sim = sim_with(SimConfig { kubelet: None, ..SimConfig::default() }).await?;
    let admin = sim.client().await;
    let bindings: Api<RoleBinding> = Api::default_namespaced(admin.clone());
    for (user, role) in [("viewer", "view"), ("editor", "edit"), ("owner", "admin")] {
        bindings
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": user},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}))?,
            )
            .await?;
    }
    for user in ["viewer", "editor", "owner"] {
        let token = sim.add_token_user(TokenUser { user: user.into(), ..TokenUser::default() });
        let client = sim.client_for_token(&token).await?;
        let slices: Api<EndpointSlice> = Api::default_namespaced(client.clone());
        slices.list(&ListParams::default()).await.map_err(|e| anyhow::anyhow!("{user} lists endpointslices: {e}"))?;
        let endpoints: Api<Endpoints> = Api::default_namespaced(client);
        endpoints.list(&ListParams::default()).await?;
        let err = api_error(
            endpoints
                .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "by-hand"}}))?)
                .await,
        )?;
        assert_eq!(err.code, 403, "{user} must not write Endpoints: {err:?}");
    }
    Ok(())
}
