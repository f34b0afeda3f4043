//! Signing in and out (DESIGN §6c, issue 42): the sign-in form; the password checked (every
//! attempt counted by `services::limiter`, the same answer for an unknown address and a wrong
//! password); then, when needed, a second page — the code mailed to an address never proven
//! (`services::proof`), or the second factor of an account with two-factor on
//! (`services::two_factor`) — kept by the browser's flow cookie; on success a new session
//! (rotation at sign-in). Signing out ends the session on the server.

use super::cookies;
use super::render::{
    Code, code_page, forbidden, pre_session_form, retry_after, unavailable, wait_text,
};
use super::session::Viewer;
use crate::http::form::field;
use crate::services::audit;
use crate::services::sessions;
use crate::services::{limiter, people, proof};
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

#[derive(Template)]
#[template(path = "console/sign_in.html")]
struct SignIn<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    next: &'a str,
    email: &'a str,
    error: Option<&'a str>,
}

#[derive(Deserialize)]
pub(crate) struct NextQuery {
    next: Option<String>,
}

/// Where to go after signing in: a console path only (never another site).
fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(n) if n.starts_with("/console/") && !n.starts_with("//") && !n.contains('\\') => n,
        _ => "/console/",
    }
}

/// The sign-in form with a fresh double-submit token (set as a cookie with the page).
fn sign_in_page(
    state: &AppState,
    status: StatusCode,
    next: &str,
    email: &str,
    error: Option<&str>,
) -> Response {
    let csrf = sessions::secret();
    let page = SignIn {
        signed_in: None,
        csrf: &csrf,
        next,
        email,
        error,
    };
    pre_session_form(state, status, &csrf, &page, None)
}

/// `GET /console/sign-in`.
pub(crate) async fn sign_in_form(
    State(state): State<AppState>,
    Query(q): Query<NextQuery>,
) -> Response {
    sign_in_page(
        &state,
        StatusCode::OK,
        safe_next(q.next.as_deref()),
        "",
        None,
    )
}

/// The one answer to a failed sign-in, whether the address has an account or not.
const SIGN_IN_FAILED: &str = "The email address or the password is not correct.";

/// `POST /console/sign-in`: every attempt counted by the limiter (per address and per client
/// network, before any password work); the same answer for an unknown address and a wrong
/// password; an account whose address was never proven gets a mailed code first (the second
/// post, with `verification_code`, completes); on success a new session (any session cookie the
/// browser had is replaced: rotation at sign-in).
pub(crate) async fn sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !cookies::pre_session_ok(&state, &headers, &body) {
        return forbidden();
    }
    let ip = crate::auth::client_ip(&headers);
    if let Some(code) = field(&body, "verification_code").filter(|c| !c.is_empty()) {
        return sign_in_code(&state, &headers, &code, ip).await;
    }
    if let Some(code) = field(&body, "two_factor_code").filter(|c| !c.is_empty()) {
        return sign_in_second_factor(&state, &headers, &code, ip).await;
    }
    let email = field(&body, "email").unwrap_or_default();
    let password = field(&body, "password").unwrap_or_default();
    let next = field(&body, "next");
    let next = safe_next(next.as_deref()).to_string();
    if people::too_long(&password) {
        return sign_in_page(
            &state,
            StatusCode::BAD_REQUEST,
            &next,
            &email,
            Some("Passwords are at most 128 characters."),
        );
    }
    let now = state.clock.now();
    let attempt = match limiter::attempt(&state.db, &email, ip.as_deref(), now).await {
        Ok(a) => a,
        Err(limiter::Refused::Throttled(secs)) => {
            return throttled_page(&state, &next, &email, secs);
        }
        Err(limiter::Refused::Unavailable) => return unavailable(),
    };
    let user = match people::authenticate(&state.db, &email, &password).await {
        Ok(user) => user,
        Err(e) => {
            tracing::error!(error = %e, "sign-in not checked");
            return unavailable();
        }
    };
    let scope = proof::Scope {
        check: limiter::Check::SignIn,
        organization: None,
        partner: None,
    };
    let Some(user) = user else {
        proof::audit_failure(&state, scope, &email, ip.as_deref(), Some(&attempt)).await;
        return sign_in_page(
            &state,
            StatusCode::UNAUTHORIZED,
            &next,
            &email,
            Some(SIGN_IN_FAILED),
        );
    };
    if user.email_verified_at.is_none() {
        return prove_address_first(&state, &user).await;
    }
    if user.totp_enabled_at.is_some() {
        return ask_second_factor(&state, &user).await;
    }
    limiter::succeeded(&state.db, &attempt).await;
    match signed_in(&state, &user, ip, &next, now).await {
        Ok(resp) => resp,
        Err(e) => {
            tracing::error!(error = %e, "session not opened");
            unavailable()
        }
    }
}

