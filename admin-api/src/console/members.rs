//! A team's members in the console, for an organization (`/console/orgs/{id}/members`) and for a
//! partner (`/console/partners/{id}/team`): every member sees who belongs and with which role,
//! and the sign-up links still open. Managers invite (a `/console/join` link mailed to the
//! address and shown once), change roles and remove members: an organization's owners; a
//! partner's owners and admins, where only an owner grants the owner role or changes or removes
//! an owner. A team always keeps at least one owner (checked under a lock, see
//! [`teams::change_member`]). Managers also read the team's audit log. Every change commits with
//! its audit record.

use super::gate::{self, Membership};
use super::render::{self, render};
use super::session::Viewer;
use crate::db::begin;
use crate::http::form::field;
use crate::http::params::{Seg, Segs};
use crate::services::audit;
use crate::services::teams::{self, MemberError, Team};
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, MatchedPath, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

/// The viewer and its place in the team a route names: an organization
/// (`/console/orgs/{org}/…`) or a partner's team (`/console/partners/{partner}/…`). One handler
/// serves both routes of a team page; a viewer with no place there gets the gate's page instead.
pub(crate) struct InTeam {
    pub(super) viewer: Viewer,
    pub(super) place: Place,
}

impl FromRequestParts<AppState> for InTeam {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<InTeam, Response> {
        let viewer = Viewer::from_request_parts(parts, state).await?;
        let Ok(Seg(team)) = Seg::from_request_parts(parts, state).await;
        let route = parts
            .extensions
            .get::<MatchedPath>()
            .map(MatchedPath::as_str);
        // A route of neither kind has no team: not found, never a guess.
        let place = match route {
            Some(r) if r.starts_with("/console/partners/") => {
                partner_place(state, &viewer, &team).await?
            }
            Some(r) if r.starts_with("/console/orgs/") => org_place(state, &viewer, &team).await?,
            _ => return Err(render::not_found(&viewer)),
        };
        Ok(InTeam { viewer, place })
    }
}

/// The team a page is about, its name and the viewer's role in it.
pub(crate) struct Place {
    pub(super) team: Team,
    pub(super) name: String,
    pub(super) role: String,
}

impl Place {
    pub(super) fn id(&self) -> i64 {
        match self.team {
            Team::Org(id) | Team::Partner(id) => id,
        }
    }

    /// The team's pages' path.
    pub(super) fn base(&self) -> String {
        match self.team {
            Team::Org(id) => format!("/console/orgs/{id}"),
            Team::Partner(id) => format!("/console/partners/{id}"),
        }
    }

    /// The members page's path.
    pub(super) fn members_path(&self) -> String {
        match self.team {
            Team::Org(_) => format!("{}/members", self.base()),
            Team::Partner(_) => format!("{}/team", self.base()),
        }
    }

    /// Roles that manage the team (and read its audit log).
    pub(super) fn managers(&self) -> &'static [&'static str] {
        self.team.managers()
    }

    pub(super) fn who_manages(&self) -> &'static str {
        match self.team {
            Team::Org(_) => "the organization's owners",
            Team::Partner(_) => "the partner's owners and admins",
        }
    }

    pub(super) fn can_manage(&self) -> bool {
        self.managers().contains(&self.role.as_str())
    }

    /// Whether the viewer may give or take `role` (or change a member who has it): only an owner
    /// touches the owner role.
    pub(super) fn may_touch(&self, role: &str) -> bool {
        role != "owner" || self.role == "owner"
    }
}

/// The viewer's place in organization `org` (a path segment), or the page to answer instead.
pub(super) async fn org_place(
    state: &AppState,
    viewer: &Viewer,
    org: &str,
) -> Result<Place, Response> {
    let Membership { id, name, role } = gate::organization(state, viewer, org).await?;
    Ok(Place {
        team: Team::Org(id),
        name,
        role,
    })
}

