//! Partner webhooks in the dashboard (issue 45): `/console/partners/{id}/webhooks` lists the
//! endpoints (every team member) and, for owners and admins, registers one (the signing secret
//! shown once), disables, enables and deletes; `/console/partners/{id}/webhooks/{webhook}` shows
//! its delivery log (each attempt's status and first bytes, or why none) with "Redeliver" for
//! owners and admins. Every change goes through `services::partner_webhooks` (the partner API's
//! rules and reasons) in one transaction with its audit record.

use super::form::Posted;
use super::gate::{self, Membership};
use super::render::{self, render};
use super::session::Viewer;
use crate::dto::{Webhook, WebhookDelivery, WebhookRequest};
use crate::http::params::{Seg, Segs};
use crate::services::audit;
use crate::services::partner_webhooks::{self, EVENT_TYPES, EndpointInput, WebhookError};
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Map, Value};

#[derive(Template)]
#[template(path = "console/partner_webhooks.html")]
struct List<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    partner_id: i64,
    tab: &'a str,
    name: &'a str,
    role: &'a str,
    endpoints: Vec<Webhook>,
    events: &'a [&'a str],
    can_manage: bool,
    /// The new endpoint's secret, shown once.
    secret: Option<String>,
    notice: Option<String>,
    error: Option<String>,
    /// The create form as sent (refused): url, description.
    url: String,
    description: String,
}

#[derive(Template)]
#[template(path = "console/partner_webhook.html")]
struct Log<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    partner_id: i64,
    tab: &'a str,
    name: &'a str,
    role: &'a str,
    endpoint: Webhook,
    deliveries: Vec<WebhookDelivery>,
    can_manage: bool,
    notice: Option<String>,
    error: Option<String>,
}

/// What a page shows after a change.
#[derive(Default)]
struct Outcome {
    status: Option<StatusCode>,
    secret: Option<String>,
    notice: Option<String>,
    error: Option<String>,
    url: String,
    description: String,
}

fn can_manage(t: &Membership) -> bool {
    gate::TOKEN_MANAGERS.roles.contains(&t.role.as_str())
}

async fn list_page(state: &AppState, viewer: &Viewer, t: &Membership, out: Outcome) -> Response {
    let Ok(mut endpoints) = partner_webhooks::list(&state.db, t.id).await else {
        return render::unavailable();
    };
    // "2026-11-29 11:06" (UTC) for the table.
    for e in &mut endpoints {
        e.created_at = e.created_at.replace('T', " ").chars().take(16).collect();
    }
    render(
        out.status.unwrap_or(StatusCode::OK),
        &List {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            partner_id: t.id,
            tab: "webhooks",
            name: &t.name,
            role: &t.role,
            endpoints,
            events: &EVENT_TYPES,
            can_manage: can_manage(t),
            secret: out.secret,
            notice: out.notice,
            error: out.error,
            url: out.url,
            description: out.description,
        },
    )
}

/// `GET /console/partners/{partner}/webhooks`: every team member.
pub(crate) async fn list(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(partner): Seg,
) -> Response {
    match gate::team(&state, &viewer, &partner).await {
        Ok(t) => list_page(&state, &viewer, &t, Outcome::default()).await,
        Err(resp) => resp,
    }
}

/// The dashboard's words for a refusal (the API's reason beside them).
fn refused(e: &WebhookError) -> Option<String> {
    match e {
        WebhookError::Invalid(_) | WebhookError::Limit { .. } => Some(e.to_string()),
        WebhookError::NotFound | WebhookError::DeliveryNotFound | WebhookError::Fault(_) => None,
    }
}

/// Why a change did not happen: the service refused it, or the page to answer instead.
enum Failed {
    Refused(WebhookError),
    Answer(Box<Response>),
}

