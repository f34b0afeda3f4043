//! The console's pages: sign-in and sign-out, the organization list and an organization's
//! overview. Handlers read the request, call the services (`services::people`,
//! `services::wallets`, `services::billing`) and render a template; permissions are checked on
//! the server for every request (a page of an organization the viewer is not a member of answers
//! 404, exactly like one that does not exist).

use super::session::{self, Viewer};
use crate::http::form::field;
use crate::services::{billing, limiter, people, proof, wallets};
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use money::NanoUsd;
use serde::Deserialize;

/// Renders `t` with `status`; a template that fails to render is a 500 page.
pub(crate) fn render(status: StatusCode, t: &impl Template) -> Response {
    match t.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "console template failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
        }
    }
}

/// A form shown before a session exists: `page`, rendered with the fresh double-submit token
/// `csrf` (from [`people::secret`]), which is set as the `tg_csrf` cookie with it, and, when a
/// proof-of-address step just started, its flow cookie.
pub(crate) fn pre_session_form(
    state: &AppState,
    status: StatusCode,
    csrf: &str,
    page: &impl Template,
    flow: Option<&str>,
) -> Response {
    let mut resp = render(status, page);
    let headers = resp.headers_mut();
    headers.append(
        header::SET_COOKIE,
        session::set_cookie(state, session::PRE_CSRF, csrf, 3600),
    );
    if let Some(flow) = flow {
        headers.append(header::SET_COOKIE, session::flow_cookie(state, flow));
    }
    resp
}

/// A page with a heading, a message and maybe a link.
#[derive(Template)]
#[template(path = "console/message.html")]
pub(crate) struct Message<'a> {
    pub signed_in: Option<&'a str>,
    pub csrf: &'a str,
    pub heading: &'a str,
    pub message: &'a str,
    pub link: Option<(&'a str, &'a str)>,
}

/// A message page without a session.
pub(crate) fn message(status: StatusCode, heading: &str, text: &str) -> Response {
    render(
        status,
        &Message {
            signed_in: None,
            csrf: "",
            heading,
            message: text,
            link: None,
        },
    )
}

/// The store or the database cannot answer: 503, try again.
pub(crate) fn unavailable() -> Response {
    message(
        StatusCode::SERVICE_UNAVAILABLE,
        "Try again shortly",
        "The console cannot answer right now. Nothing was changed; please try again in a moment.",
    )
}

/// A refused state-changing request (CSRF token or origin): nothing changed.
pub(crate) fn forbidden() -> Response {
    render(
        StatusCode::FORBIDDEN,
        &Message {
            signed_in: None,
            csrf: "",
            heading: "Request refused",
            message: "This form has expired or was not sent from this site. Nothing was changed; reload the page and try again.",
            link: Some(("/console/", "Back to the console")),
        },
    )
}

