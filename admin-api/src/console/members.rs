//! An organization's members in the console: every member sees who belongs and with which role,
//! and the sign-up links still open. Owners alone invite (a `/console/join` link mailed to the
//! address and shown to the owner once), change roles and remove members; an organization always
//! keeps at least one owner (checked under a lock, see [`people::change_org_member`]). Owners
//! also read the organization's audit log. Every change commits with its audit record.

use super::keys::{allowed, member, not_permitted};
use super::pages::{self, render};
use super::session::Viewer;
use crate::db::begin;
use crate::http::form::field;
use crate::http::params::{Seg, Segs};
use crate::services::customers::valid_email;
use crate::services::people::{self, MemberError};
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

/// How many audit records the audit page shows (newest first).
pub(crate) const AUDIT_PAGE: u64 = 200;

struct MemberRow {
    id: i64,
    email: String,
    role: String,
    since: String,
    is_you: bool,
}

#[derive(Template)]
#[template(path = "console/members.html")]
struct Members<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    org_id: i64,
    tab: &'a str,
    name: &'a str,
    is_owner: bool,
    members: Vec<MemberRow>,
    pending: Vec<(String, String, String)>,
    roles: [&'a str; 3],
    invited: Option<(&'a str, &'a str)>,
    error: Option<&'a str>,
}

async fn page(
    state: &AppState,
    viewer: &Viewer,
    (org_id, name, role): (i64, String, String),
    status: StatusCode,
    invited: Option<(&str, &str)>,
    error: Option<&str>,
) -> Response {
    let now = state.clock.now();
    let (members, pending) = match (
        people::org_members_of(&state.db, org_id).await,
        people::pending_org_invites(&state.db, org_id, now).await,
    ) {
        (Ok(m), Ok(p)) => (m, p),
        _ => return pages::unavailable(),
    };
    render(
        status,
        &Members {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            org_id,
            tab: "members",
            name: &name,
            is_owner: role == "owner",
            members: members
                .into_iter()
                .map(|(m, email)| MemberRow {
                    id: m.id,
                    is_you: m.user_id == viewer.user.id,
                    email,
                    role: m.role,
                    since: m.created_at.format("%Y-%m-%d").to_string(),
                })
                .collect(),
            pending: pending
                .into_iter()
                .map(|t| {
                    (
                        t.email,
                        t.role.unwrap_or_default(),
                        t.expires_at.format("%Y-%m-%d %H:%M UTC").to_string(),
                    )
                })
                .collect(),
            roles: people::ORG_ROLES,
            invited,
            error,
        },
    )
}

/// `GET /console/orgs/{org}/members`.
pub(crate) async fn list(State(state): State<AppState>, viewer: Viewer, Seg(org): Seg) -> Response {
    match member(&state, &viewer, &org).await {
        Ok(m) => page(&state, &viewer, m, StatusCode::OK, None, None).await,
        Err(resp) => resp,
    }
}

