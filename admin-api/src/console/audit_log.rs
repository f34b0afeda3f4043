//! A team's audit page (`…/audit`): its latest records, readable, for the organization's owners
//! and the partner's owners and admins (the same `Place` rules as the member pages).

use super::members::*;
use super::render::{self, render};
use super::session::Viewer;
use crate::services::teams::{self, Team};
use crate::state::AppState;
use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

/// How many audit records the audit page shows (newest first).
pub(crate) const AUDIT_PAGE: u64 = 200;

pub(super) struct AuditRow {
    pub(super) when: String,
    pub(super) who: String,
    pub(super) action: String,
    pub(super) target: String,
    pub(super) detail: String,
    pub(super) ip: String,
}

#[derive(Template)]
#[template(path = "console/audit.html")]
pub(super) struct Audit<'a> {
    pub(super) signed_in: Option<&'a str>,
    pub(super) csrf: &'a str,
    pub(super) org_id: i64,
    pub(super) partner_id: i64,
    pub(super) is_partner: bool,
    pub(super) tab: &'a str,
    pub(super) name: &'a str,
    pub(super) role: &'a str,
    pub(super) records: Vec<AuditRow>,
    pub(super) limit: u64,
}

/// An audit record's detail (a JSON object) as `key: value` pairs for people.
pub(super) fn readable(detail: &str) -> String {
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

/// `GET /console/orgs/{org}/audit` (owners only) and `GET /console/partners/{partner}/audit`
/// (owners and admins only).
pub(crate) async fn audit(State(state): State<AppState>, team: InTeam) -> Response {
    audit_page(&state, &team.viewer, &team.place).await
}

pub(super) async fn audit_page(state: &AppState, viewer: &Viewer, place: &Place) -> Response {
    if !place.can_manage() {
        return refused(place);
    }
    let Ok(records) = teams::audit_of(&state.db, place.team, AUDIT_PAGE).await else {
        return render::unavailable();
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
            org_id: place.id(),
            partner_id: place.id(),
            is_partner: matches!(place.team, Team::Partner(_)),
            tab: match place.team {
                Team::Org(_) => "members",
                Team::Partner(_) => "team",
            },
            name: &place.name,
            role: &place.role,
            records,
            limit: AUDIT_PAGE,
        },
    )
}