/// Runs `change` in a transaction with its audit record (`action`, `target`); the change's
/// answer, or its refusal.
async fn audited<T>(
    state: &AppState,
    viewer: &Viewer,
    t: &Membership,
    action: &'static str,
    target: String,
    change: impl for<'c> FnOnce(
        &'c sea_orm::DatabaseTransaction,
        crate::caller::Caller,
    ) -> futures_util::future::BoxFuture<'c, Result<T, WebhookError>>,
) -> Result<T, Failed> {
    let caller = gate::console_caller(state, t)
        .await
        .map_err(|r| Failed::Answer(Box::new(r)))?;
    let txn = crate::db::begin(&state.db)
        .await
        .map_err(|_| Failed::Answer(Box::new(render::unavailable())))?;
    let done = change(&txn, caller).await.map_err(Failed::Refused)?;
    let record = audit::Audit {
        organization: None,
        partner: Some(t.id),
        actor: Some(viewer.user.id),
        action,
        target: Some(target),
        detail: serde_json::json!({"role": t.role}),
        ip: viewer.ip.clone(),
    };
    let now = state.clock.now();
    if audit::audit(&txn, record, now).await.is_err() || txn.commit().await.is_err() {
        return Err(Failed::Answer(Box::new(render::unavailable())));
    }
    Ok(done)
}

/// `POST /console/partners/{partner}/webhooks` with `url`, `description` and `events` (each
/// checked box): owners and admins.
pub(crate) async fn create(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(partner): Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let t = match super::partner::token_manager(&state, &viewer, &partner, &headers, &body).await {
        Ok(t) => t,
        Err(resp) => return resp,
    };
    let form = Posted::read(&body);
    let url = form.text("url").trim().to_string();
    let description = form.text("description").trim().to_string();
    let events: Vec<Value> = crate::http::form::pairs(&body)
        .into_iter()
        .filter(|(k, _)| k == "events")
        .map(|(_, v)| Value::String(v))
        .collect();
    let req = WebhookRequest {
        url: Some(Value::String(url.clone())),
        events: Some(Value::Array(events)),
        description: (!description.is_empty()).then(|| Value::String(description.clone())),
        status: None,
        unknown: Map::new(),
    };
    let allow = state.settings.webhooks.allow_private_addresses;
    let refuse = |e: WebhookError| Outcome {
        status: Some(StatusCode::BAD_REQUEST),
        error: Some(e.to_string()),
        url: url.clone(),
        description: description.clone(),
        ..Outcome::default()
    };
    let input = match EndpointInput::parse(req, true, allow) {
        Ok(i) => i,
        Err(e) => return list_page(&state, &viewer, &t, refuse(e)).await,
    };
    let made = audited(
        &state,
        &viewer,
        &t,
        "webhook_created",
        url.clone(),
        |txn, caller| {
            let s = state.clone();
            Box::pin(async move { partner_webhooks::create(txn, &s, &caller, input).await })
        },
    )
    .await;
    match made {
        Ok(w) => {
            let out = Outcome {
                secret: w.data.secret,
                notice: Some(format!("The endpoint {} was registered.", w.data.url)),
                ..Outcome::default()
            };
            list_page(&state, &viewer, &t, out).await
        }
        Err(Failed::Refused(e)) if refused(&e).is_some() => {
            list_page(&state, &viewer, &t, refuse(e)).await
        }
        Err(Failed::Refused(_)) => render::unavailable(),
        Err(Failed::Answer(resp)) => *resp,
    }
}

async fn log_page(
    state: &AppState,
    viewer: &Viewer,
    t: &Membership,
    webhook: &str,
    out: Outcome,
) -> Response {
    let endpoint = match partner_webhooks::get(&state.db, t.id, webhook).await {
        Ok(e) => e,
        Err(WebhookError::NotFound) => return render::not_found(viewer),
        Err(_) => return render::unavailable(),
    };
    let Ok(log) = partner_webhooks::deliveries(&state.db, t.id, webhook, None).await else {
        return render::unavailable();
    };
    render(
        out.status.unwrap_or(StatusCode::OK),
        &Log {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            partner_id: t.id,
            tab: "webhooks",
            name: &t.name,
            role: &t.role,
            endpoint,
            deliveries: log.deliveries,
            can_manage: can_manage(t),
            notice: out.notice,
            error: out.error,
        },
    )
}

/// `GET /console/partners/{partner}/webhooks/{webhook}`: the endpoint and its latest 50
/// deliveries; every team member. Another partner's: 404.
pub(crate) async fn log(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(partner, webhook): Segs,
) -> Response {
    match gate::team(&state, &viewer, &partner).await {
        Ok(t) => log_page(&state, &viewer, &t, &webhook, Outcome::default()).await,
        Err(resp) => resp,
    }
}

