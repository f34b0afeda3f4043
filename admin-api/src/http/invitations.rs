//! Invitation acceptance: the page with its form, and the accept action (a form answered with a
//! page, or JSON answered in JSON).

use super::form;
use super::pages::{escape, page};
use super::params::Seg;
use crate::dto::{Envelope, InvitationAccepted};
use crate::services::customers::valid_email;
use crate::services::invitations::{self, InvitationError};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use entities::status::InvitationStatus;
use serde_json::Value;

/// `GET /invitations/{token}`.
pub(super) async fn show(State(state): State<AppState>, Seg(token): Seg) -> Response {
    match invitations::view(&state, &token).await {
        Ok(v) if v.status == InvitationStatus::Pending => page(
            &format!("Join {}", v.organization_name),
            &format!(
                "<p>You were invited to activate <strong>{org}</strong>. Confirm the email address the invitation was sent to ({hint}).</p>\
                 <form method=\"post\" action=\"/invitations/{token}/accept\"><label>Email <input type=\"email\" name=\"email\" required></label> <button type=\"submit\">Accept invitation</button></form>",
                org = escape(&v.organization_name),
                hint = escape(&v.email_hint),
                token = escape(&token),
            ),
        )
        .into_response(),
        Ok(v) => {
            let message = match v.status {
                InvitationStatus::Accepted => "This invitation was already accepted.",
                InvitationStatus::Expired => {
                    "This invitation has expired; ask your provider for a new one."
                }
                InvitationStatus::Revoked => {
                    "This invitation was revoked; ask your provider for a new one."
                }
                InvitationStatus::Pending => "This invitation is no longer valid.",
            };
            (StatusCode::GONE, page("Invitation", &format!("<p>{message}</p>"))).into_response()
        }
        Err(e) => refused_page(&e),
    }
}

/// `POST /invitations/{token}/accept` with `email` as JSON (`{"email": …}`, answered in JSON) or
/// as a form (answered with a page).
pub(super) async fn accept(
    State(state): State<AppState>,
    Seg(token): Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/json"));
    let email: Option<String> = if is_json {
        serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("email").and_then(Value::as_str).map(str::to_string))
    } else {
        form::field(&body, "email")
    };
    let result = match email {
        Some(email) if valid_email(email.trim()) => {
            invitations::accept(&state, &token, &email).await
        }
        _ => Err(InvitationError::EmailMismatch),
    };
    match (result, is_json) {
        (Ok(accepted), true) => axum::Json(Envelope::ok(accepted)).into_response(),
        (Ok(InvitationAccepted { .. }), false) => page(
            "Welcome",
            "<p>Your organization is active. Your provider can now fund it and create API keys.</p>",
        )
        .into_response(),
        (Err(e), true) => (e.status(), axum::Json(e.body())).into_response(),
        (Err(e), false) => refused_page(&e),
    }
}

fn refused_page(e: &InvitationError) -> Response {
    (
        e.status(),
        page("Invitation", &format!("<p>{}</p>", escape(&e.to_string()))),
    )
        .into_response()
}
