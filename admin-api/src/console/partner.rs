//! The partner dashboard (issue 29): a partner team's pages under `/console/partners/{id}`.
//! Every page checks the viewer's team membership on the server (another partner's pages answer
//! 404, like a missing one) and every post its origin, the session's CSRF token and the role.
//!
//! Roles (SPEC's partner roles): every member sees everything; `owner` and `admin` manage
//! partner tokens (and, next, the team); `operator` does customer work; `viewer` changes
//! nothing.

use super::amount::{Amount, amount};
use super::gate::{self, Membership};
use super::render::{self, render};
use super::session::Viewer;
use crate::http::form::field;
use crate::http::params::{Seg, Segs};
use crate::services::funding;
use crate::services::partner_tokens::{self, Actor, TokenError};
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

#[derive(Template)]
#[template(path = "console/partner.html")]
struct Overview<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    partner_id: i64,
    tab: &'a str,
    name: &'a str,
    role: &'a str,
    available: Amount,
    reserved: Amount,
    outstanding: Amount,
}

/// `GET /console/partners/{partner}`: the partner's funding.
pub(crate) async fn overview(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(partner): Seg,
) -> Response {
    let Membership {
        id: partner_id,
        name,
        role,
    } = match gate::team(&state, &viewer, &partner).await {
        Ok(t) => t,
        Err(resp) => return resp,
    };
    let f = match funding::view_of(&state.db, &state, partner_id).await {
        Ok(f) => f,
        Err(_) => return render::unavailable(),
    };
    let usd = |u: crate::dto::Usd| amount(u.0);
    render(
        StatusCode::OK,
        &Overview {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            partner_id,
            tab: "overview",
            name: &name,
            role: &role,
            available: usd(f.available_funding_usd),
            reserved: usd(f.reserved_allocations_usd),
            outstanding: usd(f.outstanding_usage_usd),
        },
    )
}

/// One row of the token list.
struct TokenRow {
    id: i64,
    preview: String,
    scope: String,
    creator: String,
    created: String,
    last_used: String,
    status: String,
    active: bool,
}

#[derive(Template)]
#[template(path = "console/partner_tokens.html")]
struct Tokens<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    partner_id: i64,
    tab: &'a str,
    name: &'a str,
    role: &'a str,
    tokens: Vec<TokenRow>,
    can_manage: bool,
    created: Option<&'a str>,
    error: Option<&'a str>,
}

async fn tokens_page(
    state: &AppState,
    viewer: &Viewer,
    Membership {
        id: partner_id,
        name,
        role,
    }: Membership,
    status: StatusCode,
    created: Option<&str>,
    error: Option<&str>,
) -> Response {
    let list = match partner_tokens::list(&state.db, partner_id).await {
        Ok(l) => l,
        Err(_) => return render::unavailable(),
    };
    let when = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M").to_string();
    let tokens = list
        .into_iter()
        .map(|t| {
            let active = t.row.status == entities::status::TokenStatus::Active;
            TokenRow {
                id: t.row.id,
                preview: t.row.preview.clone(),
                scope: t.row.scopes.replace(' ', ", "),
                creator: t.creator.unwrap_or_else(|| "operator".into()),
                created: t.row.created_at.format("%Y-%m-%d").to_string(),
                last_used: t.row.last_used_at.map_or_else(|| "never".into(), when),
                status: if active { "active" } else { "revoked" }.into(),
                active,
            }
        })
        .collect();
    render(
        status,
        &Tokens {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            partner_id,
            tab: "tokens",
            name: &name,
            role: &role,
            tokens,
            can_manage: gate::TOKEN_MANAGERS.roles.contains(&role.as_str()),
            created,
            error,
        },
    )
}

/// `GET /console/partners/{partner}/tokens`.
pub(crate) async fn tokens(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(partner): Seg,
) -> Response {
    match gate::team(&state, &viewer, &partner).await {
        Ok(t) => tokens_page(&state, &viewer, t, StatusCode::OK, None, None).await,
        Err(resp) => resp,
    }
}

/// A post's checks for what owners and admins manage (tokens, webhooks): origin, CSRF, an owner
/// or admin of the partner.
pub(super) async fn token_manager(
    state: &AppState,
    viewer: &Viewer,
    partner: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Membership, Response> {
    gate::team_change(state, viewer, partner, headers, body, &gate::TOKEN_MANAGERS).await
}

/// The viewer changing tokens with `role`.
fn actor<'a>(viewer: &Viewer, role: &'a str) -> Actor<'a> {
    Actor {
        user_id: viewer.user.id,
        role,
        ip: viewer.ip.clone(),
    }
}

/// `POST /console/partners/{partner}/tokens` with `scope`: a new token, shown once.
pub(crate) async fn create_token(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(partner): Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let t = match token_manager(&state, &viewer, &partner, &headers, &body).await {
        Ok(t) => t,
        Err(resp) => return resp,
    };
    let scope = field(&body, "scope").unwrap_or_default();
    let actor = actor(&viewer, &t.role);
    match partner_tokens::create(&state, t.id, &scope, &actor).await {
        Ok(secret) => {
            let secret = secret.expose().to_string();
            tokens_page(&state, &viewer, t, StatusCode::OK, Some(&secret), None).await
        }
        Err(e) => token_refused(&state, &viewer, t, e).await,
    }
}

/// `POST /console/partners/{partner}/tokens/{token}` with `action` `rotate` or `revoke`.
pub(crate) async fn change_token(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(partner, token): Segs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let t = match token_manager(&state, &viewer, &partner, &headers, &body).await {
        Ok(t) => t,
        Err(resp) => return resp,
    };
    let Ok(token_id) = token.parse::<i64>() else {
        return render::not_found(&viewer);
    };
    let actor = actor(&viewer, &t.role);
    let outcome = match field(&body, "action").as_deref() {
        Some("rotate") => partner_tokens::rotate(&state, t.id, token_id, &actor)
            .await
            .map(|s| Some(s.expose().to_string())),
        Some("revoke") => partner_tokens::revoke(&state, t.id, token_id, &actor)
            .await
            .map(|()| None),
        _ => {
            return tokens_page(
                &state,
                &viewer,
                t,
                StatusCode::BAD_REQUEST,
                None,
                Some("Choose rotate or revoke."),
            )
            .await;
        }
    };
    match outcome {
        Ok(secret) => {
            tokens_page(&state, &viewer, t, StatusCode::OK, secret.as_deref(), None).await
        }
        Err(e) => token_refused(&state, &viewer, t, e).await,
    }
}

async fn token_refused(
    state: &AppState,
    viewer: &Viewer,
    t: Membership,
    e: TokenError,
) -> Response {
    match e {
        TokenError::NotFound => render::not_found(viewer),
        TokenError::BadScope => {
            tokens_page(
                state,
                viewer,
                t,
                StatusCode::BAD_REQUEST,
                None,
                Some(&e.to_string()),
            )
            .await
        }
        TokenError::Db(e) => {
            tracing::error!(error = %e, "partner token change failed");
            render::unavailable()
        }
    }
}
