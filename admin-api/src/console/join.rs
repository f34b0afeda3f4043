//! `GET/POST /console/join/{token}`: a mailed sign-up link (`admin-api user invite`, later the
//! members page) joins the person to an organization or a partner team with the link's role. As
//! with an organization's invitation, only exactly the invited address is accepted; a new address
//! signs up (the link proves it), an existing one signs in. Membership, the spent link and the
//! audit record commit together, then a session opens.

use super::pages::{self, Join};
use super::session;
use crate::db::begin;
use crate::http::form::field;
use crate::http::params::Seg;
use crate::services::people;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use entities::console_tokens;

/// What a join link offers, for its page.
async fn offer(
    state: &AppState,
    token: &str,
) -> Result<Option<(console_tokens::Model, String)>, sea_orm::DbErr> {
    let Some(t) = people::live_token(&state.db, state, token).await? else {
        return Ok(None);
    };
    let name = match (t.purpose.as_str(), t.organization_id, t.partner_id) {
        ("org_invite", Some(org), _) => crate::services::customers::organization(&state.db, org)
            .await
            .ok()
            .flatten()
            .map(|o| o.name),
        ("partner_invite", _, Some(p)) => {
            use sea_orm::EntityTrait;
            entities::partners::Entity::find_by_id(p)
                .one(&state.db)
                .await?
                .map(|p| p.name)
        }
        _ => None,
    };
    Ok(name.map(|n| (t, n)))
}

fn expired() -> Response {
    pages::message(
        StatusCode::GONE,
        "Link expired",
        "This link has expired, was already used, or does not exist. Ask whoever invited you for a new one.",
    )
}

fn page(
    state: &AppState,
    status: StatusCode,
    token: &str,
    name: &str,
    role: &str,
    error: Option<&str>,
) -> Response {
    let heading = format!("Join {name}");
    let intro = format!(
        "You are invited to join {name} as {role}. Sign up, or sign in, with the address the link was sent to."
    );
    let action = format!("/console/join/{token}");
    pages::join_page(
        state,
        status,
        Join {
            signed_in: None,
            csrf: "",
            heading: &heading,
            intro: &intro,
            action: &action,
            email: "",
            button: "Join",
            error,
        },
    )
}

/// `GET /console/join/{token}`.
pub(crate) async fn form(State(state): State<AppState>, Seg(token): Seg) -> Response {
    match offer(&state, &token).await {
        Ok(Some((t, name))) => page(
            &state,
            StatusCode::OK,
            &token,
            &name,
            t.role.as_deref().unwrap_or("member"),
            None,
        ),
        Ok(None) => expired(),
        Err(_) => pages::unavailable(),
    }
}

/// `POST /console/join/{token}`.
pub(crate) async fn join(
    State(state): State<AppState>,
    Seg(token): Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !session::pre_session_ok(&state, &headers, &body) {
        return pages::forbidden();
    }
    let (t, name) = match offer(&state, &token).await {
        Ok(Some(found)) => found,
        Ok(None) => return expired(),
        Err(_) => return pages::unavailable(),
    };
    let role = t.role.clone().unwrap_or_else(|| "member".into());
    let email = field(&body, "email").unwrap_or_default();
    let password = field(&body, "password").unwrap_or_default();
    if people::normal_email(&email) != t.email {
        return page(
            &state,
            StatusCode::FORBIDDEN,
            &token,
            &name,
            &role,
            Some("Use the address this link was sent to."),
        );
    }
    let ip = session::client_ip(&headers);
    if let Err(retry) = session::throttle(&state, &email, ip.as_deref()).await {
        let _ = retry;
        return page(
            &state,
            StatusCode::TOO_MANY_REQUESTS,
            &token,
            &name,
            &role,
            Some("Too many attempts. Wait a few minutes, then try again."),
        );
    }
    let now = state.clock.now();
    let result: Result<Result<entities::console_users::Model, &'static str>, sea_orm::DbErr> =
        async {
            let txn = begin(&state.db).await?;
            let user = match people::find_user(&txn, &email).await? {
                Some(_) => match people::authenticate(&txn, &email, &password).await? {
                    Some(u) => u,
                    None => {
                        return Ok(Err(
                            "The password is not correct for the account of this address.",
                        ));
                    }
                },
                None => match people::create_user(&txn, &email, &password, now).await {
                    Ok(u) => u,
                    Err(people::PeopleError::Db(e)) => return Err(e),
                    Err(_) => return Ok(Err("Choose a password of 12 to 128 characters.")),
                },
            };
            match (t.organization_id, t.partner_id) {
                (Some(org), _) => people::join_org(&txn, org, user.id, &role, now).await?,
                (None, Some(p)) => people::join_partner(&txn, p, user.id, &role, now).await?,
                (None, None) => {}
            }
            people::audit(
                &txn,
                people::Audit {
                    organization: t.organization_id,
                    partner: t.partner_id,
                    actor: Some(user.id),
                    action: "member_joined",
                    target: Some(format!("user:{}", user.id)),
                    detail: serde_json::json!({"email": user.email, "role": role}),
                    ip: ip.clone(),
                },
                now,
            )
            .await?;
            people::use_token(&txn, t.clone(), now).await?;
            txn.commit().await?;
            Ok(Ok(user))
        }
        .await;
    let user = match result {
        Ok(Ok(user)) => user,
        Ok(Err(message)) => {
            let status = if message.starts_with("Choose") {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::UNAUTHORIZED
            };
            return page(&state, status, &token, &name, &role, Some(message));
        }
        Err(e) => {
            tracing::error!(error = %e, "join failed");
            return pages::unavailable();
        }
    };
    let next = match (t.organization_id, t.partner_id) {
        (Some(org), _) => format!("/console/orgs/{org}"),
        (None, Some(partner)) => format!("/console/partners/{partner}"),
        (None, None) => "/console/".to_string(),
    };
    match pages::signed_in(&state, &user, ip, &next, now).await {
        Ok(resp) => resp,
        Err(_) => pages::unavailable(),
    }
}
