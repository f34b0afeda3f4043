//! `GET/POST /console/join/{token}`: a sign-up link (`admin-api user invite`, the members page)
//! joins the person to an organization or a partner team with the link's role. Only exactly the
//! invited address is accepted, and the link proves nothing (its sender saw it): the first post
//! (address and password: a new address signs up, an existing one signs in) mails a code to the
//! address, and the second, with the code, joins. The challenge's end, the spent link, the
//! membership and the audit record commit together, then a session opens.

use super::cookies;
use super::render::{self, Join};
use crate::db::begin;
use crate::http::form::field;
use crate::http::params::Seg;
use crate::services::audit;
use crate::services::limiter::{self, Check};
use crate::services::memberships;
use crate::services::people;
use crate::services::proof::{self, Purpose, Scope, StepError};
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
    let Some(t) = memberships::live_token(&state.db, state, token).await? else {
        return Ok(None);
    };
    let name = match (t.purpose.as_str(), t.organization_id, t.partner_id) {
        ("org_invite", Some(org), _) => crate::services::customers::organization(&state.db, org)
            .await
            .ok()
            .flatten()
            .map(|o| o.name),
        ("partner_invite", _, Some(p)) => crate::services::partners::find(&state.db, p)
            .await?
            .map(|p| p.name),
        _ => None,
    };
    Ok(name.map(|n| (t, n)))
}

