//! Who a console request is for, checked on the server for every request: the signed-in
//! [`Viewer`] every page extracts from its session cookie (or a redirect to the sign-in page;
//! until a partner's owner or admin required to turn on two-factor has done so, only their
//! account page).

use super::cookies;
use super::render;
use super::session::Viewer;
use crate::auth::client_ip;
use crate::caller::Caller;
use crate::http::form::field;
use crate::services::memberships;
use crate::services::sessions;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

/// Not signed in: the sign-in page (the page asked for comes back after signing in).
pub(crate) struct SignInFirst(String);

impl IntoResponse for SignInFirst {
    fn into_response(self) -> Response {
        Redirect::to(&format!("/console/sign-in?next={}", self.0)).into_response()
    }
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Viewer, Response> {
        let next = parts.uri.path().to_string();
        let next: String = url::form_urlencoded::byte_serialize(next.as_bytes()).collect();
        let Some(cookie) = cookies::cookie(state, &parts.headers, cookies::COOKIE) else {
            return Err(SignInFirst(next).into_response());
        };
        match sessions::session(&state.db, &cookie, state.clock.now(), state.lifetimes()).await {
            Ok(Some((session, user))) => {
                // `[console] require_two_factor`: until a partner's owner or admin turns it on,
                // their console is their account page (and signing out).
                let path = parts.uri.path();
                let open = path == "/console/account"
                    || path.starts_with("/console/account/")
                    || path == "/console/sign-out";
                if !open {
                    match crate::services::two_factor::must_set_up(state, &user).await {
                        Ok(false) => {}
                        Ok(true) => return Err(Redirect::to("/console/account").into_response()),
                        Err(_) => return Err(render::unavailable()),
                    }
                }
                Ok(Viewer {
                    user,
                    session,
                    ip: client_ip(&parts.headers),
                })
            }
            Ok(None) => Err(SignInFirst(next).into_response()),
            Err(e) => {
                tracing::error!(error = %e, "console session lookup failed");
                Err(render::unavailable())
            }
        }
    }
}

/// Where a console page acts and with which role: an organization or a partner team the viewer
/// belongs to (checked on every request; one that is not theirs answers 404, like a missing one).
#[derive(Debug, Clone)]
pub(crate) struct Membership {
    /// The organization's or the partner's id.
    pub id: i64,
    pub name: String,
    /// The role the viewer acts with: an organization's, or a partner team's capped by the
    /// partner's role the operator set (issue 42).
    pub role: String,
}

impl Membership {
    /// Whether the viewer's role is one of `roles`.
    pub fn may(&self, roles: &Roles) -> bool {
        roles.roles.contains(&self.role.as_str())
    }
}

/// Who may make a change, and how a refusal names them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Roles {
    pub roles: &'static [&'static str],
    pub who: &'static str,
}

/// An organization's owners: its alert.
pub(crate) const ORG_OWNERS: Roles = Roles {
    roles: &["owner"],
    who: "owners",
};
/// An organization's owners and administrators: its keys and billing token.
pub(crate) const KEY_MANAGERS: Roles = Roles {
    roles: &["owner", "administrator"],
    who: "owners and administrators",
};
/// A partner's owners and admins: its partner tokens.
pub(crate) const TOKEN_MANAGERS: Roles = Roles {
    roles: &["owner", "admin"],
    who: "owners and admins",
};
/// A partner's owners, admins and operators: customer work (customers, funding, prices).
pub(crate) const CUSTOMER_WORK: Roles = Roles {
    roles: &["owner", "admin", "operator"],
    who: "owners, admins and operators",
};

/// The viewer's membership of organization `org` (a path segment), or the page to answer.
pub(crate) async fn organization(
    state: &AppState,
    viewer: &Viewer,
    org: &str,
) -> Result<Membership, Response> {
    let Ok(id) = org.parse::<i64>() else {
        return Err(render::not_found(viewer));
    };
    let role = match memberships::org_role(&state.db, id, viewer.user.id).await {
        Ok(Some(role)) => role,
        Ok(None) => return Err(render::not_found(viewer)),
        Err(_) => return Err(render::unavailable()),
    };
    match crate::services::customers::organization(&state.db, id).await {
        Ok(Some(o)) => Ok(Membership {
            id,
            name: o.name,
            role,
        }),
        Ok(None) => Err(render::not_found(viewer)),
        Err(_) => Err(render::unavailable()),
    }
}