/// A sign-in of an account whose address was never proven (made before proof of address): a
/// code mailed to the address first, and the code page.
async fn prove_address_first(state: &AppState, user: &entities::console_users::Model) -> Response {
    let first = proof::FirstStep {
        password_hash: None,
        user_id: Some(user.id),
    };
    let subject = format!("user:{}", user.id);
    let started = match proof::start(
        &state.db,
        state,
        proof::Purpose::SignIn,
        &subject,
        &user.email,
        first,
    )
    .await
    {
        Ok(s) => s,
        Err(_) => return unavailable(),
    };
    proof::mail_code(state, &user.email, &started.code, "sign in to the console");
    code_page(
        state,
        StatusCode::OK,
        Code {
            signed_in: None,
            csrf: "",
            heading: "Confirm your address",
            email: &user.email,
            action: "/console/sign-in",
            button: "Sign in",
            restart: "/console/sign-in",
            error: None,
        },
        Some(&started.flow),
    )
}

/// The sign-in page of a throttled address or network: 429 with `Retry-After`.
fn throttled_page(state: &AppState, next: &str, email: &str, secs: u64) -> Response {
    let text = format!(
        "Too many sign-in attempts. Wait {} and try again.",
        wait_text(secs)
    );
    let page = sign_in_page(
        state,
        StatusCode::TOO_MANY_REQUESTS,
        next,
        email,
        Some(&text),
    );
    retry_after(page, secs)
}

#[derive(Template)]
#[template(path = "console/second_factor.html")]
struct SecondFactor<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    error: Option<&'a str>,
}

/// The second-factor page with a fresh double-submit token; `flow`: a new challenge's secret.
fn second_factor_page(
    state: &AppState,
    status: StatusCode,
    flow: Option<&str>,
    error: Option<&str>,
) -> Response {
    let csrf = sessions::secret();
    let page = SecondFactor {
        signed_in: None,
        csrf: &csrf,
        error,
    };
    pre_session_form(state, status, &csrf, &page, flow)
}

/// The password was right and the account has two-factor on: a challenge for the second factor
/// (nothing mailed), kept by the browser's flow cookie.
async fn ask_second_factor(state: &AppState, user: &entities::console_users::Model) -> Response {
    let first = proof::FirstStep {
        password_hash: None,
        user_id: Some(user.id),
    };
    let subject = format!("user:{}", user.id);
    match proof::start(
        &state.db,
        state,
        proof::Purpose::TwoFactor,
        &subject,
        &user.email,
        first,
    )
    .await
    {
        Ok(started) => second_factor_page(state, StatusCode::OK, Some(&started.flow), None),
        Err(_) => unavailable(),
    }
}

/// The live challenge of `purpose` the browser's flow cookie names, if any.
async fn flow_challenge(
    state: &AppState,
    headers: &HeaderMap,
    purpose: proof::Purpose,
) -> Result<Option<entities::console_challenges::Model>, sea_orm::DbErr> {
    let Some(flow) = cookies::cookie(state, headers, proof::FLOW_COOKIE) else {
        return Ok(None);
    };
    let found = proof::by_flow(&state.db, &flow, state.clock.now()).await?;
    Ok(found.filter(|c| c.purpose == purpose.name()))
}

/// What a wrong second factor is told.
const WRONG_CODE: &str =
    "That code is not correct, or was used already. Try the next code your app shows.";

