//! The console's shared page helpers (rendering, messages, refusals, the pre-session forms and
//! the code page of a proof of address), the organization list and an organization's overview
//! (signing in and out: `sign_in`). Handlers read the request, call the services (`services::people`,
//! `services::wallets`, `services::billing`) and render a template; permissions are checked on
//! the server for every request (a page of an organization the viewer is not a member of answers
//! 404, exactly like one that does not exist).

use super::amount::{Amount, amount};
use super::form;
use super::gate::{self, Membership};
use super::render::{render, unavailable};
use super::session::Viewer;
use crate::services::alerts;
use crate::services::allocations;
use crate::services::audit;
use crate::services::memberships;
use crate::services::{billing, wallets};
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use money::NanoUsd;

#[derive(Template)]
#[template(path = "console/home.html")]
struct Home<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    orgs: Vec<(i64, String, String)>,
    partners: Vec<(i64, String, String)>,
}

/// `GET /console/`: the organizations the viewer belongs to.
pub(crate) async fn home(State(state): State<AppState>, viewer: Viewer) -> Response {
    let (orgs, partners) = match (
        memberships::org_memberships(&state.db, viewer.user.id).await,
        memberships::partner_memberships(&state.db, viewer.user.id).await,
    ) {
        (Ok(orgs), Ok(partners)) => (orgs, partners),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "memberships not read");
            return unavailable();
        }
    };
    render(
        StatusCode::OK,
        &Home {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            orgs: orgs
                .into_iter()
                .map(|(org, role)| (org.id, org.name, role))
                .collect(),
            partners: partners
                .into_iter()
                .map(|(p, role)| (p.id, p.name, role))
                .collect(),
        },
    )
}

/// Figures of a reconciled wallet, in USD.
struct Balance {
    available: Amount,
    book: Amount,
    reserved: Amount,
}

#[derive(Template)]
#[template(path = "console/org.html")]
struct Org<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    org_id: i64,
    tab: &'a str,
    name: &'a str,
    role: &'a str,
    balance: Option<Balance>,
    today: Amount,
    week: Amount,
    days: Vec<(String, i64, Amount)>,
    chart: super::chart::Chart,
    chart_title: &'a str,
    /// The low-balance alert: threshold (USD), below it now.
    alert: Option<(Amount, bool)>,
    /// Owners set the alert.
    can_alert: bool,
    /// The partner's automatic allocation: below, amount, monthly cap (USD).
    rule: Option<(Amount, Amount, Amount)>,
    /// Automatic allocations: when, amount (USD), outcome.
    runs: Vec<(String, Amount, String)>,
    error: Option<String>,
    notice: Option<String>,
}

/// `GET /console/orgs/{org}`: balance (or "being reconciled", never zero), spend today and over 7
/// days, and the daily spend of the last 14 days. Members only.
pub(crate) async fn org_overview(
    State(state): State<AppState>,
    viewer: Viewer,
    crate::http::params::Seg(org): crate::http::params::Seg,
) -> Response {
    overview_page(&state, &viewer, &org, StatusCode::OK, None, None).await
}

/// `POST /console/orgs/{org}/alert`: `threshold_usd` (empty: remove). Owners only; audited.
pub(crate) async fn org_alert(
    State(state): State<AppState>,
    viewer: Viewer,
    crate::http::params::Seg(org): crate::http::params::Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Membership { id: org_id, .. } =
        match gate::org_change(&state, &viewer, &org, &headers, &body, &gate::ORG_OWNERS).await {
            Ok(m) => m,
            Err(resp) => return resp,
        };
    let form = form::AlertForm::read(&body);
    let request = form.request();
    let raw = form.threshold_usd;
    let threshold = match alerts::parse_alert(request) {
        Ok(t) => t,
        Err(e) => {
            let message = form::explain(&e.into());
            return overview_page(
                &state,
                &viewer,
                &org,
                StatusCode::BAD_REQUEST,
                Some(message),
                None,
            )
            .await;
        }
    };
    let done = async {
        let txn = crate::db::begin(&state.db).await?;
        alerts::set_alert(
            &txn,
            alerts::Subject::Org(org_id),
            threshold,
            state.clock.now(),
        )
        .await?;
        audit::audit(
            &txn,
            audit::Audit {
                organization: Some(org_id),
                partner: None,
                actor: Some(viewer.user.id),
                action: "alert_changed",
                target: Some(format!("org:{org_id}")),
                detail: serde_json::json!({ "threshold_usd": raw }),
                ip: viewer.ip.clone(),
            },
            state.clock.now(),
        )
        .await?;
        txn.commit().await?;
        Ok::<_, crate::error::ApiError>(())
    }
    .await;
    match done {
        Ok(()) => {
            let notice = match threshold {
                Some(t) => format!(
                    "The low-balance alert is set at {} USD.",
                    t.to_decimal_usd()
                ),
                None => "The low-balance alert was removed.".into(),
            };
            overview_page(&state, &viewer, &org, StatusCode::OK, None, Some(notice)).await
        }
        Err(e) => {
            tracing::error!(error = %e, "alert not saved");
            unavailable()
        }
    }
}

