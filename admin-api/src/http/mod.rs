//! admin-api's HTTP surface: handlers extract and map, services hold the rules. One file per
//! resource; partner writes go through [`write`] (key, body, identity, then the idempotent run).
//!
//! - `/partner/v1/*`: the partner API behind the gate; unknown paths answer 404 with the plain
//!   text `page not found` (before authentication).
//! - `/api/v1/organization/billing/*`: the organization billing API (read only).
//! - `/invitations/{token}`: the acceptance page and its form.
//! - `/billing/top-up`: the page the funding object's `top_up_url` opens (how to add funds);
//! - `/billing/top-up/{token}`: the hosted top-up page (and `done` / `cancelled`, where Stripe
//!   Checkout returns the payer);
//! - `/billing/webhooks/stripe`: Stripe's webhook deliveries (signature-checked).
//! - `/healthz`.

pub(crate) mod answer;
pub(crate) mod batches;
pub(crate) mod billing;
mod customer_key;
pub(crate) mod customers;
pub(crate) mod form;
pub(crate) mod funding;
mod invitations;
pub(crate) mod keys;
pub(crate) mod message_batches;
pub(crate) mod pages;
pub(crate) mod params;
pub(crate) mod partner_webhooks;
pub(crate) mod rules;
pub mod table;
mod top_up;
mod trace;
pub(crate) mod usage;
pub(crate) mod webhooks;
mod write;

use crate::partner::gate::gate;
use crate::state::AppState;
use axum::Router;
use axum::extract::Request;
use axum::extract::State;
use axum::http::{Method, StatusCode, header};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The partner API's routes whose path carries an id, with their methods. A request whose id
/// segment is empty (`/customers/by-external-id/`, `/customers//balance`) reaches the route, which
/// refuses the empty id as it refuses any invalid one (400 `INVALID_PARTNER_EXTERNAL_CUSTOMER_ID`,
/// 404 `PARTNER_CUSTOMER_NOT_FOUND`, …), instead of the plain-text 404 of a path that does not
/// exist. `/customers/` stays the listing path that does not exist.
const ID_ROUTES: &[(&str, &[Method])] = &[
    (
        "/customers/by-external-id/{external_customer_id}",
        &[Method::GET, Method::PUT],
    ),
    ("/customers/{customer_id}/balance", &[Method::GET]),
    ("/customers/{customer_id}/allocations", &[Method::POST]),
    ("/customers/{customer_id}/groups", &[Method::GET]),
    (
        "/customers/{customer_id}/groups/{group_id}/rate",
        &[Method::PUT],
    ),
    (
        "/customers/{customer_id}/api-keys",
        &[Method::GET, Method::POST],
    ),
    (
        "/customers/{customer_id}/api-keys/{api_key_id}",
        &[Method::DELETE],
    ),
    ("/customers/{customer_id}/usage", &[Method::GET]),
    (
        "/customers/{customer_id}/low-balance-alert",
        &[Method::GET, Method::PUT],
    ),
    (
        "/customers/{customer_id}/automatic-allocation",
        &[Method::GET, Method::PUT, Method::DELETE],
    ),
    (
        "/customers/{customer_id}/api-keys/{api_key_id}/usage",
        &[Method::GET],
    ),
];

