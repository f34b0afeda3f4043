//! An organization's billing token in the console (SPEC "Organization billing token"): every
//! member sees whether one is active (its preview); owners and administrators create one (shown
//! once, with a copy button), rotate it (the previous one stops at once) or revoke it. Checked on
//! the server for every request; audited.

use super::gate::{self, Membership};
use super::render::{self, render};
use super::session::Viewer;
use crate::http::form::field;
use crate::http::params::Seg;
use crate::services::audit;
use crate::services::billing;
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

#[derive(Template)]
#[template(path = "console/billing_token.html")]
struct Page<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    org_id: i64,
    tab: &'a str,
    name: &'a str,
    active: Option<(String, String)>,
    can_manage: bool,
    created: Option<&'a str>,
    error: Option<&'a str>,
}

async fn page(
    state: &AppState,
    viewer: &Viewer,
    Membership {
        id: org_id,
        name,
        role,
    }: Membership,
    status: StatusCode,
    created: Option<&str>,
    error: Option<&str>,
) -> Response {
    let active = match billing::active_token(&state.db, org_id).await {
        Ok(t) => t.map(|t| {
            (
                t.preview,
                t.created_at.format("%Y-%m-%d %H:%M UTC").to_string(),
            )
        }),
        Err(_) => return render::unavailable(),
    };
    render(
        status,
        &Page {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            org_id,
            tab: "billing",
            name: &name,
            active,
            can_manage: gate::KEY_MANAGERS.roles.contains(&role.as_str()),
            created,
            error,
        },
    )
}

/// `GET /console/orgs/{org}/billing-token`.
pub(crate) async fn show(State(state): State<AppState>, viewer: Viewer, Seg(org): Seg) -> Response {
    match gate::organization(&state, &viewer, &org).await {
        Ok(m) => page(&state, &viewer, m, StatusCode::OK, None, None).await,
        Err(resp) => resp,
    }
}

/// `POST /console/orgs/{org}/billing-token` with `action` `create`, `rotate` or `revoke`.
pub(crate) async fn act(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(org): Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let m =
        match gate::org_change(&state, &viewer, &org, &headers, &body, &gate::KEY_MANAGERS).await {
            Ok(m) => m,
            Err(resp) => return resp,
        };
    let action = field(&body, "action").unwrap_or_default();
    let audit = |what: &'static str| audit::Audit {
        organization: Some(m.id),
        partner: None,
        actor: Some(viewer.user.id),
        action: what,
        target: None,
        detail: serde_json::json!({}),
        ip: viewer.ip.clone(),
    };
    // The change and its audit record commit together (`billing::issue_token`).
    let outcome = match action.as_str() {
        "create" => billing::issue_token(&state, m.id, false, Some(audit("billing_token_created")))
            .await
            .map(|secret| Some(secret.expose().to_string())),
        "rotate" => billing::issue_token(&state, m.id, true, Some(audit("billing_token_rotated")))
            .await
            .map(|secret| Some(secret.expose().to_string())),
        "revoke" => billing::revoke_token(&state, m.id, Some(audit("billing_token_revoked")))
            .await
            .map(|_| None),
        _ => Err("unknown action".to_string()),
    };
    match outcome {
        Ok(secret) => page(&state, &viewer, m, StatusCode::OK, secret.as_deref(), None).await,
        Err(message) => {
            page(
                &state,
                &viewer,
                m,
                StatusCode::CONFLICT,
                None,
                Some(&message),
            )
            .await
        }
    }
}
