//! Taking an admission request out of its HTTP body, as every webhook of the operator does (the pod gate, deletion
//! protection, hook validation): one extractor, so the three answer a bad body alike.

use axum::Json;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};

/// The request of an AdmissionReview body. A body that is not JSON is refused as axum's `Json` refuses it; a review
/// without a request gets `400 not an AdmissionReview request: …`.
pub(crate) struct Admission(pub(crate) AdmissionRequest<DynamicObject>);

impl<S: Send + Sync> FromRequest<S> for Admission {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let Json(review) = Json::<AdmissionReview<DynamicObject>>::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        review
            .try_into()
            .map(Admission)
            .map_err(|e| (StatusCode::BAD_REQUEST, format!("not an AdmissionReview request: {e}")).into_response())
    }
}
