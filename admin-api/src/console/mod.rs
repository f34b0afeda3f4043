//! The web console (DESIGN §6c, issue 28): server-rendered pages under `/console/` from
//! compile-time-checked templates (`admin-api/templates/console/`), assets embedded in the binary
//! (`admin-api/assets/`), no CDN and no inline script. Every answer carries the security headers
//! of [`security_headers`]; sessions and CSRF are `session`'s, pages `pages`'.

pub(crate) mod billing_token;
pub(crate) mod chart;
pub(crate) mod customer;
pub(crate) mod customers;
pub(crate) mod funding;
pub(crate) mod join;
pub(crate) mod keys;
pub(crate) mod members;
pub(crate) mod pages;
pub(crate) mod partner;
pub(crate) mod reset;
pub(crate) mod session;
pub(crate) mod statements;
pub(crate) mod usage;

use crate::state::AppState;
use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

/// The console's routes (under the one public base URL).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route("/console/", get(pages::home))
        .route(
            "/console/sign-in",
            get(pages::sign_in_form).post(pages::sign_in),
        )
        .route("/console/sign-out", post(pages::sign_out))
        .route(
            "/console/reset",
            get(reset::request_form).post(reset::request),
        )
        .route(
            "/console/reset/{token}",
            get(reset::set_form).post(reset::set),
        )
        .route("/console/orgs/{org}", get(pages::org_overview))
        .route("/console/orgs/{org}/alert", post(pages::org_alert))
        .route(
            "/console/orgs/{org}/statements/{file}",
            get(statements::org),
        )
        .route(
            "/console/partners/{partner}/statements/{file}",
            get(statements::partner),
        )
        .route("/console/orgs/{org}/usage", get(usage::page))
        .route("/console/orgs/{org}/usage.csv", get(usage::download))
        .route("/console/join/{token}", get(join::form).post(join::join))
        .route(
            "/console/orgs/{org}/keys",
            get(keys::list).post(keys::create),
        )
        .route(
            "/console/orgs/{org}/keys/{key}/disable",
            post(keys::disable),
        )
        .route(
            "/console/orgs/{org}/billing-token",
            get(billing_token::show).post(billing_token::act),
        )
        .route(
            "/console/orgs/{org}/members",
            get(members::list).post(members::invite),
        )
        .route(
            "/console/orgs/{org}/members/{member}",
            post(members::change),
        )
        .route(
            "/console/orgs/{org}/members/invitations/{invite}",
            post(members::revoke_invite),
        )
        .route("/console/orgs/{org}/audit", get(members::audit))
        .route("/console/partners/{partner}", get(partner::overview))
        .route(
            "/console/partners/{partner}/funding",
            get(funding::show).post(funding::add),
        )
        .route(
            "/console/partners/{partner}/funding/alert",
            post(funding::alert),
        )
        .route(
            "/console/partners/{partner}/funding/recharge",
            post(funding::recharge),
        )
        .route(
            "/console/partners/{partner}/usage",
            get(usage::partner_page),
        )
        .route(
            "/console/partners/{partner}/usage.csv",
            get(usage::partner_download),
        )
        .route(
            "/console/partners/{partner}/customers",
            get(customers::list).post(customers::create),
        )
        .route(
            "/console/partners/{partner}/customers/{customer}",
            get(customer::show),
        )
        .route(
            "/console/partners/{partner}/customers/{customer}/invitation",
            post(customer::invitation),
        )
        .route(
            "/console/partners/{partner}/customers/{customer}/allocations",
            post(customer::allocate),
        )
        .route(
            "/console/partners/{partner}/customers/{customer}/rates",
            post(customer::rate),
        )
        .route(
            "/console/partners/{partner}/customers/{customer}/alert",
            post(customer::alert),
        )
        .route(
            "/console/partners/{partner}/customers/{customer}/automatic-allocation",
            post(customer::automatic),
        )
        .route(
            "/console/partners/{partner}/customers/{customer}/keys",
            post(customer::create_key),
        )
        .route(
            "/console/partners/{partner}/customers/{customer}/keys/disable",
            post(customer::disable_key),
        )
        .route(
            "/console/partners/{partner}/tokens",
            get(partner::tokens).post(partner::create_token),
        )
        .route(
            "/console/partners/{partner}/tokens/{token}",
            post(partner::change_token),
        )
        .route(
            "/console/partners/{partner}/team",
            get(members::partner_list).post(members::partner_invite),
        )
        .route(
            "/console/partners/{partner}/team/{member}",
            post(members::partner_change),
        )
        .route(
            "/console/partners/{partner}/team/invitations/{invite}",
            post(members::partner_revoke_invite),
        )
        .route(
            "/console/partners/{partner}/audit",
            get(members::partner_audit),
        )
        .route("/console/assets/{file}", get(asset))
        .layer(axum::middleware::from_fn(security_headers))
}

/// The Content-Security-Policy of every console page: only this origin's own script, style and
/// images; no inline script, no framing, forms only to this origin.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Adds the console's security headers: CSP, no framing, a referrer only to this origin (pages
/// show secrets and carry tokens in their URLs; `same-origin` rather than `no-referrer` because
/// with `no-referrer` browsers send `Origin: null` on the site's own form posts, which the origin
/// check must be able to tell from a cross-site post), no sniffing, no caching of pages.
pub(crate) async fn security_headers(req: Request, next: Next) -> Response {
    let is_asset = req.uri().path().starts_with("/console/assets/");
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if !is_asset {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

/// The embedded assets: (name, content type, bytes).
const ASSETS: [(&str, &str, &[u8]); 3] = [
    (
        "console.css",
        "text/css; charset=utf-8",
        include_bytes!("../../assets/console.css"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/console.js"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_bytes!("../../assets/favicon.svg"),
    ),
];

/// `GET /console/assets/{file}`.
async fn asset(crate::http::params::Seg(file): crate::http::params::Seg) -> Response {
    match ASSETS.iter().find(|(name, ..)| *name == file) {
        Some((_, content_type, bytes)) => (
            [
                (header::CONTENT_TYPE, *content_type),
                (header::CACHE_CONTROL, "public, max-age=3600"),
            ],
            *bytes,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "not found").into_response(),
    }
}