/// The partner API's routes, behind the gate (no fallback).
fn partner_routes(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/me", get(funding::me))
        .route("/funding", get(funding::view))
        .route("/funding/top-up-sessions", post(funding::top_up))
        .route(
            "/funding/recharge",
            get(rules::recharge)
                .put(rules::set_recharge)
                .delete(rules::delete_recharge),
        )
        .route("/funding/recharge/card-sessions", post(rules::card_session))
        .route(
            "/funding/low-balance-alert",
            get(rules::funding_alert).put(rules::set_funding_alert),
        )
        .route(
            "/customers/{customer_id}/low-balance-alert",
            get(rules::customer_alert).put(rules::set_customer_alert),
        )
        .route(
            "/customers/{customer_id}/automatic-allocation",
            get(rules::customer_rule)
                .put(rules::set_customer_rule)
                .delete(rules::delete_customer_rule),
        )
        .route(
            "/customers/by-external-id/{external_customer_id}",
            get(customers::by_external_id).put(customers::create),
        )
        .route("/customers/{customer_id}", get(customers::by_id))
        .route("/customers/{customer_id}/balance", get(customers::balance))
        .route(
            "/customers/{customer_id}/allocations",
            post(customers::allocations),
        )
        .route("/customers/{customer_id}/groups", get(customers::groups))
        .route(
            "/customers/{customer_id}/groups/{group_id}/rate",
            put(customers::group_rate),
        )
        .route(
            "/customers/{customer_id}/api-keys",
            get(keys::list).post(keys::create),
        )
        .route(
            "/customers/{customer_id}/api-keys/{api_key_id}",
            delete(keys::disable),
        )
        .route("/customers/{customer_id}/usage", get(usage::customer))
        .route(
            "/customers/{customer_id}/api-keys/{api_key_id}/usage",
            get(usage::key),
        )
        .route(
            "/webhooks",
            get(partner_webhooks::list).post(partner_webhooks::create),
        )
        .route(
            "/webhooks/{webhook_id}",
            get(partner_webhooks::get)
                .patch(partner_webhooks::update)
                .delete(partner_webhooks::delete),
        )
        .route(
            "/webhooks/{webhook_id}/deliveries",
            get(partner_webhooks::deliveries),
        )
        .route(
            "/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver",
            post(partner_webhooks::redeliver),
        )
        .route_layer(from_fn_with_state(state.clone(), gate))
}

/// The admin-api router.
pub fn router(state: AppState) -> Router {
    let with_ids = Router::new()
        .nest("/partner/v1", partner_routes(&state))
        .with_state(state.clone());
    let partner = partner_routes(&state)
        .route("/openapi.json", get(openapi_json))
        .fallback(move |req: Request| empty_id_or_not_found(with_ids.clone(), req));
    Router::new()
        .route("/healthz", get(health))
        .nest("/partner/v1", partner)
        .route(
            "/api/v1/organization/billing/balance",
            get(billing::balance),
        )
        .route(
            "/api/v1/organization/billing/usage/daily",
            get(billing::daily),
        )
        .route(
            "/api/v1/organization/billing/statements/{month}",
            get(billing::statement),
        )
        .route("/compat/v1/key", get(billing::key_standing))
        .route(
            "/compat/v1/generations/{request_id}",
            get(billing::generation),
        )
        .merge(batches::routes(&state))
        .merge(message_batches::routes(&state))
        .merge(
            // Pages a person opens: the console's security headers.
            page_table()
                .finish()
                .0
                .layer(axum::middleware::from_fn_with_state(
                    state.clone(),
                    crate::console::security_headers,
                )),
        )
        .route(
            "/billing/webhooks/stripe",
            post(webhooks::stripe).layer(axum::extract::DefaultBodyLimit::max(webhooks::MAX_BODY)),
        )
        .merge(crate::console::routes(&state))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            trace::span,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            client_address,
        ))
        .with_state(state)
}

use crate::auth::CLIENT_ADDRESS;

/// Sets [`CLIENT_ADDRESS`] to the client's address as DESIGN §6c says, before any handler reads
/// it: from loopback or a `[server] trusted_proxies` peer (the gateway, a load balancer) the
/// gateway's header when it carries an IP address, else the right-most untrusted
/// `X-Forwarded-For` entry; from anyone else the TCP peer, whatever the request claimed. A
/// request served without a connection (no peer known) has no client address.
async fn client_address(
    State(state): State<AppState>,
    mut req: Request,
    next: axum::middleware::Next,
) -> Response {
    let peer = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip());
    let headers = req.headers();
    let client = peer.map(|peer| {
        let server = &state.settings.server;
        let trusted = peer.is_loopback()
            || peer.to_canonical().is_loopback()
            || server.is_trusted_proxy(peer);
        let claimed = headers
            .get(CLIENT_ADDRESS)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<std::net::IpAddr>().ok());
        match claimed {
            Some(ip) if trusted => ip,
            _ if trusted => server.client_ip(
                peer,
                headers
                    .get_all("x-forwarded-for")
                    .iter()
                    .filter_map(|v| v.to_str().ok()),
            ),
            _ => peer.to_canonical(),
        }
    });
    let headers = req.headers_mut();
    headers.remove(CLIENT_ADDRESS);
    if let Some(v) = client.and_then(|ip| axum::http::HeaderValue::from_str(&ip.to_string()).ok()) {
        headers.insert(CLIENT_ADDRESS, v);
    }
    next.run(req).await
}

