//! An organization's API keys in the console: the list (previews, group, created, expiry, last
//! use, spend) for every member; create and disable for owners and administrators only, checked
//! here on every request (a member's forged post is refused with 403 and changes nothing). A new
//! key's secret is shown once, on the answer to its create, with a copy button.

use super::form;
use super::gate::{self, Membership};
use super::render::{self, render};
use super::session::Viewer;
use crate::http::params::{Seg, Segs};
use crate::services::keys::KeyError;
use crate::services::{keys, org_keys};
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use sea_orm::ActiveEnum;

/// One row of the list.
struct Row {
    id: i64,
    name: String,
    preview: String,
    group: String,
    created: String,
    expires: String,
    last_used: String,
    spent: super::amount::Amount,
    budget: String,
    status: String,
    active: bool,
}

#[derive(Template)]
#[template(path = "console/keys.html")]
struct Keys<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    org_id: i64,
    tab: &'a str,
    name: &'a str,
    keys: Vec<Row>,
    groups: Vec<(i64, String)>,
    can_manage: bool,
    created: Option<&'a str>,
    error: Option<&'a str>,
}

/// The keys page of `org_id` (`created`: a new key's secret to show once).
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
    let (list, groups) = match (
        org_keys::org_keys(&state.db, org_id).await,
        org_keys::org_groups(&state.db, state, org_id).await,
    ) {
        (Ok(l), Ok(g)) => (l, g),
        _ => return render::unavailable(),
    };
    let group_name = |id: i64| {
        state
            .group(id)
            .map_or_else(|| format!("group {id}"), |g| g.name)
    };
    let now = state.clock.now();
    let key_rows: Vec<_> = list.iter().map(|k| k.row.clone()).collect();
    let mut budgets = org_keys::budget_texts(state, org_id, &key_rows).await;
    let rows = list
        .into_iter()
        .map(|k| {
            let expired = k.row.expires_at.is_some_and(|t| t <= now);
            let status = match k.row.status.to_value().as_str() {
                "active" if expired => "expired".to_string(),
                other => other.to_string(),
            };
            Row {
                id: k.row.id,
                name: k.row.name.clone(),
                preview: k.row.preview.clone(),
                group: group_name(k.row.group_id),
                created: k.row.created_at.format("%Y-%m-%d").to_string(),
                expires: k.row.expires_at.map_or_else(
                    || "never".into(),
                    |t| t.format("%Y-%m-%d %H:%M UTC").to_string(),
                ),
                last_used: k.last_used.map_or_else(
                    || "never".into(),
                    |t| t.format("%Y-%m-%d %H:00 UTC").to_string(),
                ),
                spent: super::amount::amount(k.spent),
                budget: budgets.remove(&k.row.id).unwrap_or_default(),
                active: status == "active",
                status,
            }
        })
        .collect();
    render(
        status,
        &Keys {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            org_id,
            tab: "keys",
            name: &name,
            keys: rows,
            groups,
            can_manage: gate::KEY_MANAGERS.roles.contains(&role.as_str()),
            created,
            error,
        },
    )
}

/// `GET /console/orgs/{org}/keys`.
pub(crate) async fn list(State(state): State<AppState>, viewer: Viewer, Seg(org): Seg) -> Response {
    match gate::organization(&state, &viewer, &org).await {
        Ok(m) => page(&state, &viewer, m, StatusCode::OK, None, None).await,
        Err(resp) => resp,
    }
}

/// `POST /console/orgs/{org}/keys`: `name`, `group_id`, optional `expires_on` (a UTC date; the
/// key stops at its start), `max_concurrency` and `requests_per_minute` (the key's own limits,
/// within its group's), `budget_usd` and `budget_period` (the key's spend budget).
pub(crate) async fn create(
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
    let created = match keys::NewKey::parse(form::KeyForm::read(&body).request()) {
        Ok(new) => org_keys::org_create(&state, m.id, new, viewer.user.id, viewer.ip.clone()).await,
        Err(e) => Err(e),
    };
    match created {
        Ok(key) => {
            let secret = key.key.unwrap_or_default();
            page(&state, &viewer, m, StatusCode::OK, Some(&secret), None).await
        }
        Err(KeyError::Invalid(message)) => {
            page(
                &state,
                &viewer,
                m,
                StatusCode::BAD_REQUEST,
                None,
                Some(&message),
            )
            .await
        }
        Err(e) => {
            tracing::error!(error = %e, "console key not created");
            render::unavailable()
        }
    }
}

/// `POST /console/orgs/{org}/keys/{key}/disable`.
pub(crate) async fn disable(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(org, key): Segs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let m =
        match gate::org_change(&state, &viewer, &org, &headers, &body, &gate::KEY_MANAGERS).await {
            Ok(m) => m,
            Err(resp) => return resp,
        };
    let Ok(key_id) = key.parse::<i64>() else {
        return render::not_found(&viewer);
    };
    match org_keys::org_disable(&state, m.id, key_id, viewer.user.id, viewer.ip.clone()).await {
        Ok(_) => Redirect::to(&format!("/console/orgs/{}/keys", m.id)).into_response(),
        Err(KeyError::NotFound) => render::not_found(&viewer),
        Err(e) => {
            tracing::error!(error = %e, "console key not disabled");
            render::unavailable()
        }
    }
}