fn expired() -> Response {
    render::message(
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
        "You are invited to join {name} as {role}. Sign up, or sign in, with the address the link was sent to; we will mail a code to that address to confirm it is yours."
    );
    let action = format!("/console/join/{token}");
    render::join_page(
        state,
        status,
        Join {
            signed_in: None,
            csrf: "",
            heading: &heading,
            intro: &intro,
            action: &action,
            email: "",
            button: "Continue",
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
        Err(_) => render::unavailable(),
    }
}

/// `POST /console/join/{token}`: the first step (`email`, `password`) mails a code to the
/// link's address and shows the code page; the second (`verification_code`, the browser's flow
/// cookie naming the first step) joins and signs in.
pub(crate) async fn join(
    State(state): State<AppState>,
    Seg(token): Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !cookies::pre_session_ok(&state, &headers, &body) {
        return render::forbidden();
    }
    let (t, name) = match offer(&state, &token).await {
        Ok(Some(found)) => found,
        Ok(None) => return expired(),
        Err(_) => return render::unavailable(),
    };
    let role = t.role.clone().unwrap_or_else(|| "member".into());
    let ip = crate::auth::client_ip(&headers);
    let subject = format!("join:{}", t.id);
    let scope = Scope {
        check: Check::Join,
        organization: t.organization_id,
        partner: t.partner_id,
    };
    let show =
        |status, error: Option<&'static str>| page(&state, status, &token, &name, &role, error);
    let Some(code) = field(&body, "verification_code").filter(|c| !c.is_empty()) else {
        // The first step.
        let email = field(&body, "email").unwrap_or_default();
        let password = field(&body, "password").unwrap_or_default();
        if people::normal_email(&email) != t.email {
            return show(
                StatusCode::FORBIDDEN,
                Some("Use the address this link was sent to."),
            );
        }
        let what = format!("join {name} as {role}");
        let step = proof::Begin {
            purpose: Purpose::Join,
            subject: &subject,
            email: &t.email,
            scope,
            what: &what,
        };
        let started = proof::begin(&state, step, &password, ip.as_deref()).await;
        return match started {
            Ok(started) => code_page(&state, &token, &name, &t.email, &started.flow),
            Err(e) => step_refused(e, show),
        };
    };
    // The second step: the browser's own first step, by its flow cookie.
    let now = state.clock.now();
    let found = match cookies::cookie(&state, &headers, proof::FLOW_COOKIE) {
        Some(flow) => match proof::by_flow(&state.db, &flow, now).await {
            Ok(c) => c.filter(|c| c.subject == subject),
            Err(_) => return render::unavailable(),
        },
        None => None,
    };
    let completed =
        proof::complete(&state, found, &t.email, &code, None, ip.as_deref(), scope).await;
    let (challenge, accepter, attempt) = match completed {
        Ok(done) => done,
        Err(e) => return step_refused(e, show),
    };
    let result = join_team(&state, &t, &challenge, accepter, &role, ip.clone()).await;
    let user = match result {
        Ok(Some(user)) => user,
        Ok(None) => return expired(),
        Err(StepError::Failed) => {
            return show(StatusCode::UNAUTHORIZED, Some(FAILED));
        }
        Err(e) => return step_refused(e, show),
    };
    limiter::succeeded(&state.db, &attempt).await;
    match super::sign_in::signed_in(&state, &user, ip, &home_of(&t), now).await {
        Ok(resp) => resp,
        Err(_) => render::unavailable(),
    }
}

/// The code page of a join link's second step (`flow`: the first step's, kept in the browser).
fn code_page(state: &AppState, token: &str, name: &str, email: &str, flow: &str) -> Response {
    let action = format!("/console/join/{token}");
    let heading = format!("Join {name}");
    let code = render::Code {
        signed_in: None,
        csrf: "",
        heading: &heading,
        email,
        action: &action,
        button: "Join",
        restart: &action,
        error: None,
    };
    render::code_page(state, StatusCode::OK, code, Some(flow))
}

/// Where a person who joined lands: the organization or partner the link added them to.
fn home_of(t: &console_tokens::Model) -> String {
    match (t.organization_id, t.partner_id) {
        (Some(org), _) => format!("/console/orgs/{org}"),
        (None, Some(partner)) => format!("/console/partners/{partner}"),
        (None, None) => "/console/".to_string(),
    }
}

/// The one message of a wrong password or code.
const FAILED: &str =
    "The password or the code is not correct, or the code has expired. Start again for a new code.";

/// A refused step as a page (429 with `Retry-After`).
fn step_refused(
    e: StepError,
    show: impl Fn(StatusCode, Option<&'static str>) -> Response,
) -> Response {
    match e {
        StepError::WeakPassword => show(
            StatusCode::BAD_REQUEST,
            Some("Choose a password of 12 to 128 characters."),
        ),
        StepError::Failed => show(StatusCode::UNAUTHORIZED, Some(FAILED)),
        StepError::Throttled(secs) => render::retry_after(
            show(
                StatusCode::TOO_MANY_REQUESTS,
                Some("Too many attempts. Wait a few minutes, then try again."),
            ),
            secs,
        ),
        StepError::Unavailable => render::unavailable(),
    }
}

/// Joins the proven person to the link's team in one transaction: the challenge ends, the link
/// is spent by one conditional update (of two concurrent posts one wins; `Ok(None)` for the
/// other), the user is made or marked proven, the membership and its audit record are written.
async fn join_team(
    state: &AppState,
    t: &console_tokens::Model,
    challenge: &entities::console_challenges::Model,
    accepter: proof::Accepter,
    role: &str,
    ip: Option<String>,
) -> Result<Option<entities::console_users::Model>, StepError> {
    let now = state.clock.now();
    let txn = begin(&state.db).await?;
    if !proof::finish(&txn, challenge, now).await? {
        return Err(StepError::Failed);
    }
    if !memberships::spend_token(&txn, t.id, now, true).await? {
        return Ok(None);
    }
    let user = match accepter {
        proof::Accepter::Existing(id) => {
            let user = people::by_id(&txn, id)
                .await?
                .filter(|u| u.email == t.email)
                .ok_or(StepError::Failed)?;
            people::mark_proven(&txn, user, now).await?
        }
        proof::Accepter::New(hash) => {
            if people::find_user(&txn, &t.email).await?.is_some() {
                return Err(StepError::Failed);
            }
            people::insert_user(&txn, &t.email, hash, Some(now), now).await?
        }
    };
    match (t.organization_id, t.partner_id) {
        (Some(org), _) => memberships::join_org(&txn, org, user.id, role, now).await?,
        (None, Some(p)) => memberships::join_partner(&txn, p, user.id, role, now).await?,
        (None, None) => {}
    }
    audit::audit(
        &txn,
        audit::Audit {
            organization: t.organization_id,
            partner: t.partner_id,
            actor: Some(user.id),
            action: "member_joined",
            target: Some(format!("user:{}", user.id)),
            detail: serde_json::json!({"email": user.email, "role": role, "address_proven": "mailed code"}),
            ip,
        },
        now,
    )
    .await?;
    txn.commit().await?;
    Ok(Some(user))
}