/// The pages a person opens outside the console (an invitation, a hosted top-up), from the
/// same kind of table as the console's (see [`table`]).
fn page_table() -> table::Table {
    table::Table::new()
        .page("/invitations/{token}", invitations::show)
        .form(
            "/invitations/{token}/accept",
            table::Gate::PreSession,
            invitations::accept,
        )
        .page("/billing/top-up", top_up::start)
        .page("/billing/top-up/done", top_up::done)
        .page("/billing/top-up/cancelled", top_up::cancelled)
        .page("/billing/top-up/{token}", top_up::show)
}

/// Every route of the console and the invitation pages that changes state, with the gate that
/// guards it, as the router is built (the security suite tries each against everyone the gate
/// keeps out).
pub fn state_changing_routes() -> Vec<table::Route> {
    let mut all = crate::console::forms();
    all.extend(page_table().finish().1);
    all
}

/// The partner API's fallback: a path of an [`ID_ROUTES`] route whose id segment is empty is
/// served by that route (its handlers read the empty id from the original path); anything else
/// is a path that does not exist.
async fn empty_id_or_not_found(routes: Router, mut req: Request) -> Response {
    let path = req.uri().path();
    let matched = ID_ROUTES.iter().find_map(|(template, methods)| {
        let filled = fill_empty_ids(template, path)?;
        methods.contains(req.method()).then_some(filled)
    });
    let Some(filled) = matched else {
        return page_not_found().await.into_response();
    };
    let query = req
        .uri()
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    match format!("/partner/v1{filled}{query}").parse() {
        Ok(uri) => {
            *req.uri_mut() = uri;
            match tower::ServiceExt::oneshot(routes, req).await {
                Ok(resp) => resp,
                Err(never) => match never {},
            }
        }
        Err(_) => page_not_found().await.into_response(),
    }
}

/// `path` with its empty id segments filled with `_`, when it has the shape of `template` and at
/// least one id segment is empty.
fn fill_empty_ids(template: &str, path: &str) -> Option<String> {
    let t: Vec<&str> = template.split('/').collect();
    let p: Vec<&str> = path.split('/').collect();
    if t.len() != p.len() {
        return None;
    }
    let mut empty = false;
    let mut out = Vec::with_capacity(p.len());
    for (t, p) in t.iter().zip(&p) {
        if t.starts_with('{') && p.is_empty() {
            empty = true;
            out.push("_");
        } else if t.starts_with('{') || t == p {
            out.push(p);
        } else {
            return None;
        }
    }
    empty.then(|| out.join("/"))
}

/// Serves `router(state)` on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let stop = async move {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    axum::serve(
        listener,
        router(state).into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(stop)
    .await
}

/// Serves a separate admin-api's Prometheus figures (`GET /metrics` at `[metrics] admin_listen`)
/// until `shutdown` turns true; nothing else answers there.
pub async fn serve_meters(
    listener: TcpListener,
    meters: std::sync::Arc<crate::meters::Meters>,
    mut shutdown: watch::Receiver<bool>,
) {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let meters = meters.clone();
            async move {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    meters.render(),
                )
            }
        }),
    );
    let stop = async move {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::error!(error = %e, "admin-api metrics listener stopped");
    }
}

/// `GET /partner/v1/openapi.json`: the generated description of the partner and billing APIs.
async fn openapi_json() -> Response {
    axum::Json(crate::openapi::document()).into_response()
}

async fn health(State(state): State<AppState>) -> (StatusCode, &'static str) {
    match state.db.ping().await {
        Ok(()) => (StatusCode::OK, "ok"),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "database unavailable"),
    }
}

async fn page_not_found() -> (
    StatusCode,
    [(header::HeaderName, &'static str); 1],
    &'static str,
) {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "page not found",
    )
}
