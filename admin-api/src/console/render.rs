//! The console's page helpers, shared by every page: rendering a template, message pages and
//! refusals (503, 403, 404), the forms shown before a session exists (a join link, the code of a
//! proof of address, with their double-submit cookie) and `Retry-After`.

use super::cookies;
use super::session::Viewer;
use crate::services::sessions;
use crate::state::AppState;
use askama::Template;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

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
/// `csrf` (from [`sessions::secret`]), which is set as the `tg_csrf` cookie with it, and, when a
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
        cookies::set_cookie(state, cookies::PRE_CSRF, csrf, 3600),
    );
    if let Some(flow) = flow {
        headers.append(header::SET_COOKIE, cookies::flow_cookie(state, flow));
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
    let csrf = sessions::secret();
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
    let csrf = sessions::secret();
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
