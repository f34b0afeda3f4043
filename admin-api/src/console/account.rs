//! `/console/account` (DESIGN §6e, issue 42): the signed-in person's own page. Change the
//! password (the current one required; every other session ends), see the sessions and sign
//! out everywhere, turn two-factor sign-in on (an authenticator app's code proves the setup;
//! recovery codes shown once) or off, renew the recovery codes, and read the account's recent
//! activity. Every check of the current password counts on the limiter; every change is audited.

use super::cookies;
use super::gate;
use super::render::{self, render, retry_after, wait_text};
use super::session::Viewer;
use crate::http::form::field;
use crate::services::audit;
use crate::services::limiter::{self, Check};
use crate::services::sessions;
use crate::services::two_factor::{self, Setup};
use crate::services::{people, proof};
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;

/// How many audit records the activity list shows.
const ACTIVITY: u64 = 20;

struct SessionRow {
    started: String,
    last_seen: String,
    ip: String,
    current: bool,
}

#[derive(Template)]
#[template(path = "console/account.html")]
struct Account<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    email: &'a str,
    sessions: Vec<SessionRow>,
    two_factor_on: bool,
    recovery_left: u64,
    required: bool,
    setup: Option<Setup>,
    recovery_codes: Option<Vec<String>>,
    activity: Vec<(String, String, String)>,
    notice: Option<&'a str>,
    error: Option<&'a str>,
}

/// What a page shows besides the account's state.
#[derive(Default)]
struct Shown<'a> {
    setup: Option<Setup>,
    recovery_codes: Option<Vec<String>>,
    notice: Option<&'a str>,
    error: Option<&'a str>,
}

async fn show(state: &AppState, viewer: &Viewer, status: StatusCode, shown: Shown<'_>) -> Response {
    let user = match people::by_id(&state.db, viewer.user.id).await {
        Ok(Some(u)) => u,
        _ => return render::unavailable(),
    };
    let now = state.clock.now();
    let read = async {
        let sessions = sessions::live_of(&state.db, user.id, now).await?;
        let activity = audit::personal(&state.db, &user, ACTIVITY).await?;
        let left = two_factor::recovery_codes_left(&state.db, user.id).await?;
        let required = two_factor::must_set_up(state, &user).await?;
        Ok::<_, sea_orm::DbErr>((sessions, activity, left, required))
    }
    .await;
    let Ok((sessions, activity, recovery_left, required)) = read else {
        return render::unavailable();
    };
    let idle = state.lifetimes().idle;
    let setup = shown.setup.or_else(|| two_factor::pending(state, &user));
    render(
        status,
        &Account {
            signed_in: Some(&user.email),
            csrf: &viewer.session.csrf,
            email: &user.email,
            sessions: sessions
                .into_iter()
                .filter(|s| s.last_seen_at + idle > now)
                .map(|s| SessionRow {
                    started: s.created_at.format("%Y-%m-%d %H:%M UTC").to_string(),
                    last_seen: s.last_seen_at.format("%Y-%m-%d %H:%M UTC").to_string(),
                    ip: s.ip.clone().unwrap_or_else(|| "unknown".into()),
                    current: s.id == viewer.session.id,
                })
                .collect(),
            two_factor_on: user.totp_enabled_at.is_some(),
            recovery_left,
            required,
            setup,
            recovery_codes: shown.recovery_codes,
            activity: activity
                .into_iter()
                .map(|r| {
                    (
                        r.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                        r.action.replace('_', " "),
                        r.ip.unwrap_or_default(),
                    )
                })
                .collect(),
            notice: shown.notice,
            error: shown.error,
        },
    )
}

#[derive(Deserialize)]
pub(crate) struct Done {
    done: Option<String>,
}

/// `GET /console/account`.
pub(crate) async fn page(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(q): Query<Done>,
) -> Response {
    let notice = match q.done.as_deref() {
        Some("password") => Some("Your password is changed; every other session was signed out."),
        _ => None,
    };
    show(
        &state,
        &viewer,
        StatusCode::OK,
        Shown {
            notice,
            ..Shown::default()
        },
    )
    .await
}

/// A post's origin and the session's CSRF token.
fn forged(state: &AppState, viewer: &Viewer, headers: &HeaderMap, body: &[u8]) -> bool {
    !gate::genuine(state, viewer, headers, body)
}

/// The account page of a refused attempt (429 with `Retry-After`).
async fn throttled(state: &AppState, viewer: &Viewer, secs: u64) -> Response {
    let text = format!("Too many attempts. Wait {} and try again.", wait_text(secs));
    let shown = Shown {
        error: Some(&text),
        ..Shown::default()
    };
    let page = show(state, viewer, StatusCode::TOO_MANY_REQUESTS, shown).await;
    retry_after(page, secs)
}

