//! An organization's API keys in the console: the list (previews, group, created, expiry, last
//! use, spend) for every member; create and disable for owners and administrators only, checked
//! here on every request (a member's forged post is refused with 403 and changes nothing). A new
//! key's secret is shown once, on the answer to its create, with a copy button.

use super::pages::{self, render};
use super::session::{self, Viewer};
use crate::dto::CreateKeyRequest;
use crate::error::ApiError;
use crate::http::form::field;
use crate::http::params::{Seg, Segs};
use crate::services::{keys, people};
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use sea_orm::ActiveEnum;
use serde_json::Value;

/// Roles that may create and disable keys.
pub(crate) const MANAGERS: [&str; 2] = ["owner", "administrator"];

/// One row of the list.
struct Row {
    id: i64,
    name: String,
    preview: String,
    group: String,
    created: String,
    expires: String,
    last_used: String,
    spent: String,
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

/// The viewer's role in organization `org` (a path segment), or the page to answer instead.
pub(crate) async fn member(
    state: &AppState,
    viewer: &Viewer,
    org: &str,
) -> Result<(i64, String, String), Response> {
    let Ok(org_id) = org.parse::<i64>() else {
        return Err(pages::not_found(viewer));
    };
    let role = match people::org_role(&state.db, org_id, viewer.user.id).await {
        Ok(Some(role)) => role,
        Ok(None) => return Err(pages::not_found(viewer)),
        Err(_) => return Err(pages::unavailable()),
    };
    match crate::services::customers::organization(&state.db, org_id).await {
        Ok(Some(o)) => Ok((org_id, o.name, role)),
        Ok(None) => Err(pages::not_found(viewer)),
        Err(_) => Err(pages::unavailable()),
    }
}

/// The keys page of `org_id` (`created`: a new key's secret to show once).
async fn page(
    state: &AppState,
    viewer: &Viewer,
    (org_id, name, role): (i64, String, String),
    status: StatusCode,
    created: Option<&str>,
    error: Option<&str>,
) -> Response {
    let (list, groups) = match (
        keys::org_keys(&state.db, org_id).await,
        keys::org_groups(&state.db, state, org_id).await,
    ) {
        (Ok(l), Ok(g)) => (l, g),
        _ => return pages::unavailable(),
    };
    let group_name = |id: i64| {
        state
            .group(id)
            .map_or_else(|| format!("group {id}"), |g| g.name)
    };
    let now = state.clock.now();
    let key_rows: Vec<_> = list.iter().map(|k| k.row.clone()).collect();
    let mut budgets = keys::budget_texts(state, org_id, &key_rows).await;
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
                spent: k.spent.to_decimal_usd().to_string(),
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
            can_manage: MANAGERS.contains(&role.as_str()),
            created,
            error,
        },
    )
}

/// `GET /console/orgs/{org}/keys`.
pub(crate) async fn list(State(state): State<AppState>, viewer: Viewer, Seg(org): Seg) -> Response {
    match member(&state, &viewer, &org).await {
        Ok(m) => page(&state, &viewer, m, StatusCode::OK, None, None).await,
        Err(resp) => resp,
    }
}

/// A state-changing post's common checks: origin, the session's CSRF token, a managing role.
pub(crate) async fn managing(
    state: &AppState,
    viewer: &Viewer,
    org: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(i64, String, String), Response> {
    allowed(
        state,
        viewer,
        org,
        headers,
        body,
        &MANAGERS,
        "owners and administrators",
    )
    .await
}

/// The checks of every state-changing post of an organization's pages: origin, the session's
/// CSRF token, membership, and one of `roles` (`who` names them in the refusal).
pub(crate) async fn allowed(
    state: &AppState,
    viewer: &Viewer,
    org: &str,
    headers: &HeaderMap,
    body: &[u8],
    roles: &[&str],
    who: &str,
) -> Result<(i64, String, String), Response> {
    if !session::same_origin(state, headers) || !viewer.csrf_ok(field(body, "csrf").as_deref()) {
        return Err(pages::forbidden());
    }
    let m = member(state, viewer, org).await?;
    if !roles.contains(&m.2.as_str()) {
        return Err(not_permitted(who));
    }
    Ok(m)
}

/// The 403 page of a role that may not do this.
pub(crate) fn not_permitted(who: &str) -> Response {
    pages::message(
        StatusCode::FORBIDDEN,
        "Not permitted",
        &format!("Only the organization's {who} may do this. Nothing was changed."),
    )
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
    let m = match managing(&state, &viewer, &org, &headers, &body).await {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let expires = field(&body, "expires_on").filter(|d| !d.trim().is_empty());
    let request = CreateKeyRequest {
        name: field(&body, "name").map(Value::String),
        group_id: field(&body, "group_id")
            .and_then(|g| g.trim().parse::<i64>().ok())
            .map(Value::from),
        expires_at: expires.map(|d| Value::String(format!("{}T00:00:00Z", d.trim()))),
        max_concurrency: number(&body, "max_concurrency"),
        requests_per_minute: number(&body, "requests_per_minute"),
        budget_usd: field(&body, "budget_usd").and_then(|v| super::customers::number(&v)),
        // The period's select always sends a value: it counts only with an amount.
        budget_period: field(&body, "budget_period")
            .filter(|p| !p.trim().is_empty())
            .filter(|_| field(&body, "budget_usd").is_some_and(|a| !a.trim().is_empty()))
            .map(Value::String),
        unknown: Default::default(),
    };
    let created = match keys::NewKey::parse(request) {
        Ok(new) => keys::org_create(&state, m.0, new, viewer.user.id, viewer.ip.clone()).await,
        Err(e) => Err(e),
    };
    match created {
        Ok(key) => {
            let secret = key.key.unwrap_or_default();
            page(&state, &viewer, m, StatusCode::OK, Some(&secret), None).await
        }
        Err(ApiError::InvalidApiKey(message)) => {
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
            pages::unavailable()
        }
    }
}

/// An optional number field of a form: absent or empty → `None`; anything else is passed on as
/// JSON (a number when it parses, else the text, which the key rules refuse with their message).
fn number(body: &[u8], name: &str) -> Option<Value> {
    let raw = field(body, name)?;
    let raw = raw.trim();
    if raw.is_empty() {
        return None;
    }
    Some(
        raw.parse::<u64>()
            .map_or_else(|_| Value::String(raw.to_string()), Value::from),
    )
}

/// `POST /console/orgs/{org}/keys/{key}/disable`.
pub(crate) async fn disable(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(org, key): Segs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let m = match managing(&state, &viewer, &org, &headers, &body).await {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let Ok(key_id) = key.parse::<i64>() else {
        return pages::not_found(&viewer);
    };
    match keys::org_disable(&state, m.0, key_id, viewer.user.id, viewer.ip.clone()).await {
        Ok(_) => Redirect::to(&format!("/console/orgs/{}/keys", m.0)).into_response(),
        Err(ApiError::ApiKeyNotFound) => pages::not_found(&viewer),
        Err(e) => {
            tracing::error!(error = %e, "console key not disabled");
            pages::unavailable()
        }
    }
}
