//! The validation webhook (`POST /validate-hooks`), served by every replica on the same HTTPS server as the pod gate:
//!
//! - a `CREATE` or `UPDATE` of a **HookTemplate**, or a `CREATE` of a **HookRun**, whose conditions, JSONPaths,
//!   durations, URLs, limits or provider settings are invalid is refused (403) with the message `hook-operator
//!   check` prints for it ([`verdict`], which calls the hook-operator's own validation: one function judges a
//!   template wherever it is checked);
//! - a `CREATE` or `UPDATE` of a **GameDeployment** naming a HookTemplate that does not exist is admitted with a
//!   warning (`kubectl apply` prints it), so apply order stays free.
//!
//! The operators validate as before (an invalid run still ends `Error`, an invalid template still gets its
//! `InvalidHookTemplate` Event): the webhook only moves the answer to apply time. Its configuration's failurePolicy
//! is `Ignore` (chart `webhook.failurePolicy.hookValidation`): while no replica answers, objects are admitted
//! unchecked, as without it. Nothing here writes; the only read is one `get` per named template of a GameDeployment,
//! within `--webhook-answer-within`.

pub mod verdict;

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use common::api::{GameDeployment, HookRun, HookTemplate};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::{Api, Client};

use self::verdict::SpecVerdict;
use super::admission::Admission;
use super::metrics::WebhookMetrics;

/// The metric label of this webhook's answers.
const WEBHOOK: &str = "hook-validation";

#[derive(Clone)]
struct ValidationState {
    client: Client,
    /// The operator's own users (`--webhook-operator-user`): the HookRuns they create are admitted unchecked.
    operator_users: Vec<String>,
    answer_within: Duration,
    metrics: WebhookMetrics,
}

/// The route, with its own state (merged into the webhook server's router).
pub fn router(client: Client, operator_users: Vec<String>, answer_within: Duration, metrics: WebhookMetrics) -> Router {
    Router::new().route("/validate-hooks", post(validate_hooks)).with_state(ValidationState {
        client,
        operator_users,
        answer_within,
        metrics,
    })
}

async fn validate_hooks(State(state): State<ValidationState>, Admission(request): Admission) -> Response {
    let response = answer(&state, &request).await;
    Json(response.into_review()).into_response()
}

async fn answer(state: &ValidationState, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let admitted = AdmissionResponse::from(request);
    if !matches!(request.operation, Operation::Create | Operation::Update)
        || request.sub_resource.is_some()
        || request.resource.group != "tkex.tencent.com"
    {
        return admitted;
    }
    let Some(object) = &request.object else { return admitted };
    let name = object.metadata.name.clone().or_else(|| object.metadata.generate_name.clone()).unwrap_or_default();
    let by_operator =
        request.user_info.username.as_deref().is_some_and(|user| state.operator_users.iter().any(|u| u == user));
    let judged = match request.resource.resource.as_str() {
        "hooktemplates" => match typed::<HookTemplate>(object) {
            Ok(template) => {
                let old = request.old_object.as_ref().and_then(|o| typed::<HookTemplate>(o).ok());
                verdict::hook_template(&name, &template.spec, old.as_ref().map(|o| &o.spec))
            }
            Err(e) => return unreadable(state, admitted, "HookTemplate", &e),
        },
        "hookruns" if request.operation == Operation::Create => match typed::<HookRun>(object) {
            Ok(run) => verdict::hook_run(&name, &run.spec, by_operator),
            Err(e) => return unreadable(state, admitted, "HookRun", &e),
        },
        // The operator's own writes (status aside, which this webhook does not see) need no warning.
        "gamedeployments" if !by_operator => return references(state, request, admitted, object).await,
        _ => return admitted,
    };
    let reason = judged.reason();
    match judged {
        SpecVerdict::Invalid(message) => {
            tracing::info!(kind = %request.kind.kind, %name, namespace = ?request.namespace, %message, "refused");
            state.metrics.count(WEBHOOK, "refused", reason);
            let mut refused = admitted.deny(message);
            refused.result.code = 403;
            refused.result.reason = "Forbidden".into();
            refused
        }
        _ => {
            state.metrics.count(WEBHOOK, "allowed", reason);
            admitted
        }
    }
}

/// An object the types cannot read (the CRD's schema admitted it, so this is a version skew): admitted, with a
/// warning; the operators judge it as before.
fn unreadable(state: &ValidationState, admitted: AdmissionResponse, kind: &str, e: &str) -> AdmissionResponse {
    state.metrics.count(WEBHOOK, "allowed", "unreadable");
    tracing::warn!(%kind, error = %e, "an object this webhook cannot read; admitted unchecked");
    with_warnings(admitted, vec![format!("this {kind} could not be checked at admission ({e}); the operators will")])
}