/// Checks the current password (counted by the limiter like a sign-in); the page to answer
/// when it is not right.
async fn current_password(
    state: &AppState,
    viewer: &Viewer,
    password: &str,
    check: Check,
) -> Result<(), Response> {
    let now = state.clock.now();
    let ip = viewer.ip.as_deref();
    let attempt = match limiter::attempt(&state.db, &viewer.user.email, ip, now).await {
        Ok(a) => a,
        Err(limiter::Refused::Throttled(secs)) => return Err(throttled(state, viewer, secs).await),
        Err(limiter::Refused::Unavailable) => return Err(render::unavailable()),
    };
    match people::password_matches(&viewer.user, password).await {
        Ok(true) => {
            limiter::succeeded(&state.db, &attempt).await;
            Ok(())
        }
        Ok(false) => {
            let scope = proof::Scope {
                check,
                organization: None,
                partner: None,
            };
            proof::audit_failure(state, scope, &viewer.user.email, ip, Some(&attempt)).await;
            let shown = Shown {
                error: Some("The current password is not correct. Nothing was changed."),
                ..Shown::default()
            };
            Err(show(state, viewer, StatusCode::UNAUTHORIZED, shown).await)
        }
        Err(_) => Err(render::unavailable()),
    }
}

/// An account record (no team: it shows on the person's own page).
fn record<'a>(viewer: &Viewer, action: &'a str, detail: serde_json::Value) -> audit::Audit<'a> {
    audit::Audit {
        organization: None,
        partner: None,
        actor: Some(viewer.user.id),
        action,
        target: Some(viewer.user.email.clone()),
        detail,
        ip: viewer.ip.clone(),
    }
}

/// `POST /console/account/password`: `current_password`, `new_password`. Every session of the
/// account ends with the change; this browser gets a new one.
pub(crate) async fn password(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if forged(&state, &viewer, &headers, &body) {
        return render::forbidden();
    }
    let current = field(&body, "current_password").unwrap_or_default();
    let new = field(&body, "new_password").unwrap_or_default();
    if people::too_long(&current) || people::check_password(&new).is_err() {
        let shown = Shown {
            error: Some("Choose a new password of 12 to 128 characters. Nothing was changed."),
            ..Shown::default()
        };
        return show(&state, &viewer, StatusCode::BAD_REQUEST, shown).await;
    }
    if let Err(resp) = current_password(&state, &viewer, &current, Check::PasswordChange).await {
        return resp;
    }
    let now = state.clock.now();
    let changed = async {
        let txn = crate::db::begin(&state.db).await?;
        let user = people::set_password(&txn, viewer.user.clone(), &new, now).await?;
        audit::audit(
            &txn,
            record(&viewer, "password_changed", serde_json::json!({})),
            now,
        )
        .await?;
        txn.commit().await?;
        Ok::<_, people::PeopleError>(user)
    }
    .await;
    let user = match changed {
        Ok(user) => user,
        Err(e) => {
            tracing::error!(error = %e, "password not changed");
            return render::unavailable();
        }
    };
    match super::sign_in::signed_in(
        &state,
        &user,
        viewer.ip.clone(),
        "/console/account?done=password",
        now,
    )
    .await
    {
        Ok(resp) => resp,
        Err(_) => render::unavailable(),
    }
}

/// `POST /console/account/sign-out-everywhere`: every session of the account ends, this one too.
pub(crate) async fn sign_out_everywhere(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if forged(&state, &viewer, &headers, &body) {
        return render::forbidden();
    }
    let now = state.clock.now();
    let done = async {
        let txn = crate::db::begin(&state.db).await?;
        sessions::end_sessions_of(&txn, viewer.user.id).await?;
        audit::audit(
            &txn,
            record(&viewer, "signed_out_everywhere", serde_json::json!({})),
            now,
        )
        .await?;
        txn.commit().await
    }
    .await;
    if done.is_err() {
        return render::unavailable();
    }
    let mut resp = Redirect::to("/console/sign-in").into_response();
    resp.headers_mut().append(
        header::SET_COOKIE,
        cookies::set_cookie(&state, cookies::COOKIE, "", 0),
    );
    resp
}

