//! The console on the wire: its cookies (only a random id, `HttpOnly`, `SameSite=Lax`, `Secure`
//! and `__Host-` when the public URL is https) and where a state-changing request may come from.
//!
//! CSRF: every state-changing form of a signed-in page carries the session's token (a hidden
//! `csrf` field, compared in constant time); forms without a session (sign-in, a join link) carry
//! a random token that must equal the `tg_csrf` cookie set with the form (double submit). Every
//! console `POST` whose `Origin` is present must also be this service's origin.

use crate::auth::same_token;
use crate::state::AppState;
use axum::http::{HeaderMap, HeaderValue, header};

/// The session cookie.
pub(crate) const COOKIE: &str = "tg_session";

/// The double-submit cookie of forms shown before a session exists.
pub(crate) const PRE_CSRF: &str = "tg_csrf";

/// Whether the console is served over https (its public URL): cookies are then `Secure` and
/// named with the `__Host-` prefix (no `Domain`, path `/`), and pages carry HSTS.
pub(crate) fn https(state: &AppState) -> bool {
    state.settings.server.public_base_url.scheme() == "https"
}

/// The name cookie `base` has on this deployment: `__Host-{base}` over https.
pub(crate) fn cookie_name(state: &AppState, base: &str) -> String {
    if https(state) {
        format!("__Host-{base}")
    } else {
        base.to_string()
    }
}

/// The value of this deployment's cookie `base` (see [`cookie_name`]) in `headers`.
pub(crate) fn cookie(state: &AppState, headers: &HeaderMap, base: &str) -> Option<String> {
    raw_cookie(headers, &cookie_name(state, base))
}

/// The value of cookie `name` in `headers`.
fn raw_cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// A `Set-Cookie` value for this deployment's cookie `base` (see [`cookie_name`]; `max_age` 0
/// removes it).
pub(crate) fn set_cookie(state: &AppState, base: &str, value: &str, max_age: i64) -> HeaderValue {
    let secure = if https(state) { "; Secure" } else { "" };
    let name = cookie_name(state, base);
    let text = format!("{name}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}");
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("invalid=1"))
}

/// The `tg_flow` cookie of a proof-of-address step: `HttpOnly`, `SameSite=Strict`, 15 minutes.
pub(crate) fn flow_cookie(state: &AppState, flow: &str) -> HeaderValue {
    let secure = if https(state) { "; Secure" } else { "" };
    let max_age = crate::services::proof::CODE_VALID.num_seconds();
    let text = format!(
        "{}={flow}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}",
        cookie_name(state, crate::services::proof::FLOW_COOKIE)
    );
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("invalid=1"))
}

/// Whether a state-changing request may come from where it says: no `Origin` (not a browser's
/// cross-site request) or this service's own origin (the public URL's, or the `Host` it was sent
/// to).
pub(crate) fn same_origin(state: &AppState, headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let public_origin = state
        .settings
        .server
        .public_base_url
        .origin()
        .ascii_serialization();
    if origin.eq_ignore_ascii_case(&public_origin) {
        return true;
    }
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    host.is_some_and(|h| {
        origin.eq_ignore_ascii_case(&format!("http://{h}"))
            || origin.eq_ignore_ascii_case(&format!("https://{h}"))
    })
}

/// A form posted before a session exists (sign-in, join, reset): this site's origin and the
/// double-submit token (the `csrf` field equals the `tg_csrf` cookie).
pub(crate) fn pre_session_ok(state: &AppState, headers: &HeaderMap, body: &[u8]) -> bool {
    let pre = cookie(state, headers, PRE_CSRF).unwrap_or_default();
    let csrf = crate::http::form::field(body, "csrf").unwrap_or_default();
    same_origin(state, headers) && same_token(&csrf, &pre)
}