async fn overview_page(
    state: &AppState,
    viewer: &Viewer,
    org: &str,
    status: StatusCode,
    error: Option<String>,
    notice: Option<String>,
) -> Response {
    let Membership {
        id: org_id,
        name,
        role,
    } = match gate::organization(state, viewer, org).await {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let balance = match wallets::reconciled(state, org_id).await {
        Ok(Some((book, reserved))) => Some(Balance {
            available: amount(book.remaining_after(reserved)),
            book: amount(book),
            reserved: amount(reserved),
        }),
        Ok(None) => None,
        Err(_) => None,
    };
    let today = state.clock.now().date_naive();
    let days = match billing::daily_spend(&state.db, org_id, today, 14).await {
        Ok(days) => days,
        Err(_) => return unavailable(),
    };
    let Ok((alert, view)) = balance_rules(state, org_id).await else {
        return unavailable();
    };
    let (rule, runs) = view.map(rule_rows).unwrap_or_default();
    let sum = |n: usize| {
        days.iter()
            .rev()
            .take(n)
            .fold(NanoUsd::ZERO, |a, (_, cost, _)| {
                a.checked_add(*cost).unwrap_or(a)
            })
    };
    render(
        status,
        &Org {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            org_id,
            tab: "overview",
            name: &name,
            role: &role,
            balance,
            today: amount(sum(1)),
            week: amount(sum(7)),
            chart: super::chart::daily(&days),
            chart_title: "Daily spend, last 14 days, oldest on the left (UTC)",
            days: days
                .iter()
                .rev()
                .map(|(d, cost, requests)| (d.to_string(), *requests, amount(*cost)))
                .collect(),
            alert: alert.map(|a| (amount(NanoUsd::from_nanos(a.threshold_nanos)), a.below)),
            can_alert: role == "owner",
            rule,
            runs,
            error,
            notice,
        },
    )
}

/// An organization's low-balance alert and, when a partner made it, its automatic allocation.
async fn balance_rules(
    state: &AppState,
    org_id: i64,
) -> Result<
    (
        Option<entities::balance_alerts::Model>,
        Option<crate::dto::AutoAllocationView>,
    ),
    crate::error::ApiError,
> {
    let alert = alerts::alert_of(&state.db, alerts::Subject::Org(org_id)).await?;
    let customer = crate::services::customers::of_organization(&state.db, org_id).await?;
    let view = match customer {
        Some(c) => Some(allocations::rule_view(&state.db, c.id, state.clock.now()).await?),
        None => None,
    };
    Ok((alert, view))
}

/// An automatic allocation as the overview shows it: the rule (below, amount, monthly cap) and
/// its runs (when, amount, allocated or refused).
type RuleRows = (
    Option<(Amount, Amount, Amount)>,
    Vec<(String, Amount, String)>,
);

fn rule_rows(v: crate::dto::AutoAllocationView) -> RuleRows {
    let dec = amount;
    let rule = v.rule.map(|r| {
        (
            dec(r.below_usd.0),
            dec(r.amount_usd.0),
            dec(r.monthly_cap_usd.0),
        )
    });
    let runs = v
        .runs
        .into_iter()
        .map(|r| {
            let outcome = if r.outcome == "allocated" {
                "allocated"
            } else {
                "refused"
            };
            (r.created_at, dec(r.amount_usd.0), outcome.to_string())
        })
        .collect();
    (rule, runs)
}
