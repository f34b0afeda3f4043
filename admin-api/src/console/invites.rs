//! Sign-up links that add a person to a team: an owner invites an address with a role (the
//! `/console/join` link is mailed, and shown to the owner once) and may revoke a link still open.

use super::members::*;
use super::render::{self};
use super::session::Viewer;
use crate::db::begin;
use crate::http::form::field;
use crate::http::params::Segs;
use crate::services::audit;
use crate::services::memberships;
use crate::services::people;
use crate::services::teams::{self};
use crate::state::AppState;
use crate::text::valid_email;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

/// `POST /console/orgs/{org}/members` and `POST /console/partners/{partner}/team`: `email`,
/// `role` → a join link, mailed and shown once.
pub(crate) async fn invite(
    State(state): State<AppState>,
    team: InTeam,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    invite_to(&state, &team.viewer, &team.place, &headers, &body).await
}

pub(super) async fn invite_to(
    state: &AppState,
    viewer: &Viewer,
    place: &Place,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    if let Some(resp) = refusal(state, viewer, place, headers, body) {
        return resp;
    }
    let email = people::normal_email(&field(body, "email").unwrap_or_default());
    let role = field(body, "role").unwrap_or_default();
    if !place.may_touch(&role) {
        return refused_owner();
    }
    let refusal = if !valid_email(&email) {
        Some("Enter a valid email address.".to_string())
    } else if !place.team.roles().contains(&role.as_str()) {
        Some(format!("Choose a role: {}.", place.team.roles().join(", ")))
    } else {
        None
    };
    if let Some(message) = refusal {
        return page(
            state,
            viewer,
            place,
            StatusCode::BAD_REQUEST,
            None,
            Some(&message),
        )
        .await;
    }
    let issued = async {
        let txn = begin(&state.db).await?;
        let token = memberships::issue_token(
            &txn,
            state,
            place.team.invite_purpose(),
            &email,
            place.team.organization(),
            place.team.partner(),
            Some(&role),
            Some(viewer.user.id),
        )
        .await?;
        let audit = audit::Audit {
            organization: place.team.organization(),
            partner: place.team.partner(),
            actor: Some(viewer.user.id),
            action: "member_invited",
            target: Some(email.clone()),
            detail: serde_json::json!({ "role": role }),
            ip: viewer.ip.clone(),
        };
        audit::audit(&txn, audit, state.clock.now()).await?;
        txn.commit().await?;
        Ok::<_, sea_orm::DbErr>(token)
    }
    .await;
    let Ok(token) = issued else {
        return render::unavailable();
    };
    let url = state.public_url(&format!("/console/join/{token}"));
    memberships::mail_join_link(state, &email, &place.name, &role, &url).await;
    page(
        state,
        viewer,
        place,
        StatusCode::OK,
        Some((&email, &url)),
        None,
    )
    .await
}

/// `POST /console/orgs/{org}/members/invitations/{invite}`: revokes an open sign-up link
/// (managers only; audited with the change).
/// (and `POST /console/partners/{partner}/team/invitations/{invite}`, in the partner's team).
pub(crate) async fn revoke_invite(
    State(state): State<AppState>,
    team: InTeam,
    Segs(_, invite): Segs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    revoke_in(&state, &team.viewer, &team.place, &invite, &headers, &body).await
}

pub(super) async fn revoke_in(
    state: &AppState,
    viewer: &Viewer,
    place: &Place,
    invite: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    if let Some(resp) = refusal(state, viewer, place, headers, body) {
        return resp;
    }
    let Ok(invite) = invite.parse::<i64>() else {
        return render::not_found(viewer);
    };
    let done = async {
        let txn = begin(&state.db).await?;
        let now = state.clock.now();
        let Some(link) = teams::revoke_invite(&txn, place.team, invite, now).await? else {
            return Ok(false);
        };
        let audit = audit::Audit {
            organization: place.team.organization(),
            partner: place.team.partner(),
            actor: Some(viewer.user.id),
            action: "member_invitation_revoked",
            target: Some(link.email.clone()),
            detail: serde_json::json!({ "role": link.role }),
            ip: viewer.ip.clone(),
        };
        audit::audit(&txn, audit, now).await?;
        txn.commit().await?;
        Ok::<_, sea_orm::DbErr>(true)
    }
    .await;
    match done {
        Ok(true) => Redirect::to(&place.members_path()).into_response(),
        Ok(false) => render::not_found(viewer),
        Err(e) => {
            tracing::error!(error = %e, "sign-up link not revoked");
            render::unavailable()
        }
    }
}
