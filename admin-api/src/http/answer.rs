//! A read's answer in the partner and billing APIs' envelope: what every resource's handlers
//! return (in its own file so that the router, which names the handlers, is not named back).

use crate::dto::Envelope;
use crate::error::ApiError;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// A read's answer: the success envelope around `data`, or the error envelope of a service's
/// error (mapped by `crate::refusal`).
pub(crate) fn respond<T: Serialize, E>(result: Result<T, E>) -> Response
where
    ApiError: From<E>,
{
    match result {
        Ok(data) => axum::Json(Envelope::ok(data)).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}