/// The viewer's place in partner `partner`'s team, or the page to answer instead.
pub(super) async fn partner_place(
    state: &AppState,
    viewer: &Viewer,
    partner: &str,
) -> Result<Place, Response> {
    let Membership { id, name, role } = gate::team(state, viewer, partner).await?;
    Ok(Place {
        team: Team::Partner(id),
        name,
        role,
    })
}

/// A team post's checks: origin, the session's CSRF token, a managing role; the refusal to
/// answer, if any.
pub(super) fn refusal(
    state: &AppState,
    viewer: &Viewer,
    place: &Place,
    headers: &HeaderMap,
    body: &[u8],
) -> Option<Response> {
    if !gate::genuine(state, viewer, headers, body) {
        return Some(render::forbidden());
    }
    if !place.can_manage() {
        return Some(refused(place));
    }
    None
}

pub(super) fn refused(place: &Place) -> Response {
    render::message(
        StatusCode::FORBIDDEN,
        "Not permitted",
        &format!(
            "Only {} may do this. Nothing was changed.",
            place.who_manages()
        ),
    )
}

pub(super) struct MemberRow {
    pub(super) id: i64,
    pub(super) email: String,
    pub(super) role: String,
    pub(super) since: String,
    pub(super) is_you: bool,
    /// Whether the viewer may change or remove this member.
    pub(super) changeable: bool,
}

#[derive(Template)]
#[template(path = "console/members.html")]
pub(super) struct Members<'a> {
    pub(super) signed_in: Option<&'a str>,
    pub(super) csrf: &'a str,
    pub(super) org_id: i64,
    pub(super) partner_id: i64,
    pub(super) is_partner: bool,
    pub(super) base: String,
    pub(super) action: String,
    pub(super) tab: &'a str,
    pub(super) name: &'a str,
    pub(super) role: &'a str,
    pub(super) can_manage: bool,
    pub(super) members: Vec<MemberRow>,
    pub(super) pending: Vec<(i64, String, String, String)>,
    pub(super) roles: Vec<&'a str>,
    pub(super) default_role: &'a str,
    pub(super) help: &'a str,
    pub(super) invited: Option<(&'a str, &'a str)>,
    pub(super) error: Option<&'a str>,
}

pub(super) async fn page(
    state: &AppState,
    viewer: &Viewer,
    place: &Place,
    status: StatusCode,
    invited: Option<(&str, &str)>,
    error: Option<&str>,
) -> Response {
    let now = state.clock.now();
    let (members, pending) = match (
        teams::members_of(&state.db, place.team).await,
        teams::pending_invites(&state.db, place.team, now).await,
    ) {
        (Ok(m), Ok(p)) => (m, p),
        _ => return render::unavailable(),
    };
    let roles: Vec<&str> = place
        .team
        .roles()
        .iter()
        .copied()
        .filter(|r| place.may_touch(r))
        .collect();
    render(
        status,
        &Members {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            org_id: place.id(),
            partner_id: place.id(),
            is_partner: matches!(place.team, Team::Partner(_)),
            base: place.base(),
            action: place.members_path(),
            tab: match place.team {
                Team::Org(_) => "members",
                Team::Partner(_) => "team",
            },
            name: &place.name,
            role: &place.role,
            can_manage: place.can_manage(),
            members: members
                .into_iter()
                .map(|(m, email)| MemberRow {
                    id: m.id,
                    is_you: m.user_id == viewer.user.id,
                    changeable: place.can_manage() && place.may_touch(&m.role),
                    email,
                    role: m.role,
                    since: m.created_at.format("%Y-%m-%d").to_string(),
                })
                .collect(),
            pending: pending
                .into_iter()
                .map(|t| {
                    (
                        t.id,
                        t.email,
                        t.role.unwrap_or_default(),
                        t.expires_at.format("%Y-%m-%d %H:%M UTC").to_string(),
                    )
                })
                .collect(),
            default_role: place.team.roles().last().copied().unwrap_or_default(),
            roles,
            help: match place.team {
                Team::Org(_) => {
                    "Owners manage members and everything else; administrators manage API keys and the billing token; members read balance, usage and keys."
                }
                Team::Partner(_) => {
                    "Owners and admins manage the team and partner tokens (only an owner makes or changes an owner); operators do customer work; viewers read everything and change nothing."
                }
            },
            invited,
            error,
        },
    )
}

