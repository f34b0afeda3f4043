//! Invitation acceptance: the page with its form, and the accept action in two steps (a form
//! answered with pages, or JSON answered in JSON). Holding the link proves nothing: the first
//! post mails a code to the invited address, and only a post with that code activates
//! (DESIGN §6c, `services::proof`).

use super::form;
use super::params::Seg;
use crate::console::cookies;
use crate::console::render;
use crate::dto::{Envelope, ErrorEnvelope};
use crate::services::invitations::{self, InvitationError};
use crate::services::limiter::{self, Check};
use crate::services::proof::{self, Purpose, Scope, StepError};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use entities::status::InvitationStatus;
use serde_json::{Value, json};

/// `GET /invitations/{token}`: the organization to activate and a form to sign up or sign in with
/// exactly the invited address (DESIGN §6c).
pub(super) async fn show(State(state): State<AppState>, Seg(token): Seg) -> Response {
    match invitations::view(&state, &token).await {
        Ok(v) if v.status == InvitationStatus::Pending => form_page(
            &state,
            StatusCode::OK,
            &token,
            &v.organization_name,
            &v.email_hint,
            None,
        ),
        Ok(v) => {
            let message = match v.status {
                InvitationStatus::Accepted => "This invitation was already accepted.",
                InvitationStatus::Expired => {
                    "This invitation has expired; ask your provider for a new one."
                }
                InvitationStatus::Revoked => {
                    "This invitation was revoked; ask your provider for a new one."
                }
                InvitationStatus::Pending => "This invitation is no longer valid.",
            };
            render::message(StatusCode::GONE, "Invitation", message)
        }
        Err(e) => refused_page(&e),
    }
}

