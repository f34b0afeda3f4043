//! The web console (DESIGN §6c, issue 28): server-rendered pages under `/console/` from
//! compile-time-checked templates (`admin-api/templates/console/`), assets embedded in the binary
//! (`admin-api/assets/`), no CDN and no inline script. Every answer carries the security headers
//! of [`security_headers`]; sessions and CSRF are `session`'s, pages `pages`'.

pub(crate) mod account;
pub(crate) mod amount;
pub(crate) mod audit_log;
pub(crate) mod batches;
pub(crate) mod billing_token;
pub(crate) mod chart;
pub(crate) mod cookies;
pub(crate) mod customer;
pub(crate) mod customer_actions;
pub(crate) mod customers;
pub(crate) mod form;
pub(crate) mod funding;
pub(crate) mod gate;
pub(crate) mod invites;
pub(crate) mod join;
pub(crate) mod keys;
pub(crate) mod members;
pub(crate) mod pages;
pub(crate) mod partner;
pub(crate) mod render;
pub(crate) mod requests;
pub(crate) mod reset;
pub(crate) mod session;
pub(crate) mod sign_in;
pub(crate) mod statements;
pub(crate) mod usage;
pub(crate) mod usage_csv;
pub(crate) mod usage_window;
pub(crate) mod webhooks;

use crate::http::table::{Route, Table};
use crate::state::AppState;
use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

/// The console's routes and its state-changing ones (see [`crate::http::table`]).
fn table() -> Table {
    use crate::http::table::Gate::{Org, Partner, Person, PreSession};
    const ORG_OWNERS: &[&str] = gate::ORG_OWNERS.roles;
    const KEY_MANAGERS: &[&str] = gate::KEY_MANAGERS.roles;
    const PARTNER_MANAGERS: &[&str] = gate::TOKEN_MANAGERS.roles;
    const CUSTOMER_WORK: &[&str] = gate::CUSTOMER_WORK.roles;
    Table::new()
        .page("/console", || async { Redirect::permanent("/console/") })
        .page("/console/", pages::home)
        .page_and_form(
            "/console/sign-in",
            PreSession,
            sign_in::sign_in_form,
            sign_in::sign_in,
        )
        .form("/console/sign-out", Person, sign_in::sign_out)
        .page("/console/account", account::page)
        .form("/console/account/password", Person, account::password)
        .form(
            "/console/account/sign-out-everywhere",
            Person,
            account::sign_out_everywhere,
        )
        .form("/console/account/two-factor", Person, account::two_factor)
        .page_and_form(
            "/console/reset",
            PreSession,
            reset::request_form,
            reset::request,
        )
        .page_and_form(
            "/console/reset/{token}",
            PreSession,
            reset::set_form,
            reset::set,
        )
        .page("/console/orgs/{org}", pages::org_overview)
        .form(
            "/console/orgs/{org}/alert",
            Org(ORG_OWNERS),
            pages::org_alert,
        )
        .page("/console/orgs/{org}/statements/{file}", statements::org)
        .page(
            "/console/partners/{partner}/statements/{file}",
            statements::partner,
        )
        .page("/console/orgs/{org}/usage", usage::page)
        .page("/console/orgs/{org}/usage.csv", usage_csv::download)
        .page("/console/orgs/{org}/requests", requests::org_page)
        .page("/console/orgs/{org}/batches", batches::page)
        .page_and_form("/console/join/{token}", PreSession, join::form, join::join)
        .page_and_form(
            "/console/orgs/{org}/keys",
            Org(KEY_MANAGERS),
            keys::list,
            keys::create,
        )
        .form(
            "/console/orgs/{org}/keys/{key}/disable",
            Org(KEY_MANAGERS),
            keys::disable,
        )
        .page_and_form(
            "/console/orgs/{org}/billing-token",
            Org(KEY_MANAGERS),
            billing_token::show,
            billing_token::act,
        )
        .page_and_form(
            "/console/orgs/{org}/members",
            Org(ORG_OWNERS),
            members::list,
            invites::invite,
        )
        .form(
            "/console/orgs/{org}/members/{member}",
            Org(ORG_OWNERS),
            members::change,
        )
        .form(
            "/console/orgs/{org}/members/invitations/{invite}",
            Org(ORG_OWNERS),
            invites::revoke_invite,
        )
        .page("/console/orgs/{org}/audit", audit_log::audit)
        .page("/console/partners/{partner}", partner::overview)
        .page_and_form(
            "/console/partners/{partner}/funding",
            Partner(CUSTOMER_WORK),
            funding::show,
            funding::add,
        )
        .form(
            "/console/partners/{partner}/funding/alert",
            Partner(CUSTOMER_WORK),
            funding::alert,
        )
        .form(
            "/console/partners/{partner}/funding/recharge",
            Partner(CUSTOMER_WORK),
            funding::recharge,
        )
        .page("/console/partners/{partner}/usage", usage::partner_page)
        .page(
            "/console/partners/{partner}/usage.csv",
            usage_csv::partner_download,
        )
        .page_and_form(
            "/console/partners/{partner}/customers",
            Partner(CUSTOMER_WORK),
            customers::list,
            customers::create,
        )
        .page(
            "/console/partners/{partner}/customers/{customer}",
            customer::show,
        )
        .page(
            "/console/partners/{partner}/customers/{customer}/requests",
            requests::customer_page,
        )
        .form(
            "/console/partners/{partner}/customers/{customer}/invitation",
            Partner(CUSTOMER_WORK),
            customer_actions::invitation,
        )
        .form(
            "/console/partners/{partner}/customers/{customer}/allocations",
            Partner(CUSTOMER_WORK),
            customer_actions::allocate,
        )
        .form(
            "/console/partners/{partner}/customers/{customer}/rates",
            Partner(CUSTOMER_WORK),
            customer_actions::rate,
        )
        .form(
            "/console/partners/{partner}/customers/{customer}/alert",
            Partner(CUSTOMER_WORK),
            customer_actions::alert,
        )
        .form(
            "/console/partners/{partner}/customers/{customer}/automatic-allocation",
            Partner(CUSTOMER_WORK),
            customer_actions::automatic,
        )
        .form(
            "/console/partners/{partner}/customers/{customer}/keys",
            Partner(CUSTOMER_WORK),
            customer_actions::create_key,
        )
        .form(
            "/console/partners/{partner}/customers/{customer}/keys/disable",
            Partner(CUSTOMER_WORK),
            customer_actions::disable_key,
        )
        .page_and_form(
            "/console/partners/{partner}/tokens",
            Partner(PARTNER_MANAGERS),
            partner::tokens,
            partner::create_token,
        )
        .page_and_form(
            "/console/partners/{partner}/webhooks",
            Partner(PARTNER_MANAGERS),
            webhooks::list,
            webhooks::create,
        )
        .page_and_form(
            "/console/partners/{partner}/webhooks/{webhook}",
            Partner(PARTNER_MANAGERS),
            webhooks::log,
            webhooks::change,
        )
        .form(
            "/console/partners/{partner}/tokens/{token}",
            Partner(PARTNER_MANAGERS),
            partner::change_token,
        )
        .page_and_form(
            "/console/partners/{partner}/team",
            Partner(PARTNER_MANAGERS),
            members::list,
            invites::invite,
        )
        .form(
            "/console/partners/{partner}/team/{member}",
            Partner(PARTNER_MANAGERS),
            members::change,
        )
        .form(
            "/console/partners/{partner}/team/invitations/{invite}",
            Partner(PARTNER_MANAGERS),
            invites::revoke_invite,
        )
        .page("/console/partners/{partner}/audit", audit_log::audit)
        .page("/console/assets/{file}", asset)
}