/// The sign-in's second factor: a code from the app (once per step) or a recovery code (each
/// once), for the challenge of the browser's flow; counted by the limiter like a password.
async fn sign_in_second_factor(
    state: &AppState,
    headers: &HeaderMap,
    code: &str,
    ip: Option<String>,
) -> Response {
    use crate::services::two_factor;

    let now = state.clock.now();
    let challenge = match flow_challenge(state, headers, proof::Purpose::TwoFactor).await {
        Ok(c) => c,
        Err(_) => return unavailable(),
    };
    let Some(challenge) = challenge else {
        return sign_in_page(
            state,
            StatusCode::UNAUTHORIZED,
            "/console/",
            "",
            Some("This sign-in has expired. Sign in again."),
        );
    };
    let attempt = match limiter::attempt(&state.db, &challenge.email, ip.as_deref(), now).await {
        Ok(a) => a,
        Err(limiter::Refused::Throttled(secs)) => {
            let text = format!("Too many attempts. Wait {} and try again.", wait_text(secs));
            let page = second_factor_page(state, StatusCode::TOO_MANY_REQUESTS, None, Some(&text));
            return retry_after(page, secs);
        }
        Err(limiter::Refused::Unavailable) => return unavailable(),
    };
    let scope = proof::Scope {
        check: limiter::Check::TwoFactor,
        organization: None,
        partner: None,
    };
    let user = match challenge.user_id {
        Some(id) => people::by_id(&state.db, id).await,
        None => Ok(None),
    };
    let Ok(Some(user)) = user else {
        return unavailable();
    };
    let checked = async {
        if !proof::spend_try(&state.db, state, &challenge).await? {
            return Ok(None);
        }
        two_factor::verify(&state.db, state, &user, code, now).await
    }
    .await;
    let given = match checked {
        Ok(Some(given)) => given,
        Ok(None) => {
            proof::audit_failure(state, scope, &user.email, ip.as_deref(), Some(&attempt)).await;
            return second_factor_page(state, StatusCode::UNAUTHORIZED, None, Some(WRONG_CODE));
        }
        Err(_) => return unavailable(),
    };
    match proof::finish(&state.db, &challenge, now).await {
        Ok(true) => {}
        Ok(false) => {
            let expired = Some("This sign-in has expired. Sign in again.");
            return second_factor_page(state, StatusCode::UNAUTHORIZED, None, expired);
        }
        Err(_) => return unavailable(),
    }
    limiter::succeeded(&state.db, &attempt).await;
    if given == two_factor::Given::RecoveryCode {
        recovery_code_used(state, &user, ip.clone(), now).await;
    }
    match signed_in(state, &user, ip, "/console/", now).await {
        Ok(resp) => resp,
        Err(_) => unavailable(),
    }
}

/// The audit record of a recovery code spent on a sign-in (a failure to write it is logged: the
/// person is signed in either way).
async fn recovery_code_used(
    state: &AppState,
    user: &entities::console_users::Model,
    ip: Option<String>,
    now: chrono::DateTime<chrono::Utc>,
) {
    let record = audit::Audit {
        organization: None,
        partner: None,
        actor: Some(user.id),
        action: "recovery_code_used",
        target: Some(user.email.clone()),
        detail: serde_json::json!({}),
        ip,
    };
    if let Err(e) = audit::audit(&state.db, record, now).await {
        tracing::warn!(error = %e, "recovery code use not audited");
    }
}