/// `GET /console/orgs/{org}/members` and `GET /console/partners/{partner}/team`.
pub(crate) async fn list(State(state): State<AppState>, team: InTeam) -> Response {
    page(
        &state,
        &team.viewer,
        &team.place,
        StatusCode::OK,
        None,
        None,
    )
    .await
}

/// The 403 of an admin touching the owner role.
pub(super) fn refused_owner() -> Response {
    render::message(
        StatusCode::FORBIDDEN,
        "Not permitted",
        "Only an owner may make someone an owner or change an owner. Nothing was changed.",
    )
}

/// `POST /console/orgs/{org}/members/{member}` and `POST /console/partners/{partner}/team/{member}`:
/// `action` `role` (with `role`) or `remove`.
pub(crate) async fn change(
    State(state): State<AppState>,
    team: InTeam,
    Segs(_, member_id): Segs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    change_in(
        &state,
        &team.viewer,
        &team.place,
        &member_id,
        &headers,
        &body,
    )
    .await
}

/// Changes member `member_id`'s role (`None`: removes them) with what follows from it (their
/// sign-up links, their dashboard tokens) and the audit record, in one transaction.
async fn change_member(
    state: &AppState,
    viewer: &Viewer,
    place: &Place,
    member_id: i64,
    role: Option<String>,
) -> Result<(), MemberError> {
    let txn = begin(&state.db).await?;
    let (target, email) = teams::change_member(&txn, place.team, member_id, role.as_deref(), |m| {
        place.may_touch(&m.role)
    })
    .await?;
    let now = state.clock.now();
    let (links_ended, tokens_changed) =
        teams::follow_change(&txn, place.team, &target, role.as_deref(), now).await?;
    let audit = audit::Audit {
        organization: place.team.organization(),
        partner: place.team.partner(),
        actor: Some(viewer.user.id),
        action: if role.is_some() {
            "member_role_changed"
        } else {
            "member_removed"
        },
        target: Some(email),
        detail: serde_json::json!({
            "from": target.role,
            "to": role,
            "sign_up_links_ended": links_ended,
            "partner_tokens_changed": tokens_changed,
        }),
        ip: viewer.ip.clone(),
    };
    audit::audit(&txn, audit, state.clock.now()).await?;
    txn.commit().await?;
    Ok(())
}

pub(super) async fn change_in(
    state: &AppState,
    viewer: &Viewer,
    place: &Place,
    member_id: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    if let Some(resp) = refusal(state, viewer, place, headers, body) {
        return resp;
    }
    let Ok(member_id) = member_id.parse::<i64>() else {
        return render::not_found(viewer);
    };
    let action = field(body, "action").unwrap_or_default();
    let role = match action.as_str() {
        "role" => Some(field(body, "role").unwrap_or_default()),
        "remove" => None,
        _ => {
            return page(
                state,
                viewer,
                place,
                StatusCode::BAD_REQUEST,
                None,
                Some("Unknown action. Nothing was changed."),
            )
            .await;
        }
    };
    if role.as_deref().is_some_and(|r| !place.may_touch(r)) {
        return refused_owner();
    }
    let done = change_member(state, viewer, place, member_id, role).await;
    match done {
        Ok(()) => Redirect::to(&place.members_path()).into_response(),
        Err(MemberError::Forbidden) => refused_owner(),
        Err(MemberError::NotFound) => render::not_found(viewer),
        Err(MemberError::Db(e)) => {
            tracing::error!(error = %e, "console member change failed");
            render::unavailable()
        }
        Err(e) => {
            let message = format!("{e}. Nothing was changed.");
            page(
                state,
                viewer,
                place,
                StatusCode::CONFLICT,
                None,
                Some(&message),
            )
            .await
        }
    }
}