/// The console's state-changing routes, each with the gate that guards it.
pub(crate) fn forms() -> Vec<Route> {
    table().finish().1
}

/// The console's routes (under the one public base URL).
pub(crate) fn routes(state: &AppState) -> Router<AppState> {
    table()
        .finish()
        .0
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            security_headers,
        ))
}

/// The Content-Security-Policy of every console page: only this origin's own script, style and
/// images; no inline script, no framing, forms only to this origin (and, where `[payments]`
/// names Stripe, to its hosted Checkout: "Add funds" and "Save a card" post to this origin,
/// which redirects there, and browsers hold a form's redirects to `form-action` too).
pub(crate) fn csp(state: &AppState) -> String {
    let checkout = checkout_origin(state)
        .map(|o| format!(" {o}"))
        .unwrap_or_default();
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'{checkout}; frame-ancestors 'none'; base-uri 'none'"
    )
}

/// Where Stripe's hosted Checkout pages are: `https://checkout.stripe.com` for Stripe itself,
/// else the configured API base's origin (a stand-in serves its pages there).
pub(crate) fn checkout_origin(state: &AppState) -> Option<String> {
    let stripe = state.settings.payments.stripe.as_ref()?;
    if stripe.api_base.host_str() == Some("api.stripe.com") {
        Some("https://checkout.stripe.com".into())
    } else {
        Some(stripe.api_base.origin().ascii_serialization())
    }
}

/// Adds the console's security headers: CSP, no framing, a referrer only to this origin (pages
/// show secrets and carry tokens in their URLs; `same-origin` rather than `no-referrer` because
/// with `no-referrer` browsers send `Origin: null` on the site's own form posts, which the origin
/// check must be able to tell from a cross-site post), no sniffing, no caching of pages, and
/// HSTS when the public URL is https.
pub(crate) async fn security_headers(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let is_asset = req.uri().path().starts_with("/console/assets/");
    let mut resp = next.run(req).await;
    let csp = HeaderValue::from_str(&csp(&state))
        .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'"));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, csp);
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if cookies::https(&state) {
        h.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
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