/// The sign-in's second step for an account proving its address: the code of the browser's own
/// first step (its flow cookie).
async fn sign_in_code(
    state: &AppState,
    headers: &HeaderMap,
    code: &str,
    ip: Option<String>,
) -> Response {
    let now = state.clock.now();
    let found = match flow_challenge(state, headers, proof::Purpose::SignIn).await {
        Ok(c) => c,
        Err(_) => return unavailable(),
    };
    let email = found.as_ref().map(|c| c.email.clone()).unwrap_or_default();
    let scope = proof::Scope {
        check: limiter::Check::SignIn,
        organization: None,
        partner: None,
    };
    let again = |status, error| sign_in_page(state, status, "/console/", &email, Some(error));
    let completed = proof::complete(state, found, &email, code, None, ip.as_deref(), scope).await;
    let (challenge, accepter, attempt) = match completed {
        Ok(done) => done,
        Err(proof::StepError::Throttled(secs)) => {
            let page = again(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many attempts. Wait a few minutes, then sign in again.",
            );
            return retry_after(page, secs);
        }
        Err(proof::StepError::Unavailable) => return unavailable(),
        Err(_) => {
            return again(
                StatusCode::UNAUTHORIZED,
                "The code is not correct or has expired. Sign in again for a new code.",
            );
        }
    };
    let proof::Accepter::Existing(user_id) = accepter else {
        return again(StatusCode::UNAUTHORIZED, SIGN_IN_FAILED);
    };
    let proven = async {
        let txn = crate::db::begin(&state.db).await?;
        if !proof::finish(&txn, &challenge, now).await? {
            return Ok(None);
        }
        let Some(user) = people::by_id(&txn, user_id).await? else {
            return Ok(None);
        };
        let user = people::mark_proven(&txn, user, now).await?;
        audit::audit(
            &txn,
            audit::Audit {
                organization: None,
                partner: None,
                actor: Some(user.id),
                action: "address_proven",
                target: Some(user.email.clone()),
                detail: serde_json::json!({ "by": "mailed code at sign-in" }),
                ip: ip.clone(),
            },
            now,
        )
        .await?;
        txn.commit().await?;
        Ok::<_, sea_orm::DbErr>(Some(user))
    }
    .await;
    let user = match proven {
        Ok(Some(user)) => user,
        Ok(None) => return again(StatusCode::UNAUTHORIZED, SIGN_IN_FAILED),
        Err(_) => return unavailable(),
    };
    limiter::succeeded(&state.db, &attempt).await;
    match signed_in(state, &user, ip, "/console/", now).await {
        Ok(resp) => resp,
        Err(_) => unavailable(),
    }
}

/// Opens a session for `user` (recorded in the audit log) and redirects to `next` with its
/// cookie; the pre-session CSRF and flow cookies are removed.
pub(crate) async fn signed_in(
    state: &AppState,
    user: &entities::console_users::Model,
    ip: Option<String>,
    next: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Response, sea_orm::DbErr> {
    let lifetimes = state.lifetimes();
    let (cookie, _) =
        sessions::open_session(&state.db, user.id, ip.clone(), now, lifetimes).await?;
    audit::audit(
        &state.db,
        audit::Audit {
            organization: None,
            partner: None,
            actor: Some(user.id),
            action: "sign_in",
            target: None,
            detail: serde_json::json!({}),
            ip,
        },
        now,
    )
    .await?;
    let mut resp = Redirect::to(next).into_response();
    let max_age = lifetimes.absolute.num_seconds();
    let headers = resp.headers_mut();
    headers.append(
        header::SET_COOKIE,
        cookies::set_cookie(state, cookies::COOKIE, &cookie, max_age),
    );
    headers.append(
        header::SET_COOKIE,
        cookies::set_cookie(state, cookies::PRE_CSRF, "", 0),
    );
    headers.append(
        header::SET_COOKIE,
        cookies::set_cookie(state, crate::services::proof::FLOW_COOKIE, "", 0),
    );
    Ok(resp)
}

/// `POST /console/sign-out`: ends the session (server side) and clears the cookie.
pub(crate) async fn sign_out(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let csrf = field(&body, "csrf");
    if !cookies::same_origin(&state, &headers) || !viewer.csrf_ok(csrf.as_deref()) {
        return forbidden();
    }
    let cookie = cookies::cookie(&state, &headers, cookies::COOKIE).unwrap_or_default();
    let audit = audit::Audit {
        organization: None,
        partner: None,
        actor: Some(viewer.user.id),
        action: "sign_out",
        target: None,
        detail: serde_json::json!({}),
        ip: viewer.ip.clone(),
    };
    let ended = sessions::end_session(&state.db, &cookie).await;
    let ended = match ended {
        Ok(()) => audit::audit(&state.db, audit, state.clock.now()).await,
        Err(e) => Err(e),
    };
    if let Err(e) = ended {
        tracing::error!(error = %e, "sign-out failed");
        return unavailable();
    }
    let mut resp = Redirect::to("/console/sign-in").into_response();
    resp.headers_mut().append(
        header::SET_COOKIE,
        cookies::set_cookie(&state, cookies::COOKIE, "", 0),
    );
    resp
}