/// `POST /console/account/two-factor`: `action` `start` (with `current_password`: a new secret
/// to scan), `enable` (with the app's `code`: on, recovery codes shown once), `disable` or
/// `recovery-codes` (with `current_password`).
pub(crate) async fn two_factor(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if forged(&state, &viewer, &headers, &body) {
        return render::forbidden();
    }
    let action = field(&body, "action").unwrap_or_default();
    let now = state.clock.now();
    let code_attempt = match checked(&state, &viewer, &action, &body, now).await {
        Ok(attempt) => attempt,
        Err(resp) => return resp,
    };
    let done = async {
        let txn = crate::db::begin(&state.db).await?;
        let shown = change_two_factor(&txn, &state, &viewer, &action, &body, now).await?;
        if shown.is_ok() {
            txn.commit().await?;
        }
        Ok::<_, sea_orm::DbErr>(shown)
    }
    .await;
    // The app's code checked (the transaction is over): a success starts the address afresh, a
    // failure is audited like any failed check.
    if let Some(attempt) = &code_attempt {
        match &done {
            Ok(Ok(_)) => limiter::succeeded(&state.db, attempt).await,
            Ok(Err((StatusCode::UNAUTHORIZED, _))) => {
                let scope = proof::Scope {
                    check: Check::TwoFactor,
                    organization: None,
                    partner: None,
                };
                let ip = viewer.ip.as_deref();
                proof::audit_failure(&state, scope, &viewer.user.email, ip, Some(attempt)).await;
            }
            _ => {}
        }
    }
    match done {
        Ok(Ok(shown)) => show(&state, &viewer, StatusCode::OK, shown).await,
        Ok(Err((status, error))) => {
            let shown = Shown {
                error: Some(error),
                ..Shown::default()
            };
            show(&state, &viewer, status, shown).await
        }
        Err(e) => {
            tracing::error!(error = %e, "two-factor change failed");
            render::unavailable()
        }
    }
}

/// A two-factor post's own check before any change: the current password (start, disable, new
/// recovery codes), or the limiter's count of the app's code (enable, returned to be closed when
/// the code is judged); the page to answer instead (an unknown action: 400).
async fn checked(
    state: &AppState,
    viewer: &Viewer,
    action: &str,
    body: &[u8],
    now: DateTime<Utc>,
) -> Result<Option<limiter::Attempt>, Response> {
    match action {
        "start" | "disable" | "recovery-codes" => {
            let current = field(body, "current_password").unwrap_or_default();
            current_password(state, viewer, &current, Check::TwoFactor).await?;
            Ok(None)
        }
        "enable" => {
            // The app's code is a check like a password: counted by the limiter.
            let ip = viewer.ip.as_deref();
            match limiter::attempt(&state.db, &viewer.user.email, ip, now).await {
                Ok(a) => Ok(Some(a)),
                Err(limiter::Refused::Throttled(secs)) => Err(throttled(state, viewer, secs).await),
                Err(limiter::Refused::Unavailable) => Err(render::unavailable()),
            }
        }
        _ => {
            let shown = Shown {
                error: Some("Unknown action. Nothing was changed."),
                ..Shown::default()
            };
            Err(show(state, viewer, StatusCode::BAD_REQUEST, shown).await)
        }
    }
}

/// A refused two-factor change: its status and what to tell the person.
type TwoFactorRefusal = (StatusCode, &'static str);

/// The change a checked two-factor post asks for, with its audit record, in `txn`.
async fn change_two_factor(
    txn: &sea_orm::DatabaseTransaction,
    state: &AppState,
    viewer: &Viewer,
    action: &str,
    body: &[u8],
    now: DateTime<Utc>,
) -> Result<Result<Shown<'static>, TwoFactorRefusal>, sea_orm::DbErr> {
    let user = &viewer.user;
    let audited = async |action: &str| {
        let detail = serde_json::json!({});
        audit::audit(txn, record(viewer, action, detail), now).await
    };
    Ok(match action {
        "start" => match two_factor::start(txn, state, user).await? {
            Some(setup) => Ok(Shown {
                setup: Some(setup),
                ..Shown::default()
            }),
            None => Err((StatusCode::CONFLICT, "Two-factor sign-in is already on.")),
        },
        "enable" => {
            let code = field(body, "code").unwrap_or_default();
            match two_factor::enable(txn, state, user, &code, now).await? {
                Some(codes) => {
                    audited("two_factor_enabled").await?;
                    Ok(Shown {
                        recovery_codes: Some(codes),
                        notice: Some("Two-factor sign-in is on."),
                        ..Shown::default()
                    })
                }
                None => Err((
                    StatusCode::UNAUTHORIZED,
                    "That code is not correct. Check the time on your phone, then enter the code your app shows now.",
                )),
            }
        }
        "disable" => {
            two_factor::disable(txn, user.id).await?;
            audited("two_factor_disabled").await?;
            Ok(Shown {
                notice: Some("Two-factor sign-in is off."),
                ..Shown::default()
            })
        }
        _ if user.totp_enabled_at.is_none() => {
            Err((StatusCode::CONFLICT, "Two-factor sign-in is off."))
        }
        _ => {
            let codes = two_factor::renew_recovery_codes(txn, state, user.id, now).await?;
            audited("recovery_codes_renewed").await?;
            Ok(Shown {
                recovery_codes: Some(codes),
                notice: Some("New recovery codes: the old ones no longer work."),
                ..Shown::default()
            })
        }
    })
}