/// The viewer's membership of partner `partner` (a path segment), or the page to answer; the
/// role is the one the viewer acts with (their team role capped by the partner's: the partner
/// API's rule, in one place).
pub(crate) async fn team(
    state: &AppState,
    viewer: &Viewer,
    partner: &str,
) -> Result<Membership, Response> {
    let Ok(partner_id) = partner.parse::<i64>() else {
        return Err(render::not_found(viewer));
    };
    match memberships::partner_membership(&state.db, partner_id, viewer.user.id).await {
        Ok(Some((p, role))) => Ok(Membership {
            id: p.id,
            role: memberships::effective_role(&p.role, Some(&role)).to_string(),
            name: p.name,
        }),
        Ok(None) => Err(render::not_found(viewer)),
        Err(_) => Err(render::unavailable()),
    }
}

/// Whether a state-changing post may come from where it says: this site's origin and the
/// session's CSRF token (a hidden `csrf` field).
pub(crate) fn genuine(state: &AppState, viewer: &Viewer, headers: &HeaderMap, body: &[u8]) -> bool {
    cookies::same_origin(state, headers) && viewer.csrf_ok(field(body, "csrf").as_deref())
}

/// The checks of every state-changing post of an organization's pages: origin, the session's
/// CSRF token, membership, and one of `roles`.
pub(crate) async fn org_change(
    state: &AppState,
    viewer: &Viewer,
    org: &str,
    headers: &HeaderMap,
    body: &[u8],
    roles: &Roles,
) -> Result<Membership, Response> {
    let post = Post { headers, body };
    change(state, viewer, Whose::Organization, org, post, roles).await
}

/// The checks of every state-changing post of a partner's pages: origin, the session's CSRF
/// token, membership, and one of `roles`.
pub(crate) async fn team_change(
    state: &AppState,
    viewer: &Viewer,
    partner: &str,
    headers: &HeaderMap,
    body: &[u8],
    roles: &Roles,
) -> Result<Membership, Response> {
    let post = Post { headers, body };
    change(state, viewer, Whose::Partner, partner, post, roles).await
}

/// Whose pages a post comes from.
#[derive(Debug, Clone, Copy)]
enum Whose {
    Organization,
    Partner,
}

/// A state-changing post as it arrived.
struct Post<'a> {
    headers: &'a HeaderMap,
    body: &'a [u8],
}

/// The checks of a state-changing post of `whose` pages, the place named by path segment `at`.
async fn change(
    state: &AppState,
    viewer: &Viewer,
    whose: Whose,
    at: &str,
    post: Post<'_>,
    roles: &Roles,
) -> Result<Membership, Response> {
    if !genuine(state, viewer, post.headers, post.body) {
        return Err(render::forbidden());
    }
    let (m, name) = match whose {
        Whose::Organization => (organization(state, viewer, at).await?, "organization"),
        Whose::Partner => (team(state, viewer, at).await?, "partner"),
    };
    if !m.may(roles) {
        return Err(not_permitted(name, roles));
    }
    Ok(m)
}

/// The 403 page of a role that may not do this (`whose`: "organization" or "partner").
pub(crate) fn not_permitted(whose: &str, roles: &Roles) -> Response {
    render::message(
        StatusCode::FORBIDDEN,
        "Not permitted",
        &format!(
            "Only the {whose}'s {} may do this. Nothing was changed.",
            roles.who
        ),
    )
}

/// The caller the partner API's services work for, made from the viewer's team (the console
/// acts with the team member's role, through the same services and rules as the API).
pub(crate) async fn console_caller(state: &AppState, t: &Membership) -> Result<Caller, Response> {
    let partner = match crate::services::partners::find(&state.db, t.id).await {
        Ok(Some(p)) => p,
        _ => return Err(render::unavailable()),
    };
    Ok(Caller {
        partner_id: t.id,
        partner_name: t.name.clone(),
        token_id: 0,
        token_preview: "console".into(),
        scopes: vec!["partner:write".into()],
        role: t.role.clone(),
        min_rate: money::RateMultiplier::from_ppm(partner.min_rate_multiplier_ppm)
            .ok_or_else(render::unavailable)?,
    })
}
