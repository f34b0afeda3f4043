//! Invitation acceptance: the page with its form, and the accept action (a form answered with a
//! page, or JSON answered in JSON).

use super::form;
use super::params::Seg;
use crate::console::{pages, session};
use crate::dto::Envelope;
use crate::services::customers::valid_email;
use crate::services::invitations::{self, InvitationError};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use entities::status::InvitationStatus;
use serde_json::Value;

/// `GET /invitations/{token}`: the organization to activate and a form to sign up or sign in with
/// exactly the invited address (DESIGN §6c).
pub(super) async fn show(State(state): State<AppState>, Seg(token): Seg) -> Response {
    match invitations::view(&state, &token).await {
        Ok(v) if v.status == InvitationStatus::Pending => {
            let heading = format!("Activate {}", v.organization_name);
            let intro = format!(
                "You were invited to activate {} and become its owner. Sign up, or sign in, with the address the invitation was sent to ({}).",
                v.organization_name, v.email_hint
            );
            let action = format!("/invitations/{token}/accept");
            pages::join_page(
                &state,
                StatusCode::OK,
                pages::Join {
                    signed_in: None,
                    csrf: "",
                    heading: &heading,
                    intro: &intro,
                    action: &action,
                    email: "",
                    button: "Activate the organization",
                    error: None,
                },
            )
        }
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
            pages::message(StatusCode::GONE, "Invitation", message)
        }
        Err(e) => refused_page(&e),
    }
}

/// `POST /invitations/{token}/accept` with `email` and, to sign up or sign in at the same time,
/// `password`, as JSON (answered in JSON) or as a form (answered with a page, or with the
/// console when a person signed in). The invitation's token is the secret that authorizes the
/// request (a program may post it without a browser's CSRF token); a browser's cross-site
/// `Origin` is refused.
pub(super) async fn accept(
    State(state): State<AppState>,
    Seg(token): Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !session::same_origin(&state, &headers) {
        return pages::forbidden();
    }
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/json"));
    let (email, password): (Option<String>, Option<String>) = if is_json {
        let v = serde_json::from_slice::<Value>(&body).ok();
        let text = |k: &str| {
            v.as_ref()
                .and_then(|v| v.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        (text("email"), text("password"))
    } else {
        (
            form::field(&body, "email"),
            form::field(&body, "password").filter(|p| !p.is_empty()),
        )
    };
    let result = match email.as_deref() {
        Some(email) if valid_email(email.trim()) => {
            invitations::accept(&state, &token, email, password.as_deref()).await
        }
        _ => Err(InvitationError::EmailMismatch),
    };
    let (accepted, user) = match result {
        Ok(done) => done,
        Err(e) if is_json => return (e.status(), axum::Json(e.body())).into_response(),
        Err(e) => return refused_page(&e),
    };
    let Some(user) = user.filter(|_| password.is_some()) else {
        return if is_json {
            axum::Json(Envelope::ok(accepted)).into_response()
        } else {
            pages::message(
                StatusCode::OK,
                "Welcome",
                "Your organization is active. Your provider can now fund it and create API keys.",
            )
        };
    };
    // A person signed up or in: a session, and the organization's console.
    let next = format!("/console/orgs/{}", accepted.organization_id);
    let ip = session::client_ip(&headers);
    match pages::signed_in(&state, &user, ip, &next, state.clock.now()).await {
        Ok(mut resp) if is_json => {
            let cookies: Vec<_> = resp
                .headers()
                .get_all(header::SET_COOKIE)
                .iter()
                .cloned()
                .collect();
            resp = axum::Json(Envelope::ok(accepted)).into_response();
            for c in cookies {
                resp.headers_mut().append(header::SET_COOKIE, c);
            }
            resp
        }
        Ok(resp) => resp,
        Err(e) => {
            tracing::error!(error = %e, "session not opened after activation");
            pages::unavailable()
        }
    }
}

fn refused_page(e: &InvitationError) -> Response {
    pages::message(e.status(), "Invitation", &e.to_string())
}