/// `POST /console/partners/{partner}/webhooks/{webhook}` with `action` `disable`, `enable`,
/// `delete` or `redeliver` (with `delivery`): owners and admins.
pub(crate) async fn change(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(partner, webhook): Segs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let t = match super::partner::token_manager(&state, &viewer, &partner, &headers, &body).await {
        Ok(t) => t,
        Err(resp) => return resp,
    };
    let form = Posted::read(&body);
    let (done, notice) = match form.text("action").as_str() {
        action @ ("disable" | "enable") => toggle(&state, &viewer, &t, &webhook, action).await,
        "delete" => {
            let r = remove(&state, &viewer, &t, &webhook).await;
            return deleted(&state, &viewer, &t, r).await;
        }
        "redeliver" => (
            resend(&state, &viewer, &t, &webhook, form.text("delivery")).await,
            "The delivery will be sent again within seconds.".into(),
        ),
        _ => {
            let out = Outcome {
                status: Some(StatusCode::BAD_REQUEST),
                error: Some("Choose disable, enable, delete or redeliver.".into()),
                ..Outcome::default()
            };
            return log_page(&state, &viewer, &t, &webhook, out).await;
        }
    };
    let out = match done {
        Ok(()) => Outcome {
            notice: Some(notice),
            ..Outcome::default()
        },
        Err(Failed::Refused(e)) => match refused(&e) {
            Some(message) => Outcome {
                status: Some(StatusCode::BAD_REQUEST),
                error: Some(message),
                ..Outcome::default()
            },
            None if matches!(e, WebhookError::Fault(_)) => return render::unavailable(),
            None => return render::not_found(&viewer),
        },
        Err(Failed::Answer(resp)) => return *resp,
    };
    log_page(&state, &viewer, &t, &webhook, out).await
}

/// Disables or enables endpoint `webhook`; what the page then says.
async fn toggle(
    state: &AppState,
    viewer: &Viewer,
    t: &Membership,
    webhook: &str,
    action: &str,
) -> (Result<(), Failed>, String) {
    let status = if action == "disable" {
        "disabled"
    } else {
        "active"
    };
    let input = EndpointInput {
        status: Some(status.to_string()),
        ..EndpointInput::default()
    };
    let (target, w) = (format!("webhook:{webhook}"), webhook.to_string());
    let r = audited(
        state,
        viewer,
        t,
        "webhook_changed",
        target,
        |txn, caller| {
            let s = state.clone();
            Box::pin(async move { partner_webhooks::update(txn, &s, &caller, &w, input).await })
        },
    )
    .await;
    (r.map(|_| ()), format!("The endpoint is {status}."))
}

/// Deletes endpoint `webhook`.
async fn remove(
    state: &AppState,
    viewer: &Viewer,
    t: &Membership,
    webhook: &str,
) -> Result<(), Failed> {
    let (target, w) = (format!("webhook:{webhook}"), webhook.to_string());
    audited(
        state,
        viewer,
        t,
        "webhook_deleted",
        target,
        |txn, caller| {
            let s = state.clone();
            Box::pin(async move { partner_webhooks::delete(txn, &s, &caller, &w).await })
        },
    )
    .await
    .map(|_| ())
}

/// Makes delivery `delivery` of endpoint `webhook` due again.
async fn resend(
    state: &AppState,
    viewer: &Viewer,
    t: &Membership,
    webhook: &str,
    delivery: String,
) -> Result<(), Failed> {
    let (target, w) = (format!("webhook:{webhook}"), webhook.to_string());
    audited(
        state,
        viewer,
        t,
        "webhook_redelivered",
        target,
        |txn, caller| {
            let s = state.clone();
            Box::pin(
                async move { partner_webhooks::redeliver(txn, &s, &caller, &w, &delivery).await },
            )
        },
    )
    .await
    .map(|_| ())
}

/// The list after a deletion, or why there was none.
async fn deleted(
    state: &AppState,
    viewer: &Viewer,
    t: &Membership,
    done: Result<(), Failed>,
) -> Response {
    match done {
        Ok(()) => {
            let out = Outcome {
                notice: Some("The endpoint was deleted.".into()),
                ..Outcome::default()
            };
            list_page(state, viewer, t, out).await
        }
        Err(Failed::Refused(WebhookError::NotFound)) => render::not_found(viewer),
        Err(Failed::Refused(_)) => render::unavailable(),
        Err(Failed::Answer(resp)) => *resp,
    }
}
