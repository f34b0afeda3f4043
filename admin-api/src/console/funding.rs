//! A partner's funding in the dashboard (`/console/partners/{id}/funding`): the funding figures,
//! the history from the ledger (`services::funding_history`: every credit, allocation and
//! release, with the balance after each), the open top-up sessions, and "Add funds", which opens
//! a top-up session of the existing hosted payment flow (`funding::create_top_up`, the API's
//! `POST /funding/top-up-sessions`) and sends the browser to its page. Every member reads;
//! owners, admins and operators add funds.

use super::amount::{self, Amount};
use super::form;
use super::gate::{self, Membership};
use super::render::{self, render};
use super::session::Viewer;
use crate::error::ApiError;
use crate::http::params::Seg;
use crate::services::alerts;
use crate::services::recharge_rules;
use crate::services::{funding, funding_history};
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use money::NanoUsd;
use std::collections::HashMap;

struct Line {
    when: String,
    what: String,
    customer: Option<(i64, String)>,
    amount: Amount,
    balance: Amount,
}

#[derive(Template)]
#[template(path = "console/partner_funding.html")]
struct Page<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    partner_id: i64,
    tab: &'a str,
    name: &'a str,
    role: &'a str,
    available: Amount,
    reserved: Amount,
    outstanding: Amount,
    lines: Vec<Line>,
    page: u64,
    pages: u64,
    prev: Option<String>,
    next: Option<String>,
    open: Vec<(Amount, String)>,
    can_add: bool,
    amount: String,
    error: Option<(&'static str, String)>,
    /// The low-funding alert: threshold (USD), below it now.
    alert: Option<(Amount, bool)>,
    alert_error: Option<String>,
    notice: Option<String>,
    /// The automatic recharge: below, amount (USD), status in words, a card saved.
    recharge: Option<(Amount, Amount, String, bool)>,
    /// Its charges: when, amount (USD), status.
    charges: Vec<(String, Amount, String)>,
    /// Cards can be saved (a payment provider is configured).
    can_save_card: bool,
    recharge_error: Option<String>,
}