/// The 404 of a page that does not exist or is not the viewer's.
pub(crate) fn not_found(viewer: &Viewer) -> Response {
    render(
        StatusCode::NOT_FOUND,
        &Message {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            heading: "Not found",
            message: "There is no such page in your console.",
            link: Some(("/console/", "Your console")),
        },
    )
}

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
    let csrf = people::secret();
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
    if !session::pre_session_ok(&state, &headers, &body) {
        return forbidden();
    }
    let ip = session::client_ip(&headers);
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
            let text = format!(
                "Too many sign-in attempts. Wait {} and try again.",
                wait_text(secs)
            );
            let page = sign_in_page(
                &state,
                StatusCode::TOO_MANY_REQUESTS,
                &next,
                &email,
                Some(&text),
            );
            return retry_after(page, secs);
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
        // Never proven (an account made before proof of address): a code to the address first.
        let first = proof::FirstStep {
            password_hash: None,
            user_id: Some(user.id),
        };
        let subject = format!("user:{}", user.id);
        let started = match proof::start(
            &state.db,
            &state,
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
        proof::mail_code(&state, &user.email, &started.code, "sign in to the console");
        return code_page(
            &state,
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
        );
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
    let csrf = people::secret();
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

/// The sign-in's second factor: a code from the app (once per step) or a recovery code (each
/// once), for the challenge of the browser's flow; counted by the limiter like a password.
async fn sign_in_second_factor(
    state: &AppState,
    headers: &HeaderMap,
    code: &str,
    ip: Option<String>,
) -> Response {
    use crate::services::two_factor;
    use sea_orm::EntityTrait;
    let now = state.clock.now();
    let challenge = match session::cookie(state, headers, proof::FLOW_COOKIE) {
        Some(flow) => match proof::by_flow(&state.db, &flow, now).await {
            Ok(c) => c.filter(|c| c.purpose == proof::Purpose::TwoFactor.name()),
            Err(_) => return unavailable(),
        },
        None => None,
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
        Some(id) => {
            entities::console_users::Entity::find_by_id(id)
                .one(&state.db)
                .await
        }
        None => Ok(None),
    };
    let user = match user {
        Ok(Some(u)) => u,
        Ok(None) => return unavailable(),
        Err(_) => return unavailable(),
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
            return second_factor_page(
                state,
                StatusCode::UNAUTHORIZED,
                None,
                Some(
                    "That code is not correct, or was used already. Try the next code your app shows.",
                ),
            );
        }
        Err(_) => return unavailable(),
    };
    match proof::finish(&state.db, &challenge, now).await {
        Ok(true) => {}
        Ok(false) => {
            return second_factor_page(
                state,
                StatusCode::UNAUTHORIZED,
                None,
                Some("This sign-in has expired. Sign in again."),
            );
        }
        Err(_) => return unavailable(),
    }
    limiter::succeeded(&state.db, &attempt).await;
    if given == two_factor::Given::RecoveryCode {
        let record = people::Audit {
            organization: None,
            partner: None,
            actor: Some(user.id),
            action: "recovery_code_used",
            target: Some(user.email.clone()),
            detail: serde_json::json!({}),
            ip: ip.clone(),
        };
        if let Err(e) = people::audit(&state.db, record, now).await {
            tracing::warn!(error = %e, "recovery code use not audited");
        }
    }
    match signed_in(state, &user, ip, "/console/", now).await {
        Ok(resp) => resp,
        Err(_) => unavailable(),
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
    let found = match session::cookie(state, headers, proof::FLOW_COOKIE) {
        Some(flow) => match proof::by_flow(&state.db, &flow, now).await {
            Ok(c) => c.filter(|c| c.purpose == "sign_in"),
            Err(_) => return unavailable(),
        },
        None => None,
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
        use sea_orm::EntityTrait;
        let Some(user) = entities::console_users::Entity::find_by_id(user_id)
            .one(&txn)
            .await?
        else {
            return Ok(None);
        };
        let user = people::mark_proven(&txn, user, now).await?;
        people::audit(
            &txn,
            people::Audit {
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
    let (cookie, _) = people::open_session(&state.db, user.id, ip.clone(), now, lifetimes).await?;
    people::audit(
        &state.db,
        people::Audit {
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
        session::set_cookie(state, session::COOKIE, &cookie, max_age),
    );
    headers.append(
        header::SET_COOKIE,
        session::set_cookie(state, session::PRE_CSRF, "", 0),
    );
    headers.append(
        header::SET_COOKIE,
        session::set_cookie(state, crate::services::proof::FLOW_COOKIE, "", 0),
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
    if !session::same_origin(&state, &headers) || !viewer.csrf_ok(csrf.as_deref()) {
        return forbidden();
    }
    let cookie = session::cookie(&state, &headers, session::COOKIE).unwrap_or_default();
    let audit = people::Audit {
        organization: None,
        partner: None,
        actor: Some(viewer.user.id),
        action: "sign_out",
        target: None,
        detail: serde_json::json!({}),
        ip: viewer.ip.clone(),
    };
    let ended = people::end_session(&state.db, &cookie).await;
    let ended = match ended {
        Ok(()) => people::audit(&state.db, audit, state.clock.now()).await,
        Err(e) => Err(e),
    };
    if let Err(e) = ended {
        tracing::error!(error = %e, "sign-out failed");
        return unavailable();
    }
    let mut resp = Redirect::to("/console/sign-in").into_response();
    resp.headers_mut().append(
        header::SET_COOKIE,
        session::set_cookie(&state, session::COOKIE, "", 0),
    );
    resp
}

#[derive(Template)]
#[template(path = "console/home.html")]
struct Home<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    orgs: Vec<(i64, String, String)>,
    partners: Vec<(i64, String, String)>,
}

/// `GET /console/`: the organizations the viewer belongs to.
pub(crate) async fn home(State(state): State<AppState>, viewer: Viewer) -> Response {
    let (orgs, partners) = match (
        people::org_memberships(&state.db, viewer.user.id).await,
        people::partner_memberships(&state.db, viewer.user.id).await,
    ) {
        (Ok(orgs), Ok(partners)) => (orgs, partners),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "memberships not read");
            return unavailable();
        }
    };
    render(
        StatusCode::OK,
        &Home {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            orgs: orgs
                .into_iter()
                .map(|(org, role)| (org.id, org.name, role))
                .collect(),
            partners: partners
                .into_iter()
                .map(|(p, role)| (p.id, p.name, role))
                .collect(),
        },
    )
}

/// Figures of a reconciled wallet, in USD.
struct Balance {
    available: String,
    book: String,
    reserved: String,
}

#[derive(Template)]
#[template(path = "console/org.html")]
struct Org<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    org_id: i64,
    tab: &'a str,
    name: &'a str,
    role: &'a str,
    balance: Option<Balance>,
    today: String,
    week: String,
    days: Vec<(String, i64, String)>,
    chart: super::chart::Chart,
    chart_title: &'a str,
    /// The low-balance alert: threshold (USD), below it now.
    alert: Option<(String, bool)>,
    /// Owners set the alert.
    can_alert: bool,
    /// The partner's automatic allocation: below, amount, monthly cap (USD).
    rule: Option<(String, String, String)>,
    /// Automatic allocations: when, amount (USD), outcome.
    runs: Vec<(String, String, String)>,
    error: Option<String>,
    notice: Option<String>,
}

/// `GET /console/orgs/{org}`: balance (or "being reconciled", never zero), spend today and over 7
/// days, and the daily spend of the last 14 days. Members only.
pub(crate) async fn org_overview(
    State(state): State<AppState>,
    viewer: Viewer,
    crate::http::params::Seg(org): crate::http::params::Seg,
) -> Response {
    overview_page(&state, &viewer, &org, StatusCode::OK, None, None).await
}

/// `POST /console/orgs/{org}/alert`: `threshold_usd` (empty: remove). Owners only; audited.
pub(crate) async fn org_alert(
    State(state): State<AppState>,
    viewer: Viewer,
    crate::http::params::Seg(org): crate::http::params::Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    use crate::services::watch;
    let (org_id, _, _) =
        match super::keys::allowed(&state, &viewer, &org, &headers, &body, &["owner"], "owners")
            .await
        {
            Ok(m) => m,
            Err(resp) => return resp,
        };
    let raw = field(&body, "threshold_usd").unwrap_or_default();
    let request = crate::dto::AlertRequest {
        threshold_usd: Some(super::customers::number(&raw).unwrap_or(serde_json::Value::Null)),
        unknown: Default::default(),
    };
    let threshold = match watch::parse_alert(request) {
        Ok(t) => t,
        Err(e) => {
            let message = super::customers::explain(&e);
            return overview_page(
                &state,
                &viewer,
                &org,
                StatusCode::BAD_REQUEST,
                Some(message),
                None,
            )
            .await;
        }
    };
    let done = async {
        let txn = crate::db::begin(&state.db).await?;
        watch::set_alert(
            &txn,
            watch::Subject::Org(org_id),
            threshold,
            state.clock.now(),
        )
        .await?;
        people::audit(
            &txn,
            people::Audit {
                organization: Some(org_id),
                partner: None,
                actor: Some(viewer.user.id),
                action: "alert_changed",
                target: Some(format!("org:{org_id}")),
                detail: serde_json::json!({ "threshold_usd": raw }),
                ip: viewer.ip.clone(),
            },
            state.clock.now(),
        )
        .await?;
        txn.commit().await?;
        Ok::<_, crate::error::ApiError>(())
    }
    .await;
    match done {
        Ok(()) => {
            let notice = match threshold {
                Some(t) => format!(
                    "The low-balance alert is set at {} USD.",
                    t.to_decimal_usd()
                ),
                None => "The low-balance alert was removed.".into(),
            };
            overview_page(&state, &viewer, &org, StatusCode::OK, None, Some(notice)).await
        }
        Err(e) => {
            tracing::error!(error = %e, "alert not saved");
            unavailable()
        }
    }
}

async fn overview_page(
    state: &AppState,
    viewer: &Viewer,
    org: &str,
    status: StatusCode,
    error: Option<String>,
    notice: Option<String>,
) -> Response {
    use crate::services::watch;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let state = state.clone();
    let Ok(org_id) = org.parse::<i64>() else {
        return not_found(viewer);
    };
    let role = match people::org_role(&state.db, org_id, viewer.user.id).await {
        Ok(Some(role)) => role,
        Ok(None) => return not_found(viewer),
        Err(e) => {
            tracing::error!(error = %e, "membership not read");
            return unavailable();
        }
    };
    let org = match crate::services::customers::organization(&state.db, org_id).await {
        Ok(Some(org)) => org,
        Ok(None) => return not_found(viewer),
        Err(_) => return unavailable(),
    };
    let balance = match wallets::reconciled(&state, org_id).await {
        Ok(Some((book, reserved))) => Some(Balance {
            available: book.remaining_after(reserved).to_decimal_usd().to_string(),
            book: book.to_decimal_usd().to_string(),
            reserved: reserved.to_decimal_usd().to_string(),
        }),
        Ok(None) => None,
        Err(_) => None,
    };
    let today = state.clock.now().date_naive();
    let days = match billing::daily_spend(&state.db, org_id, today, 14).await {
        Ok(days) => days,
        Err(_) => return unavailable(),
    };
    let rules = async {
        let alert = watch::alert_of(&state.db, watch::Subject::Org(org_id)).await?;
        let customer = entities::customers::Entity::find()
            .filter(entities::customers::Column::OrganizationId.eq(org_id))
            .one(&state.db)
            .await?;
        let view = match customer {
            Some(c) => Some(watch::rule_view(&state.db, c.id, state.clock.now()).await?),
            None => None,
        };
        Ok::<_, crate::error::ApiError>((alert, view))
    }
    .await;
    let Ok((alert, view)) = rules else {
        return unavailable();
    };
    let dec = |n: NanoUsd| n.to_decimal_usd().to_string();
    let (rule, runs) = match view {
        Some(v) => (
            v.rule.map(|r| {
                (
                    dec(r.below_usd.0),
                    dec(r.amount_usd.0),
                    dec(r.monthly_cap_usd.0),
                )
            }),
            v.runs
                .into_iter()
                .map(|r| {
                    let outcome = if r.outcome == "allocated" {
                        "allocated"
                    } else {
                        "refused"
                    };
                    (r.created_at, dec(r.amount_usd.0), outcome.to_string())
                })
                .collect(),
        ),
        None => (None, Vec::new()),
    };
    let sum = |n: usize| {
        days.iter()
            .rev()
            .take(n)
            .fold(NanoUsd::ZERO, |a, (_, cost, _)| {
                a.checked_add(*cost).unwrap_or(a)
            })
            .to_decimal_usd()
            .to_string()
    };
    render(
        status,
        &Org {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            org_id,
            tab: "overview",
            name: &org.name,
            role: &role,
            balance,
            today: sum(1),
            week: sum(7),
            chart: super::chart::daily(&days),
            chart_title: "Daily spend, last 14 days, oldest on the left (UTC)",
            days: days
                .iter()
                .rev()
                .map(|(d, cost, requests)| {
                    (d.to_string(), *requests, cost.to_decimal_usd().to_string())
                })
                .collect(),
            alert: alert.map(|a| (dec(NanoUsd::from_nanos(a.threshold_nanos)), a.below)),
            can_alert: role == "owner",
            rule,
            runs,
            error,
            notice,
        },
    )
}

/// The form of a link that adds a person (an organization's invitation, a sign-up link).
#[derive(Template)]
#[template(path = "console/join.html")]
pub(crate) struct Join<'a> {
    pub signed_in: Option<&'a str>,
    pub csrf: &'a str,
    pub heading: &'a str,
    pub intro: &'a str,
    pub action: &'a str,
    pub email: &'a str,
    pub button: &'a str,
    pub error: Option<&'a str>,
}

/// A join form with a fresh double-submit token (set as a cookie with the page).
pub(crate) fn join_page(state: &AppState, status: StatusCode, join: Join<'_>) -> Response {
    let csrf = people::secret();
    let page = Join {
        csrf: &csrf,
        ..join
    };
    pre_session_form(state, status, &csrf, &page, None)
}

/// The second step of a proof of address: the code form.
#[derive(Template)]
#[template(path = "console/code.html")]
pub(crate) struct Code<'a> {
    pub signed_in: Option<&'a str>,
    pub csrf: &'a str,
    pub heading: &'a str,
    /// The address the code went to.
    pub email: &'a str,
    pub action: &'a str,
    pub button: &'a str,
    /// Where "Start again" leads (the first step's page).
    pub restart: &'a str,
    pub error: Option<&'a str>,
}

/// A code form with a fresh double-submit token; `flow`: the flow secret of a challenge just
/// started, kept in the browser's `tg_flow` cookie for the second step.
pub(crate) fn code_page(
    state: &AppState,
    status: StatusCode,
    code: Code<'_>,
    flow: Option<&str>,
) -> Response {
    let csrf = people::secret();
    let page = Code {
        csrf: &csrf,
        ..code
    };
    pre_session_form(state, status, &csrf, &page, flow)
}

/// `resp` with `Retry-After: secs`.
pub(crate) fn retry_after(mut resp: Response, secs: u64) -> Response {
    if let Ok(v) = HeaderValue::from_str(&secs.max(1).to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// "3 minutes", "40 seconds".
pub(crate) fn wait_text(secs: u64) -> String {
    match secs {
        0..=1 => "a second".into(),
        2..=90 => format!("{secs} seconds"),
        _ => format!("{} minutes", secs.div_ceil(60)),
    }
}