/// Admits a GameDeployment, warning for each named HookTemplate that does not exist (or could not be looked up
/// within the budget: a warning too, never a refusal).
async fn references(
    state: &ValidationState,
    request: &AdmissionRequest<DynamicObject>,
    admitted: AdmissionResponse,
    object: &DynamicObject,
) -> AdmissionResponse {
    let gd = match typed::<GameDeployment>(object) {
        Ok(gd) => gd,
        Err(e) => return unreadable(state, admitted, "GameDeployment", &e),
    };
    let namespace = request.namespace.clone().unwrap_or_default();
    let templates: Api<HookTemplate> = Api::namespaced(state.client.clone(), &namespace);
    let deadline = tokio::time::Instant::now() + state.answer_within;
    let mut warnings = Vec::new();
    let mut reason = "templates_exist";
    for (template, fields) in verdict::named_templates(&gd.spec) {
        match tokio::time::timeout_at(deadline, templates.get_opt(&template)).await {
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => {
                reason = "template_missing";
                warnings.push(verdict::missing_template(&namespace, &template, &fields));
            }
            Ok(Err(e)) => {
                reason = "lookup_failed";
                warnings.push(verdict::unknown_template(&namespace, &template, &e.to_string()));
            }
            Err(_) => {
                reason = "lookup_failed";
                let why = format!(
                    "no answer within the webhook's {} (--webhook-answer-within)",
                    common::duration::format_go(state.answer_within)
                );
                warnings.push(verdict::unknown_template(&namespace, &template, &why));
            }
        }
    }
    state.metrics.count(WEBHOOK, "allowed", reason);
    with_warnings(admitted, warnings)
}

fn with_warnings(mut response: AdmissionResponse, warnings: Vec<String>) -> AdmissionResponse {
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

fn typed<K: serde::de::DeserializeOwned>(object: &DynamicObject) -> Result<K, String> {
    serde_json::to_value(object).and_then(serde_json::from_value).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::admission::AdmissionReview;
    use serde_json::json;

    fn request(resource: &str, operation: &str, object: serde_json::Value) -> AdmissionRequest<DynamicObject> {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "tkex.tencent.com", "version": "v1alpha1", "kind": "HookTemplate"},
                "resource": {"group": "tkex.tencent.com", "version": "v1alpha1", "resource": resource},
                "name": "bad",
                "namespace": "default",
                "operation": operation,
                "userInfo": {"username": "alice"},
                "object": object,
            },
        }))
        .expect("an AdmissionReview");
        review.try_into().expect("a request")
    }

    /// A state whose client points nowhere: HookTemplates and HookRuns are judged without any read.
    fn state() -> ValidationState {
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URI"));
        ValidationState {
            client: Client::try_from(config).expect("a client"),
            operator_users: vec!["system:serviceaccount:ops:gd".into()],
            answer_within: Duration::from_secs(1),
            metrics: WebhookMetrics::default(),
        }
    }

    fn template(condition: &str) -> serde_json::Value {
        json!({
            "apiVersion": "tkex.tencent.com/v1alpha1", "kind": "HookTemplate",
            "metadata": {"name": "bad", "namespace": "default"},
            "spec": {"metrics": [{"name": "webtest", "successCondition": condition,
                                  "provider": {"web": {"url": "http://x"}}}]},
        })
    }

    #[tokio::test]
    async fn an_invalid_template_is_refused_with_the_check_message_as_a_403() {
        let req = request("hooktemplates", "CREATE", template("asInt(reslt) > 30"));
        let out = serde_json::to_value(answer(&state(), &req).await.into_review()).expect("serialisable");
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(out["response"]["status"]["code"], 403);
        let spec = typed::<HookTemplate>(req.object.as_ref().expect("object")).expect("typed").spec;
        let check = hook_operator::engine::validate::template_refusal("bad", &spec).expect("invalid");
        assert_eq!(out["response"]["status"]["message"], check.as_str());

        let req = request("hooktemplates", "CREATE", template("asInt(result) > 30"));
        let out = serde_json::to_value(answer(&state(), &req).await.into_review()).expect("serialisable");
        assert_eq!(out["response"]["allowed"], true);
        // A DELETE is never this webhook's business (deletion protection answers those).
        let req = request("hooktemplates", "DELETE", template("asInt(reslt) > 30"));
        let out = serde_json::to_value(answer(&state(), &req).await.into_review()).expect("serialisable");
        assert_eq!(out["response"]["allowed"], true);
    }
}