fn form_page(
    state: &AppState,
    status: StatusCode,
    token: &str,
    name: &str,
    hint: &str,
    error: Option<&str>,
) -> Response {
    let heading = format!("Activate {name}");
    let intro = format!(
        "You were invited to activate {name} and become its owner. Sign up, or sign in, with the address the invitation was sent to ({hint}); we will mail a code to that address to confirm it is yours."
    );
    let action = format!("/invitations/{token}/accept");
    render::join_page(
        state,
        status,
        render::Join {
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

/// What an accept post carries.
struct Posted {
    json: bool,
    email: Option<String>,
    password: Option<String>,
    code: Option<String>,
}

fn posted(headers: &HeaderMap, body: &[u8]) -> Posted {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/json"));
    let nonempty = |v: Option<String>| v.filter(|s| !s.is_empty());
    if json {
        let v = serde_json::from_slice::<Value>(body).ok();
        let text = |k: &str| {
            v.as_ref()
                .and_then(|v| v.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        Posted {
            json,
            email: nonempty(text("email")),
            password: nonempty(text("password")),
            code: nonempty(text("verification_code")),
        }
    } else {
        Posted {
            json,
            email: nonempty(form::field(body, "email")),
            password: nonempty(form::field(body, "password")),
            code: nonempty(form::field(body, "verification_code")),
        }
    }
}

/// `POST /invitations/{token}/accept`, JSON (answered in JSON) or a form (answered with pages):
/// - with `email` and `password`: the first step, answered 202 `verification_required` (a form:
///   the code page) whatever the address; the code is mailed to the invited address;
/// - with `verification_code` too (a program), or `verification_code` alone from the code page
///   (the browser's flow cookie names the first step): the acceptance, answered 200 with
///   `{organization_id, status: "active"}` and a console session (a form: the organization's
///   console).
///
/// The invitation's token authorizes a program's post without a browser's CSRF token; a
/// browser's cross-site `Origin` is refused, and the flow cookie is `SameSite=Strict`.
pub(super) async fn accept(
    State(state): State<AppState>,
    Seg(token): Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !cookies::same_origin(&state, &headers) {
        return render::forbidden();
    }
    let p = posted(&headers, &body);
    let (inv, name) = match invitations::pending(&state, &token).await {
        Ok(found) => found,
        Err(e) => return refused(&p, &e),
    };
    let scope = Scope {
        check: Check::Invitation,
        organization: None,
        partner: None,
    };
    let ip = crate::auth::client_ip(&headers);
    let subject = invitations::subject(&inv);
    let Some(code) = p.code.clone() else {
        return first_step(
            &state,
            &p,
            &inv,
            &name,
            &token,
            &subject,
            ip.as_deref(),
            scope,
        )
        .await;
    };
    let found = match second_step_of(&state, &headers, &p, &inv.email, &subject).await {
        Ok(c) => c,
        Err(e) => return refused(&p, &e),
    };
    let completed = proof::complete(
        &state,
        found,
        &inv.email,
        &code,
        p.password.as_deref(),
        ip.as_deref(),
        scope,
    )
    .await;
    let (challenge, accepter, attempt) = match completed {
        Ok(done) => done,
        Err(e) => return refused(&p, &step_error(e)),
    };
    let (accepted, user) =
        match invitations::accept(&state, &token, &challenge, accepter, ip.clone()).await {
            Ok(done) => done,
            Err(e) => return refused(&p, &e),
        };
    limiter::succeeded(&state.db, &attempt).await;
    let next = format!("/console/orgs/{}", accepted.organization_id);
    match crate::console::sign_in::signed_in(&state, &user, ip, &next, state.clock.now()).await {
        Ok(resp) if p.json => json_with_session(resp, accepted),
        Ok(resp) => resp,
        Err(e) => {
            tracing::error!(error = %e, "session not opened after activation");
            render::unavailable()
        }
    }
}

/// The challenge a second step completes: by address with a password (a program), by the flow
/// cookie without (a browser's own first step).
async fn second_step_of(
    state: &AppState,
    headers: &HeaderMap,
    p: &Posted,
    invited: &str,
    subject: &str,
) -> Result<Option<entities::console_challenges::Model>, InvitationError> {
    let now = state.clock.now();
    let found = match (
        &p.password,
        cookies::cookie(state, headers, proof::FLOW_COOKIE),
    ) {
        (Some(_), _) => {
            let email = p.email.clone().unwrap_or_default();
            if !invited.eq_ignore_ascii_case(email.trim()) {
                return Err(InvitationError::EmailMismatch);
            }
            proof::for_address(&state.db, subject, &email, now).await
        }
        (None, Some(flow)) => proof::by_flow(&state.db, &flow, now)
            .await
            .map(|c| c.filter(|c| c.subject == subject)),
        (None, None) => Ok(None),
    };
    found.map_err(|_| InvitationError::Unavailable)
}

/// A program's answer to an activation: the accepted invitation in the partner envelope, with
/// the session cookies of the page answer `signed_in` made.
fn json_with_session(signed_in: Response, accepted: crate::dto::InvitationAccepted) -> Response {
    let cookies: Vec<_> = signed_in
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .cloned()
        .collect();
    let mut resp = axum::Json(Envelope::ok(accepted)).into_response();
    for c in cookies {
        resp.headers_mut().append(header::SET_COOKIE, c);
    }
    resp
}

/// The first step: the address must be the invited one and the password 12 to 128 characters;
/// then the same answer whatever the address (the code goes to the invited address).
#[allow(clippy::too_many_arguments, reason = "one step's inputs")]
async fn first_step(
    state: &AppState,
    p: &Posted,
    inv: &entities::invitations::Model,
    name: &str,
    token: &str,
    subject: &str,
    ip: Option<&str>,
    scope: Scope,
) -> Response {
    let email = p.email.clone().unwrap_or_default();
    if !crate::text::valid_email(email.trim()) || !inv.email.eq_ignore_ascii_case(email.trim()) {
        return refused(p, &InvitationError::EmailMismatch);
    }
    let Some(password) = p.password.as_deref() else {
        return refused(p, &InvitationError::WeakPassword);
    };
    let what = format!("activate {name} and become its owner");
    let step = proof::Begin {
        purpose: Purpose::Invitation,
        subject,
        email: &inv.email,
        scope,
        what: &what,
    };
    let started = proof::begin(state, step, password, ip).await;
    let started = match started {
        Ok(s) => s,
        Err(e) => return refused(p, &step_error(e)),
    };
    if p.json {
        return (
            StatusCode::ACCEPTED,
            axum::Json(json!({
                "code": 0,
                "message": "a verification code was mailed to the invited address; post again with verification_code",
                "data": { "status": "verification_required" },
            })),
        )
            .into_response();
    }
    let action = format!("/invitations/{token}/accept");
    let restart = format!("/invitations/{token}");
    let heading = format!("Activate {name}");
    render::code_page(
        state,
        StatusCode::OK,
        render::Code {
            signed_in: None,
            csrf: "",
            heading: &heading,
            email: &started.challenge.email,
            action: &action,
            button: "Activate the organization",
            restart: &restart,
            error: None,
        },
        Some(&started.flow),
    )
}

fn step_error(e: StepError) -> InvitationError {
    match e {
        StepError::WeakPassword => InvitationError::WeakPassword,
        StepError::Failed => InvitationError::VerificationFailed,
        StepError::Throttled(s) => InvitationError::Throttled(s),
        StepError::Unavailable => InvitationError::Unavailable,
    }
}

/// A refused post: JSON in the envelope, a form with a page; 429 with `Retry-After`.
fn refused(p: &Posted, e: &InvitationError) -> Response {
    let resp = if p.json {
        (e.status(), axum::Json(e.body())).into_response()
    } else {
        refused_page(e)
    };
    match e {
        InvitationError::Throttled(secs) => render::retry_after(resp, *secs),
        _ => resp,
    }
}

fn refused_page(e: &InvitationError) -> Response {
    let text = match e {
        InvitationError::Throttled(secs) => format!(
            "Too many attempts for this address or from your network. Wait {} and try again.",
            render::wait_text(*secs)
        ),
        e => {
            let t = e.to_string();
            let mut c = t.chars();
            c.next()
                .map(|f| f.to_uppercase().collect::<String>() + c.as_str() + ".")
                .unwrap_or_default()
        }
    };
    render::message(e.status(), "Invitation", &text)
}

/// How a refused acceptance is answered: the one mapping of `InvitationError` (page or JSON).
impl InvitationError {
    /// The HTTP status of a refused acceptance (page or JSON).
    pub fn status(&self) -> StatusCode {
        use InvitationError::*;
        match self {
            NotFound => StatusCode::NOT_FOUND,
            Expired | Revoked => StatusCode::GONE,
            AlreadyAccepted => StatusCode::CONFLICT,
            EmailMismatch => StatusCode::FORBIDDEN,
            Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            VerificationFailed => StatusCode::UNAUTHORIZED,
            WeakPassword => StatusCode::BAD_REQUEST,
            Throttled(_) => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// The JSON answer of a refused acceptance, in the partner envelope.
    pub fn body(&self) -> ErrorEnvelope {
        use InvitationError::*;
        let reason = match self {
            NotFound => "INVITATION_NOT_FOUND",
            Expired => "INVITATION_EXPIRED",
            AlreadyAccepted => "INVITATION_ALREADY_ACCEPTED",
            Revoked => "INVITATION_REVOKED",
            EmailMismatch => "INVITATION_EMAIL_MISMATCH",
            Unavailable => "SERVICE_UNAVAILABLE",
            VerificationFailed => "INVITATION_VERIFICATION_FAILED",
            WeakPassword => "INVITATION_WEAK_PASSWORD",
            Throttled(_) => "INVITATION_TOO_MANY_ATTEMPTS",
        };
        ErrorEnvelope {
            code: self.status().as_u16(),
            reason: Some(reason),
            message: self.to_string(),
            metadata: match self {
                Throttled(secs) => json!({ "retry_after_seconds": secs }),
                _ => json!({}),
            },
        }
    }
}
