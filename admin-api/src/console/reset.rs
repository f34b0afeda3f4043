//! Password reset by mailed link: `GET/POST /console/reset` asks for the address and, when it has
//! an account, mails a single-use link (`/console/reset/{token}`, valid [`RESET_VALID`]); the
//! answer is the same whether the address has an account or not (no enumeration), and the mail
//! is sent after the answer so its time does not tell either. Requests count on the limiter of
//! every check (`services::limiter`). A reset link goes only to the mailbox, so setting a
//! password with it also proves the address. Setting the new password, ending every session of the account, spending the link
//! and the audit record commit together.

use super::cookies;
use super::render::{self, render};
use crate::db::begin;
use crate::http::form::field;
use crate::http::params::Seg;
use crate::services::audit;
use crate::services::memberships;
use crate::services::sessions;
use crate::services::{limiter, people};
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use chrono::Duration;
use entities::console_tokens;

/// How long a reset link works.
pub(crate) const RESET_VALID: Duration = Duration::hours(1);

#[derive(Template)]
#[template(path = "console/reset.html")]
struct Reset<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    token: Option<&'a str>,
    error: Option<&'a str>,
}

/// The reset form (`token`: the set-password step) with a fresh double-submit token.
fn form_page(
    state: &AppState,
    status: StatusCode,
    token: Option<&str>,
    error: Option<&str>,
) -> Response {
    let csrf = sessions::secret();
    let page = Reset {
        signed_in: None,
        csrf: &csrf,
        token,
        error,
    };
    render::pre_session_form(state, status, &csrf, &page, None)
}

/// `GET /console/reset`.
pub(crate) async fn request_form(State(state): State<AppState>) -> Response {
    form_page(&state, StatusCode::OK, None, None)
}

/// `POST /console/reset`: `email`.
pub(crate) async fn request(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !cookies::pre_session_ok(&state, &headers, &body) {
        return render::forbidden();
    }
    let email = people::normal_email(&field(&body, "email").unwrap_or_default());
    if !crate::text::valid_email(&email) {
        return form_page(
            &state,
            StatusCode::BAD_REQUEST,
            None,
            Some("Enter a valid email address."),
        );
    }
    let ip = crate::auth::client_ip(&headers);
    // Asking for a link checks nothing, but it mails the address: counted like a check.
    if let Err(refused) =
        limiter::attempt(&state.db, &email, ip.as_deref(), state.clock.now()).await
    {
        return match refused {
            limiter::Refused::Throttled(secs) => render::retry_after(
                form_page(
                    &state,
                    StatusCode::TOO_MANY_REQUESTS,
                    None,
                    Some("Too many attempts. Wait a few minutes, then try again."),
                ),
                secs,
            ),
            limiter::Refused::Unavailable => render::unavailable(),
        };
    }
    let user = match people::find_user(&state.db, &email).await {
        Ok(user) => user,
        Err(_) => return render::unavailable(),
    };
    if let Some(user) = user {
        let token = match memberships::issue_token(
            &state.db,
            &state,
            "reset",
            &user.email,
            None,
            None,
            None,
            Some(user.id),
        )
        .await
        {
            Ok(t) => t,
            Err(_) => return render::unavailable(),
        };
        let url = state.public_url(&format!("/console/reset/{token}"));
        let mailer = state.mailer.clone();
        let send = async move {
            let body = format!(
                "Hello,\n\nSomeone (we hope you) asked to reset the password of your Tollgate console account ({}).\n\nChoose a new password within one hour with this link; it works once:\n\n{url}\n\nIf you did not ask, ignore this mail: your password stays as it is.\n",
                user.email
            );
            if let Err(e) = mailer
                .send(&user.email, "Reset your Tollgate password", body)
                .await
            {
                tracing::warn!(error = %e, "the password reset link was not mailed");
            }
        };
        if let Ok(mut tasks) = state.mail_tasks.lock() {
            while tasks.try_join_next().is_some() {}
            tasks.spawn(send);
        }
    }
    render::message(
        StatusCode::OK,
        "Check your mail",
        "If this address has an account, we mailed it a link to choose a new password. The link works once, for one hour.",
    )
}

/// The reset row of `token` if it is unused, a reset link, and younger than [`RESET_VALID`].
async fn live_reset(
    state: &AppState,
    token: &str,
) -> Result<Option<console_tokens::Model>, sea_orm::DbErr> {
    let now = state.clock.now();
    Ok(memberships::live_token(&state.db, state, token)
        .await?
        .filter(|t| t.purpose == "reset" && t.created_at + RESET_VALID > now))
}

fn expired() -> Response {
    render::message(
        StatusCode::GONE,
        "Link expired",
        "This password reset link has expired, was already used, or does not exist. Ask for a new one from the sign-in page.",
    )
}

/// `GET /console/reset/{token}`.
pub(crate) async fn set_form(State(state): State<AppState>, Seg(token): Seg) -> Response {
    match live_reset(&state, &token).await {
        Ok(Some(_)) => form_page(&state, StatusCode::OK, Some(&token), None),
        Ok(None) => expired(),
        Err(_) => render::unavailable(),
    }
}

/// `POST /console/reset/{token}`: `password`.
pub(crate) async fn set(
    State(state): State<AppState>,
    Seg(token): Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !cookies::pre_session_ok(&state, &headers, &body) {
        return render::forbidden();
    }
    let password = field(&body, "password").unwrap_or_default();
    if people::check_password(&password).is_err() {
        return form_page(
            &state,
            StatusCode::BAD_REQUEST,
            Some(&token),
            Some("Choose a password of 12 to 128 characters."),
        );
    }
    let now = state.clock.now();
    let ip = crate::auth::client_ip(&headers);
    let done: Result<bool, people::PeopleError> = async {
        let txn = begin(&state.db).await?;
        let Some(t) = live_reset(&state, &token).await? else {
            return Ok(false);
        };
        // Spend the link first, only if still unused: of two posts of one link, one wins.
        if !memberships::spend_token(&txn, t.id, now, false).await? {
            return Ok(false);
        }
        let Some(user) = people::find_user(&txn, &t.email).await? else {
            return Ok(false);
        };
        // The link went only to the mailbox: setting the password proves the address.
        let user = people::set_password(&txn, user, &password, now).await?;
        let user = people::mark_proven(&txn, user, now).await?;
        audit::audit(
            &txn,
            audit::Audit {
                organization: None,
                partner: None,
                actor: Some(user.id),
                action: "password_reset",
                target: Some(format!("user:{}", user.id)),
                detail: serde_json::json!({}),
                ip,
            },
            now,
        )
        .await?;
        txn.commit().await?;
        Ok(true)
    }
    .await;
    match done {
        Ok(true) => render(
            StatusCode::OK,
            &render::Message {
                signed_in: None,
                csrf: "",
                heading: "Password changed",
                message: "Your password is changed and every session of your account was signed out.",
                link: Some(("/console/sign-in", "Sign in with the new password")),
            },
        ),
        Ok(false) => expired(),
        Err(e) => {
            tracing::error!(error = %e, "password reset failed");
            render::unavailable()
        }
    }
}