/// A post's checks on this page: origin, CSRF, membership, and a role that moves money (owners,
/// admins and operators).
async fn working(
    state: &AppState,
    viewer: &Viewer,
    partner: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Membership, Response> {
    gate::team_change(state, viewer, partner, headers, body, &gate::CUSTOMER_WORK).await
}

/// What the page shows besides the figures: the top-up form's amount and refusal, the alert
/// form's refusal, a notice.
#[derive(Default)]
struct Shown {
    amount: String,
    error: Option<(&'static str, String)>,
    alert_error: Option<String>,
    notice: Option<String>,
    recharge_error: Option<String>,
}

impl Line {
    fn of(l: &crate::services::funding_history::Line) -> Line {
        Line {
            when: l.at.format("%Y-%m-%d %H:%M").to_string(),
            what: l.kind.label().to_string(),
            customer: l.customer.clone(),
            amount: amount::amount(l.amount),
            balance: amount::amount(l.balance_after),
        }
    }
}

/// The automatic recharge as the page shows it: below, amount, its state in words, a card saved.
fn recharge_row(r: crate::dto::RechargeRuleView) -> (Amount, Amount, String, bool) {
    let status = match (r.status.as_str(), r.stop_reason) {
        ("active", _) => "active".to_string(),
        ("needs_card", _) => "waiting for a saved card".to_string(),
        (_, Some(why)) => format!("stopped ({why})"),
        (other, None) => other.to_string(),
    };
    (
        amount::amount(r.below_usd.0),
        amount::amount(r.amount_usd.0),
        status,
        r.card_saved,
    )
}

/// A recharge's charge as the page lists it: when, amount, what came of it.
fn charge_row(a: crate::dto::RechargeAttemptView) -> (String, Amount, String) {
    let status = match a.status.as_str() {
        "pending" => "charged, waiting for the payment".to_string(),
        "succeeded" => "credited".to_string(),
        "declined" => format!(
            "declined{}",
            a.failure.map(|f| format!(": {f}")).unwrap_or_default()
        ),
        other => other.to_string(),
    };
    (a.created_at, amount::amount(a.amount_usd.0), status)
}

async fn page(
    state: &AppState,
    viewer: &Viewer,
    t: &Membership,
    page_no: u64,
    status: StatusCode,
    shown: Shown,
) -> Response {
    let Shown {
        amount,
        error,
        alert_error,
        notice,
        recharge_error,
    } = shown;
    let read = async {
        let f = funding::view_of(&state.db, state, t.id).await?;
        let h = funding_history::history(&state.db, t.id, page_no).await?;
        let open = funding::open_top_ups(&state.db, t.id).await?;
        let alert = crate::services::alerts::alert_of(
            &state.db,
            crate::services::alerts::Subject::Partner(t.id),
        )
        .await?;
        let recharge = crate::services::recharge_rules::view(&state.db, t.id).await?;
        Ok::<_, ApiError>((f, h, open, alert, recharge))
    }
    .await;
    let Ok((f, h, open, alert, recharge)) = read else {
        return render::unavailable();
    };
    let link = |p: u64| format!("/console/partners/{}/funding?page={p}", t.id);
    render(
        status,
        &Page {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            partner_id: t.id,
            tab: "funding",
            name: &t.name,
            role: &t.role,
            available: amount::amount(f.available_funding_usd.0),
            reserved: amount::amount(f.reserved_allocations_usd.0),
            outstanding: amount::amount(f.outstanding_usage_usd.0),
            lines: h.lines.iter().map(Line::of).collect(),
            page: h.page,
            pages: h.pages,
            prev: (h.page > 1).then(|| link(h.page - 1)),
            next: (h.page < h.pages).then(|| link(h.page + 1)),
            open: open
                .iter()
                .map(|s| {
                    (
                        amount::amount(NanoUsd::from_nanos(s.amount_nanos)),
                        s.created_at.format("%Y-%m-%d %H:%M UTC").to_string(),
                    )
                })
                .collect(),
            can_add: t.may(&gate::CUSTOMER_WORK),
            amount,
            error,
            alert: alert.map(|a| {
                (
                    amount::amount(NanoUsd::from_nanos(a.threshold_nanos)),
                    a.below,
                )
            }),
            alert_error,
            notice,
            recharge: recharge.rule.map(recharge_row),
            charges: recharge.attempts.into_iter().map(charge_row).collect(),
            can_save_card: state.stripe.is_some(),
            recharge_error,
        },
    )
}

/// The rule a recharge post sets (`None`: it removes the rule or saves a card), or what to tell
/// the person.
fn recharge_rule(
    posted: &form::RechargeForm,
) -> Result<Option<recharge_rules::RechargeRule>, String> {
    match posted.action.as_str() {
        "set" => recharge_rules::parse(posted.request())
            .map(Some)
            .map_err(|e| form::explain(&e.into())),
        "remove" | "card" => Ok(None),
        _ => Err("Choose an action.".into()),
    }
}

/// `POST /console/partners/{partner}/funding/recharge`: `action` = `set` (`below_usd`,
/// `amount_usd`), `remove`, or `card` (opens Stripe's page that saves a card: 303 there).
/// Owners, admins and operators; audited.
pub(crate) async fn recharge(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(partner): Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let t = match working(&state, &viewer, &partner, &headers, &body).await {
        Ok(t) => t,
        Err(resp) => return resp,
    };
    let posted = form::RechargeForm::read(&body);
    let action = posted.action.clone();
    let refused = |message: String| {
        let (state, viewer, t) = (&state, &viewer, &t);
        async move {
            let shown = Shown {
                recharge_error: Some(message),
                ..Shown::default()
            };
            page(state, viewer, t, 1, StatusCode::BAD_REQUEST, shown).await
        }
    };
    let rule = match recharge_rule(&posted) {
        Ok(rule) => rule,
        Err(message) => return refused(message).await,
    };
    let done = async {
        let txn = crate::db::begin(&state.db).await?;
        let outcome = if action == "card" {
            Some(recharge_rules::start_card_session(&txn, &state, t.id).await?)
        } else {
            recharge_rules::set(&txn, t.id, rule, state.clock.now()).await?;
            None
        };
        let what = match action.as_str() {
            "card" => "recharge_card_session",
            "remove" => "recharge_removed",
            _ => "recharge_changed",
        };
        let detail = serde_json::json!({
            "below_usd": posted.below_usd,
            "amount_usd": posted.amount_usd,
        });
        let record = partner_record(&viewer, &t, what, detail);
        crate::services::audit::audit(&txn, record, state.clock.now()).await?;
        txn.commit().await?;
        Ok::<_, ApiError>(outcome)
    }
    .await;
    match done {
        Ok(Some(url)) => Redirect::to(&url).into_response(),
        Ok(None) => {
            let notice = if action == "remove" {
                "The automatic recharge was removed."
            } else {
                "The automatic recharge is set."
            };
            let shown = Shown {
                notice: Some(notice.into()),
                ..Shown::default()
            };
            page(&state, &viewer, &t, 1, StatusCode::OK, shown).await
        }
        Err(e @ (ApiError::RechargeRuleRequired | ApiError::RechargeUnavailable)) => {
            refused(format!("{e}.")).await
        }
        Err(e) => {
            tracing::error!(error = %e, "recharge not changed");
            render::unavailable()
        }
    }
}

/// `POST /console/partners/{partner}/funding/alert`: `threshold_usd` (empty: remove). Owners,
/// admins and operators; audited.
pub(crate) async fn alert(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(partner): Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let t = match working(&state, &viewer, &partner, &headers, &body).await {
        Ok(t) => t,
        Err(resp) => return resp,
    };
    let form = form::AlertForm::read(&body);
    let request = form.request();
    let raw = form.threshold_usd;
    let reply = |status, shown| {
        let (state, viewer, t) = (&state, &viewer, &t);
        async move { page(state, viewer, t, 1, status, shown).await }
    };
    let threshold = match alerts::parse_alert(request) {
        Ok(x) => x,
        Err(e) => {
            let message = form::explain(&e.into());
            let shown = Shown {
                alert_error: Some(message),
                ..Shown::default()
            };
            return reply(StatusCode::BAD_REQUEST, shown).await;
        }
    };
    let done = async {
        let txn = crate::db::begin(&state.db).await?;
        alerts::set_alert(
            &txn,
            alerts::Subject::Partner(t.id),
            threshold,
            state.clock.now(),
        )
        .await?;
        crate::services::audit::audit(
            &txn,
            partner_record(
                &viewer,
                &t,
                "funding_alert_changed",
                serde_json::json!({ "threshold_usd": raw }),
            ),
            state.clock.now(),
        )
        .await?;
        txn.commit().await?;
        Ok::<_, ApiError>(())
    }
    .await;
    match done {
        Ok(()) => {
            let notice = match threshold {
                Some(x) => format!("The low-funding alert is set at {} USD.", form::usd(x)),
                None => "The low-funding alert was removed.".into(),
            };
            let shown = Shown {
                notice: Some(notice),
                ..Shown::default()
            };
            reply(StatusCode::OK, shown).await
        }
        Err(e) => {
            tracing::error!(error = %e, "funding alert not saved");
            render::unavailable()
        }
    }
}

/// `GET /console/partners/{partner}/funding?page=…`.
pub(crate) async fn show(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(partner): Seg,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let page_no = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(1);
    match gate::team(&state, &viewer, &partner).await {
        Ok(t) => {
            page(
                &state,
                &viewer,
                &t,
                page_no,
                StatusCode::OK,
                Shown::default(),
            )
            .await
        }
        Err(resp) => resp,
    }
}

/// `POST /console/partners/{partner}/funding`: `amount_usd` → a top-up session; the browser goes
/// to its hosted page (303). The funding is credited when the payment is (webhook or operator).
pub(crate) async fn add(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(partner): Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let t = match working(&state, &viewer, &partner, &headers, &body).await {
        Ok(t) => t,
        Err(resp) => return resp,
    };
    let caller = match gate::console_caller(&state, &t).await {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    let posted = form::TopUpForm::read(&body);
    let request = posted.request();
    let raw = posted.amount_usd;
    let outcome = async {
        let amount = funding::top_up_amount(request)?;
        let txn = crate::db::begin(&state.db).await?;
        let done = funding::create_top_up(&txn, &state, &caller, amount).await?;
        txn.commit().await?;
        Ok::<_, ApiError>(done.data.url)
    }
    .await;
    match outcome {
        Ok(url) => Redirect::to(&url).into_response(),
        Err(ApiError::Unavailable | ApiError::Internal) => render::unavailable(),
        Err(e) => {
            let (status, reason, _) = e.parts();
            let message = match e {
                ApiError::InvalidTopUpAmount => {
                    "Enter an amount of USD above zero (whole cents, at least 0.50 with card payments).".to_string()
                }
                other => other.to_string(),
            };
            page(
                &state,
                &viewer,
                &t,
                1,
                status,
                Shown {
                    amount: raw,
                    error: Some((reason.unwrap_or("REFUSED"), message)),
                    ..Shown::default()
                },
            )
            .await
        }
    }
}

/// The audit record of a change to the partner's own funding settings by the viewer.
fn partner_record<'a>(
    viewer: &Viewer,
    t: &Membership,
    action: &'a str,
    detail: serde_json::Value,
) -> crate::services::audit::Audit<'a> {
    crate::services::audit::Audit {
        organization: None,
        partner: Some(t.id),
        actor: Some(viewer.user.id),
        action,
        target: Some(format!("partner:{}", t.id)),
        detail,
        ip: viewer.ip.clone(),
    }
}