/// A members post's checks: origin, the session's CSRF token, the owner role.
async fn owning(
    state: &AppState,
    viewer: &Viewer,
    org: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(i64, String, String), Response> {
    allowed(state, viewer, org, headers, body, &["owner"], "owners").await
}

/// `POST /console/orgs/{org}/members`: `email`, `role` → a join link, mailed and shown once.
pub(crate) async fn invite(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(org): Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let m = match owning(&state, &viewer, &org, &headers, &body).await {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let email = people::normal_email(&field(&body, "email").unwrap_or_default());
    let role = field(&body, "role").unwrap_or_default();
    let refusal = if !valid_email(&email) {
        Some("Enter a valid email address.")
    } else if !people::ORG_ROLES.contains(&role.as_str()) {
        Some("Choose a role: owner, administrator or member.")
    } else {
        None
    };
    if let Some(message) = refusal {
        return page(
            &state,
            &viewer,
            m,
            StatusCode::BAD_REQUEST,
            None,
            Some(message),
        )
        .await;
    }
    let issued = async {
        let txn = begin(&state.db).await?;
        let token = people::issue_token(
            &txn,
            &state,
            "org_invite",
            &email,
            Some(m.0),
            None,
            Some(&role),
            Some(viewer.user.id),
        )
        .await?;
        let audit = people::Audit {
            organization: Some(m.0),
            partner: None,
            actor: Some(viewer.user.id),
            action: "member_invited",
            target: Some(email.clone()),
            detail: serde_json::json!({ "role": role }),
            ip: viewer.ip.clone(),
        };
        people::audit(&txn, audit, state.clock.now()).await?;
        txn.commit().await?;
        Ok::<_, sea_orm::DbErr>(token)
    }
    .await;
    let Ok(token) = issued else {
        return pages::unavailable();
    };
    let url = state.public_url(&format!("/console/join/{token}"));
    people::mail_join_link(&state, &email, &m.1, &role, &url).await;
    page(
        &state,
        &viewer,
        m,
        StatusCode::OK,
        Some((&email, &url)),
        None,
    )
    .await
}

/// `POST /console/orgs/{org}/members/{member}`: `action` `role` (with `role`) or `remove`.
pub(crate) async fn change(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(org, member_id): Segs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let m = match owning(&state, &viewer, &org, &headers, &body).await {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let Ok(member_id) = member_id.parse::<i64>() else {
        return pages::not_found(&viewer);
    };
    let action = field(&body, "action").unwrap_or_default();
    let role = match action.as_str() {
        "role" => Some(field(&body, "role").unwrap_or_default()),
        "remove" => None,
        _ => {
            return page(
                &state,
                &viewer,
                m,
                StatusCode::BAD_REQUEST,
                None,
                Some("Unknown action. Nothing was changed."),
            )
            .await;
        }
    };
    let done = async {
        let txn = begin(&state.db).await?;
        let (email, former) =
            people::change_org_member(&txn, m.0, member_id, role.as_deref()).await?;
        let audit = people::Audit {
            organization: Some(m.0),
            partner: None,
            actor: Some(viewer.user.id),
            action: if role.is_some() {
                "member_role_changed"
            } else {
                "member_removed"
            },
            target: Some(email),
            detail: serde_json::json!({ "from": former, "to": role }),
            ip: viewer.ip.clone(),
        };
        people::audit(&txn, audit, state.clock.now()).await?;
        txn.commit().await?;
        Ok::<_, MemberError>(())
    }
    .await;
    match done {
        Ok(()) => Redirect::to(&format!("/console/orgs/{}/members", m.0)).into_response(),
        Err(MemberError::NotFound) => pages::not_found(&viewer),
        Err(MemberError::Db(e)) => {
            tracing::error!(error = %e, "console member change failed");
            pages::unavailable()
        }
        Err(e) => {
            let message = format!("{e}. Nothing was changed.");
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

struct AuditRow {
    when: String,
    who: String,
    action: String,
    target: String,
    detail: String,
    ip: String,
}

#[derive(Template)]
#[template(path = "console/audit.html")]
struct Audit<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    org_id: i64,
    tab: &'a str,
    name: &'a str,
    records: Vec<AuditRow>,
    limit: u64,
}

/// An audit record's detail (a JSON object) as `key: value` pairs for people.
fn readable(detail: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(detail) {
        Ok(serde_json::Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{}: {s}", k.replace('_', " ")),
                serde_json::Value::Null => format!("{}: none", k.replace('_', " ")),
                other => format!("{}: {other}", k.replace('_', " ")),
            })
            .collect::<Vec<_>>()
            .join(", "),
        _ => detail.to_string(),
    }
}

/// `GET /console/orgs/{org}/audit`: owners only.
pub(crate) async fn audit(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(org): Seg,
) -> Response {
    let (org_id, name, role) = match member(&state, &viewer, &org).await {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    if role != "owner" {
        return not_permitted("owners");
    }
    let Ok(records) = people::org_audit(&state.db, org_id, AUDIT_PAGE).await else {
        return pages::unavailable();
    };
    let records = records
        .into_iter()
        .map(|(r, who)| AuditRow {
            when: r.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
            who: who.unwrap_or_else(|| "a program".into()),
            action: r.action.replace('_', " "),
            target: r.target.unwrap_or_default(),
            detail: readable(&r.detail),
            ip: r.ip.unwrap_or_default(),
        })
        .collect();
    render(
        StatusCode::OK,
        &Audit {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            org_id,
            tab: "members",
            name: &name,
            records,
            limit: AUDIT_PAGE,
        },
    )
}
